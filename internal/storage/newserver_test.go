package storage_test

import (
	"context"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
)

// TestServerAddedToGroupJoinsItsShard: a storage server added to a group
// of two (empty data dir) copies the group's live shard from its
// replicas, the control plane adds it to the configuration, and once the
// two original servers die it alone serves every acknowledged record and
// takes appends for the same shard.
func TestServerAddedToGroupJoinsItsShard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	for _, mode := range []string{"eager", "spec", "lazy"} {
		t.Run(mode, func(t *testing.T) { addServerAndJoin(t, mode) })
	}
}

func addServerAndJoin(t *testing.T, mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := startOneShardLoad(ctx, t, mode, "newserver-%03d")
	c, cl, appendN := l.c, l.cl, l.appendN
	if mode == "lazy" {
		// Positions come once ordered.
		appendN = l.appendSyncN
	}
	appendN(30)
	shardID := l.acks[0].Shard
	originals := c.StorageIDs()
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := st.Shards[0]
	if len(before.Replicas) != 2 {
		t.Fatalf("configuration before the new server: %v", before)
	}
	added, err := c.AddStorage(before.Group)
	if err != nil {
		t.Fatal(err)
	}
	// The shard takes the new server in as its third replica, keeping its
	// id (in speculative order, once the primary vouched for it; in lazy
	// order, once it caught up under its primary).
	sh := awaitShard(ctx, t, cl, shardID, func(sh *pb.ShardInfo) bool {
		return len(sh.Replicas) == 3 && sh.Replicas[2].Id == added && !sh.Replicas[2].Pending
	})
	if sh.Epoch <= before.Epoch || sh.Replicas[0].Id != before.Replicas[0].Id || len(sh.Out) != 0 {
		t.Fatalf("configuration after the join: %v (before: %v)", sh, before)
	}
	if mode != "lazy" {
		// The eager copy's health (a lazy copy's lives in its own shell).
		addr, err := c.Config().Addr(added)
		if err != nil {
			t.Fatal(err)
		}
		h := awaitHealth(ctx, t, cl, addr, shardID, func(h *pb.ReplicaHealth) bool { return h.Role == "backup" })
		if h.Lost || len(h.Damaged) != 0 || h.CatchUp != nil {
			t.Fatalf("health of the new backup: %v", h)
		}
	}
	// Acknowledged from now on only once the new copy holds them too.
	appendN(10)
	for _, id := range originals {
		if err := c.KillStorage(id); err != nil {
			t.Fatal(err)
		}
	}
	// The new copy alone takes over, and the shard goes on.
	awaitShard(ctx, t, cl, shardID, func(sh *pb.ShardInfo) bool { return len(sh.Replicas) == 1 && sh.Replicas[0].Id == added })
	l.readBackAll("the new copy")
	appendN(1)
	if a := l.acks[len(l.acks)-1]; a.Shard != shardID {
		t.Fatalf("append after the failover went to shard %d, want %d", a.Shard, shardID)
	}
}
