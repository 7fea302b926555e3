package fixante

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/cut"
)

// slot is one entry of a window: the k-th entry of a shard.
type slot struct {
	shard cut.ShardID
	k     uint64
}

// replay lays a window out entry by entry, cut by cut: the shards of the
// cut's group in ascending id order, each adding its quota.
func replay(w Window) (layout []slot, cutEnds []uint64) {
	next := map[cut.ShardID]uint64{}
	for j := uint64(0); j < w.Cuts; j++ {
		for _, q := range w.Quotas {
			if q.PerCut == 0 || uint64(q.Group) != j%uint64(w.Groups) {
				continue
			}
			for i := uint64(0); i < q.PerCut; i++ {
				layout = append(layout, slot{q.Shard, next[q.Shard]})
				next[q.Shard]++
			}
		}
		cutEnds = append(cutEnds, w.Start+uint64(len(layout)))
	}
	return layout, cutEnds
}

func randomWindow(rng *rand.Rand) Window {
	n := 1 + rng.IntN(9)
	var quotas []Quota
	id := cut.ShardID(rng.IntN(3))
	for i := 0; i < n; i++ {
		id += cut.ShardID(1 + rng.IntN(3))
		var per uint64
		if rng.IntN(4) > 0 {
			per = uint64(1 + rng.IntN(6))
		}
		quotas = append(quotas, Quota{Shard: id, PerCut: per})
	}
	active := 0
	for _, q := range quotas {
		if q.PerCut > 0 {
			active++
		}
	}
	groups := 1
	if active > 1 {
		groups = 1 + rng.IntN(active)
	}
	// Deal active shards round-robin so no group is empty.
	a := 0
	for i := range quotas {
		if quotas[i].PerCut > 0 {
			quotas[i].Group = a % groups
			a++
		} else {
			quotas[i].Group = rng.IntN(groups)
		}
	}
	return Window{Index: 3, FirstCut: 300, Cuts: uint64(1 + rng.IntN(12)), Start: uint64(rng.IntN(1000)), Groups: groups, Quotas: quotas}
}

// TestPredictMatchesReplay checks the closed-form prediction, cut bounds and
// release counts against the entry-by-entry replay over many windows.
func TestPredictMatchesReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 5))
	for trial := 0; trial < 2000; trial++ {
		w := randomWindow(rng)
		if err := w.Validate(); err != nil {
			if errors.Is(err, ErrEmptyGroup) {
				continue
			}
			t.Fatalf("trial %d: %v for %+v", trial, err, w)
		}
		layout, cutEnds := replay(w)
		for off, s := range layout {
			pos, j, ok := w.Predict(s.shard, s.k)
			if !ok || pos != w.Start+uint64(off) {
				t.Fatalf("trial %d: shard %d entry %d predicted at %d (ok %v), replay puts it at %d\n%+v",
					trial, s.shard, s.k, pos, ok, w.Start+uint64(off), w)
			}
			if pos < w.CutStart(j) || pos >= cutEnds[j] {
				t.Fatalf("trial %d: position %d outside its cut %d [%d, %d)", trial, pos, j, w.CutStart(j), cutEnds[j])
			}
		}
		for j := uint64(0); j < w.Cuts; j++ {
			if w.CutStart(j+1) != cutEnds[j] {
				t.Fatalf("trial %d: cut %d ends at %d, replay %d", trial, j, w.CutStart(j+1), cutEnds[j])
			}
		}
		if w.End() != w.Start+uint64(len(layout)) {
			t.Fatalf("trial %d: end %d, replay %d", trial, w.End(), w.Start+uint64(len(layout)))
		}
		for _, q := range w.Quotas {
			var seen uint64
			for _, s := range layout {
				if s.shard == q.Shard {
					seen++
				}
			}
			if w.Capacity(q.Shard) != seen {
				t.Fatalf("trial %d: shard %d capacity %d, replay %d", trial, q.Shard, w.Capacity(q.Shard), seen)
			}
			// The first entry past the window is not predictable here.
			if _, _, ok := w.Predict(q.Shard, seen); ok {
				t.Fatalf("trial %d: shard %d entry %d predicted beyond the window", trial, q.Shard, seen)
			}
		}
	}
}

// TestSatisfiedWaitsOnlyForTheCutsGroup: a cut is released once the shards
// of its group reported what they owe; other groups' shards do not hold it.
func TestSatisfiedWaitsOnlyForTheCutsGroup(t *testing.T) {
	w := Window{Cuts: 4, Groups: 2, Quotas: []Quota{{Shard: 1, PerCut: 2, Group: 0}, {Shard: 2, PerCut: 3, Group: 1}}}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	reported := map[cut.ShardID]uint64{1: 2}
	get := func(s cut.ShardID) uint64 { return reported[s] }
	if !w.Satisfied(0, get) {
		t.Fatal("cut 0 waits only for shard 1, which reported its 2")
	}
	if w.Satisfied(1, get) {
		t.Fatal("cut 1 needs shard 2's 3 entries")
	}
	reported[2] = 3
	if !w.Satisfied(1, get) || w.Satisfied(2, get) {
		t.Fatal("cut 2 needs shard 1's second quota")
	}
	if got := w.Entries(1, 2); got != 4 {
		t.Fatalf("shard 1 owes %d by cut 2, want 4", got)
	}
	if pos, j, _ := w.Predict(2, 4); j != 3 || pos != 2+3+2+1 {
		t.Fatalf("shard 2 entry 4 at %d in cut %d", pos, j)
	}
}

func TestValidateRefusesBadWindows(t *testing.T) {
	ok := []Quota{{Shard: 1, PerCut: 1}, {Shard: 2, PerCut: 1}}
	cases := map[string]struct {
		w    Window
		want error
	}{
		"zero cuts":          {Window{Cuts: 0, Groups: 1, Quotas: ok}, ErrNoCuts},
		"zero groups":        {Window{Cuts: 5, Groups: 0, Quotas: ok}, ErrGroups},
		"more groups":        {Window{Cuts: 5, Groups: 3, Quotas: ok}, ErrGroups},
		"group out of range": {Window{Cuts: 5, Groups: 1, Quotas: []Quota{{Shard: 1, PerCut: 1, Group: 1}}}, ErrGroups},
		"unsorted":           {Window{Cuts: 5, Groups: 1, Quotas: []Quota{{Shard: 2, PerCut: 1}, {Shard: 1, PerCut: 1}}}, ErrQuotaOrder},
		"empty group":        {Window{Cuts: 5, Groups: 2, Quotas: []Quota{{Shard: 1, PerCut: 1}, {Shard: 2, PerCut: 1}}}, ErrEmptyGroup},
		"overflow":           {Window{Cuts: 5, Groups: 1, Start: ^uint64(0) - 3, Quotas: ok}, ErrCutOverflow},
	}
	for name, c := range cases {
		if err := c.w.Validate(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func TestRateQuota(t *testing.T) {
	for _, c := range []struct {
		rate float64
		want uint64
	}{{0, 1}, {100, 1}, {2000, 2}, {10000, 10}, {12600, 13}} {
		if got := RateQuota(c.rate, time.Millisecond); got != c.want {
			t.Errorf("RateQuota(%v) = %d, want %d", c.rate, got, c.want)
		}
	}
}
