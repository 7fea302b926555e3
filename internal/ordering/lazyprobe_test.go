package ordering

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/sequencing"
)

// TestSlowSequencingReplicaKeepsItsView checks that the control plane
// takes a sequencing replica that answers its probes late, but well
// within the failure timeout, for alive: the view it runs in is never
// sealed. Its answers take three keepalive intervals here; a control plane
// that gave each probe one interval heard nothing from it and changed the
// view after a failure timeout.
func TestSlowSequencingReplicaKeepsItsView(t *testing.T) {
	const (
		keepalive = 50 * time.Millisecond
		failure   = 600 * time.Millisecond
		slowBy    = 3 * keepalive
	)
	ol, ql1, ql2 := listenLoopback(t), listenLoopback(t), listenLoopback(t)
	members := []sequencing.Peer{{ID: "q1", Addr: ql1.Addr().String()}, {ID: "q2", Addr: ql2.Addr().String()}}
	for i, l := range []net.Listener{ql1, ql2} {
		q, err := sequencing.New(sequencing.Config{ClusterID: "c", ID: members[i].ID, Replicas: members,
			Ordering: []string{ol.Addr().String()}, BatchInterval: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		var opts []grpc.ServerOption
		if i == 1 {
			opts = append(opts, grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if info.FullMethod == pb.Sequencing_SequencingStatus_FullMethodName {
					time.Sleep(slowBy) // the fault under test: a slow answer
				}
				return h(ctx, req)
			}))
		}
		g := grpc.NewServer(opts...)
		q.Register(g)
		go g.Serve(l)
		q.Start()
		t.Cleanup(func() {
			g.Stop()
			q.Stop()
		})
	}
	oc := startLeaderOn(t, ol, func(c *Config) {
		c.FailureTimeout, c.KeepaliveInterval = failure, keepalive
		c.Mode = mode.Lazy{Interval: time.Millisecond}
		c.Sequencing = []Member{{ID: "q1", Addr: ql1.Addr().String()}, {ID: "q2", Addr: ql2.Addr().String()}}
	})

	// The first view starts on both replicas.
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	started := time.After(keepaliveTestTimeout)
	for {
		st, err := oc.Status(t.Context(), &pb.StatusRequest{ClusterId: "c"})
		if err == nil && st.GetLazy().GetView() == 1 && len(st.GetLazy().GetReplicas()) == 2 {
			break
		}
		select {
		case <-tick.C:
		case <-started:
			t.Fatalf("view 1 was not recorded within %v: %v %v", keepaliveTestTimeout, st, err)
		}
	}
	// Over three failure timeouts, it stays the view: the slow replica
	// is never taken for failed.
	watched := time.After(3 * failure)
	for {
		st, err := oc.Status(t.Context(), &pb.StatusRequest{ClusterId: "c"})
		if err != nil {
			t.Fatal(err)
		}
		if lz := st.GetLazy(); lz.GetView() != 1 || lz.GetSealed() || len(lz.GetReplicas()) != 2 {
			t.Fatalf("a replica answering %v late was taken for failed: view %d, sealed %v, replicas %v", slowBy, lz.GetView(), lz.GetSealed(), lz.GetReplicas())
		}
		select {
		case <-tick.C:
		case <-watched:
			return
		}
	}
}
