package spec

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
)

const tord = time.Millisecond

// cluster is a control state with n shards and the sequencer that watches
// it; apply commits a command and shows the new state to the sequencer.
type cluster struct {
	t   *testing.T
	st  *control.State
	seq *Sequencer
	now time.Time
}

func newCluster(t *testing.T, n int, w uint64, cfg Config) *cluster {
	c := &cluster{t: t, st: control.NewSpec("test", w), seq: NewSequencer(cfg), now: t0}
	for i := range n {
		c.apply(control.Command{Register: &control.RegisterCommand{Group: string(rune('a' + i)),
			Replicas: []control.Replica{{ID: string(rune('a' + i)), Incarnation: 1}}}})
	}
	return c
}

func (c *cluster) apply(cmd control.Command) control.Event {
	c.t.Helper()
	ev, _ := c.st.Apply(cmd)
	c.seq.Observe(c.st, c.now)
	return ev
}

func (c *cluster) plan() *control.WindowCommand {
	c.t.Helper()
	w, ok := c.seq.PlanWindow(c.now)
	if !ok {
		c.t.Fatalf("no window planned at cut %d", c.st.LastCut.Index)
	}
	if ev := c.apply(control.Command{Window: w}); ev.Window == nil {
		c.t.Fatalf("window %+v not applied", w)
	}
	return w
}

// release commits every satisfied cut and returns how many.
func (c *cluster) release() uint64 {
	n := c.seq.Releasable(c.now)
	if n > 0 {
		c.apply(control.Command{Cut: &control.CutCommand{ReleaseThrough: c.st.LastCut.Index + n}})
	}
	return n
}

func (c *cluster) report(shard cut.ShardID, length, records uint64) {
	c.seq.Report(shard, length, records, 0, c.now)
}

func testConfig() Config {
	cfg := DefaultConfig(tord)
	cfg.SuspectAfter = 50 * tord
	// These tests drive fix-ante at a record or so per cut; the eager
	// fallback has its own (TestEagerFallback...).
	cfg.EagerAbove = 0
	return cfg
}

// TestReleaseWaitsForEveryQuota checks that a cut is released only once
// every shard in it reported its quota, and that several satisfied cuts go
// in one release.
func TestReleaseWaitsForEveryQuota(t *testing.T) {
	c := newCluster(t, 2, 10, testConfig())
	c.plan()
	c.report(0, 3, 3)
	if n := c.release(); n != 0 {
		t.Fatalf("released %d cuts without shard 1", n)
	}
	c.report(1, 2, 2)
	if n := c.release(); n != 2 {
		t.Fatalf("released %d cuts, want 2 (both shards have 2 entries of quota 1)", n)
	}
	if c.st.LastCut.Index != 2 || c.st.LastCut.End != 4 {
		t.Fatalf("last cut %+v", c.st.LastCut)
	}
}

// TestLagFix checks that a shard holding back a cut others are done with is
// told to catch up: at once when another is two cuts ahead (a burst), after
// LagAfter when one is one cut ahead, never while nobody waits, and not
// again while it is answering.
func TestLagFix(t *testing.T) {
	c := newCluster(t, 2, 20, testConfig())
	c.plan()
	c.release()
	if f := c.seq.LagFixes(c.now); len(f) != 0 {
		t.Fatalf("lag-fix with nobody waiting: %v", f)
	}
	c.report(0, 1, 1)
	c.release()
	if f := c.seq.LagFixes(c.now); len(f) != 0 {
		t.Fatalf("lag-fix at once for one cut ahead: %v", f)
	}
	c.now = c.now.Add(tord)
	c.release()
	if f := c.seq.LagFixes(c.now); !slices.Equal(f, []cut.Length{{Shard: 1, Length: 1}}) {
		t.Fatalf("lag-fixes after waiting %v: %v", tord, f)
	}
	c.report(1, 1, 0)
	c.release()
	// A burst: shard 0 is two cuts ahead; shard 1 must reach its length
	// at the second cut at once.
	c.report(0, 3, 3)
	c.release()
	if f := c.seq.LagFixes(c.now); !slices.Equal(f, []cut.Length{{Shard: 1, Length: 3}}) {
		t.Fatalf("lag-fixes in a burst: %v", f)
	}
	if f := c.seq.LagFixes(c.now); len(f) != 0 {
		t.Fatalf("lag-fix repeated at once: %v", f)
	}
	c.report(1, 3, 0)
	if n := c.release(); n != 2 {
		t.Fatalf("released %d after the lag-fix, want 2", n)
	}
	if fixes, _ := c.seq.TakeStats(); fixes != 2 {
		t.Fatalf("%d lag-fixes counted, want 2", fixes)
	}
}

// TestLagFixIdleShardAtOnce checks that a shard which reported nothing
// beyond its last report is told to catch up as soon as another shard is
// one cut ahead, while a shard with entries on the way still gets
// LagAfter to report them itself.
func TestLagFixIdleShardAtOnce(t *testing.T) {
	c := newCluster(t, 3, 20, testConfig())
	c.plan()
	c.release()
	c.seq.Report(1, 0, 0, 0, c.now) // idle
	c.seq.Report(2, 0, 1, 1, c.now) // a record not yet durable
	c.report(0, 1, 1)
	c.release()
	if f := c.seq.LagFixes(c.now); !slices.Equal(f, []cut.Length{{Shard: 1, Length: 1}}) {
		t.Fatalf("lag-fixes with shard 0 one cut ahead: %v, want shard 1 (idle) at once and not shard 2 (busy)", f)
	}
	c.report(1, 1, 0)
	c.now = c.now.Add(tord)
	c.release()
	if f := c.seq.LagFixes(c.now); !slices.Equal(f, []cut.Length{{Shard: 2, Length: 1}}) {
		t.Fatalf("lag-fixes after waiting %v: %v, want shard 2 now", tord, f)
	}
}

// TestLagFixWhileEntriesReplicate checks that as soon as a shard says it
// stored entries beyond its last report, the idle shards are told to fill
// the cut those entries head for, before the entries are durable and
// reported: the fills then overlap the replication. A busy shard is not
// told, nor is the shard itself.
func TestLagFixWhileEntriesReplicate(t *testing.T) {
	c := newCluster(t, 4, 20, testConfig())
	c.plan()
	c.release()
	c.seq.Report(1, 0, 0, 0, c.now)
	c.seq.Report(2, 0, 0, 0, c.now)
	c.seq.Report(3, 0, 1, 1, c.now) // busy itself
	if !c.seq.Report(0, 0, 2, 2, c.now) {
		t.Fatal("a backlog that appeared was no news")
	}
	// Shard 0's second entry lands in the window's second cut.
	if f := c.seq.LagFixes(c.now); !slices.Equal(f, []cut.Length{{Shard: 1, Length: 2}, {Shard: 2, Length: 2}}) {
		t.Fatalf("lag-fixes while shard 0's entries replicate: %v, want the idle shards 1 and 2 to its cut", f)
	}
	if f := c.seq.LagFixes(c.now); len(f) != 0 {
		t.Fatalf("lag-fix repeated at once: %v", f)
	}
	// The fills arrive before shard 0's own report: nothing to release
	// yet, and nobody is asked again.
	c.report(1, 2, 0)
	c.report(2, 2, 0)
	if n := c.release(); n != 0 {
		t.Fatalf("released %d cuts before shard 0 reported", n)
	}
	if f := c.seq.LagFixes(c.now); len(f) != 0 {
		t.Fatalf("lag-fixes after the fills: %v", f)
	}
	c.seq.Report(0, 2, 2, 0, c.now)
	c.seq.Report(3, 2, 2, 0, c.now)
	if n := c.release(); n != 2 {
		t.Fatalf("released %d cuts once every shard reported, want 2", n)
	}
}

// TestBurstLagFixesWhileEntriesReplicate checks that a shard two cuts
// ahead with its own entries is a burst, which tells a busy blocker to
// catch up at once, even while some shard's stored entries head further;
// only a lead made of fills told ahead of another's records is none.
func TestBurstLagFixesWhileEntriesReplicate(t *testing.T) {
	c := newCluster(t, 3, 20, testConfig())
	c.plan()
	c.release()
	c.seq.Report(1, 0, 1, 1, c.now) // busy
	c.seq.Report(2, 0, 0, 0, c.now) // idle
	c.seq.Report(0, 3, 4, 1, c.now) // three cuts ahead, and one more entry on the way
	want := []cut.Length{{Shard: 1, Length: 3}, {Shard: 2, Length: 4}}
	if f := c.seq.LagFixes(c.now); !slices.Equal(f, want) {
		t.Fatalf("lag-fixes in a burst: %v, want %v", f, want)
	}
	// Fills told ahead are no burst: shard 2 filled to 4, shard 0's
	// entries are still on the way, and busy shard 1 keeps LagAfter.
	d := newCluster(t, 3, 20, testConfig())
	d.plan()
	d.release()
	d.seq.Report(1, 0, 1, 1, d.now)
	d.seq.Report(2, 0, 0, 0, d.now)
	d.seq.Report(0, 0, 3, 3, d.now)
	if f := d.seq.LagFixes(d.now); !slices.Equal(f, []cut.Length{{Shard: 2, Length: 3}}) {
		t.Fatalf("lag-fixes while shard 0's entries replicate: %v", f)
	}
	d.seq.Report(2, 3, 0, 0, d.now)
	if f := d.seq.LagFixes(d.now); len(f) != 0 {
		t.Fatalf("shard 2's fill counted as a burst: %v", f)
	}
}

// TestQuotaFollowsRateAtWindowBoundary checks that the next window's quota
// is the measured rate times the ordering interval, that it changes only
// in the window announced next (the current one keeps its quotas), and
// that it grows at most fourfold per window.
func TestQuotaFollowsRateAtWindowBoundary(t *testing.T) {
	c := newCluster(t, 2, 10, testConfig())
	c.plan()
	c.report(0, 0, 0)
	c.report(1, 0, 0)
	// Shard 0 takes 8 records per interval, shard 1 one.
	var got []uint64
	for range 3 {
		c.now = c.now.Add(10 * tord)
		c.report(0, 0, c.seq.shards[0].records+80)
		c.report(1, 0, c.seq.shards[1].records+10)
		w, ok := c.seq.PlanWindow(c.now)
		if !ok {
			// Only one window ahead at a time: finish the current one.
			cur := c.st.Spec.Windows[0]
			c.report(0, lastLen(cur, 0), c.seq.shards[0].records)
			c.report(1, lastLen(cur, 1), c.seq.shards[1].records)
			c.release()
			w, ok = c.seq.PlanWindow(c.now)
			if !ok {
				t.Fatal("no window planned after the current one ended")
			}
		}
		c.apply(control.Command{Window: w})
		got = append(got, w.Quotas[0].PerCut, w.Quotas[1].PerCut)
	}
	want := []uint64{4, 1, 8, 1, 8, 1}
	if !slices.Equal(got, want) {
		t.Fatalf("quotas per window (shard 0, shard 1): %v, want %v", got, want)
	}
	if _, changes := c.seq.TakeStats(); changes != 2 {
		t.Fatalf("%d quota changes counted, want 2", changes)
	}
}

// TestEntriesInFlightAreNoBacklog plans windows for a shard taking 8
// records per interval whose reports, at each plan, leave entries in
// flight that the announced windows already place (a busy shard always has
// some between two reports). Those need no drain: counting them as a
// backlog gave the shard a quota above its rate, so that it filled part of
// every cut with no-ops and its records waited for the fills.
func TestEntriesInFlightAreNoBacklog(t *testing.T) {
	c := newCluster(t, 1, 10, testConfig())
	c.plan()
	c.report(0, 0, 0)
	var records uint64
	var got []uint64
	for range 4 {
		c.now = c.now.Add(10 * tord)
		records += 80
		if ws := c.st.Spec.Windows; len(ws) == 2 {
			c.report(0, lastLen(ws[0], 0), records)
			c.release()
		}
		cur := c.st.Spec.Windows[0]
		mid, _ := cur.Length(0, cur.Cuts/2)
		c.seq.Report(0, mid, records, min(30, lastLen(cur, 0)-mid), c.now)
		c.release()
		got = append(got, c.plan().Quotas[0].PerCut)
	}
	if want := []uint64{4, 8, 8, 8}; !slices.Equal(got, want) {
		t.Fatalf("quotas per window: %v, want %v", got, want)
	}
}

func lastLen(w fixante.Window, shard cut.ShardID) uint64 {
	l, _ := w.Length(shard, w.Cuts-1)
	return l
}

// TestJoinFlushesWindows checks that a shard registered mid-window makes
// the others fill the announced windows, so that the next window, which
// includes it, starts soon.
func TestJoinFlushesWindows(t *testing.T) {
	c := newCluster(t, 1, 5, testConfig())
	c.plan()
	c.apply(control.Command{Register: &control.RegisterCommand{Group: "z", Replicas: []control.Replica{{ID: "z", Incarnation: 1}}}})
	c.release()
	if f := c.seq.LagFixes(c.now); !slices.Equal(f, []cut.Length{{Shard: 0, Length: 5}}) {
		t.Fatalf("lag-fixes for a join: %v", f)
	}
	c.report(0, 5, 0)
	c.release()
	w := c.plan()
	if len(w.Quotas) != 2 || w.Quotas[1].Shard != 1 {
		t.Fatalf("window after the join: %+v", w.Quotas)
	}
}

// TestLeaveFlushesWindowsWhenIdle checks that a shard leaving an idle
// cluster, where every shard reported its last quota and nobody is ahead,
// makes every shard, itself included, fill the announced windows, so that
// the window ends and the shard can leave.
func TestLeaveFlushesWindowsWhenIdle(t *testing.T) {
	c := newCluster(t, 2, 5, testConfig())
	c.plan()
	c.report(0, 2, 2)
	c.report(1, 2, 2)
	if n := c.release(); n != 2 {
		t.Fatalf("released %d cuts, want 2", n)
	}
	if f := c.seq.LagFixes(c.now.Add(10 * tord)); len(f) != 0 {
		t.Fatalf("lag-fixes on an idle cluster: %v", f)
	}
	c.apply(control.Command{Finalize: &control.FinalizeCommand{Shard: 0}})
	f := c.seq.LagFixes(c.now)
	if !slices.Equal(f, []cut.Length{{Shard: 0, Length: 5}, {Shard: 1, Length: 5}}) &&
		!slices.Equal(f, []cut.Length{{Shard: 1, Length: 5}, {Shard: 0, Length: 5}}) {
		t.Fatalf("lag-fixes for a leave on an idle cluster: %v, want both shards to the window's end", f)
	}
	c.report(0, 5, 2)
	c.report(1, 5, 2)
	if n := c.release(); n != 3 {
		t.Fatalf("released %d cuts after the fills, want the window's last 3", n)
	}
	w := c.plan()
	if len(w.Quotas) != 1 || w.Quotas[0].Shard != 1 {
		t.Fatalf("window after the leave: %+v", w.Quotas)
	}
}

// TestReportSaysWhatIsNews checks that Report tells the leader to look
// again for a longer length and, for a shard without a quota, for a
// backlog that appears or goes, so that an idle leader flushes the windows
// for such a shard that got a record; a heartbeat that repeats itself, or
// a backlog that only grows, is no news. A backlog that appears is news
// for any shard: the idle ones can fill the cut it heads for at once.
func TestReportSaysWhatIsNews(t *testing.T) {
	c := newCluster(t, 1, 10, testConfig())
	c.plan()
	// Shard 1 registers after the window was announced: it has no quota.
	c.apply(control.Command{Register: &control.RegisterCommand{Group: "z", Replicas: []control.Replica{{ID: "z", Incarnation: 1}}}})
	for _, r := range []struct {
		shard           cut.ShardID
		length, backlog uint64
		news            bool
	}{
		{0, 2, 0, true}, {0, 2, 0, false}, {0, 2, 1, true}, {0, 2, 2, false}, {0, 3, 0, true},
		{1, 0, 1, true}, {1, 0, 1, false}, {1, 0, 3, false}, {1, 0, 0, true}, {1, 0, 0, false},
	} {
		if got := c.seq.Report(r.shard, r.length, r.length, r.backlog, c.now); got != r.news {
			t.Errorf("shard %d, report of length %d, backlog %d: news %v, want %v", r.shard, r.length, r.backlog, got, r.news)
		}
	}
	if c.seq.Report(7, 5, 5, 1, c.now) {
		t.Error("a report of an unknown shard was news")
	}
}

// TestBusyLeaveKeepsItsQuota checks that a leaving shard that another
// shard is ahead of is not told to fill the rest of its windows at once: on
// a busy cluster it keeps meeting its quota with records until the window
// ends.
func TestBusyLeaveKeepsItsQuota(t *testing.T) {
	c := newCluster(t, 2, 10, testConfig())
	c.plan()
	c.seq.Report(0, 2, 3, 1, c.now) // busy: a record on the way
	c.report(1, 3, 3)
	c.release()
	c.apply(control.Command{Finalize: &control.FinalizeCommand{Shard: 0}})
	if f := c.seq.LagFixes(c.now); len(f) != 0 {
		t.Fatalf("lag-fixes right after a leave, one cut behind another shard: %v", f)
	}
}

// TestStragglerExcludedThenProbed checks straggler mitigation: a shard
// that alone holds cuts back for longer than StragglerDelay three times
// gets quota 0 in the next window, then a probe quota of 1, then its rate
// quota again once it keeps up.
func TestStragglerExcludedThenProbed(t *testing.T) {
	cfg := testConfig()
	cfg.LagFix = false // the straggler must be late on its own
	c := newCluster(t, 2, 40, cfg)
	c.plan()
	var l0, l1 uint64
	for range 3 {
		l0++
		c.report(0, l0, l0)
		c.release()
		c.now = c.now.Add(cfg.StragglerDelay + tord)
		l1++
		c.report(1, l1, l1)
		c.release()
	}
	if q := c.nextQuotas(); q[1] != 0 || q[0] == 0 {
		t.Fatalf("after three late reports: quotas %v, want shard 1 excluded", q)
	}
	if q := c.nextQuotas(); q[1] != 1 {
		t.Fatalf("the window after: quotas %v, want a probe of 1 for shard 1", q)
	}
	if q := c.nextQuotas(); q[1] == 0 {
		t.Fatalf("after a probe on time: quotas %v, want shard 1 back", q)
	}
}

// TestStragglerLateOnEveryCutExcluded checks that lateness counts from when
// the other shards reported a cut: a shard that reports every cut
// StragglerDelay after the others, while they are ahead, releases the cuts
// one at a time, each blocked only for one interval, and is still excluded.
func TestStragglerLateOnEveryCutExcluded(t *testing.T) {
	cfg := testConfig()
	cfg.LagFix = false
	c := newCluster(t, 2, 40, cfg)
	c.plan()
	start := c.now
	for i := range uint64(3) {
		c.now = start.Add(time.Duration(i) * tord)
		c.report(0, i+1, i+1)
		c.release()
	}
	for i := range uint64(3) {
		c.now = start.Add(cfg.StragglerDelay + time.Duration(i+1)*tord)
		c.report(1, i+1, i+1)
		if n := c.release(); n != 1 {
			t.Fatalf("late report %d released %d cuts, want 1", i+1, n)
		}
	}
	if q := c.nextQuotas(); q[1] != 0 || q[0] == 0 {
		t.Fatalf("after three cuts each reported late: quotas %v, want shard 1 excluded", q)
	}
}

// TestStragglerBlameStaysWithTheStraggler checks, with staggered groups,
// that a shard that becomes the last blocker of a cut only once another
// group's straggler released the cut before is timed from then, not from
// when its group's other shard reported: it answers at once and must not
// collect the straggler's strikes.
func TestStragglerBlameStaysWithTheStraggler(t *testing.T) {
	cfg := testConfig()
	cfg.LagFix = false
	cfg.StaggerAbove = 2
	c := newCluster(t, 3, 40, cfg)
	c.plan()
	w := c.st.Spec.Windows[0]
	if w.Groups != 2 {
		t.Fatalf("window of %d groups, want 2: %+v", w.Groups, w.Quotas)
	}
	// straggler is alone in its group; prompt and idle share the other.
	var straggler cut.ShardID
	byGroup := map[int][]cut.ShardID{}
	for _, q := range w.Quotas {
		byGroup[q.Group] = append(byGroup[q.Group], q.Shard)
	}
	for _, ids := range byGroup {
		if len(ids) == 1 {
			straggler = ids[0]
		}
	}
	sq, _ := w.Quota(straggler)
	other := byGroup[1-sq.Group]
	prompt, idle := other[0], other[1]
	lenAt := func(shard cut.ShardID, j uint64) uint64 {
		l, _ := w.Length(shard, j)
		return l
	}
	// Cut j (0-based) of the window waits for group j%2.
	j := uint64(0)
	if sq.Group != 0 {
		c.report(prompt, lenAt(prompt, 0), 0)
		c.report(idle, lenAt(idle, 0), 0)
		c.release()
		j = 1
	}
	for round := 0; round < 3; round++ {
		c.report(prompt, lenAt(prompt, j+1), 0) // the next cut, ahead
		c.now = c.now.Add(cfg.StragglerDelay + tord)
		c.report(straggler, lenAt(straggler, j), 0)
		if n := c.release(); n != 1 {
			t.Fatalf("round %d: the straggler's report released %d cuts, want 1", round, n)
		}
		c.now = c.now.Add(tord / 10)
		c.report(idle, lenAt(idle, j+1), 0)
		if n := c.release(); n != 1 {
			t.Fatalf("round %d: the idle shard's report released %d cuts, want 1", round, n)
		}
		j += 2
	}
	if s := c.seq.shards[idle].strikes; s != 0 {
		t.Fatalf("the idle shard, on time once asked, has %d strikes", s)
	}
	if q := c.nextQuotas(); q[straggler] != 0 || q[idle] == 0 || q[prompt] == 0 {
		t.Fatalf("quotas %v: want only shard %d, the straggler, excluded", q, straggler)
	}
}

// nextQuotas finishes the current windows and plans the next one, whose
// quotas it returns.
func (c *cluster) nextQuotas() map[cut.ShardID]uint64 {
	c.t.Helper()
	for len(c.st.Spec.Windows) > 0 {
		cur := c.st.Spec.Windows[0]
		for _, q := range cur.Quotas {
			c.report(q.Shard, lastLen(cur, q.Shard), 0)
		}
		c.release()
	}
	w := c.plan()
	out := map[cut.ShardID]uint64{}
	for _, q := range w.Quotas {
		out[q.Shard] = q.PerCut
	}
	return out
}

// TestSuspectOnlyWithoutProgress checks that a shard is taken for failed
// only when it was asked to catch up and reported nothing for
// SuspectAfter; one that answers late keeps its place.
func TestSuspectOnlyWithoutProgress(t *testing.T) {
	cfg := testConfig()
	c := newCluster(t, 2, 100, cfg)
	c.plan()
	c.report(0, 5, 5)
	c.release()
	if f := c.seq.LagFixes(c.now); len(f) != 1 {
		t.Fatalf("lag-fixes %v", f)
	}
	for range 3 {
		c.now = c.now.Add(cfg.SuspectAfter * 2 / 3)
		c.report(1, c.seq.shards[1].length+1, 0) // late, but moving
		c.release()
		c.seq.LagFixes(c.now)
		if s := c.seq.Suspects(c.now); len(s) != 0 {
			t.Fatalf("a shard that moves was suspected: %v", s)
		}
	}
	c.report(0, 50, 50)
	c.release()
	c.seq.LagFixes(c.now)
	c.now = c.now.Add(cfg.SuspectAfter + tord)
	c.release()
	c.seq.LagFixes(c.now)
	if s := c.seq.Suspects(c.now); !slices.Equal(s, []cut.ShardID{1}) {
		t.Fatalf("suspects %v, want shard 1 silent for %v", s, cfg.SuspectAfter)
	}
}

// TestStaggeredQuotasCoverTheirGroups checks that with staggered cuts a
// shard's quota covers all the ordering intervals between its cuts.
func TestStaggeredQuotasCoverTheirGroups(t *testing.T) {
	cfg := testConfig()
	cfg.StaggerAbove = 2
	c := newCluster(t, 5, 10, cfg)
	w := c.plan()
	if w.Groups != 3 {
		t.Fatalf("%d groups for 5 shards of at most 2, want 3", w.Groups)
	}
	for _, q := range w.Quotas {
		if q.PerCut != 3 {
			t.Fatalf("quota %+v, want 3: one record per interval, in one cut of 3", q)
		}
	}
}

// aheadSlow is aheadIn's definition, walked cut by cut.
func aheadSlow(ws []fixante.Window, idx uint64, shard cut.ShardID, r uint64) uint64 {
	var ahead uint64
	for k := idx; ; k++ {
		var w fixante.Window
		found := false
		for _, c := range ws {
			if k >= c.FirstCut && k < c.FirstCut+c.Cuts {
				w, found = c, true
			}
		}
		if !found {
			return ahead
		}
		j := k - w.FirstCut
		if need, has := w.Length(shard, j); has && r < need {
			return ahead
		}
		if w.Includes(shard, j) {
			ahead = k - idx + 1
		}
	}
}

// TestAheadInMatchesTheCutByCutWalk compares the arithmetic with the walk
// on random windows: staggered groups, shards without a quota, every
// starting cut and reported length.
func TestAheadInMatchesTheCutByCutWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		shards := 1 + r.IntN(4)
		base := make([]uint64, shards)
		var ws []fixante.Window
		first := uint64(r.IntN(5))
		for range 1 + r.IntN(3) {
			groups := 1 + r.IntN(min(shards, 3))
			w := fixante.Window{FirstCut: first, Cuts: uint64(1 + r.IntN(9)), Groups: groups}
			for s := range shards {
				per := uint64(r.IntN(4))
				w.Quotas = append(w.Quotas, fixante.Quota{Shard: cut.ShardID(s), PerCut: per, Group: r.IntN(groups), Base: base[s]})
			}
			for s := range shards {
				base[s] += w.Capacity(cut.ShardID(s))
			}
			ws = append(ws, w)
			first += w.Cuts
		}
		for s := range shards {
			for idx := uint64(0); idx <= first+1; idx++ {
				for rep := uint64(0); rep <= base[s]+2; rep++ {
					want := aheadSlow(ws, idx, cut.ShardID(s), rep)
					if got := aheadIn(ws, idx, cut.ShardID(s), rep); got != want {
						t.Fatalf("trial %d: shard %d from cut %d with %d reported: %d, the walk says %d (windows %+v)", trial, s, idx, rep, got, want, ws)
					}
				}
			}
		}
	}
}

// TestReportTimes checks the ring of report times: the first report that
// reached a length, and no answer for lengths not reached yet or reached
// by a report the ring has dropped.
func TestReportTimes(t *testing.T) {
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * tord) }
	var r reportTimes
	if _, ok := r.at(1); ok {
		t.Fatal("an empty ring answered")
	}
	r.add(5, at(5))
	r.add(10, at(10))
	for _, c := range []struct {
		length uint64
		want   time.Time
		ok     bool
	}{{3, at(5), true}, {5, at(5), true}, {7, at(10), true}, {10, at(10), true}, {11, time.Time{}, false}} {
		if got, ok := r.at(c.length); ok != c.ok || !got.Equal(c.want) {
			t.Errorf("two reports: at(%d) = %v, %v; want %v, %v", c.length, got, ok, c.want, c.ok)
		}
	}
	var full reportTimes
	for i := 1; i <= 100; i++ {
		full.add(uint64(10*i), at(i))
	}
	// Reports 37..100 are remembered; whether report 36 or an earlier one
	// already reached 365 or 370 is not.
	for _, c := range []struct {
		length uint64
		want   time.Time
		ok     bool
	}{{365, time.Time{}, false}, {370, time.Time{}, false}, {371, at(38), true}, {1000, at(100), true}, {360, time.Time{}, false}, {5, time.Time{}, false}, {1001, time.Time{}, false}} {
		if got, ok := full.at(c.length); ok != c.ok || !got.Equal(c.want) {
			t.Errorf("wrapped ring: at(%d) = %v, %v; want %v, %v", c.length, got, ok, c.want, c.ok)
		}
	}
}

// newFallbackCluster is a cluster of n shards with the default eager
// fallback, its first window planned and every shard heard from.
func newFallbackCluster(t *testing.T, n int) *cluster {
	cfg := testConfig()
	cfg.EagerAbove = EagerAboveDefault
	c := newCluster(t, n, 10, cfg)
	c.plan()
	for id := range cut.ShardID(n) {
		c.report(id, 0, 0)
	}
	return c
}

// TestFillsPerRecord checks the estimate the eager fallback judges by: a
// record's cut needs a fill from every other shard that has no record for
// it (Poisson), so one shard needs none, two at ln 2 records per interval
// need half a fill, and four at an eighth of a record need almost three.
func TestFillsPerRecord(t *testing.T) {
	for _, c := range []struct {
		rates []float64
		want  float64
	}{
		{[]float64{0.1}, 0},
		{[]float64{math.Ln2, math.Ln2}, 0.5},
		{[]float64{0.125, 0.125, 0.125, 0.125}, 3 * math.Exp(-0.125)},
		// A shard without records adds a fill to every other's cut.
		{[]float64{1, 0}, 1},
	} {
		if got := fillsPerRecord(c.rates); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("fillsPerRecord(%v) = %v, want %v", c.rates, got, c.want)
		}
	}
}

// TestOneShardNeverFallsBack checks that a sparse single shard keeps its
// windows: its cuts need no fills from anybody.
func TestOneShardNeverFallsBack(t *testing.T) {
	c := newFallbackCluster(t, 1)
	for k := uint64(1); k <= 5; k++ {
		c.now = c.now.Add(tord)
		c.report(0, k, k/5)
		c.release()
	}
	if w, ok := c.seq.PlanWindow(c.now); !ok || w.Fallback {
		t.Fatalf("planned %+v %v at one record in five intervals, want a window", w, ok)
	}
}

// TestFallbackHysteresis checks that the leader falls back to eager cuts
// above EagerAbove fills per record but speculates again only below half
// of it: two shards at one record per interval (0.37 fills) fall back, at
// 1.6 (0.20) they stay eager, at 2.6 (0.07) a window is planned again.
func TestFallbackHysteresis(t *testing.T) {
	c := newFallbackCluster(t, 2)
	var records uint64
	stretch := func(perInterval float64) {
		for range 5 {
			c.now = c.now.Add(tord)
		}
		records += uint64(perInterval * 5)
	}
	stretch(1)
	for id := range cut.ShardID(2) {
		c.report(id, 5, records)
	}
	c.release()
	w, ok := c.seq.PlanWindow(c.now)
	if !ok || !w.Fallback {
		t.Fatalf("planned %+v %v at one record per shard per interval, want the fallback", w, ok)
	}
	c.apply(control.Command{Window: w})
	for id := range cut.ShardID(2) {
		c.report(id, 10, records)
	}
	c.release()
	if !c.seq.Eager() {
		t.Fatal("not eager once the window is released")
	}
	stretch(1.6)
	for id := range cut.ShardID(2) {
		c.report(id, 10, records)
	}
	if w, ok := c.seq.PlanWindow(c.now); ok {
		t.Fatalf("planned %+v at 0.2 fills per record: the fallback must hold above half the threshold", w)
	}
	stretch(2.6)
	for id := range cut.ShardID(2) {
		c.report(id, 10, records)
	}
	if w, ok := c.seq.PlanWindow(c.now); !ok || w.Fallback {
		t.Fatalf("planned %+v %v at 0.07 fills per record, want a window", w, ok)
	}
}

// TestMeasuredFillsFallBackWithBackoff checks the fallback the windows'
// own fills decide: two shards at five records per interval, where the
// rates predict almost no fills, fall back once their windows fill as
// many positions as they order records; the leader tries a window again
// after one judgement period, after two once that fails as well, and a
// window that fills little resets the back-off.
func TestMeasuredFillsFallBackWithBackoff(t *testing.T) {
	c := newFallbackCluster(t, 2)
	var records, length uint64
	// stretch runs one judgement period (half a window) at five records
	// per shard per interval, filling fills positions per record.
	stretch := func(fills uint64) {
		for range 5 {
			c.now = c.now.Add(tord)
		}
		records += 25
		length += 25 * (1 + fills)
		for id := range cut.ShardID(2) {
			c.report(id, length, records)
		}
		c.release()
	}
	fallsBack := func(why string) {
		t.Helper()
		w, ok := c.seq.PlanWindow(c.now)
		if !ok || !w.Fallback {
			t.Fatalf("%s: planned %+v %v, want the fallback", why, w, ok)
		}
		c.apply(control.Command{Window: w})
		// The shards fill what is left of the announced windows.
		length += 1000
		for id := range cut.ShardID(2) {
			c.report(id, length, records)
		}
		c.release()
		if !c.seq.Eager() {
			t.Fatalf("%s: not eager once the windows are released", why)
		}
	}
	speculates := func(why string) {
		t.Helper()
		w, ok := c.seq.PlanWindow(c.now)
		if !ok || w.Fallback {
			t.Fatalf("%s: planned %+v %v, want a window", why, w, ok)
		}
		c.apply(control.Command{Window: w})
	}
	stretch(1)
	fallsBack("a fill per record")
	stretch(0)
	speculates("eager cuts for one period, the first back-off")
	stretch(1)
	fallsBack("the retried window filled a position per record again")
	stretch(0)
	if w, ok := c.seq.PlanWindow(c.now); ok {
		t.Fatalf("planned %+v one period into a back-off of two", w)
	}
	stretch(0)
	speculates("two periods of eager cuts")
	stretch(0)
	speculates("a window without fills")
	stretch(1)
	fallsBack("a fill per record after the back-off was reset")
	stretch(0)
	speculates("one period of eager cuts: the back-off started over")
}
