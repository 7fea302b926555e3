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
// Cuts are group commits. Reports that find no cut in flight are cut at
// once if they add at most SparseRecordsPerShardMax records per shard and
// the last cut went out at least AtOnceCutSpacing ago:
// waiting for an interval tick would only add latency, as there is little
// to batch them with. While a cut is in flight, reports are batched until
// it commits (then the same test applies) or an ordering interval has
// passed since it was proposed. A larger batch shows a load that fills
// cuts anyway: it goes at the interval, as before, so that under load a
// cut goes out about once per interval, never once per report or Raft
// round (each cut costs every server CPU, whatever it carries).
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

// SparseRecordsPerShardMax is the most records per live shard, on average,
// that a cut proposed at once (before the interval is over) may carry.
// One keeps moderate loads (a record per shard or so between Raft rounds)
// free of interval waits; at saturation, cuts that carry a dozen records
// each at Raft's pace cost a quarter of the throughput (bench append
// closed loop).
const SparseRecordsPerShardMax = 1

// AtOnceCutSpacing is the least time between a cut and the next one
// proposed at once, three fifths of the ordering interval. A cut costs the
// cluster about the same CPU whatever it carries (a Raft round on every
// ordering replica, an event to every primary, a notice to every
// subscriber): cutting every sparse report as soon as the cut before
// committed made about 1,450 cuts/s at 2,000 records/s over 2 shards,
// against about 900 on the interval tick, and a fifth more CPU. With this
// spacing a model of that load (Poisson reports, 0.45 ms Raft rounds)
// makes about 1,250 cuts/s, and the median report waits 0.32 ms for its
// cut, against 0.17 ms cutting at once and 0.47 ms on the tick.
func AtOnceCutSpacing(interval time.Duration) time.Duration { return interval * 3 / 5 }

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
	// waiting counts the records reported beyond what is committed or
	// in flight, over live shards.
	var waiting, live uint64
	for i := range e.st.Shards {
		sh := &e.st.Shards[i]
		if sh.State == control.Finalized {
			continue
		}
		if sh.State == control.Finalizing {
			force = true
		}
		live++
		if r, ok := e.reports[sh.ID]; ok && r > max(e.st.LastCut.Len(sh.ID), e.proposed[sh.ID]) {
			grew = true
			waiting += r - max(e.st.LastCut.Len(sh.ID), e.proposed[sh.ID])
		}
	}
	if !grew && !force {
		return Plan{}
	}
	// A finalizing shard's grace cuts come one per interval; they carry
	// nothing that is waiting.
	sparse := grew && free >= cutsInflightMax && waiting <= SparseRecordsPerShardMax*live
	since := now.Sub(e.last)
	spacing := AtOnceCutSpacing(e.interval)
	if since < e.interval && !(sparse && since >= spacing) {
		if sparse {
			return Plan{Wake: spacing - since}
		}
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
