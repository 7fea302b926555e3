// Package spec holds the protocol logic of speculative order (SpecLog, the
// Belfast system) as pure state machines: how a shard adheres to the
// predetermined cuts of its lease windows (Shard), how the ordering leader
// releases cuts, fixes lags, sets quotas and excludes stragglers
// (Sequencer), and how a subscriber merges speculative streams (Merger).
// No I/O, goroutines or clocks: callers pass the time in.
package spec

import (
	"time"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
)

// Shard is a shard primary's side of fix-ante ordering. The shard's local
// log holds records and no-ops; Stored, Durable and Ordered track its
// length, and the announced windows say which lengths are quota
// boundaries. The shard reports when its durable length crosses a
// boundary, fills the rest of a quota at once when it has nothing more on
// the way, or after a while when it sits between boundaries, and fills on
// a lag-fix.
type Shard struct {
	id cut.ShardID
	// fillAfter is how long after its last report a shard short of its
	// next quota fills it with no-ops. A shard at a boundary fills its
	// next quota whole only while it stored records within idleAfter, so
	// that an idle cluster goes quiet (a lag-fix does not count: fills
	// answering fills would never stop); idleAfter 0 leaves those fills to
	// the leader's lag-fixes.
	fillAfter time.Duration
	idleAfter time.Duration
	active    time.Time

	windows  []fixante.Window
	eager    bool
	stored   uint64
	durable  uint64
	ordered  uint64 // entries committed cuts gave positions
	records  uint64 // real records among the stored entries
	reported uint64 // the last boundary reported
	// announce says records arrived while everything stored was
	// reported: the leader's view of the shard is idle, and it learns of
	// the records only when they are durable unless told now.
	announce bool
	// closeNow says records arrived while the shard waited for nothing
	// (see settled): it closes their quota in the same step, so that the
	// fill replicates with them rather than after them.
	closeNow bool
	lastSent time.Time
	// lastFill is when the last fill was made: a fill is reported only
	// once durable, and must not be repeated meanwhile.
	lastFill time.Time
}

// NewShard returns the adherence state of shard id, whose log already holds
// length entries.
func NewShard(id cut.ShardID, length uint64, fillAfter, idleAfter time.Duration, now time.Time) *Shard {
	return &Shard{id: id, fillAfter: fillAfter, idleAfter: idleAfter, stored: length, durable: length, reported: length, lastSent: now}
}

// SetWindows replaces the announced windows (the current one first);
// eager says the cluster is between windows (control.Spec.Eager), where
// cuts are eager cuts of reported lengths.
func (s *Shard) SetWindows(ws []fixante.Window, eager bool) { s.windows, s.eager = ws, eager }

// Windows returns the announced windows.
func (s *Shard) Windows() []fixante.Window { return s.windows }

// Stored records that the log now holds length entries, records of them
// real records.
func (s *Shard) Stored(length, records uint64, now time.Time) {
	if records > s.records && length > s.stored {
		s.active = now
		if s.stored <= s.reported && !s.eager {
			s.announce = true
		}
		if s.durable >= s.stored && s.ordered >= s.reported {
			s.closeNow = true
		}
	}
	s.stored = max(s.stored, length)
	s.records = max(s.records, records)
}

// Durable records that every replica holds length entries.
func (s *Shard) Durable(length uint64) { s.durable = max(s.durable, length) }

// Ordered records that committed cuts gave the first length entries
// their positions.
func (s *Shard) Ordered(length uint64) { s.ordered = max(s.ordered, length) }

// Length is the number of entries stored.
func (s *Shard) Length() uint64 { return s.stored }

// Records is the number of real records stored.
func (s *Shard) Records() uint64 { return s.records }

// boundaryAfter is the first quota boundary after length n in the
// announced windows.
func (s *Shard) boundaryAfter(n uint64) (uint64, bool) {
	for _, w := range s.windows {
		if b, ok := w.Boundary(s.id, n); ok {
			return b, true
		}
	}
	return 0, false
}

// boundaryAtMost is the last quota boundary at or below n that lies beyond
// the last report, if any.
func (s *Shard) boundaryAtMost(n uint64) (uint64, bool) {
	b, found := uint64(0), false
	at := s.reported
	for {
		next, ok := s.boundaryAfter(at)
		if !ok || next > n {
			return b, found
		}
		b, found, at = next, true, next
	}
}

// Report returns the length to report now: the last quota boundary the
// durable length crossed, if it crossed one since the last report. Reports at boundaries only keep the
// leader's load at about one report per cut. Between windows (the
// leader's eager fallback) it is every durable length, as in eager order:
// the cuts of that stretch give the entries their positions.
func (s *Shard) Report(now time.Time) (length uint64, ok bool) {
	if s.eager {
		if s.durable <= s.reported {
			return 0, false
		}
		s.reported, s.lastSent = s.durable, now
		return s.durable, true
	}
	b, ok := s.boundaryAtMost(s.durable)
	if !ok {
		return 0, false
	}
	s.reported = b
	s.lastSent = now
	// Only lengths the shard could predict: a cut must never order an
	// entry no subscriber was given a position for.
	return b, true
}

// Announce says whether to tell the leader now that records arrived
// beyond the last report: once for the records that end an idle spell, so
// that the leader can have the other shards fill the cut those records
// head for while they replicate. Later records, and the shard's own fills,
// reach the leader with the reports that durability brings anyway.
func (s *Shard) Announce() bool {
	a := s.announce
	s.announce = false
	return a
}

// between returns the next boundary when the log ends strictly between
// two boundaries of the announced windows: it owes the rest of a quota.
func (s *Shard) between() (uint64, bool) {
	next, ok := s.boundaryAfter(s.stored)
	if !ok {
		return 0, false
	}
	for _, w := range s.windows {
		q, has := w.Quota(s.id)
		if !has || s.stored < q.Base {
			continue
		}
		if end, _ := w.ShardEnd(s.id); s.stored <= end && (s.stored-q.Base)%q.PerCut == 0 {
			return 0, false
		}
	}
	return next, true
}

// FillAt is when Fill will next have no-ops to add, if the log ends
// between boundaries.
func (s *Shard) FillAt() (time.Time, bool) {
	next, ok := s.short()
	if !ok {
		return time.Time{}, false
	}
	if s.settled() {
		return s.quietSince(), true
	}
	return s.quietSince().Add(s.fillDelay(next)), true
}

// settled says that a shard between boundaries waits for nothing it knows
// of: every entry it stored is durable, and its last report is ordered, so
// no cut is on the way that later records could join; or it was so when
// its latest records arrived. Like a group commit, it then closes its
// quota at once rather than after fillAfter; while a cut of its is on the
// way, records that arrive meanwhile gather for the next one.
func (s *Shard) settled() bool {
	_, between := s.between()
	return between && (s.closeNow || s.durable >= s.stored && s.ordered >= s.reported)
}

// fillDelay is how long the shard waits for records before it fills up to
// boundary next: fillAfter per cut between its reports. In a window of g
// staggered groups the shard has a slot in every g-th cut only, so it
// reports about every g ordering intervals; filling after 1.5 intervals
// there would fill most of every quota with no-ops and run the cuts ahead
// of the records.
func (s *Shard) fillDelay(next uint64) time.Duration {
	for _, w := range s.windows {
		if _, ok := w.Boundary(s.id, next-1); ok {
			return s.fillAfter * time.Duration(max(w.Groups, 1))
		}
	}
	return s.fillAfter
}

// quietSince is when the shard last reported or filled.
func (s *Shard) quietSince() time.Time {
	if s.lastFill.After(s.lastSent) {
		return s.lastFill
	}
	return s.lastSent
}

// short returns the next boundary when the shard owes entries: it ends
// between two boundaries, or it was active lately and the next cut waits
// for its quota. A shard that fills only when it holds records would hold
// back the positions of every other shard's records after its empty slots.
func (s *Shard) short() (uint64, bool) {
	if next, ok := s.between(); ok {
		return next, true
	}
	if s.idleAfter <= 0 || s.active.IsZero() || s.lastSent.Sub(s.active) > s.idleAfter {
		return 0, false
	}
	return s.boundaryAfter(s.stored)
}

// Fill returns how many no-ops to append now: the rest of the current quota
// once the shard is settled, or has been short for fillAfter since its last
// report.
func (s *Shard) Fill(now time.Time) uint64 {
	next, ok := s.short()
	if !ok || !s.settled() && now.Sub(s.quietSince()) < s.fillDelay(next) {
		return 0
	}
	s.lastFill = now
	s.closeNow = false
	return next - s.stored
}

// LagFix returns how many no-ops to append so the log reaches target at
// once: the leader saw other shards ahead. A target past the announced
// windows is cut back to their last boundary.
func (s *Shard) LagFix(target uint64) uint64 {
	if target <= s.stored {
		return 0
	}
	limit := s.stored
	for {
		b, ok := s.boundaryAfter(limit)
		if !ok || b > target {
			break
		}
		limit = b
	}
	return limit - s.stored
}

// Predict returns the global position of the entry at local index n, if an
// announced window covers it.
func (s *Shard) Predict(n uint64) (uint64, bool) { return Predict(s.windows, s.id, n) }

// Predict returns the global position that the announced windows give the
// entry of shard id at local index n, if one of them covers it: where a
// cut will order it unless a view change voids the window first. It is the
// one rule by which shards, subscription feeds and the simulator place
// entries before their cuts commit.
func Predict(windows []fixante.Window, id cut.ShardID, n uint64) (uint64, bool) {
	for _, w := range windows {
		if pos, _, ok := w.Locate(id, n); ok {
			return pos, true
		}
	}
	return 0, false
}
