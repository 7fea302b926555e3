package shard

import (
	"math/rand/v2"
	"testing"

	"github.com/augur-log/augur/internal/cut"
)

// fakePositions stands in for the store's local -> global index.
type fakePositions map[uint64]uint64

func (f fakePositions) lookup(local uint64) (uint64, bool) {
	p, ok := f[local]
	return p, ok
}

// order applies a slice to both the primary and the position index, as the
// storage loop does (the store is assigned before the primary answers).
func order(p *Primary[string], pos fakePositions, sl cut.Slice) []Answer[string] {
	for i := uint64(0); i < sl.Count; i++ {
		pos[sl.LocalStart+i] = sl.GlobalStart + i
	}
	return p.Order(sl, nil)
}

func TestRetryIsStoredOnce(t *testing.T) {
	pos := fakePositions{}
	p := NewPrimary[string](0, pos.lookup)
	if v, _ := p.Admit(7, 1, "s1"); v != Store {
		t.Fatalf("first append: %v", v)
	}
	p.Stored(7, 1, 0, "s1")
	// The retry arrives on a new stream before the cut: it waits, and the
	// answer goes to the new stream.
	if v, _ := p.Admit(7, 1, "s2"); v != Waiting {
		t.Fatalf("retry before cut: %v", v)
	}
	got := order(p, pos, cut.Slice{LocalStart: 0, GlobalStart: 40, Count: 1})
	if len(got) != 1 || got[0] != (Answer[string]{Waiter: "s2", Seq: 1, Verdict: Ordered, Position: 40}) {
		t.Fatalf("answers %+v", got)
	}
	// A retry after the cut is answered at once with the same position.
	if v, at := p.Admit(7, 1, "s3"); v != Ordered || at != 40 {
		t.Fatalf("retry after cut: %v %d", v, at)
	}
	// Another client's same sequence number is a different append.
	if v, _ := p.Admit(8, 1, "s4"); v != Store {
		t.Fatalf("other client: %v", v)
	}
}

func TestFinalizeAnswersUnorderedOnly(t *testing.T) {
	pos := fakePositions{}
	p := NewPrimary[string](0, pos.lookup)
	for i := uint64(0); i < 5; i++ {
		p.Stored(1, i+1, i, "s")
	}
	got := order(p, pos, cut.Slice{LocalStart: 0, GlobalStart: 0, Count: 3})
	if len(got) != 3 {
		t.Fatalf("ordered %d", len(got))
	}
	fin, unanswered := p.Finalize(3)
	if len(fin) != 2 || fin[0].Verdict != Abandoned || fin[0].Seq != 4 || fin[1].Seq != 5 || unanswered != 0 {
		t.Fatalf("finalize answers %+v, %d unanswered", fin, unanswered)
	}
	if v, _ := p.Admit(1, 6, "s"); v != Finalized {
		t.Fatalf("append after finalize: %v", v)
	}
	if v, at := p.Admit(1, 2, "s"); v != Finalized && !(v == Ordered && at == 1) {
		t.Fatalf("retry of ordered record after finalize: %v", v)
	}
}

func TestDedupWindowExpires(t *testing.T) {
	pos := fakePositions{}
	p := NewPrimary[string](0, pos.lookup)
	n := uint64(DedupPerClientMax + 10)
	for i := uint64(0); i < n; i++ {
		p.Stored(3, i+1, i, "s")
	}
	if v, _ := p.Admit(3, 1, "s"); v != Expired {
		t.Fatalf("oldest retry: %v, want Expired", v)
	}
	if v, _ := p.Admit(3, n, "s"); v != Waiting {
		t.Fatalf("newest retry: %v, want Waiting", v)
	}
	if v, _ := p.Admit(3, n+1, "s"); v != Store {
		t.Fatalf("new sequence: %v, want Store", v)
	}
}

// TestRandomHistories drives the primary with random appends, retries, cuts
// and a final finalization, and checks against a model: every stored
// append is answered exactly once, by position in local order or as final,
// and no (client, seq) is ever stored twice.
func TestRandomHistories(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		pos := fakePositions{}
		p := NewPrimary[string](0, pos.lookup)
		stored := map[[2]uint64]uint64{} // (client, seq) -> local
		answered := map[[2]uint64]int{}
		byLocal := map[uint64][2]uint64{}
		var local, ordered, global uint64
		nextSeq := map[uint64]uint64{}
		for step := 0; step < 300; step++ {
			switch k := rng.IntN(10); {
			case k < 5:
				c := uint64(rng.IntN(3))
				var seq uint64
				if rng.IntN(3) == 0 && nextSeq[c] > 0 {
					seq = 1 + uint64(rng.IntN(int(nextSeq[c]))) // a retry
				} else {
					nextSeq[c]++
					seq = nextSeq[c]
				}
				v, at := p.Admit(c, seq, "w")
				key := [2]uint64{c, seq}
				_, was := stored[key]
				switch v {
				case Store:
					if was {
						t.Fatalf("seed %d: %v stored twice", seed, key)
					}
					p.Stored(c, seq, local, "w")
					stored[key] = local
					byLocal[local] = key
					local++
				case Ordered:
					if !was || stored[key] >= ordered || pos[stored[key]] != at {
						t.Fatalf("seed %d: bad Ordered for %v", seed, key)
					}
				case Waiting:
					if !was || stored[key] < ordered {
						t.Fatalf("seed %d: bad Waiting for %v", seed, key)
					}
				default:
					t.Fatalf("seed %d: unexpected verdict %v", seed, v)
				}
			default:
				n := uint64(rng.IntN(int(local-ordered) + 1))
				sl := cut.Slice{LocalStart: ordered, GlobalStart: global, Count: n}
				for _, a := range order(p, pos, sl) {
					key := byLocal[a.Position-global+ordered]
					if a.Seq != key[1] {
						t.Fatalf("seed %d: answer %+v for %v", seed, a, key)
					}
					answered[key]++
				}
				ordered += n
				global += n + uint64(rng.IntN(3)) // other shards' records
			}
		}
		fin, unanswered := p.Finalize(ordered)
		if unanswered != 0 {
			t.Fatalf("seed %d: %d records below the final length never answered", seed, unanswered)
		}
		for _, a := range fin {
			if a.Verdict != Abandoned {
				t.Fatalf("seed %d: non-final answer at finalize", seed)
			}
			answered[[2]uint64{0, a.Seq}]++ // client unknown here; count by total below
		}
		total := 0
		for _, n := range answered {
			total += n
		}
		if total != len(stored) {
			t.Fatalf("seed %d: %d answers for %d stored appends", seed, total, len(stored))
		}
	}
}

func TestEvictedClientRetryIsRefused(t *testing.T) {
	pos := fakePositions{}
	p := NewPrimary[string](0, pos.lookup)
	var local uint64
	for c := uint64(0); c <= DedupClientsMax; c++ {
		p.Stored(c, 5, local, "s")
		local++
	}
	// One client was forgotten in full to make room; whichever it was, its
	// retry is refused, never stored again, and its new appends still go.
	expired := 0
	for c := uint64(0); c <= DedupClientsMax; c++ {
		switch v, _ := p.Admit(c, 5, "s"); v {
		case Expired:
			expired++
			if v, _ := p.Admit(c, 6, "s"); v != Store {
				t.Fatalf("client %d: new sequence after eviction: %v", c, v)
			}
		case Waiting:
		default:
			t.Fatalf("client %d: retry verdict %v", c, v)
		}
	}
	if expired != 1 {
		t.Fatalf("%d clients expired, want 1", expired)
	}
}

// TestRetryOfOrderedRecordAfterFinalize: a retry whose first attempt was
// ordered must get its position even after the shard is finalized;
// Finalized would make the client store the record again elsewhere.
func TestRetryOfOrderedRecordAfterFinalize(t *testing.T) {
	pos := fakePositions{}
	p := NewPrimary[string](0, pos.lookup)
	p.Stored(7, 1, 0, "s")
	order(p, pos, cut.Slice{LocalStart: 0, GlobalStart: 40, Count: 1})
	p.Stored(7, 2, 1, "s")
	if _, unanswered := p.Finalize(1); unanswered != 0 {
		t.Fatalf("%d unanswered", unanswered)
	}
	if v, at := p.Admit(7, 1, "s2"); v != Ordered || at != 40 {
		t.Fatalf("retry of ordered record: %v at %d, want Ordered at 40", v, at)
	}
	if v, _ := p.Admit(7, 2, "s2"); v != Finalized {
		t.Fatalf("retry of record stored past the final length: %v, want Finalized", v)
	}
	if v, _ := p.Admit(7, 3, "s2"); v != Finalized {
		t.Fatalf("new append after finalize: %v, want Finalized", v)
	}
}

// TestFinalizeCountsUnansweredBelowLength checks that finalizing past
// records whose cuts were never applied reports them: their clients would
// otherwise wait without a word.
func TestFinalizeCountsUnansweredBelowLength(t *testing.T) {
	p := NewPrimary[string](0, func(uint64) (uint64, bool) { return 0, false })
	for i := uint64(0); i < 4; i++ {
		p.Stored(1, i+1, i, "s")
	}
	fin, unanswered := p.Finalize(3)
	if len(fin) != 1 || fin[0].Seq != 4 || unanswered != 3 {
		t.Fatalf("finalize: answers %+v, %d unanswered; want seq 4 final and 3 unanswered", fin, unanswered)
	}
}
