package storage

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/segment"
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

// TestLazyAckWaitsForThePrimarysPlacementSync: a Map handler wrote a
// placement and its flush is inside the fsync of the placements file when
// another flush runs (a backup loop's, after a backup applied the
// placement it was sent). That flush must not publish the acknowledgement
// (after which the sequencing leader advances stable-gp) on the strength of
// the sync still running: it syncs the placement itself first. Publishing
// at once let a crash of the primary lose a placement below stable-gp.
func TestLazyAckWaitsForThePrimarysPlacementSync(t *testing.T) {
	m, err := mode.Parse(mode.LazyName, mode.Params{OrderingInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{
		ClusterID: "c", ID: "s1", Group: []Peer{{ID: "s1", Addr: "127.0.0.1:1"}}, GroupName: "g",
		Ordering: []string{"127.0.0.1:2"}, Dir: t.TempDir(), RecordBytesMax: 1024, Sync: segment.SyncAlways,
		HeartbeatInterval: time.Second, Mode: m, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Crash()
	s.view.shards = map[cut.ShardID]*pb.ShardInfo{0: {Id: 0, Epoch: 1, Replicas: []*pb.ReplicaAddr{{Id: "s1", Addr: "s1:1"}}}}
	ls, err := s.lazyShard(0)
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var completed atomic.Int32
	sync := ls.places.syncFile
	first := true
	ls.places.syncFile = func() error {
		if first {
			first = false
			close(entered)
			<-release
		}
		err := sync()
		completed.Add(1)
		return err
	}
	mapped := make(chan error, 1)
	go func() {
		ls.mu.Lock()
		var out lazy.ShardOutput[*lazyRead]
		err := ls.core.Map(lazy.Mapping{View: 1, From: 0, Records: []lazy.Meta{{ID: lazy.RecordID{Client: 5, Seq: 1}, Shard: 1, View: 1}}}, time.Now(), &out)
		if err == nil && (out.Place == nil || out.Ack == nil || out.Ack.End != 1) {
			err = fmt.Errorf("mapping of [0, 1) gave %+v, want a placement acknowledged up to 1", out)
		}
		if err == nil {
			err = ls.handleLocked(&out)
		}
		ls.mu.Unlock()
		if err == nil {
			err = ls.flush()
		}
		mapped <- err
	}()
	<-entered
	if err := ls.flush(); err != nil {
		t.Fatal(err)
	}
	ls.mu.Lock()
	acked := ls.acked
	ls.mu.Unlock()
	if n := completed.Load(); acked != 1 || n != 1 {
		t.Errorf("second flush published acknowledged end %d after %d completed syncs of the placement; want 1 after 1", acked, n)
	}
	close(release)
	if err := <-mapped; err != nil {
		t.Fatal(err)
	}
}
