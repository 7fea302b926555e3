package order

import (
	"fmt"
	"slices"
	"testing"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/spec"
)

func specConfig() spec.Config {
	cfg := spec.DefaultConfig(tord)
	cfg.SuspectAfter = 50 * tord
	return cfg
}

// newSpecWorld starts a speculative leader over shards and commits the
// first window it plans.
func newSpecWorld(t *testing.T, shards int, windowCuts uint64) *world {
	w := newWorld(t, control.NewSpec("test", windowCuts), shards, NewSpec(specConfig()))
	out := w.l.Step(w.now)
	if len(out.Propose) != 1 || out.Propose[0].Window == nil {
		t.Fatalf("first step proposed %+v, want a window", out.Propose)
	}
	if !w.apply(out.Propose[0], true) {
		t.Fatal("the commit of an own window is not news")
	}
	if len(w.st.Spec.Windows) != 1 {
		t.Fatalf("windows %+v after the first", w.st.Spec.Windows)
	}
	return w
}

func windows(cmds []control.Command) int {
	n := 0
	for _, c := range cmds {
		if c.Window != nil {
			n++
		}
	}
	return n
}

// TestSpecWindowOnceWhileInFlight checks that a window announcement is
// proposed once while it awaits commit, and again only once it went
// stale.
func TestSpecWindowOnceWhileInFlight(t *testing.T) {
	w := newWorld(t, control.NewSpec("test", 100), 2, NewSpec(specConfig()))
	if n := windows(w.l.Step(w.now).Propose); n != 1 {
		t.Fatalf("%d windows proposed, want 1", n)
	}
	w.after(proposalStaleAfter)
	if n := windows(w.l.Step(w.now).Propose); n != 0 {
		t.Fatalf("%d windows proposed while one is in flight", n)
	}
	w.after(1)
	if n := windows(w.l.Step(w.now).Propose); n != 1 {
		t.Fatalf("%d windows proposed after the first went stale, want 1", n)
	}
}

// TestSpecReleasesPipeline checks that releases of satisfied cuts go out
// without waiting for the one before to commit, up to
// releasesInflightMax, each reaching further than the last.
func TestSpecReleasesPipeline(t *testing.T) {
	w := newSpecWorld(t, 2, 100)
	var sent []*control.CutCommand
	for i := range uint64(releasesInflightMax + 1) {
		w.report(0, i+1)
		w.report(1, i+1)
		c := w.cuts(w.l.Step(w.now).Propose)
		if i == releasesInflightMax {
			if len(c) != 0 {
				t.Fatalf("released %+v beyond %d in flight", c, releasesInflightMax)
			}
			break
		}
		if len(c) != 1 || c[0].ReleaseThrough != i+1 {
			t.Fatalf("step %d released %+v, want through %d", i, c, i+1)
		}
		sent = append(sent, c[0])
		if c := w.cuts(w.l.Step(w.now).Propose); len(c) != 0 {
			t.Fatalf("released %+v again while it is in flight", c)
		}
	}
	if !w.apply(control.Command{Cut: sent[0]}, true) {
		t.Fatal("the commit of an own release is not news")
	}
	if c := w.cuts(w.l.Step(w.now).Propose); len(c) != 1 || c[0].ReleaseThrough != releasesInflightMax+1 {
		t.Fatalf("released %+v after a commit, want through %d", c, releasesInflightMax+1)
	}
	if c := w.cuts(w.l.Step(w.now).Propose); len(c) != 0 {
		t.Fatalf("released %+v again", c)
	}
}

// TestSpecLagFixesAndSuspects checks that a shard holding back a cut the
// others are done with is sent a lag-fix through its primary, and that a
// shard that ignores it for SuspectAfter loses its primary (a
// ReconfigCommand; here its only replica, which finalizes it),
// proposed once.
func TestSpecLagFixesAndSuspects(t *testing.T) {
	w := newSpecWorld(t, 2, 100)
	w.report(0, 3)
	out := w.l.Step(w.now)
	if len(out.LagFixes) != 1 || out.LagFixes[0].Server != "s1" || len(out.LagFixes[0].Lengths) != 1 ||
		out.LagFixes[0].Lengths[0].Shard != 1 || out.LagFixes[0].Lengths[0].Length == 0 {
		t.Fatalf("lag-fixes %+v, want one for shard 1 to its primary s1", out.LagFixes)
	}
	if out.Stats.LagFixes != 1 || out.Wake != tord/2 {
		t.Fatalf("stats %+v, wake %v; want one lag-fix and a wake-up at half an interval", out.Stats, out.Wake)
	}
	w.after(specConfig().SuspectAfter + 1)
	out = w.l.Step(w.now)
	if f := removals(out.Propose); !slices.Equal(f, []cut.ShardID{1}) || len(out.Suspects) != 1 || out.Suspects[0] != 1 {
		t.Fatalf("proposed %+v, suspects %v; want shard 1 without its primary", out.Propose, out.Suspects)
	}
	w.after(tord)
	if f := removals(w.l.Step(w.now).Propose); len(f) != 0 {
		t.Fatalf("removal proposed again for %v", f)
	}
}

// TestSpecNextWindowAfterCommit checks that the commit of the leader's own
// window frees its slot: the next window is proposed as soon as it is due,
// not only once the first went stale.
func TestSpecNextWindowAfterCommit(t *testing.T) {
	w := newSpecWorld(t, 2, 4)
	w.report(0, 2)
	w.report(1, 2)
	out := w.l.Step(w.now)
	if n := windows(out.Propose); n != 0 {
		t.Fatalf("%d windows proposed before halfway through the first", n)
	}
	c := w.cuts(out.Propose)
	if len(c) != 1 || c[0].ReleaseThrough != 2 {
		t.Fatalf("released %+v, want through 2", c)
	}
	w.apply(control.Command{Cut: c[0]}, true)
	if n := windows(w.l.Step(w.now).Propose); n != 1 {
		t.Fatalf("%d windows proposed halfway through the first, want 1", n)
	}
}

// removals returns the shards whose primary cmds take out of the
// configuration (the world's shards have one replica: that finalizes them).
func removals(cmds []control.Command) []cut.ShardID {
	var out []cut.ShardID
	for _, c := range cmds {
		if rc := c.Reconfig; rc != nil && len(rc.Remove) == 1 && rc.Remove[0] == fmt.Sprintf("s%d", rc.Shard) {
			out = append(out, rc.Shard)
		}
	}
	return out
}

// TestSpecLostSuspectFinalizeRetried checks that a suspect's removal
// that never commits is proposed again a failure timeout later, and not
// before.
func TestSpecLostSuspectFinalizeRetried(t *testing.T) {
	w := newSpecWorld(t, 2, 100)
	w.report(0, 3)
	w.l.Step(w.now)
	w.after(specConfig().SuspectAfter + 1)
	if f := removals(w.l.Step(w.now).Propose); !slices.Equal(f, []cut.ShardID{1}) {
		t.Fatalf("finalized %v, want shard 1 suspected", f)
	}
	// The proposal is lost: it never commits.
	w.after(timeout - 1)
	if f := removals(w.l.Step(w.now).Propose); len(f) != 0 {
		t.Fatalf("finalized %v again within the failure timeout", f)
	}
	w.after(1)
	if f := removals(w.l.Step(w.now).Propose); !slices.Equal(f, []cut.ShardID{1}) {
		t.Fatalf("finalized %v a failure timeout after the lost proposal, want shard 1 again", f)
	}
}

// TestSpecEagerFallback checks the leader's fallback to eager cuts where
// fills cost more than spec.Config.EagerAbove per record: at four shards
// that share one record per ten intervals it plans no next window, cuts
// the reported lengths as eager order does once the announced window is
// released, and announces a window again, from the last eager cut on,
// once the shards get records every interval; an eager cut that finds
// that window committed changes nothing.
func TestSpecEagerFallback(t *testing.T) {
	w := newSpecWorld(t, 4, 10)
	report := func(shard cut.ShardID, length, records uint64) {
		w.l.Report(Report{Shard: shard, Epoch: 1, Length: length, Records: records}, w.now)
	}
	step := func() []control.Command {
		var out []control.Command
		for _, c := range w.l.Step(w.now).Propose {
			w.cuts([]control.Command{c})
			w.apply(c, true)
			out = append(out, c)
		}
		return out
	}
	for id := range cut.ShardID(4) {
		report(id, 0, 0)
	}
	// One record in ten intervals over four shards: the window's other
	// slots are fills.
	fallbacks := 0
	for k := uint64(1); k <= 10; k++ {
		w.after(tord)
		for id := range cut.ShardID(4) {
			records := uint64(0)
			if id == 0 && k >= 3 {
				records = 1
			}
			report(id, k, records)
		}
		for _, c := range step() {
			switch {
			case c.Window != nil && c.Window.Fallback:
				fallbacks++
			case c.Window != nil:
				t.Fatalf("cut %d: a window planned at about 3 fills per record", k)
			}
		}
	}
	if fallbacks != 1 || !w.st.Spec.Eager() {
		t.Fatalf("%d fallbacks proposed, eager %v; want one, and eager cuts", fallbacks, w.st.Spec.Eager())
	}
	if len(w.st.Spec.Windows) != 0 || w.st.LastCut.Index != 10 {
		t.Fatalf("after the window: last cut %d, windows %+v", w.st.LastCut.Index, w.st.Spec.Windows)
	}
	// Between windows a report is cut at once, with its length alone.
	w.after(tord)
	report(1, 11, 0)
	cmds := step()
	if len(cmds) != 1 || cmds[0].Cut == nil || cmds[0].Cut.ReleaseThrough != 0 {
		t.Fatalf("proposed %+v, want one eager cut", cmds)
	}
	if w.st.LastCut.Index != 11 || w.st.LastCut.Len(1) != 11 || w.st.LastCut.Len(0) != 10 {
		t.Fatalf("last cut %+v, want shard 1 at 11 in cut 11", w.st.LastCut)
	}
	// Four records per shard per interval: fills are rare again.
	// The eager cuts proposed meanwhile commit after the window.
	var window *control.WindowCommand
	var late []control.Command
	for k := uint64(1); k <= 10 && window == nil; k++ {
		w.after(tord)
		for id := range cut.ShardID(4) {
			report(id, 11+4*k, 4*k)
		}
		for _, c := range w.l.Step(w.now).Propose {
			if c.Window != nil {
				window = c.Window
				w.apply(c, true)
				continue
			}
			w.cuts([]control.Command{c})
			late = append(late, c)
		}
	}
	if window == nil {
		t.Fatal("no window planned at three records per shard per interval")
	}
	ws := w.st.Spec.Windows
	if len(ws) != 1 || ws[0].FirstCut != w.st.LastCut.Index+1 || ws[0].Start != w.st.LastCut.End {
		t.Fatalf("window %+v after last cut %+v", ws, w.st.LastCut)
	}
	if len(late) == 0 {
		t.Fatal("no eager cut went out before the window")
	}
	before := w.st.LastCut
	for _, c := range late {
		w.apply(c, true)
	}
	if w.st.LastCut.Index != before.Index {
		t.Fatalf("an eager cut committed after the window: %+v", w.st.LastCut)
	}
}
