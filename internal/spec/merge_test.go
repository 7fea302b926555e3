package spec

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/augur-log/augur/internal/cut"
)

func rec(pos uint64, shard cut.ShardID, r string) Item[string] {
	return Item[string]{Pos: pos, Shard: shard, Rec: r}
}

func skip(pos uint64, shard cut.ShardID, n uint64) Item[string] {
	return Item[string]{Pos: pos, Shard: shard, Skip: n}
}

// drain renders the pending events compactly: d3=x (speculative d3~x),
// c5, f4.
func drain(m *Merger[string]) string {
	var b []string
	for {
		ev, ok := m.Next()
		if !ok {
			return strings.Join(b, " ")
		}
		switch ev.Kind {
		case EventDeliver:
			sep := "="
			if ev.Speculative {
				sep = "~"
			}
			b = append(b, fmt.Sprintf("d%d%s%s", ev.Pos, sep, ev.Rec))
		case EventConfirm:
			b = append(b, fmt.Sprintf("c%d", ev.Pos))
		case EventFail:
			b = append(b, fmt.Sprintf("f%d", ev.Pos))
		}
	}
}

func expect(t *testing.T, m *Merger[string], want string) {
	t.Helper()
	if got := drain(m); got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
}

func TestMergerOutOfOrderAndDuplicates(t *testing.T) {
	m := NewMerger[string](0, false)
	m.Add(rec(2, 1, "c"), rec(1, 0, "b"))
	expect(t, m, "")
	m.Add(rec(0, 0, "a"))
	expect(t, m, "d0~a d1~b d2~c")
	m.Add(rec(1, 0, "b"), rec(0, 0, "a"), rec(2, 1, "c")) // a reconnect
	expect(t, m, "")
	m.Add(rec(4, 1, "e"), rec(4, 1, "e"))
	m.Add(rec(3, 0, "d"))
	expect(t, m, "d3~d d4~e")
	m.Confirm(2)
	expect(t, m, "c2")
	m.Confirm(2)
	m.Confirm(1)
	expect(t, m, "")
	m.Add(rec(6, 0, "g"))
	m.Confirm(7)
	// Confirm never passes the first undelivered position.
	expect(t, m, "c5")
	m.Add(rec(5, 1, "f"))
	expect(t, m, "d5=f d6=g c7")
	if m.Buffered() != 0 {
		t.Fatalf("%d items buffered after everything was confirmed", m.Buffered())
	}
}

func TestMergerSkips(t *testing.T) {
	m := NewMerger[string](10, false)
	// A skip that starts before from and straddles it.
	m.Add(skip(7, 0, 5))
	m.Add(rec(14, 1, "o"), rec(12, 1, "m"), rec(3, 1, "old"))
	expect(t, m, "d12~m")
	// A repeated skip split differently, overlapping what was delivered.
	m.Add(skip(11, 0, 2), skip(13, 0, 1), skip(9, 0, 5))
	expect(t, m, "d14~o")
	m.Confirm(8)
	expect(t, m, "")
	m.Confirm(16)
	expect(t, m, "c15")
	m.Add(skip(15, 0, 3), skip(15, 0, 1), rec(18, 1, "s"))
	expect(t, m, "d18~s c16")
	m.Confirm(19)
	expect(t, m, "c19")
	// Overlapping skips in the future are all consumed.
	m.Add(skip(20, 0, 5), skip(22, 0, 1), skip(19, 1, 2), rec(25, 1, "z"))
	expect(t, m, "d25~z")
	m.Confirm(30)
	expect(t, m, "c26")
	if m.Buffered() != 0 {
		t.Fatalf("%d items buffered", m.Buffered())
	}
}

func TestMergerConfirmedOnly(t *testing.T) {
	m := NewMerger[string](0, true)
	m.Add(rec(0, 0, "a"), rec(1, 1, "b"), skip(2, 0, 2), rec(4, 1, "e"))
	expect(t, m, "")
	m.Confirm(1)
	expect(t, m, "d0=a c1")
	m.Confirm(4)
	expect(t, m, "d1=b c4")
	// A view change after the confirmed end fails nothing.
	m.ViewChange(1, 4, 1)
	expect(t, m, "")
	m.Add(skip(4, 0, 1), rec(5, 0, "f"))
	m.Confirm(6)
	expect(t, m, "d5=f c6")
}

// TestMergerFail checks a view change: buffered items of live shards are
// delivered again at their positions after a Fail, the failed shard's void
// items are dropped wherever they are and ignored when they come late, and
// the filler's no-ops take their slots.
func TestMergerFail(t *testing.T) {
	m := NewMerger[string](0, false)
	m.Confirm(2)
	m.Add(rec(0, 0, "a"), rec(1, 1, "b"), rec(2, 0, "c"), rec(3, 1, "d"), rec(4, 0, "e"), rec(5, 1, "f"), rec(7, 1, "h"))
	expect(t, m, "d0=a d1=b d2~c d3~d d4~e d5~f c2")
	// Shard 1 fails; cut end 4 was released before the view change.
	m.ViewChange(1, 4, 1)
	expect(t, m, "f4 d4~e")
	m.ViewChange(1, 4, 1) // every stream repeats it
	m.Add(rec(5, 1, "f"), rec(9, 1, "late"))
	expect(t, m, "")
	m.Confirm(4)
	expect(t, m, "c4")
	m.Add(skip(5, 0, 1), rec(6, 0, "g"), skip(7, 0, 1), rec(8, 0, "i"), skip(9, 0, 1))
	expect(t, m, "d6~g d8~i")
	m.Confirm(10)
	expect(t, m, "c10")

	// Nothing delivered past confirmed-gp: no Fail, but void items go.
	m = NewMerger[string](0, false)
	m.Add(rec(0, 0, "a"), rec(2, 1, "x"))
	expect(t, m, "d0~a")
	m.ViewChange(3, 1, 1)
	m.Add(rec(1, 0, "b"), skip(2, 0, 1))
	expect(t, m, "d1~b")
	if m.View() != 3 {
		t.Fatalf("view %d", m.View())
	}

	// Only no-ops past confirmed-gp: rewind silently.
	m = NewMerger[string](0, false)
	m.Add(rec(0, 0, "a"), skip(1, 1, 3), rec(4, 0, "e"))
	expect(t, m, "d0~a d4~e")
	m.ViewChange(1, 4, 0)
	expect(t, m, "f4")
	// The failed shard's own no-ops past confirmed-gp are its void slots,
	// no-ops in the new view too: they stay.
	m = NewMerger[string](0, false)
	m.Add(rec(0, 0, "a"), skip(1, 1, 3))
	expect(t, m, "d0~a")
	m.ViewChange(1, 2, 1)
	expect(t, m, "")
	if m.Position() != 4 {
		t.Fatalf("rewound to %d, want 4", m.Position())
	}
	m.Add(rec(4, 0, "c"))
	expect(t, m, "d4~c")
}

// TestMergerKeepsAFailedFillersSkips: a filler leaves, so another shard
// fills the same void slots; the merger keeps one of the two equal skips,
// the first filler's. When that filler then fails, its skip still holds
// no-ops (spec seed 335 of the simulator: every subscriber waited at the
// first slot for good once the kept skip was dropped as void).
func TestMergerKeepsAFailedFillersSkips(t *testing.T) {
	for _, confirmedOnly := range []bool{false, true} {
		m := NewMerger[string](0, confirmedOnly)
		m.Add(rec(0, 1, "a"), rec(1, 2, "b"))
		m.Confirm(2)
		// Shard 0 failed at 2; shard 1 fills its slots 2 and 3.
		m.ViewChange(1, 2, 0)
		m.Add(skip(2, 1, 2))
		// Shard 1 leaves; shard 2 sends the same slots.
		m.Add(skip(2, 2, 2))
		// Shard 1 then fails as a whole, at the same confirmed-gp.
		m.ViewChange(2, 2, 1)
		m.Add(rec(4, 2, "c"))
		m.Confirm(5)
		if m.Position() != 5 {
			t.Fatalf("confirmed only %v: stuck at %d, want 5", confirmedOnly, m.Position())
		}
	}
}

// TestMergerFillerFails checks two views: the filler of the first failure
// fails too, and a second filler takes over both voids.
func TestMergerFillerFails(t *testing.T) {
	m := NewMerger[string](0, false)
	// Three shards: 0, 1, 2 take one slot each per cut.
	m.Add(rec(0, 0, "a0"), rec(1, 1, "b0"), rec(2, 2, "c0"), rec(3, 0, "a1"), rec(4, 1, "b1"))
	expect(t, m, "d0~a0 d1~b0 d2~c0 d3~a1 d4~b1")
	m.ViewChange(1, 3, 2) // shard 2 fails after cut 1
	expect(t, m, "f3 d3~a1 d4~b1")
	m.Add(skip(5, 0, 1), rec(6, 0, "a2"), rec(7, 1, "b2"))
	expect(t, m, "d6~a2 d7~b2")
	m.ViewChange(2, 6, 0) // the filler fails after cut 2; shard 1 fills
	expect(t, m, "f6")
	m.Add(rec(8, 2, "void"), skip(5, 0, 1), rec(6, 0, "void"))
	m.Add(skip(5, 1, 1), skip(6, 1, 1), rec(7, 1, "b2"), skip(8, 1, 1))
	expect(t, m, "d7~b2")
	m.Confirm(9)
	expect(t, m, "c9")
}

// TestMergerAdoptedVoid fails both shards, the second before it filled the
// first's slots: nobody fills them, and the merger must not pass them,
// even once confirmed. A shard that registers later, named in no view
// change, sends their no-ops, and the merger goes on.
func TestMergerAdoptedVoid(t *testing.T) {
	m := NewMerger[string](0, false)
	// Two shards: 0, 1 take one slot each per cut.
	m.Add(rec(0, 0, "a0"), rec(1, 1, "b0"))
	m.Confirm(2)
	expect(t, m, "d0~a0 d1~b0 c2")
	m.ViewChange(1, 2, 1) // shard 1 fails after cut 1; shard 0 fills
	m.Add(rec(2, 0, "a1"))
	expect(t, m, "d2~a1")
	m.ViewChange(2, 2, 0) // shard 0 fails too, before it filled
	expect(t, m, "f2")
	m.Confirm(6) // the window's cuts are released without them
	expect(t, m, "")
	m.Add(skip(2, 2, 4))
	expect(t, m, "c6")
	if m.Position() != 6 {
		t.Fatalf("position %d after the adopted void, want 6", m.Position())
	}
}

// TestMergerRandom feeds one log's items in random order with repeats,
// confirmations and a view change, and checks the merged sequence against
// the log after the rewind.
func TestMergerRandom(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		const n = 60
		// Positions round-robin over three shards; shard 2 fails at gp.
		gp := uint64(r.IntN(n))
		shardOf := func(p uint64) cut.ShardID { return cut.ShardID(p % 3) }
		var items []Item[string]
		for p := uint64(0); p < n; p++ {
			s := shardOf(p)
			switch {
			case r.IntN(4) == 0:
				items = append(items, skip(p, s, 1))
			default:
				items = append(items, rec(p, s, fmt.Sprint(p)))
			}
		}
		// Fillers for shard 2's slots after gp, sent by shard 0.
		var fill []Item[string]
		for p := gp; p < n; p++ {
			if shardOf(p) == 2 {
				fill = append(fill, skip(p, 0, 1))
			}
		}
		want := map[uint64]string{}
		for _, it := range items {
			if it.Skip == 0 && (it.Pos < gp || shardOf(it.Pos) != 2) {
				want[it.Pos] = it.Rec
			}
		}
		from := uint64(r.IntN(5))
		m := NewMerger[string](from, seed%5 == 0)
		got := map[uint64]string{}
		var confirmed uint64
		var failAt uint64 = n + 1
		check := func() {
			for {
				ev, ok := m.Next()
				if !ok {
					return
				}
				switch ev.Kind {
				case EventDeliver:
					if ev.Pos < confirmed {
						t.Fatalf("seed %d: delivered %d below confirmed %d", seed, ev.Pos, confirmed)
					}
					got[ev.Pos] = ev.Rec
				case EventConfirm:
					if ev.Pos <= confirmed {
						t.Fatalf("seed %d: confirm %d after %d", seed, ev.Pos, confirmed)
					}
					confirmed = ev.Pos
				case EventFail:
					if ev.Pos != gp {
						t.Fatalf("seed %d: fail %d, want %d", seed, ev.Pos, gp)
					}
					failAt = ev.Pos
					for p := range got {
						if p >= ev.Pos {
							delete(got, p)
						}
					}
				}
			}
		}
		perm := r.Perm(len(items))
		viewAt := r.IntN(len(items))
		var high uint64
		for i, k := range perm {
			m.Add(items[k])
			if r.IntN(3) == 0 {
				m.Add(items[perm[r.IntN(i+1)]])
			}
			if r.IntN(5) == 0 && high < gp {
				high = min(gp, high+uint64(r.IntN(8)))
				m.Confirm(high)
			}
			if i == viewAt {
				m.Confirm(gp)
				m.ViewChange(1, gp, 2)
				m.Add(fill...)
			}
			check()
		}
		if viewAt >= len(items) {
			m.ViewChange(1, gp, 2)
		}
		m.Confirm(n)
		check()
		if failAt != n+1 && seed%5 == 0 {
			t.Fatalf("seed %d: confirmed-only merger failed", seed)
		}
		if confirmed != n || m.Position() != n {
			t.Fatalf("seed %d: confirmed %d, at %d", seed, confirmed, m.Position())
		}
		var keys []uint64
		for p := range want {
			if p >= from {
				keys = append(keys, p)
			}
		}
		slices.Sort(keys)
		if len(got) != len(keys) {
			t.Fatalf("seed %d: got %d records, want %d", seed, len(got), len(keys))
		}
		for _, p := range keys {
			if got[p] != want[p] {
				t.Fatalf("seed %d: position %d holds %q, want %q", seed, p, got[p], want[p])
			}
		}
		if m.Buffered() != 0 {
			t.Fatalf("seed %d: %d items buffered at the end", seed, m.Buffered())
		}
	}
}

func TestShardMergerDeliversWithoutWaitingForOtherShards(t *testing.T) {
	m := NewShardMerger[string](0, false)
	// Shard 1's stream: positions 0, 2 and 3 belong to other shards.
	m.Add(rec(1, 1, "a"))
	expect(t, m, "d1~a")
	m.Add(skip(4, 1, 2), rec(6, 1, "b"), rec(1, 1, "a")) // no-ops, then a repeat
	expect(t, m, "d6~b")
	// A confirmation covers the other shards' positions it passes.
	m.Confirm(5)
	expect(t, m, "c5")
	m.Confirm(9)
	expect(t, m, "c9")
	// A record of this stream below the confirmed end comes final.
	m.Add(rec(8, 1, "c"))
	expect(t, m, "d8=c")
	m.Add(rec(10, 1, "d"))
	expect(t, m, "d10~d")

	// A whole-shard failure elsewhere voids this stream's deliveries from
	// confirmed-gp on; they come again at the same positions.
	m.ViewChange(1, 9, 3)
	expect(t, m, "f9 d10~d")
	m.Confirm(11)
	expect(t, m, "c11")

	// This stream's own shard failing voids its items from confirmed-gp on.
	m.Add(rec(12, 1, "e"))
	expect(t, m, "d12~e")
	m.ViewChange(2, 12, 1)
	expect(t, m, "f12")
	m.Add(rec(13, 1, "f"))
	expect(t, m, "")
	if m.Buffered() != 0 {
		t.Fatalf("%d items buffered after the failure", m.Buffered())
	}
}

// TestShardMergerFiller follows the shard that fills a failed shard's
// slots: the filler's stream sends skips for all of them at once, ahead of
// its own records in between, which must still come.
func TestShardMergerFiller(t *testing.T) {
	m := NewShardMerger[string](0, false)
	m.Add(rec(0, 0, "a"))
	m.ViewChange(1, 1, 1)
	m.Add(skip(3, 0, 1), skip(5, 0, 1), skip(7, 0, 1)) // shard 1's void slots
	m.Add(rec(2, 0, "b"), rec(4, 0, "c"), rec(6, 0, "d"))
	expect(t, m, "d0~a d2~b d4~c d6~d")
	m.Confirm(8)
	expect(t, m, "c8")
}

func TestShardMergerConfirmedOnly(t *testing.T) {
	m := NewShardMerger[string](0, true)
	m.Add(rec(1, 1, "a"), rec(4, 1, "b"))
	expect(t, m, "")
	m.Confirm(3)
	expect(t, m, "d1=a c3")
	m.Confirm(5)
	expect(t, m, "d4=b c5")
}
