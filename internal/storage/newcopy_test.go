package storage

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/mode"
)

// TestNewServerCopiesOnlyTheShardsItMayJoin: a server makes an empty copy
// of a live shard of its own group whose configuration does not list it
// (it was never in it, or it was taken out and lost its data), whether
// or not the cluster trimmed (a copy of a trimmed shard starts where its
// source's log does).
func TestNewServerCopiesOnlyTheShardsItMayJoin(t *testing.T) {
	for _, trim := range []uint64{0, 5} {
		m, err := mode.Parse(mode.EagerName, mode.Params{OrderingInterval: time.Millisecond, FailureTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{
			ClusterID: "c", ID: "s3", GroupName: "g",
			Group:    []Peer{{ID: "s1", Addr: "127.0.0.1:1"}, {ID: "s2", Addr: "127.0.0.1:2"}, {ID: "s3", Addr: "127.0.0.1:3"}},
			Ordering: []string{"127.0.0.1:4"}, Dir: t.TempDir(), RecordBytesMax: 1024,
			HeartbeatInterval: time.Second, Mode: m, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		rep := func(id string) *pb.ReplicaAddr { return &pb.ReplicaAddr{Id: id, Addr: "x"} }
		s.mu.Lock()
		s.view.trim = trim
		s.view.lastCut = cut.Cut{Index: 1}
		s.setShardsLocked([]*pb.ShardInfo{
			{Id: 0, Group: "g", Epoch: 2, Replicas: []*pb.ReplicaAddr{rep("s1"), rep("s2")}},
			{Id: 1, Group: "g", Epoch: 1, Replicas: []*pb.ReplicaAddr{rep("s1"), rep("s3")}},
			{Id: 2, Group: "h", Epoch: 1, Replicas: []*pb.ReplicaAddr{rep("h1"), rep("h2")}},
			{Id: 3, Group: "g", Epoch: 3, Replicas: []*pb.ReplicaAddr{rep("s1")}, Out: []*pb.ReplicaAddr{rep("s3")}},
			{Id: 4, Group: "g", Epoch: 1, State: pb.ShardState_SHARD_FINALIZED, Replicas: []*pb.ReplicaAddr{rep("s1"), rep("s2")}},
		})
		msgs, targets := s.copyNewShardsLocked()
		var copied []cut.ShardID
		for id := range s.replicas {
			copied = append(copied, id)
		}
		s.mu.Unlock()
		slices.Sort(copied)
		// Shard 3 left s3 out, and s3 holds no copy of it: it lost its
		// data and copies the shard as a new server would.
		want := []cut.ShardID{0, 3}
		if !slices.Equal(copied, want) || len(msgs) != len(want) || len(targets) != len(want) {
			t.Fatalf("trim %d: copies of shards %v (%d messages), want %v", trim, copied, len(msgs), want)
		}
		for i, m := range msgs {
			if m.member == nil || m.member.Role != roleFenced || targets[i].role() != roleRecovered {
				t.Fatalf("the copy of shard %d hears %+v; role %v", m.slice.Shard, m.member, targets[i].role())
			}
		}
		s.Stop()
	}
}

// TestConfigurationOfAnEarlierRunTakesThisOneIn: a configuration that
// names this server as it ran before a restart (a Join decided for that
// run can commit after the restart, holding more than this run does) is
// handed to the copy as such (shard.Membership.EarlierRun), and this run
// refuses its primary's replication; one that names this run, or no
// incarnation, is this run's.
func TestConfigurationOfAnEarlierRunTakesThisOneIn(t *testing.T) {
	m, err := mode.Parse(mode.EagerName, mode.Params{OrderingInterval: time.Millisecond, FailureTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{
		ClusterID: "c", ID: "s2", GroupName: "g",
		Group:    []Peer{{ID: "s1", Addr: "127.0.0.1:1"}, {ID: "s2", Addr: "127.0.0.1:2"}},
		Ordering: []string{"127.0.0.1:4"}, Dir: t.TempDir(), RecordBytesMax: 1024,
		HeartbeatInterval: time.Second, Mode: m, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	for _, c := range []struct {
		inc    uint64
		member bool
	}{{s.incarnation - 1, false}, {s.incarnation, true}, {0, true}} {
		s.mu.Lock()
		s.setShardsLocked([]*pb.ShardInfo{{Id: 0, Group: "g", Epoch: 3, Replicas: []*pb.ReplicaAddr{
			{Id: "s1", Addr: "x", Incarnation: 7}, {Id: "s2", Addr: "x", Incarnation: c.inc}}}})
		mb, _ := s.memberLocked(0)
		s.mu.Unlock()
		if mb.Role != roleBackup || mb.EarlierRun == c.member {
			t.Fatalf("incarnation %d named (this run %d): %+v, want a backup of an earlier run: %v", c.inc, s.incarnation, mb, !c.member)
		}
		_, err := s.backupReplica(0, 3)
		if refused := status.Code(err) == codes.FailedPrecondition; refused == c.member {
			t.Fatalf("incarnation %d named (this run %d): replication of configuration 3 answered %v", c.inc, s.incarnation, err)
		}
	}
}
