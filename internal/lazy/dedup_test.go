package lazy

import (
	"math/rand/v2"
	"testing"
)

// TestDedupAgreesWithASetOfEverySeqDone checks Dedup, which keeps a floor
// and the done sequence numbers above it, against the naive model that
// remembers every done sequence number and every promise, over random
// marks, floors and restarts from the persisted marks.
func TestDedupAgreesWithASetOfEverySeqDone(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		d := NewDedup(nil)
		done := map[RecordID]bool{}
		floor := map[uint64]uint64{}
		for step := range 300 {
			id := RecordID{Client: 1 + r.Uint64N(3), Seq: 1 + r.Uint64N(40)}
			switch r.IntN(10) {
			case 0:
				f := 1 + r.Uint64N(40)
				d.Raise(id.Client, f)
				floor[id.Client] = max(floor[id.Client], f)
			case 1:
				d = NewDedup(d.Marks())
			default:
				d.Mark(id)
				done[id] = true
			}
			for c, cs := range d.clients {
				for s := range cs.above {
					if s <= cs.floor {
						t.Fatalf("seed %d step %d: client %d keeps done seq %d at or below its floor %d", seed, step, c, s, cs.floor)
					}
				}
			}
			for c := uint64(1); c <= 3; c++ {
				for s := uint64(1); s <= 40; s++ {
					q := RecordID{Client: c, Seq: s}
					want := done[q] || s < floor[c]
					if got := d.Done(q); got != want {
						t.Fatalf("seed %d step %d: Done(%v) = %v, want %v", seed, step, q, got, want)
					}
				}
			}
		}
	}
}
