package shard

import (
	"sync/atomic"
	"time"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
	"github.com/augur-log/augur/internal/spec"
)

// Report is what a primary tells the ordering leader about its shard.
type Report struct {
	// Length is the shard length the leader may order up to. It never
	// exceeds what every replica holds.
	Length uint64
	// Records is how many real records (no-ops aside) the log stores, and
	// Backlog how many stored entries lie past Length: the speculative
	// leader plans quotas from them. Zero in eager order.
	Records, Backlog uint64
	// Epoch is the configuration the primary reports in (set by
	// Replica.Report, not by the ordering mode).
	Epoch uint64
}

// Ordering is what a primary's ordering mode decides about its log: when
// to report a length to the leader and which no-ops to add. The Replica
// calls it on its owner goroutine, except Report and ActsOnDurable, which
// must be safe for concurrent use.
type Ordering interface {
	// Observe tells the mode that the log holds stored entries, records
	// of them real records, that every replica holds durable, and that
	// committed cuts ordered the first ordered.
	Observe(now time.Time, stored, records, durable, ordered uint64)
	// Fill returns how many no-ops to append now.
	Fill(now time.Time) uint64
	// LagFix returns how many no-ops to append because the leader asked
	// the shard to reach length target.
	LagFix(target uint64) uint64
	// ReportDue says whether the mode reached a point to report now
	// (beyond every change of durable, which is always reported).
	ReportDue(now time.Time) bool
	// WakeAt is when Fill may next have no-ops to add, if ever.
	WakeAt() (time.Time, bool)
	// Report is the report as of now, given what every replica holds and
	// what the log stores; ok is false when there is nothing to report.
	Report(durable, stored, records uint64) (r Report, ok bool)
	// ActsOnDurable says that the mode reports and serves entries as soon
	// as they are durable, before a cut orders them: a change of durable
	// must reach Tick and wake subscription feeds.
	ActsOnDurable() bool
}

// WindowFollower is an Ordering that follows the announced lease windows:
// its owner hands it every announcement, on the Replica's goroutine, then
// calls Tick.
type WindowFollower interface {
	Ordering
	// SetWindows replaces the announced windows (the current one first);
	// eager says the cluster is between windows (control.Spec.Eager).
	SetWindows(ws []fixante.Window, eager bool)
}

// Eager is Scalog's ordering: report every change of what every replica
// holds; the leader cuts at its own pace and nothing is filled.
type Eager struct{}

func (Eager) Observe(time.Time, uint64, uint64, uint64, uint64) {}
func (Eager) Fill(time.Time) uint64                             { return 0 }
func (Eager) LagFix(uint64) uint64                              { return 0 }
func (Eager) ReportDue(time.Time) bool                          { return false }
func (Eager) WakeAt() (time.Time, bool)                         { return time.Time{}, false }
func (Eager) ActsOnDurable() bool                               { return false }

// Report is the durable length; nothing before the first record.
func (Eager) Report(durable, _, _ uint64) (Report, bool) {
	return Report{Length: durable}, durable > 0
}

// Speculative is SpecLog's fix-ante ordering: the shard adheres to the
// quotas of the announced lease windows (spec.Shard), reporting only at
// quota boundaries, filling a quota it sat short of for too long, and
// filling up to a lag-fix target.
type Speculative struct {
	adh *spec.Shard
	// reported is the last boundary reported; the heartbeat reads it.
	reported atomic.Uint64
	// eager says the cluster is between windows, where every durable
	// length is a report; the heartbeat reads it.
	eager atomic.Bool
}

// NewSpeculative returns the adherence of shard id whose log holds length
// entries; fillAfter and idleAfter tune fills as spec.NewShard says.
func NewSpeculative(id cut.ShardID, length uint64, fillAfter, idleAfter time.Duration, now time.Time) *Speculative {
	return &Speculative{adh: spec.NewShard(id, length, fillAfter, idleAfter, now)}
}

var _ WindowFollower = (*Speculative)(nil)

// SetWindows implements WindowFollower.
func (s *Speculative) SetWindows(ws []fixante.Window, eager bool) {
	s.adh.SetWindows(ws, eager)
	s.eager.Store(eager)
}

// Windows returns the announced windows.
func (s *Speculative) Windows() []fixante.Window { return s.adh.Windows() }

func (s *Speculative) Observe(now time.Time, stored, records, durable, ordered uint64) {
	s.adh.Stored(stored, records, now)
	s.adh.Durable(durable)
	s.adh.Ordered(ordered)
}

func (s *Speculative) Fill(now time.Time) uint64           { return s.adh.Fill(now) }
func (s *Speculative) LagFix(target uint64) uint64         { return s.adh.LagFix(target) }
func (s *Speculative) WakeAt() (time.Time, bool)           { return s.adh.FillAt() }
func (s *Speculative) ActsOnDurable() bool                 { return true }
func (s *Speculative) Predict(local uint64) (uint64, bool) { return s.adh.Predict(local) }

// ReportDue is due at a new quota boundary, and when records end an idle
// spell (spec.Shard.Announce): the report then carries the backlog.
func (s *Speculative) ReportDue(now time.Time) bool {
	l, ok := s.adh.Report(now)
	if ok {
		s.reported.Store(l)
	}
	return s.adh.Announce() || ok
}

// Report is the last boundary reported, or between windows the durable
// length, as in eager order. Every report carries the records and the
// backlog, even before the first boundary: a shard without a quota reports
// nothing else, but the leader must know it waits.
//
// Between windows the heartbeat reports durable itself rather than what
// the owner's last ReportDue saw, which would cost every report a detour
// through the owner's goroutine, busy storing the next batch (speculative
// appends at 4 shards and 2,000/s took 1.4 times eager's on identical
// eager cuts). Whatever the interleaving with SetWindows, such a length
// orders no predicted entry elsewhere: the cluster is between windows
// only once every window's cuts were released, and once a window is
// announced a cut of lengths commits nothing (control.State.Apply).
func (s *Speculative) Report(durable, stored, records uint64) (Report, bool) {
	l := s.reported.Load()
	if s.eager.Load() {
		l = max(l, durable)
	}
	return Report{Length: l, Records: records, Backlog: stored - min(l, stored)}, true
}
