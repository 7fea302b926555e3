package cut

import (
	"math/rand/v2"
	"testing"
)

// naivePositions replays cuts record by record: within each cut, shards in
// ascending id order, each shard's new records in local order.
func naivePositions(cuts []Cut) map[[2]uint64]uint64 {
	pos := map[[2]uint64]uint64{}
	var next uint64
	var prev Cut
	for _, c := range cuts {
		for _, l := range c.Lengths {
			for local := prev.Len(l.Shard); local < l.Length; local++ {
				pos[[2]uint64{uint64(l.Shard), local}] = next
				next++
			}
		}
		prev = c
	}
	return pos
}

func noLimit(ShardID) (uint64, bool) { return 0, false }

// TestInterleaveMatchesReplay checks the slice arithmetic against the naive
// replay over many random cut sequences.
func TestInterleaveMatchesReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 500; trial++ {
		shards := 1 + rng.IntN(6)
		lens := make([]uint64, shards)
		var cuts []Cut
		var prev Cut
		for i := 0; i < 30; i++ {
			var proposed []Length
			for s := range lens {
				if rng.IntN(3) == 0 {
					lens[s] += uint64(rng.IntN(5))
				}
				proposed = append(proposed, Length{Shard: ShardID(s * 2), Length: lens[s]})
			}
			next, grew := Next(prev, proposed, noLimit)
			if !grew {
				continue
			}
			cuts = append(cuts, next)
			prev = next
		}
		want := naivePositions(cuts)
		got := map[[2]uint64]uint64{}
		var p Cut
		for _, c := range cuts {
			slices, err := Interleave(p, c)
			if err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
			for _, sl := range slices {
				one := SliceOf(p, c, sl.Shard)
				if one != sl {
					t.Fatalf("trial %d: SliceOf %+v != Interleave %+v", trial, one, sl)
				}
				for i := uint64(0); i < sl.Count; i++ {
					got[[2]uint64{uint64(sl.Shard), sl.LocalStart + i}] = sl.GlobalStart + i
				}
			}
			p = c
		}
		if len(got) != len(want) {
			t.Fatalf("trial %d: %d positions, want %d", trial, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("trial %d: shard %d local %d at %d, want %d", trial, k[0], k[1], got[k], v)
			}
		}
	}
}

func TestInterleaveOrdersByShardThenLocal(t *testing.T) {
	prev := Cut{Index: 1, Start: 0, End: 3, Lengths: []Length{{0, 2}, {1, 1}}}
	cur := Cut{Index: 2, Start: 3, End: 7, Lengths: []Length{{0, 3}, {1, 1}, {4, 3}}}
	got, err := Interleave(prev, cur)
	if err != nil {
		t.Fatal(err)
	}
	want := []Slice{{Shard: 0, LocalStart: 2, GlobalStart: 3, Count: 1}, {Shard: 4, LocalStart: 0, GlobalStart: 4, Count: 3}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if sl := SliceOf(prev, cur, 1); sl.Count != 0 || sl.LocalStart != 1 {
		t.Fatalf("shard 1 adds nothing, got %+v", sl)
	}
}

func TestCheckSuccessorRejects(t *testing.T) {
	prev := Cut{Index: 1, End: 3, Lengths: []Length{{0, 2}, {1, 1}}}
	cases := map[string]Cut{
		"skipped index":   {Index: 3, Start: 3, End: 3, Lengths: prev.Lengths},
		"gap in start":    {Index: 2, Start: 4, End: 4, Lengths: prev.Lengths},
		"shard shrinks":   {Index: 2, Start: 3, End: 3, Lengths: []Length{{0, 1}, {1, 2}}},
		"shard vanishes":  {Index: 2, Start: 3, End: 4, Lengths: []Length{{0, 3}}},
		"unsorted":        {Index: 2, Start: 3, End: 4, Lengths: []Length{{1, 1}, {0, 3}}},
		"wrong span size": {Index: 2, Start: 3, End: 9, Lengths: []Length{{0, 3}, {1, 1}}},
	}
	for name, c := range cases {
		if err := CheckSuccessor(prev, c); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
}

func TestNextMergesByMaxAndCaps(t *testing.T) {
	prev := Cut{Index: 4, Start: 10, End: 15, Lengths: []Length{{0, 10}, {2, 5}}}
	limit := func(s ShardID) (uint64, bool) { return 6, s == 2 }
	next, grew := Next(prev, []Length{{0, 7}, {2, 9}, {3, 2}}, limit)
	if !grew {
		t.Fatal("expected growth")
	}
	// Shard 0's stale report keeps 10; shard 2 is capped at 6; shard 3 joins.
	want := []Length{{0, 10}, {2, 6}, {3, 2}}
	if len(next.Lengths) != 3 || next.Lengths[0] != want[0] || next.Lengths[1] != want[1] || next.Lengths[2] != want[2] {
		t.Fatalf("lengths %+v, want %+v", next.Lengths, want)
	}
	if next.Index != 5 || next.Start != 15 || next.End != 18 {
		t.Fatalf("cut %+v", next)
	}
	if err := CheckSuccessor(prev, next); err != nil {
		t.Fatal(err)
	}
	if _, grew := Next(prev, []Length{{0, 3}}, noLimit); grew {
		t.Fatal("a stale proposal must not make a cut")
	}
}
