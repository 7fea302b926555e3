package merge

import (
	"testing"

	pb "github.com/augur-log/augur/api/augurpb"
)

func rec(pos uint64, shard uint32, p string) *pb.SpecEntry {
	return &pb.SpecEntry{Position: pos, Shard: shard, Record: &pb.Record{Payload: []byte(p)}}
}

func skip(pos, n uint64, shard uint32) *pb.SpecEntry {
	return &pb.SpecEntry{Position: pos, Shard: shard, Skip: n}
}

func drain(m Merger) []string {
	var out []string
	for {
		ev, ok := m.Next()
		if !ok {
			return out
		}
		out = append(out, string(ev.Rec.Payload))
	}
}

// A position is released only once the stream of the shard that holds it
// covered it, whatever order the streams arrive in; no-op skips of the
// holder release nothing.
func TestLazyReleasesAPositionOnceItsHolderCoveredIt(t *testing.T) {
	m := NewLazy(0)
	// Shard 1 holds 0 and 2, shard 2 holds 1 (a no-op) and 3.
	if err := m.Step(1, &pb.SubscribeResponse{Entries: []*pb.SpecEntry{rec(0, 1, "a"), skip(1, 1, 2), rec(2, 1, "c"), skip(3, 1, 2)}, Confirmed: 4}); err != nil {
		t.Fatal(err)
	}
	if got := drain(m); len(got) != 1 || got[0] != "a" {
		t.Fatalf("before shard 2 covered 1, released %v, want [a]", got)
	}
	if !m.Waiting() {
		t.Error("not waiting for shard 2")
	}
	if err := m.Step(2, &pb.SubscribeResponse{Entries: []*pb.SpecEntry{skip(0, 1, 1), skip(1, 1, 2), skip(2, 1, 1), rec(3, 2, "d")}, Confirmed: 4}); err != nil {
		t.Fatal(err)
	}
	if got := drain(m); len(got) != 2 || got[0] != "c" || got[1] != "d" {
		t.Fatalf("released %v, want [c d]", got)
	}
	if m.Resume() != 4 || m.Waiting() {
		t.Errorf("resume %d, waiting %v", m.Resume(), m.Waiting())
	}
	// A reconnecting stream repeats itself: nothing is delivered twice.
	if err := m.Step(1, &pb.SubscribeResponse{Entries: []*pb.SpecEntry{rec(2, 1, "c")}, Confirmed: 4}); err != nil {
		t.Fatal(err)
	}
	if got := drain(m); len(got) != 0 {
		t.Fatalf("a repeated entry was delivered again: %v", got)
	}
}

func TestLazyShardReleasesWhatItsStreamCovered(t *testing.T) {
	m := NewLazyShard(0)
	if err := m.Step(1, &pb.SubscribeResponse{Entries: []*pb.SpecEntry{rec(0, 1, "a"), skip(1, 2, 2), rec(3, 1, "d")}, Confirmed: 4}); err != nil {
		t.Fatal(err)
	}
	if got := drain(m); len(got) != 2 || got[0] != "a" || got[1] != "d" {
		t.Fatalf("released %v, want [a d]", got)
	}
}

func TestLazyRefusesAnEntryWithoutRecordOrSkip(t *testing.T) {
	m := NewLazy(0)
	if err := m.Step(1, &pb.SubscribeResponse{Entries: []*pb.SpecEntry{{Position: 0, Shard: 1}}}); err == nil {
		t.Fatal("an empty entry was taken")
	}
}
