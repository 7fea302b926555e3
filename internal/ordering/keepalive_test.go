package ordering

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/mode"
)

// keepaliveTestInterval is the keepalive interval of the replicas these
// tests start; answers may come up to keepaliveTestSlack late on a loaded
// machine.
const (
	keepaliveTestInterval = 100 * time.Millisecond
	keepaliveTestSlack    = 400 * time.Millisecond
	keepaliveTestTimeout  = 10 * time.Second
)

// startLeader starts a one-replica ordering layer on loopback, waits until
// it leads, and returns a client of it.
func startLeader(t *testing.T) pb.OrderingClient {
	t.Helper()
	return startLeaderOn(t, listenLoopback(t), nil)
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startLeaderOn starts a one-replica ordering layer serving l, with the
// test's settings as edit changes them, waits until it leads, and returns
// a client of it.
func startLeaderOn(t *testing.T, l net.Listener, edit func(*Config)) pb.OrderingClient {
	t.Helper()
	cfg := Config{
		ClusterID: "c", ID: "o1", Members: []Member{{ID: "o1", Addr: l.Addr().String()}},
		Dir: t.TempDir(), RaftTick: time.Millisecond, OrderingInterval: time.Millisecond,
		FailureTimeout: time.Minute, KeepaliveInterval: keepaliveTestInterval, Mode: mode.Eager{Interval: time.Millisecond},
		Logger: slog.New(slog.DiscardHandler),
	}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go g.Serve(l)
	s.Start()
	t.Cleanup(func() {
		g.Stop()
		s.Stop()
	})
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	oc := pb.NewOrderingClient(conn)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(keepaliveTestTimeout)
	for {
		st, err := oc.Status(t.Context(), &pb.StatusRequest{ClusterId: "c"})
		if err == nil && st.LeaderId == "o1" {
			return oc
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the replica did not lead within %v: %v %v", keepaliveTestTimeout, st, err)
		}
	}
}

// recvWithin receives the next message of a stream, failing the test if
// none comes within d.
func recvWithin[T any](t *testing.T, d time.Duration, cancel context.CancelFunc, recv func() (*T, error)) *T {
	t.Helper()
	timer := time.AfterFunc(d, cancel)
	defer timer.Stop()
	m, err := recv()
	if err != nil {
		t.Fatalf("no message within %v: %v", d, err)
	}
	return m
}

// TestLeaderAnswersEveryIdleHeartbeat checks that the leader answers a
// storage server's heartbeats, though it has nothing to say, whenever it
// said nothing for half a keepalive interval: a server heartbeating once
// an interval hears the leader as often, so it can tell a stopped leader
// from an idle one.
func TestLeaderAnswersEveryIdleHeartbeat(t *testing.T) {
	oc := startLeader(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := oc.Heartbeat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := stream.Send(&pb.HeartbeatRequest{ClusterId: "c", ServerId: "a1", Incarnation: 1}); err != nil {
			t.Fatal(err)
		}
		resp := recvWithin(t, keepaliveTestSlack, cancel, stream.Recv)
		if resp.NotLeader || len(resp.LagFixes) > 0 {
			t.Fatalf("heartbeat %d answered %v, want an empty keepalive", i, resp)
		}
		wait := time.NewTimer(keepaliveTestInterval)
		<-wait.C
	}
}

// TestLeaderKeepsAnIdleWatchAlive checks that the leader sends an empty
// message on a Watch stream at least once per keepalive interval while no
// event comes.
func TestLeaderKeepsAnIdleWatchAlive(t *testing.T) {
	oc := startLeader(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := oc.Watch(ctx, &pb.WatchRequest{ClusterId: "c", From: 1, ServerId: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	for i := range 5 {
		resp := recvWithin(t, keepaliveTestInterval+keepaliveTestSlack, cancel, stream.Recv)
		if len(resp.Events) > 0 || resp.Snapshot != nil || resp.LeaderAddr != "" {
			t.Fatalf("message %d of an idle watch is %v, want an empty keepalive", i, resp)
		}
		now := time.Now()
		t.Logf("keepalive %d after %v", i, now.Sub(last))
		last = now
	}
}
