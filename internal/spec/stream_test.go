package spec

import (
	"fmt"
	"strings"
	"testing"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/merge"
)

func specRec(pos uint64, shard uint32) *pb.SpecEntry {
	return &pb.SpecEntry{Position: pos, Shard: shard, Record: &pb.Record{Key: fmt.Sprint("k", pos)}}
}

// streamEvents renders the queued events like drain (d3~k3 speculative,
// d3=k3 final, c5, f4), checking each delivery's shard.
func streamEvents(t *testing.T, m merge.Merger, shardOf func(uint64) uint32) string {
	t.Helper()
	var b []string
	for {
		ev, ok := m.Next()
		if !ok {
			return strings.Join(b, " ")
		}
		switch ev.Kind {
		case EventDeliver:
			if ev.Shard != shardOf(ev.Pos) {
				t.Fatalf("position %d delivered from shard %d, sent by %d", ev.Pos, ev.Shard, shardOf(ev.Pos))
			}
			sep := "="
			if ev.Speculative {
				sep = "~"
			}
			b = append(b, fmt.Sprintf("d%d%s%s", ev.Pos, sep, ev.Rec.GetKey()))
		case EventConfirm:
			b = append(b, fmt.Sprintf("c%d", ev.Pos))
		case EventFail:
			b = append(b, fmt.Sprintf("f%d", ev.Pos))
		}
	}
}

// byParity: shard 1 holds the even positions, shard 2 the odd ones.
func byParity(p uint64) uint32 { return uint32(1 + p%2) }

func TestStreamMergerTakesViewChangeThenConfirmationThenEntries(t *testing.T) {
	m := NewStreamMerger(0, false, false)
	if err := m.Step(1, &pb.SubscribeResponse{Entries: []*pb.SpecEntry{specRec(0, 1), specRec(2, 1)}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Step(2, &pb.SubscribeResponse{Entries: []*pb.SpecEntry{specRec(1, 2), specRec(3, 2)}}); err != nil {
		t.Fatal(err)
	}
	if got, want := streamEvents(t, m, byParity), "d0~k0 d1~k1 d2~k2 d3~k3"; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	if !m.Waiting() || m.Resume() != 4 {
		t.Fatalf("waiting %v, resume %d; want waiting at 4", m.Waiting(), m.Resume())
	}
	// Shard 2 fails whole with 2 confirmed; shard 1's stream says so with
	// a confirmation of 2 and shard 1's record at 4, all in view 1. Were
	// the confirmation taken first, 2 and 3 would not be void.
	r := &pb.SubscribeResponse{View: 1, Confirmed: 2, Entries: []*pb.SpecEntry{specRec(4, 1)},
		ViewChange: &pb.ViewChange{View: 1, ConfirmedGp: 2, FailedShard: 2}}
	if err := m.Step(1, r); err != nil {
		t.Fatal(err)
	}
	if got, want := streamEvents(t, m, byParity), "f2 d2~k2 c2"; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	if m.Resume() != 3 {
		t.Fatalf("resume %d after the rewind, want 3", m.Resume())
	}
}

func TestStreamMergerRefusesAnUnannouncedView(t *testing.T) {
	m := NewStreamMerger(0, false, false)
	err := m.Step(1, &pb.SubscribeResponse{View: 1, Entries: []*pb.SpecEntry{specRec(0, 1)}})
	if err == nil {
		t.Fatal("entries of view 1 without its view change were taken")
	}
	if got := streamEvents(t, m, byParity); got != "" {
		t.Fatalf("events %q from a broken stream", got)
	}
}

func TestStreamMergerObservesTheStatusOnlyForOneShard(t *testing.T) {
	st := &pb.StatusResponse{Tail: 6, Spec: &pb.SpecState{View: 1,
		Void: []*pb.ViewChange{{View: 1, ConfirmedGp: 2, FailedShard: 2}}}}
	one := NewStreamMerger(0, false, true)
	if err := one.Step(2, &pb.SubscribeResponse{Entries: []*pb.SpecEntry{specRec(1, 2), specRec(3, 2)}}); err != nil {
		t.Fatal(err)
	}
	if got, want := streamEvents(t, one, byParity), "d1~k1 d3~k3"; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	// Shard 2's stream died with it: only the status says that 3 is void
	// and that everything below the tail is final.
	one.Observe(st)
	if got, want := streamEvents(t, one, byParity), "f2 c6"; got != want {
		t.Fatalf("events %q after the status, want %q", got, want)
	}
	if one.Waiting() {
		t.Fatal("one-shard merger still waiting after everything was confirmed")
	}
	// A merger of every stream hears both from the live shards' streams.
	all := NewStreamMerger(0, false, false)
	if err := all.Step(1, &pb.SubscribeResponse{Entries: []*pb.SpecEntry{specRec(0, 1)}}); err != nil {
		t.Fatal(err)
	}
	streamEvents(t, all, byParity)
	all.Observe(st)
	if got := streamEvents(t, all, byParity); got != "" {
		t.Fatalf("whole-log merger took %q from the status", got)
	}
}
