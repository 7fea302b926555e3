package spec

import (
	"testing"
	"time"

	"github.com/augur-log/augur/internal/fixante"
)

var t0 = time.Unix(1000, 0)

// oneWindow is a window of 4 cuts in which shard 1 holds 3 entries per
// cut from local index base.
func oneWindow(base uint64) fixante.Window {
	return fixante.Window{Cuts: 4, Groups: 1, Start: 100,
		Quotas: []fixante.Quota{{Shard: 0, PerCut: 2}, {Shard: 1, PerCut: 3, Base: base}}}
}

// TestShardReportsAtBoundaries checks that a shard reports only when its
// durable length crosses a quota boundary, and then the boundary itself,
// never entries it cannot place yet.
func TestShardReportsAtBoundaries(t *testing.T) {
	s := NewShard(1, 0, 1500*time.Microsecond, time.Second, t0)
	s.SetWindows([]fixante.Window{oneWindow(0)}, false)
	s.Stored(2, 2, t0)
	s.Durable(2)
	if _, ok := s.Report(t0); ok {
		t.Fatal("reported between boundaries")
	}
	s.Stored(7, 7, t0)
	s.Durable(7)
	if l, ok := s.Report(t0); !ok || l != 6 {
		t.Fatalf("report %d %v, want the boundary 6 (two cuts at once)", l, ok)
	}
	if _, ok := s.Report(t0); ok {
		t.Fatal("reported the same boundary twice")
	}
	// Past the window's last boundary (12) nothing is reported until the
	// next window is known.
	s.Stored(20, 20, t0)
	s.Durable(20)
	if l, _ := s.Report(t0); l != 12 {
		t.Fatalf("report %d, want 12, the window's end", l)
	}
	if _, ok := s.Report(t0); ok {
		t.Fatal("reported past the announced windows")
	}
	next := oneWindow(12)
	next.FirstCut, next.Start = 4, 120
	s.SetWindows([]fixante.Window{oneWindow(0), next}, false)
	if l, ok := s.Report(t0); !ok || l != 18 {
		t.Fatalf("report %d %v, want 18 in the next window", l, ok)
	}
	if pos, ok := s.Predict(13); !ok || pos != 120+2+1 {
		t.Fatalf("predict local 13: %d %v", pos, ok)
	}
}

// TestShardFillsNoops checks both fill rules: a shard between boundaries
// fills the rest of its quota fillAfter after its last report, a shard at a
// boundary fills its next quota only while it stored records within
// idleAfter, a fill is not repeated before it is reported, and a lag-fix
// fills up to the target's boundary.
func TestShardFillsNoops(t *testing.T) {
	fill := 1500 * time.Microsecond
	// The shard holds 3 entries and reported them, but no cut ordered
	// them yet: records that arrive now gather for the next cut.
	s := NewShard(1, 3, fill, 10*time.Millisecond, t0)
	s.SetWindows([]fixante.Window{oneWindow(0)}, false)
	if _, ok := s.FillAt(); ok {
		t.Fatal("an idle shard that never stored a record wants to fill")
	}
	s.Stored(4, 1, t0)
	if at, ok := s.FillAt(); !ok || !at.Equal(t0.Add(fill)) {
		t.Fatalf("fill at %v %v", at, ok)
	}
	if n := s.Fill(t0.Add(fill - 1)); n != 0 {
		t.Fatalf("filled %d before its time", n)
	}
	t1 := t0.Add(fill)
	if n := s.Fill(t1); n != 2 {
		t.Fatalf("filled %d, want the 2 missing of the quota", n)
	}
	s.Stored(6, 1, t1)
	if n := s.Fill(t1.Add(fill / 2)); n != 0 {
		t.Fatalf("filled %d again before the fill was reported", n)
	}
	s.Durable(6)
	if l, ok := s.Report(t1); !ok || l != 6 {
		t.Fatalf("report %d %v", l, ok)
	}
	// At a boundary, with records stored lately: the next quota is owed.
	t2 := t1.Add(fill)
	if n := s.Fill(t2); n != 3 {
		t.Fatalf("active shard at a boundary filled %d, want its next quota 3", n)
	}
	s.Stored(9, 1, t2)
	s.Durable(9)
	s.Report(t2)
	// Long after its last record the shard stops filling.
	quiet := NewShard(1, 0, fill, 10*time.Millisecond, t0)
	quiet.SetWindows([]fixante.Window{oneWindow(0)}, false)
	quiet.Stored(3, 3, t0)
	quiet.Durable(3)
	quiet.Report(t0.Add(20 * time.Millisecond))
	if _, ok := quiet.FillAt(); ok {
		t.Fatal("a shard idle past idleAfter still fills")
	}
	// A lag-fix fills to the target, cut back to a boundary it knows.
	if n := quiet.LagFix(8); n != 3 {
		t.Fatalf("lag-fix to 8 from 3 filled %d, want 3 (to boundary 6)", n)
	}
	if n := quiet.LagFix(100); n != 9 {
		t.Fatalf("lag-fix past the window filled %d, want 9 (to its end, 12)", n)
	}
}

// TestShardFillsAtOnceWhenSettled checks that a shard between boundaries
// closes its quota as soon as it waits for nothing it knows of (every
// entry durable, its last report ordered), in the same step as records
// that end such a wait, and otherwise keeps fillAfter: entries on the way
// to a backup, or a cut of its on the way, that records arriving
// meanwhile can join the next of.
func TestShardFillsAtOnceWhenSettled(t *testing.T) {
	fill := 1500 * time.Microsecond
	s := NewShard(1, 0, fill, 0, t0)
	s.SetWindows([]fixante.Window{oneWindow(0)}, false)
	s.Stored(1, 1, t0)
	if at, ok := s.FillAt(); !ok || at.After(t0) {
		t.Fatalf("fill at %v %v, want at once: the record ended an idle spell", at, ok)
	}
	if n := s.Fill(t0); n != 2 {
		t.Fatalf("filled %d for a record that ended an idle spell, want the 2 missing of the quota with it", n)
	}
	s.Stored(3, 1, t0)
	s.Durable(3)
	if l, ok := s.Report(t0); !ok || l != 3 {
		t.Fatalf("report %d %v", l, ok)
	}
	s.Ordered(3)
	s.Stored(4, 2, t0)
	if n := s.Fill(t0); n != 2 {
		t.Fatalf("filled %d for the next record after an idle spell, want 2", n)
	}
	s.Stored(6, 2, t0)
	// A record that arrives while the last is on the way to the backups
	// gathers; so it does while their cut is on the way.
	s.Stored(7, 3, t0)
	if n := s.Fill(t0); n != 0 {
		t.Fatalf("filled %d while the records before are on the way to the backups", n)
	}
	s.Durable(7)
	if l, ok := s.Report(t0); !ok || l != 6 {
		t.Fatalf("report %d %v", l, ok)
	}
	if n := s.Fill(t0); n != 0 {
		t.Fatalf("filled %d while its last report awaits its cut", n)
	}
	s.Ordered(6)
	if n := s.Fill(t0); n != 2 {
		t.Fatalf("filled %d once its cut committed, want 2", n)
	}
	// With idleAfter 0 a shard at a boundary never fills a whole quota by
	// itself: the leader's lag-fixes do.
	s.Stored(9, 3, t0)
	s.Durable(9)
	s.Report(t0)
	s.Ordered(9)
	if at, ok := s.FillAt(); ok {
		t.Fatalf("a shard at a boundary wants to fill at %v without idleAfter", at)
	}
}

// TestShardAnnouncesRecordsAfterIdle checks that records stored while
// everything before them was reported are announced once, and that
// records joining a backlog, or fills, are not.
func TestShardAnnouncesRecordsAfterIdle(t *testing.T) {
	s := NewShard(1, 0, time.Millisecond, 0, t0)
	s.SetWindows([]fixante.Window{oneWindow(0)}, false)
	s.Stored(1, 1, t0)
	if !s.Announce() {
		t.Fatal("the first record after an idle spell was not announced")
	}
	if s.Announce() {
		t.Fatal("announced twice")
	}
	s.Stored(2, 2, t0)
	if s.Announce() {
		t.Fatal("a record joining a backlog was announced")
	}
	s.Durable(2)
	s.Fill(t0)
	s.Stored(3, 2, t0)
	s.Durable(3)
	s.Report(t0)
	if s.Announce() {
		t.Fatal("a fill was announced")
	}
	s.Stored(6, 2, t0) // a lag-fix
	s.Durable(6)
	if s.Announce() {
		t.Fatal("a lag-fix was announced")
	}
	s.Report(t0)
	s.Stored(8, 4, t0)
	if !s.Announce() {
		t.Fatal("records after the next idle spell were not announced")
	}
}

// TestShardFillWaitsForItsStaggeredSlot checks that in a window of g
// staggered groups, where the shard holds a slot in every g-th cut only, it
// waits g times as long before filling: filling after 1.5 intervals there
// filled most quotas with no-ops and ran the cuts ahead of the records.
func TestShardFillWaitsForItsStaggeredSlot(t *testing.T) {
	fill := 1500 * time.Microsecond
	s := NewShard(1, 0, fill, time.Second, t0)
	s.SetWindows([]fixante.Window{{Cuts: 6, Groups: 3, Start: 100,
		Quotas: []fixante.Quota{{Shard: 0, PerCut: 2}, {Shard: 1, PerCut: 6, Group: 1}, {Shard: 2, PerCut: 2, Group: 2}}}}, false)
	s.Stored(1, 1, t0)
	s.Fill(t0) // closes the first quota at once: it waited for nothing
	s.Stored(6, 1, t0)
	s.Durable(6)
	s.Report(t0)
	s.Stored(7, 2, t0) // its cut is on the way
	if at, ok := s.FillAt(); !ok || !at.Equal(t0.Add(3*fill)) {
		t.Fatalf("fill at %v %v, want %v: three cuts per slot", at, ok, t0.Add(3*fill))
	}
	if n := s.Fill(t0.Add(3*fill - 1)); n != 0 {
		t.Fatalf("filled %d before its time", n)
	}
	if n := s.Fill(t0.Add(3 * fill)); n != 5 {
		t.Fatalf("filled %d, want the 5 missing of the quota", n)
	}
}

// TestShardReportsDurableBetweenWindows checks the leader's eager
// fallback on the shard's side: between windows every durable length is
// reported (the eager cuts place the entries), nothing is announced or
// filled, and once a window comes reports are at its boundaries again.
// Before the first window (not between windows) nothing is reported.
func TestShardReportsDurableBetweenWindows(t *testing.T) {
	s := NewShard(1, 0, 1500*time.Microsecond, time.Second, t0)
	s.Stored(1, 1, t0)
	s.Durable(1)
	if _, ok := s.Report(t0); ok {
		t.Fatal("reported before the first window")
	}
	s.Announce()
	s.SetWindows(nil, true)
	if l, ok := s.Report(t0); !ok || l != 1 {
		t.Fatalf("report %d %v between windows, want the durable length 1", l, ok)
	}
	s.Stored(2, 2, t0)
	if s.Announce() {
		t.Error("announced records between windows: no cut waits for other shards' fills")
	}
	if _, ok := s.Report(t0); ok {
		t.Fatal("reported entries that are not durable")
	}
	s.Durable(2)
	if l, ok := s.Report(t0); !ok || l != 2 {
		t.Fatalf("report %d %v, want the durable length 2", l, ok)
	}
	if _, ok := s.Report(t0); ok {
		t.Fatal("reported the same length twice")
	}
	if n := s.Fill(t0.Add(time.Second)); n != 0 {
		t.Fatalf("filled %d no-ops with no window", n)
	}
	if _, ok := s.Predict(1); ok {
		t.Fatal("predicted a position with no window")
	}
	// A window from local index 2 on (the last cut's length).
	s.SetWindows([]fixante.Window{oneWindow(2)}, false)
	s.Stored(4, 4, t0)
	s.Durable(4)
	if _, ok := s.Report(t0); ok {
		t.Fatal("reported between the window's boundaries")
	}
	s.Stored(5, 5, t0)
	s.Durable(5)
	if l, ok := s.Report(t0); !ok || l != 5 {
		t.Fatalf("report %d %v, want the boundary 5", l, ok)
	}
}
