package sim

// Damaged files and their repair: a storage server restarts with a range
// of its log damaged (bytes flipped on disk, found by recovery), and its
// copy runs the shard core's CatchUp against the shard's other copies, as
// the storage server runs it against its group (internal/storage's
// catchup.go). The simulator carries the fetches: each batch is read
// from the source's log and arrives a little later; a source that
// crashed meanwhile breaks the fetch. A scenario may crash the source
// after the first batch (a failure during catch-up).

import (
	"math/rand/v2"
	"time"

	"github.com/augur-log/augur/internal/segment"
	core "github.com/augur-log/augur/internal/shard"
)

// Catch-up timings and bounds.
const (
	// catchUpBatchMax bounds the entries of one fetched batch; small, so
	// that fetches take several batches and a source can die between.
	catchUpBatchMax = 3
	// catchUpBatchDelay is how long a batch takes to arrive.
	catchUpBatchDelay = 200 * time.Microsecond
	// catchUpRetryEvery is how soon a stalled catch-up asks again.
	catchUpRetryEvery = 2 * time.Millisecond
	// damageMax bounds the local indexes a restart damages.
	damageMax = 6
)

// planDamage chooses, from its own random source so that the rest of the
// scenario stays as the seed drew it, which storage crashes restart with
// a damaged file, and which of those lose their catch-up's source after
// its first batch (only where a crash of the source loses nothing
// acknowledged: under the durable default).
func (sc *scenario) planDamage(r *rand.Rand) {
	for i := range sc.crashes {
		x := &sc.crashes[i]
		x.damage = r.IntN(2) == 0
		x.sourceDies = x.damage && sc.sync.durable() && r.IntN(2) == 0
	}
}

// damageOnRestart damages a range of copy c's log as its server restarts,
// if its crash asked for it.
func (sh *shard) damageOnRestart(c *copyOf) {
	if !c.damage {
		return
	}
	c.damage = false
	s := sh.s
	start, n := c.log.Start(), c.log.Len()
	if n <= start {
		return
	}
	first := start + uint64(s.r.IntN(int(n-start)))
	d, ok := c.log.Damage(first, first+1+uint64(s.r.IntN(damageMax)))
	if !ok {
		return
	}
	s.stats.damaged++
	s.tracef("shard %d: %s restarts with local [%d, %d) damaged", sh.id, c.name(), d.First, d.End)
}

// catchUp runs copy c's catch-up of its damaged ranges from the shard's
// other copies (the core's sources, in copy order), for as long as c's
// server stays up.
func (sh *shard) catchUp(c *copyOf) {
	gaps := c.r.Gaps()
	if len(gaps) == 0 {
		return
	}
	s := sh.s
	var sources []*copyOf
	for _, o := range sh.copies {
		if o != c {
			sources = append(sources, o)
		}
	}
	cu, err := core.NewCatchUp(core.CatchUpConfig{Gaps: gaps, Sources: len(sources)})
	if err != nil {
		s.errorf("shard %d %s: %v", sh.id, c.name(), err)
		return
	}
	inc := c.inc
	killSource := c.killSource
	c.killSource = false
	c.repairing = true
	var step func()
	step = func() {
		if c.inc != inc {
			return // c crashed again: its next restart starts over
		}
		if cu.Done() {
			s.tracef("shard %d: %s caught up (lost %v)", sh.id, c.name(), cu.Lost())
			c.repairing = false
			sh.maybeRejoin(c)
			return
		}
		f, ok := cu.Next()
		if !ok {
			s.after(catchUpRetryEvery, func() { cu.Retry(); step() })
			return
		}
		src := sources[f.Source]
		if !src.running() {
			cu.Ended(false)
			s.after(catchUpRetryEvery, step)
			return
		}
		entries, sums := sh.fetchBatch(src, f, c.log.Ordered())
		if len(entries) == 0 {
			cu.Ended(true) // the source holds none of it
			s.after(0, step)
			return
		}
		srcInc := src.inc
		s.after(catchUpBatchDelay, func() {
			if c.inc != inc {
				return
			}
			if src.inc != srcInc {
				// The source died while the batch was on its way.
				cu.Ended(false)
				step()
				return
			}
			w, ok, err := cu.Received(s.now, f.First, entries, sums, 0)
			if err != nil {
				s.tracef("shard %d: %s refuses a fetched batch: %v", sh.id, c.name(), err)
				cu.Ended(true)
				step()
				return
			}
			if ok {
				sh.repaired(c, w)
			}
			if killSource && src.up {
				killSource = false
				s.stats.sourceDeaths++
				s.tracef("shard %d: the catch-up source %s dies mid-copy", sh.id, src.name())
				sh.crash(src, 0, time.Duration(1+s.r.IntN(10))*time.Millisecond)
			}
			if cu.Fetching() && len(entries) < catchUpBatchMax {
				// The source held no more than it sent.
				cu.Ended(true)
			}
			step()
		})
	}
	s.after(0, step)
}

// fetchBatch reads what copy src serves of fetch f: at most
// catchUpBatchMax entries from f.First, stopping where its log does
// (damaged, trimmed or shorter), with their checksums. served is how many
// entries of its log the copy repaired with them serves to readers.
func (sh *shard) fetchBatch(src *copyOf, f core.Fetch, served uint64) ([]segment.Entry, []uint32) {
	s := sh.s
	if src.r.Lost() || src.log.Start() > f.First {
		return nil, nil
	}
	var entries []segment.Entry
	var sums []uint32
	var locals []uint64
	next := f.First
	src.log.Scan(f.First, func(local uint64, e segment.Entry) bool {
		if local != next || local >= f.End || len(entries) == catchUpBatchMax {
			return false
		}
		if e.Noops > f.End-local {
			e.Noops = f.End - local
		}
		entries = append(entries, e)
		sums = append(sums, segment.Checksum(e))
		locals = append(locals, local)
		next = local + max(e.Noops, 1)
		return true
	})
	if s.plant == bugCopyUnchecked && !s.planted {
		for i := range entries {
			// Only a record the repaired copy serves can be seen
			// altered; one past what it serves (a copy back from a
			// crash serves what the cuts before its exclusion ordered)
			// is never read from it, and altering it proves nothing.
			if entries[i].Noops == 0 && locals[i] < served {
				// A source that serves what it read without checking its
				// frame: the checksum it sends covers the bad bytes.
				s.planted = true
				entries[i].Seq = 1 + entries[i].Seq%2 // another record of the run
				sums[i] = segment.Checksum(entries[i])
				break
			}
		}
	}
	return entries, sums
}

// repaired stores a catch-up's write on copy c and serves again what it
// repaired: the cuts that ordered its range, streamed from c.
func (sh *shard) repaired(c *copyOf, w core.Write) {
	s := sh.s
	if err := c.r.Repair(w); err != nil {
		s.errorf("shard %d %s: %v", sh.id, c.name(), err)
		return
	}
	end := w.First
	for _, e := range w.Entries {
		end += max(e.Noops, 1)
	}
	s.stats.repairs++
	s.tracef("shard %d: %s repaired local [%d, %d)", sh.id, c.name(), w.First, end)
	var cuts []shardCut
	prev := s.initialCut
	for _, cc := range s.cutHist {
		if cc.Index > sh.knownCut.Index {
			break
		}
		sl := sliceOf(prev, cc, sh.id)
		if sl.Count > 0 && sl.LocalStart < end && w.First < sl.LocalStart+sl.Count {
			cuts = append(cuts, shardCut{c: cc, slice: sl})
		}
		prev = cc
	}
	if s.servesAfterFailure() {
		sh.feed.replay(c, cuts)
	}
}

// checkCopies checks every copy that is up against the shard's log: what
// a copy reads at a local index is the entry the primary stored there
// (damaged entries are never read, and repaired ones must be right). A
// copy out of the configuration (recovered or fenced) is checked as far as
// it ordered entries: past that it may hold a tail its shard never made
// durable, which a newer primary replaced and which it never serves.
func (s *cluster) checkCopies() {
	for _, sh := range s.order {
		for _, c := range sh.copies {
			if !c.up {
				continue
			}
			end := uint64(len(sh.log))
			if role := c.r.Role(); role == core.RoleRecovered || role == core.RoleFenced {
				end = min(end, c.log.Ordered())
			}
			bad := false
			c.log.Scan(0, func(local uint64, e segment.Entry) bool {
				if local >= end {
					return false
				}
				got, n := noop, uint64(1)
				if e.Noops == 0 {
					got = int64(e.Seq) - 1
				} else {
					n = min(e.Noops, end-local)
				}
				for k := range n {
					if want := sh.log[local+k]; got != want {
						s.errorf("invariant 2: shard %d: %s reads %d at local %d, where the shard stored %d", sh.id, c.name(), got, local+k, want)
						bad = true
						break
					}
				}
				return !bad
			})
		}
	}
}
