package storage

import (
	"log/slog"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
	"github.com/augur-log/augur/internal/mode"
)

// TestLazyPrimaryWithPlacementsOnDiskTakesOverWithABase: a server that
// opens its lazy copy as the shard's primary while the copy holds an old
// primary's placements (it was promoted while it was down) takes over as
// a promoted backup does: a base of its own term, persisted, that its
// backups take in place of their tail of the old term. Continuing the old
// term's numbering would let a backup holding another placement under the
// same number answer that it applied this one.
func TestLazyPrimaryWithPlacementsOnDiskTakesOverWithABase(t *testing.T) {
	dir := t.TempDir()
	m, err := mode.Parse(mode.LazyName, mode.Params{OrderingInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := func(info *pb.ShardInfo) (*Server, *lazyShard) {
		t.Helper()
		s, err := New(Config{
			ClusterID: "c", ID: "s1", Group: []Peer{{ID: "s1", Addr: "127.0.0.1:1"}}, GroupName: "g",
			Ordering: []string{"127.0.0.1:2"}, Dir: dir, RecordBytesMax: 1024,
			HeartbeatInterval: time.Second, Mode: m, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		s.view.shards = map[cut.ShardID]*pb.ShardInfo{0: info}
		ls, err := s.lazyShard(0)
		if err != nil {
			t.Fatal(err)
		}
		return s, ls
	}
	reps := func(ids ...string) []*pb.ReplicaAddr {
		var out []*pb.ReplicaAddr
		for _, id := range ids {
			out = append(out, &pb.ReplicaAddr{Id: id, Addr: id + ":1"})
		}
		return out
	}
	// As a backup of p, s1 applies p's first placement (a no-op at 0).
	s, ls := start(&pb.ShardInfo{Id: 0, Epoch: 1, Replicas: reps("p", "s1", "b")})
	ls.mu.Lock()
	var out lazy.ShardOutput[*lazyRead]
	if err := ls.core.Place(lazy.Placement{Seq: 1, Term: 1, View: 1, From: 0, End: 1, Runs: []lazy.Run{{From: 0, End: 1}}, Slots: []lazy.Slot{{Pos: 0, ID: lazy.RecordID{Client: 9, Seq: 9}, Noop: true}}}, &out); err != nil {
		t.Fatal(err)
	}
	err = ls.handleLocked(&out)
	ls.mu.Unlock()
	if err == nil {
		err = ls.flush()
	}
	if err != nil {
		t.Fatal(err)
	}
	s.Crash()
	// Down, it was made primary of epoch 3; it comes back.
	s, ls = start(&pb.ShardInfo{Id: 0, Epoch: 3, Replicas: reps("s1", "b")})
	defer s.Crash()
	ls.mu.Lock()
	primary, resend := ls.core.Primary(), ls.core.Resend("b")
	ls.mu.Unlock()
	if !primary || len(resend) != 1 || !resend[0].Base || resend[0].Term != 3 || resend[0].Seq != 2 || resend[0].End != 1 {
		t.Fatalf("primary %v, resends to b %+v; want a base of term 3 numbered 2 up to 1", primary, resend)
	}
	_, persisted, err := openPlacementLog(ls.places.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if len(persisted) != 2 || !persisted[1].Base || persisted[1].Term != 3 {
		t.Fatalf("persisted placements %+v; want the old one and the base", persisted)
	}
}
