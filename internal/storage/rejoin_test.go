package storage_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/devcluster"
)

// TestRestartedReplicaCatchesUpAndRejoins stops one replica of a shard
// (its other replica then serves the shard alone, as primary), tears the
// tail off its segment file so that it lost records a cut had ordered,
// and appends more while it is down. Restarted, the replica must catch up
// from the serving one and be added back to the shard's configuration:
// the same shard, live, with both replicas, and appends acknowledged
// after that held by both. The serving replica is then killed: the
// rejoined copy, now alone, must serve every acknowledged record at its
// position. It runs for the backup, and for the primary (which comes back
// as a backup of the replica that took over).
func TestRestartedReplicaCatchesUpAndRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	for _, restarted := range []int{1, 0} {
		t.Run([]string{"primary", "backup"}[restarted], func(t *testing.T) { restartAndRejoin(t, "", restarted) })
	}
}

// TestRestartedReplicaRejoinsInSpeculativeOrder: the same in speculative
// order, where the rejoined copy is pending until its primary vouched
// that it holds everything the primary acknowledged; then it takes over
// when the primary dies.
func TestRestartedReplicaRejoinsInSpeculativeOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	restartAndRejoin(t, "spec", 0)
}

func restartAndRejoin(t *testing.T, mode string, restarted int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := startOneShardLoad(ctx, t, mode, "rejoin-%03d-payload")
	c, cl, appendN := l.c, l.cl, l.appendN
	appendN(10)
	shardID := l.acks[0].Shard
	ids := c.StorageIDs()
	// back is the replica that restarts, kept the one that serves.
	kept, back := ids[1-restarted], ids[restarted]
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	epoch := st.Shards[0].Epoch
	if err := c.StopStorage(back); err != nil {
		t.Fatal(err)
	}
	tearAfter(t, filepath.Join(c.Dir(), back), []byte("rejoin-007-payload"))
	appendN(10)
	if err := c.StartStorage(back); err != nil {
		t.Fatal(err)
	}
	// The shard takes the backup back in, keeping its id.
	// In speculative order, once its primary vouched for it.
	sh := awaitShard(ctx, t, cl, shardID, func(sh *pb.ShardInfo) bool {
		return len(sh.Replicas) == 2 && sh.Replicas[1].Id == back && !sh.Replicas[1].Pending
	})
	if sh.Replicas[0].Id != kept || sh.Epoch < epoch+2 || len(sh.Out) != 0 {
		t.Fatalf("configuration after the rejoin: %v (epoch before %d)", sh, epoch)
	}
	addr, err := c.Config().Addr(back)
	if err != nil {
		t.Fatal(err)
	}
	h := awaitHealth(ctx, t, cl, addr, shardID, func(h *pb.ReplicaHealth) bool { return h.Role == "backup" })
	if h.Lost || len(h.Damaged) != 0 || h.CatchUp != nil {
		t.Fatalf("health of the rejoined backup: %v", h)
	}
	// Acknowledged from now on only once the rejoined copy holds them.
	appendN(10)
	if err := c.KillStorage(kept); err != nil {
		t.Fatal(err)
	}
	l.readBackAll("the rejoined copy")
	// The rejoined copy takes over, and the shard goes on.
	awaitShard(ctx, t, cl, shardID, func(sh *pb.ShardInfo) bool { return len(sh.Replicas) == 1 && sh.Replicas[0].Id == back })
	appendN(1)
	if a := l.acks[len(l.acks)-1]; a.Shard != shardID {
		t.Fatalf("append after the failover went to shard %d, want %d", a.Shard, shardID)
	}
}

// oneShardLoad is a one-shard cluster of groups of two and a client that
// appends numbered records and reads every acknowledged one back.
type oneShardLoad struct {
	t      *testing.T
	ctx    context.Context
	c      *devcluster.Cluster
	cl     *client.Client
	format string // of the payload, from the record's number
	acks   []client.Ack
}

func startOneShardLoad(ctx context.Context, t *testing.T, mode, format string) *oneShardLoad {
	t.Helper()
	c, err := devcluster.Start(ctx, devcluster.Options{Shards: 1, Replicas: 2, OrderingReplicas: 1, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return &oneShardLoad{t: t, ctx: ctx, c: c, cl: cl, format: format}
}

// appendN appends n more records and keeps their acknowledgements.
func (l *oneShardLoad) appendN(n int) {
	l.t.Helper()
	for range n {
		i := len(l.acks)
		a, err := l.cl.Append(l.ctx, client.Record{Payload: []byte(fmt.Sprintf(l.format, i))})
		if err != nil {
			l.t.Fatalf("append %d: %v", i, err)
		}
		l.acks = append(l.acks, a)
	}
}

// readBackAll reads every acknowledged record back, from the copy named
// from, and checks each is at its position.
func (l *oneShardLoad) readBackAll(from string) {
	l.t.Helper()
	got, err := l.cl.ReadRange(l.ctx, l.acks[0].Position, len(l.acks))
	if err != nil {
		l.t.Fatalf("read everything acknowledged from %s: %v", from, err)
	}
	byPos := map[uint64]string{}
	for _, e := range got {
		byPos[e.Position] = string(e.Record.Payload)
	}
	for i, a := range l.acks {
		if want := fmt.Sprintf(l.format, i); byPos[a.Position] != want {
			l.t.Fatalf("position %d holds %q, want %q", a.Position, byPos[a.Position], want)
		}
	}
}

// awaitShard polls the status until shard id satisfies ok, and returns
// it; it fails the test if the shard is not alone and live, or at ctx's
// deadline.
func awaitShard(ctx context.Context, t *testing.T, cl *client.Client, id uint32, ok func(*pb.ShardInfo) bool) *pb.ShardInfo {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Shards) != 1 || st.Shards[0].Id != id || st.Shards[0].State != pb.ShardState_SHARD_LIVE {
			t.Fatalf("shards: %v; want shard %d alone and live", st.Shards, id)
		}
		if ok(st.Shards[0]) {
			return st.Shards[0]
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("shard %d never got there: %v", id, st.Shards[0])
		}
	}
}
