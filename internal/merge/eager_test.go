package merge

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	pb "github.com/augur-log/augur/api/augurpb"
)

// batch is shard's share of cut idx, positions [start, end): its run is
// [runStart, runStart+runCount), and it holds a record at each of held
// (the others are filtered out).
func batch(idx, start, end uint64, shard uint32, runStart, runCount uint64, held ...uint64) *pb.CutBatch {
	b := &pb.CutBatch{Cut: idx, CutStart: start, CutEnd: end, Shard: shard, RunStart: runStart, RunCount: runCount}
	for _, p := range held {
		b.Records = append(b.Records, &pb.LogEntry{Position: p, Shard: shard, Record: &pb.Record{Key: fmt.Sprint("k", p)}})
	}
	return b
}

// all is shard's batch holding every position of its run.
func all(idx, start, end uint64, shard uint32, runStart, runCount uint64) *pb.CutBatch {
	held := make([]uint64, 0, runCount)
	for p := runStart; p < runStart+runCount; p++ {
		held = append(held, p)
	}
	return batch(idx, start, end, shard, runStart, runCount, held...)
}

func step(t *testing.T, m Merger, shard uint32, bs ...*pb.CutBatch) {
	t.Helper()
	if err := m.Step(shard, &pb.SubscribeResponse{Batches: bs}); err != nil {
		t.Fatal(err)
	}
}

// delivered renders the queued events: the positions delivered, checking
// that each carries its own record and that nothing else is emitted.
func delivered(t *testing.T, m Merger) string {
	t.Helper()
	var got []string
	for {
		ev, ok := m.Next()
		if !ok {
			return strings.Join(got, " ")
		}
		if ev.Kind != EventDeliver || ev.Speculative || ev.Rec.GetKey() != fmt.Sprint("k", ev.Pos) {
			t.Fatalf("eager merger emitted %v at %d (speculative %v, record %q)", ev.Kind, ev.Pos, ev.Speculative, ev.Rec.GetKey())
		}
		got = append(got, fmt.Sprint(ev.Pos))
	}
}

func expectDelivered(t *testing.T, m Merger, want string) {
	t.Helper()
	if got := delivered(t, m); got != want {
		t.Fatalf("delivered %q, want %q", got, want)
	}
}

func TestEagerCutsOutOfOrderAcrossShards(t *testing.T) {
	m := NewEager(0)
	// Cut 0 is [0,4): shard 1 holds [0,2), shard 2 [2,4). Cut 1 is [4,6):
	// shard 1 holds 4, shard 2 holds 5. Shard 2's stream runs ahead.
	step(t, m, 2, all(0, 0, 4, 2, 2, 2), all(1, 4, 6, 2, 5, 1))
	expectDelivered(t, m, "")
	step(t, m, 1, all(1, 4, 6, 1, 4, 1)) // cut 1 is whole, cut 0 is not
	expectDelivered(t, m, "")
	if !m.Waiting() || m.Resume() != 0 {
		t.Fatalf("waiting %v, resume %d; want waiting at 0", m.Waiting(), m.Resume())
	}
	step(t, m, 1, all(0, 0, 4, 1, 0, 2))
	expectDelivered(t, m, "0 1 2 3 4 5")
	if m.Waiting() || m.Resume() != 6 {
		t.Fatalf("waiting %v, resume %d; want idle at 6", m.Waiting(), m.Resume())
	}
}

func TestEagerCutCompletesOnlyWhenCovered(t *testing.T) {
	m := NewEager(0)
	// Cut 0 is [0,6) over three shards.
	step(t, m, 1, all(0, 0, 6, 1, 0, 2))
	step(t, m, 3, all(0, 0, 6, 3, 4, 2))
	expectDelivered(t, m, "")
	// A batch sent again after a reconnect covers nothing new.
	step(t, m, 1, all(0, 0, 6, 1, 0, 2))
	expectDelivered(t, m, "")
	step(t, m, 2, all(0, 0, 6, 2, 2, 2))
	expectDelivered(t, m, "0 1 2 3 4 5")
	// Batches of a released cut, resent, deliver nothing again.
	step(t, m, 2, all(0, 0, 6, 2, 2, 2))
	expectDelivered(t, m, "")
}

func TestEagerStartsInsideACut(t *testing.T) {
	m := NewEager(3)
	// A subscription from 3 needs only [3,6) of cut 0: shard 2's run [2,4)
	// covers 3, shard 3's [4,6) the rest; shard 1's [0,2) is not needed.
	step(t, m, 2, all(0, 0, 6, 2, 2, 2))
	expectDelivered(t, m, "")
	step(t, m, 3, all(0, 0, 6, 3, 4, 2))
	expectDelivered(t, m, "3 4 5")
}

func TestEagerOneShardDeliversWithoutTheOthers(t *testing.T) {
	m := NewEagerShard(0)
	// Shard 2 holds [2,4) of cut 0 and [7,8) of cut 1; shards 1 and 3,
	// whose positions lie between, never send anything.
	step(t, m, 2, all(0, 0, 6, 2, 2, 2))
	expectDelivered(t, m, "2 3")
	if m.Waiting() || m.Resume() != 6 {
		t.Fatalf("waiting %v, resume %d; want idle at 6", m.Waiting(), m.Resume())
	}
	step(t, m, 2, all(1, 6, 9, 2, 7, 1))
	expectDelivered(t, m, "7")
}

func TestEagerOverCoveringCutIsAnError(t *testing.T) {
	m := NewEager(0)
	step(t, m, 1, all(0, 0, 2, 1, 0, 1))
	step(t, m, 2, all(0, 0, 2, 2, 1, 1))
	// Cut 1 is [2,4), but the two runs claim 3 positions of it.
	step(t, m, 2, all(1, 2, 4, 2, 3, 1))
	err := m.Step(1, &pb.SubscribeResponse{Batches: []*pb.CutBatch{all(1, 2, 4, 1, 2, 2)}})
	if err == nil {
		t.Fatal("a cut whose runs cover 3 of its 2 positions was accepted")
	}
	// What was complete before the broken cut stays delivered, and the
	// merger releases nothing more.
	expectDelivered(t, m, "0 1")
	if err := m.Step(1, &pb.SubscribeResponse{Batches: []*pb.CutBatch{all(2, 4, 5, 1, 4, 1)}}); err == nil {
		t.Fatal("a broken merger took more batches")
	}
	expectDelivered(t, m, "")
}

func TestEagerFilteredRecordsLeaveGapsThatCompleteTheCut(t *testing.T) {
	m := NewEager(0)
	// The filter kept 1 of shard 1's run [0,3) and nothing of shard 2's
	// [3,5): the runs still cover the cut.
	step(t, m, 1, batch(0, 0, 5, 1, 0, 3, 1))
	expectDelivered(t, m, "")
	step(t, m, 2, batch(0, 0, 5, 2, 3, 2))
	expectDelivered(t, m, "1")
	if m.Waiting() || m.Resume() != 5 {
		t.Fatalf("waiting %v, resume %d; want idle at 5", m.Waiting(), m.Resume())
	}
	// A shard with no run in a cut sends an empty batch: it is not needed.
	step(t, m, 1, batch(1, 5, 7, 1, 0, 0), batch(1, 5, 7, 2, 5, 2, 5, 6))
	expectDelivered(t, m, "5 6")
}

// TestEagerAgainstEveryInterleaving checks the merger against the order it
// must produce: random cuts over random shards, each shard's stream in
// order, the streams interleaved at random, some batches sent twice, and
// the whole order delivered once, in position order.
func TestEagerAgainstEveryInterleaving(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		shards := 1 + rng.IntN(4)
		streams := make([][]*pb.CutBatch, shards)
		var want []string
		var pos uint64
		for idx := uint64(0); idx < 20; idx++ {
			start := pos
			runs := make([]uint64, shards)
			for s := range runs {
				runs[s] = uint64(rng.IntN(3))
				pos += runs[s]
			}
			p := start
			for s := range runs {
				var held []uint64
				for q := p; q < p+runs[s]; q++ {
					if rng.IntN(4) > 0 { // the filter drops a quarter
						held = append(held, q)
						want = append(want, fmt.Sprint(q))
					}
				}
				streams[s] = append(streams[s], batch(idx, start, pos, uint32(s), p, runs[s], held...))
				p += runs[s]
			}
		}
		m := NewEager(0)
		var got []string
		next := make([]int, shards)
		for left := true; left; {
			left = false
			s := rng.IntN(shards)
			if next[s] < len(streams[s]) {
				n := next[s] + 1 + rng.IntN(3)
				n = min(n, len(streams[s]))
				from := next[s]
				if from > 0 && rng.IntN(5) == 0 {
					from-- // a reconnect repeats a batch
				}
				if err := m.Step(uint32(s), &pb.SubscribeResponse{Batches: streams[s][from:n]}); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				next[s] = n
				if d := delivered(t, m); d != "" {
					got = append(got, strings.Fields(d)...)
				}
			}
			for s := range next {
				left = left || next[s] < len(streams[s])
			}
		}
		if g, w := strings.Join(got, " "), strings.Join(want, " "); g != w {
			t.Fatalf("seed %d: delivered %q, want %q", seed, g, w)
		}
		if m.Waiting() || m.Resume() != pos {
			t.Fatalf("seed %d: waiting %v, resume %d; want idle at %d", seed, m.Waiting(), m.Resume(), pos)
		}
	}
}
