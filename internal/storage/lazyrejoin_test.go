package storage_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
)

// TestRestartedLazyReplicaRejoins kills one replica of a lazy shard (its
// other replica then serves the shard alone), appends while it is down,
// and restarts it: the copy must catch up from the serving replica and be
// taken back into the shard's configuration, counted (not pending) once
// it caught up. Appends acknowledged after the rejoin too, the serving
// replica is then killed: the rejoined copy, alone, must serve every
// acknowledged record at its position, and take appends. It runs for the
// backup and for the primary (which comes back as a backup).
func TestRestartedLazyReplicaRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	for _, restarted := range []int{1, 0} {
		t.Run([]string{"primary", "backup"}[restarted], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			l := startOneShardLoad(ctx, t, "lazy", "lazy-rejoin-%03d-payload")
			l.appendSyncN(10)
			shardID := l.acks[0].Shard
			ids := l.c.StorageIDs()
			kept, back := ids[1-restarted], ids[restarted]
			if err := l.c.KillStorage(back); err != nil {
				t.Fatal(err)
			}
			awaitShard(ctx, t, l.cl, shardID, func(sh *pb.ShardInfo) bool { return len(sh.Replicas) == 1 && sh.Replicas[0].Id == kept })
			l.appendSyncN(10)
			if err := l.c.StartStorage(back); err != nil {
				t.Fatal(err)
			}
			// Appends go on while the copy rejoins.
			for {
				l.appendSyncN(1)
				st, err := l.cl.Status(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if sh := st.Shards[0]; len(sh.Replicas) == 2 && sh.Replicas[1].Id == back && !sh.Replicas[1].Pending {
					break
				}
			}
			// Its server says so too (augur status asks it): it serves
			// as a backup, once its copy followed the new configuration,
			// whatever it was before the restart.
			st, err := l.cl.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for {
				resp, err := l.cl.Ping(ctx, st.Shards[0].Replicas[1].Addr)
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Health) == 1 && resp.Health[0].Role == "backup" {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("the rejoined copy's health: %v, want it serving as a backup", resp.Health)
				case <-time.After(10 * time.Millisecond):
				}
			}
			l.appendSyncN(10)
			if err := l.c.KillStorage(kept); err != nil {
				t.Fatal(err)
			}
			awaitShard(ctx, t, l.cl, shardID, func(sh *pb.ShardInfo) bool { return len(sh.Replicas) == 1 && sh.Replicas[0].Id == back })
			l.readBackAll("the rejoined copy")
			l.appendSyncN(1)
			if a := l.acks[len(l.acks)-1]; a.Shard != shardID {
				t.Fatalf("append after the failover went to shard %d, want %d", a.Shard, shardID)
			}
		})
	}
}

// appendSyncN appends n more records, each waiting for its position (lazy
// order), and keeps their acknowledgements.
func (l *oneShardLoad) appendSyncN(n int) {
	l.t.Helper()
	for range n {
		i := len(l.acks)
		a, err := l.cl.AppendSync(l.ctx, client.Record{Payload: []byte(fmt.Sprintf(l.format, i))})
		if err != nil {
			l.t.Fatalf("append %d: %v", i, err)
		}
		l.acks = append(l.acks, a)
	}
}
