package order

import (
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
)

// Eager is the eager (Scalog) ordering policy: it proposes a cut of the
// lengths the shards reported when one of them grew past what is committed
// or in flight, or when a shard is finalizing and needs cuts until its
// final one.
//
// Cuts are group commits. A report that finds no cut in flight is cut at
// once: waiting for an interval tick would only add latency, as there is
// nothing to batch it with. While a cut is in flight, reports are batched
// until it commits or an ordering interval has passed since it was
// proposed, whichever comes first; so under load a cut goes out about once
// per Raft round or interval, never once per report.
type Eager struct {
	interval time.Duration
	st       *control.State
	// reports is the longest length each shard reported.
	reports map[cut.ShardID]uint64
	// proposed is the lengths of the last cut proposed: with several
	// cuts in flight, the next must not propose again what one of them
	// carries.
	proposed map[cut.ShardID]uint64
	// last is when the last cut was proposed.
	last time.Time
}

var _ Policy = (*Eager)(nil)

// NewEager returns the eager policy with ordering interval interval.
func NewEager(interval time.Duration) *Eager {
	return &Eager{interval: interval, reports: map[cut.ShardID]uint64{}, proposed: map[cut.ShardID]uint64{}}
}

// Observe implements Policy.
func (e *Eager) Observe(st *control.State, _ time.Time) { e.st = st }

// Report implements Policy: a longer length is news.
func (e *Eager) Report(r Report, _ time.Time) bool {
	if r.Length <= e.reports[r.Shard] {
		return false
	}
	e.reports[r.Shard] = r.Length
	return true
}

// CutsInflightMax implements Policy.
func (e *Eager) CutsInflightMax() int { return cutsInflightMax }

// Committed implements Policy; a cut's commit changes nothing here, as
// Observe shows the new last cut.
func (e *Eager) Committed(control.Command) bool { return false }

// Forget implements Policy.
func (e *Eager) Forget() { clear(e.proposed) }

// Step implements Policy.
func (e *Eager) Step(now time.Time, free int) Plan {
	grew, force := false, false
	for i := range e.st.Shards {
		sh := &e.st.Shards[i]
		if sh.State == control.Finalized {
			continue
		}
		if sh.State == control.Finalizing {
			force = true
		}
		if r, ok := e.reports[sh.ID]; ok && r > max(e.st.LastCut.Len(sh.ID), e.proposed[sh.ID]) {
			grew = true
		}
	}
	if !grew && !force {
		return Plan{}
	}
	// A finalizing shard's grace cuts come one per interval; they carry
	// nothing that is waiting.
	idle := grew && free >= cutsInflightMax
	if since := now.Sub(e.last); since < e.interval && !idle {
		return Plan{Wake: e.interval - since}
	}
	if free <= 0 {
		return Plan{Wake: e.interval}
	}
	var lengths []cut.Length
	for i := range e.st.Shards {
		sh := &e.st.Shards[i]
		if sh.State == control.Finalized {
			continue
		}
		if r, ok := e.reports[sh.ID]; ok {
			lengths = append(lengths, cut.Length{Shard: sh.ID, Length: r})
			e.proposed[sh.ID] = r
		}
	}
	e.last = now
	// Reports that arrive while this cut is in flight need another one;
	// a finalizing shard needs cuts until its final one.
	return Plan{
		Propose: []control.Command{{Cut: &control.CutCommand{Lengths: lengths, Force: force}}},
		Wake:    e.interval,
	}
}
