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
