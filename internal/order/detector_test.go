package order

import (
	"slices"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
)

// detect runs Detect and expects reconfigurations of the shards want
// (each world shard has one replica: removing it finalizes the shard).
func (w *world) detect(want ...cut.ShardID) {
	w.t.Helper()
	var got []cut.ShardID
	for _, c := range w.l.Detect(w.now) {
		got = append(got, c.Reconfig.Shard)
	}
	if !slices.Equal(got, want) {
		w.t.Fatalf("at %v: detected %v, want %v", w.now.Sub(t0), got, want)
	}
}

// pass moves time on by d, running Detect every DetectInterval as the
// ordering server does, and expects it to find nothing.
func (w *world) pass(d time.Duration) {
	w.t.Helper()
	step := DetectInterval(timeout)
	for ; d > 0; d -= min(d, step) {
		w.after(min(d, step))
		w.detect()
	}
}

// TestDetectSilence checks that a shard is finalized once one of its
// replicas stayed silent longer than the failure timeout, and not before.
func TestDetectSilence(t *testing.T) {
	w := newEagerWorld(t, 2)
	w.l.Beat("s0", 1, w.now)
	w.l.Beat("s1", 1, w.now)
	w.pass(timeout / 2)
	w.l.Beat("s0", 1, w.now)
	w.pass(timeout / 2)
	w.after(1)
	w.detect(1)
}

// TestDetectNoSilenceWhileTheLeaderWasStopped checks that a leader that
// did not run for many timeouts (SIGSTOP, a GC stall, a frozen VM) takes
// nobody for failed when it runs again, as it heard nothing meanwhile,
// and counts silence again from then.
func TestDetectNoSilenceWhileTheLeaderWasStopped(t *testing.T) {
	w := newEagerWorld(t, 2)
	w.l.Beat("s0", 1, w.now)
	w.l.Beat("s1", 1, w.now)
	w.pass(timeout / 2)
	w.after(5 * timeout)
	w.detect()
	w.l.Beat("s0", 1, w.now)
	w.pass(timeout / 2)
	w.l.Beat("s0", 1, w.now)
	w.pass(timeout / 2)
	w.after(1)
	w.detect(1)
}

// TestDetectShortStallCountsSilence checks that runs of Detect a little
// late, but no more than stoppedDetectIntervals apart, still count the
// silence in between.
func TestDetectShortStallCountsSilence(t *testing.T) {
	w := newEagerWorld(t, 1)
	for range timeout / (stoppedDetectIntervals * DetectInterval(timeout)) {
		w.after(stoppedDetectIntervals * DetectInterval(timeout))
		w.detect()
	}
	w.after(1)
	w.detect(0)
}

// TestDetectIncarnationChange checks that a replica heard with another
// incarnation than the shard table's fails its shard at once: it restarted
// and lost what it held.
func TestDetectIncarnationChange(t *testing.T) {
	w := newEagerWorld(t, 2)
	w.l.Beat("s0", 1, w.now)
	w.l.Beat("s1", 2, w.now)
	w.detect(1)
}

// TestDetectNewLeaderWaitsAFullTimeout checks that a leader that starts
// long after the shards were registered counts their silence only from its
// own start.
func TestDetectNewLeaderWaitsAFullTimeout(t *testing.T) {
	w := newEagerWorld(t, 1)
	w.after(time.Hour)
	w.l = NewLeader(NewEager(tord), timeout, w.st, w.now, idPrefix)
	w.settle()
	w.pass(timeout)
	w.after(1)
	w.detect(0)
}

// TestDetectNewShardGetsAFullTimeout checks that a shard registered while
// the leader leads gets a full timeout from its registration, while an
// older silent one does not.
func TestDetectNewShardGetsAFullTimeout(t *testing.T) {
	w := newEagerWorld(t, 1)
	w.pass(timeout / 2)
	w.apply(control.Command{Register: &control.RegisterCommand{Group: "g", Replicas: []control.Replica{{ID: "s1", Incarnation: 1}}}}, false)
	w.pass(timeout / 2)
	w.after(1)
	w.detect(0)
	w.after(timeout/2 - 1)
	w.detect()
	w.after(1)
	w.detect(1)
}

// TestDetectBrokenAtOnce checks that a shard its primary reported broken
// is finalized at once, though every replica is heard.
func TestDetectBrokenAtOnce(t *testing.T) {
	w := newEagerWorld(t, 2)
	w.l.Beat("s0", 1, w.now)
	w.l.Beat("s1", 1, w.now)
	w.l.Broken(0, "s0", 0)
	w.detect(0)
}

// TestDetectOnceWithinTheTimeout checks that a shard the leader proposed
// to reconfigure is not proposed again within a failure timeout (nor as a
// policy's suspect), and is proposed again after it, in case the first
// proposal was lost.
func TestDetectOnceWithinTheTimeout(t *testing.T) {
	w := newEagerWorld(t, 1)
	w.l.Broken(0, "s0", 0)
	w.detect(0)
	if _, ok := w.l.det.Suspect(0, w.now); ok {
		t.Fatal("a shard being finalized was suspected again")
	}
	w.after(timeout - 1)
	w.detect()
	w.after(1)
	w.detect(0)
}

// TestDetectForgetsTheOldIncarnation checks that a server that restarted
// and registered a new shard is checked against its new incarnation, not
// against a heartbeat of the old one.
func TestDetectForgetsTheOldIncarnation(t *testing.T) {
	w := newEagerWorld(t, 1)
	w.l.Beat("s0", 1, w.now)
	reps := []control.Replica{{ID: "s0", Incarnation: 2}}
	w.apply(control.Command{Register: &control.RegisterCommand{Group: "g", Replicas: reps}}, false)
	if sh := w.st.Shard(0); sh.State != control.Finalized {
		t.Fatalf("the old incarnation's only shard is %v", sh.State)
	}
	w.l.Registered(reps)
	w.detect()
}

// replicatedWorld registers one shard with replicas a, b, c and starts a
// leader; every replica beats at t0.
func replicatedWorld(t *testing.T) *world {
	st := control.New("test")
	st.Apply(control.Command{Register: &control.RegisterCommand{Group: "g", Replicas: []control.Replica{
		{ID: "a", Incarnation: 1}, {ID: "b", Incarnation: 1}, {ID: "c", Incarnation: 1}}}})
	w := &world{t: t, st: st, now: t0, ids: map[*control.CutCommand]string{}}
	w.l = NewLeader(NewEager(tord), timeout, st, w.now, idPrefix)
	w.settle()
	return w
}

// reconfigs runs Detect and returns what it proposes.
func (w *world) reconfigs() []control.ReconfigCommand {
	var out []control.ReconfigCommand
	for _, c := range w.l.Detect(w.now) {
		out = append(out, *c.Reconfig)
	}
	return out
}

// TestDetectRemovesOnlyTheFailedReplica checks that a silent replica is
// taken out of its shard's configuration at the current epoch, and that
// the shard lives on: its other replicas are heard.
func TestDetectRemovesOnlyTheFailedReplica(t *testing.T) {
	w := replicatedWorld(t)
	for range 4 {
		w.after(timeout / 4)
		w.l.Beat("b", 1, w.now)
		w.l.Beat("c", 1, w.now)
		if got := w.reconfigs(); len(got) != 0 {
			t.Fatalf("proposed %+v before a timeout", got)
		}
	}
	w.after(1)
	got := w.reconfigs()
	if len(got) != 1 || got[0].Shard != 0 || got[0].Epoch != 1 || !slices.Equal(got[0].Remove, []string{"a"}) {
		t.Fatalf("proposed %+v, want shard 0 at epoch 1 without a", got)
	}
	w.apply(control.Command{Reconfig: &got[0]}, true)
	sh := w.st.Shard(0)
	if sh.State != control.Live || sh.Epoch != 2 || sh.Replicas[0].ID != "b" {
		t.Fatalf("shard after the reconfiguration %+v", sh)
	}
	// A report of the fenced configuration is dropped; the new one's is
	// taken.
	if w.l.Report(Report{Shard: 0, Epoch: 1, Length: 5, Records: 5}, w.now) {
		t.Fatal("a report of epoch 1 was taken after epoch 2 committed")
	}
	if !w.l.Report(Report{Shard: 0, Epoch: 2, Length: 5, Records: 5}, w.now) {
		t.Fatal("a report of the current epoch was dropped")
	}
}

// TestDetectGoingAwayAndRestart checks that a clean stop and a new
// incarnation take a replica out at once, and that with every replica
// gone the proposal removes them all (which finalizes the shard).
func TestDetectGoingAwayAndRestart(t *testing.T) {
	w := replicatedWorld(t)
	for _, s := range []string{"a", "b", "c"} {
		w.l.Beat(s, 1, w.now)
	}
	w.l.GoingAway("b", 1)
	w.l.Beat("c", 2, w.now)
	got := w.reconfigs()
	if len(got) != 1 || !slices.Equal(got[0].Remove, []string{"b", "c"}) {
		t.Fatalf("proposed %+v, want b and c removed", got)
	}
	w.apply(control.Command{Reconfig: &got[0]}, true)
	// A primary of epoch 1 says it cannot reach a: too late, the shard
	// is in epoch 2. a's own copy broken is the last replica failing.
	w.l.Broken(0, "a", 1)
	if got := w.reconfigs(); len(got) != 0 {
		t.Fatalf("proposed %+v on a report of an old configuration", got)
	}
	w.l.Broken(0, "a", 0)
	got = w.reconfigs()
	if len(got) != 1 || got[0].Epoch != 2 || !slices.Equal(got[0].Remove, []string{"a"}) {
		t.Fatalf("proposed %+v, want a removed at epoch 2", got)
	}
	w.apply(control.Command{Reconfig: &got[0]}, true)
	if sh := w.st.Shard(0); sh.State != control.Finalized || !sh.Failed {
		t.Fatalf("shard with no replica left %+v", sh)
	}
}

// TestSuspectSparesANewConfiguration checks that a primary promoted while
// the leader led gets a failure timeout before a policy's suspicion (a
// lag-fix it did not answer, sent perhaps to its predecessor) takes it
// out too.
func TestSuspectSparesANewConfiguration(t *testing.T) {
	w := replicatedWorld(t)
	w.apply(control.Command{Reconfig: &control.ReconfigCommand{Shard: 0, Epoch: 1, Remove: []string{"a"}}}, true)
	w.after(timeout / 2)
	if rc, ok := w.l.det.Suspect(0, w.now); ok {
		t.Fatalf("suspected the new primary %+v half a timeout after its promotion", rc)
	}
	w.after(timeout / 2)
	rc, ok := w.l.det.Suspect(0, w.now)
	if !ok || rc.Epoch != 2 || !slices.Equal(rc.Remove, []string{"b"}) {
		t.Fatalf("suspect a timeout after the promotion: %+v %v, want b removed at epoch 2", rc, ok)
	}
}

// TestSuspectTakesOutASilentBackupRatherThanItsPrimary: a primary whose
// backup stopped (a paused server) cannot make its entries durable, so it
// answers no lag-fix; once the backup has been silent for the failure
// timeout, a suspicion of the primary takes out the backup, which explains
// the lag, rather than the primary, which would leave the shard to the
// silent backup alone (and fail it as a whole).
func TestSuspectTakesOutASilentBackupRatherThanItsPrimary(t *testing.T) {
	w := replicatedWorld(t)
	for range 4 {
		w.after(timeout / 4)
		w.l.Beat("a", 1, w.now)
		w.l.Beat("c", 1, w.now)
	}
	w.after(1)
	rc, ok := w.l.det.Suspect(0, w.now)
	if !ok || rc.Epoch != 1 || !slices.Equal(rc.Remove, []string{"b"}) {
		t.Fatalf("suspecting the primary of a shard whose backup b is silent: %+v %v, want b removed at epoch 1", rc, ok)
	}
}

// TestSuspectHoldsWhileTheShardFailsWhole: as Detect, a suspicion takes
// out no failed backup while the shard's other replicas are falling silent
// too (heard last more than half a timeout ago): they go out together.
func TestSuspectHoldsWhileTheShardFailsWhole(t *testing.T) {
	w := replicatedWorld(t)
	for i := range 4 {
		w.after(timeout / 4)
		if i < 2 {
			w.l.Beat("a", 1, w.now)
			w.l.Beat("c", 1, w.now)
		}
	}
	w.after(1)
	if rc, ok := w.l.det.Suspect(0, w.now); ok {
		t.Fatalf("suspecting the primary while a and c fall silent after b: %+v, want no proposal", rc)
	}
}

// TestDetectTakesOutAShardFailingWholeAtOnce: when every replica of a
// shard falls silent within half a failure timeout (its servers died
// together, or the primary died and the backups were cut off), they are
// taken out together, finalizing the shard, rather than the first to fall
// silent alone: fenced, that one would drop entries the configuration
// left to its dead peers. A replica still heard within half a timeout is
// a survivor: the silent ones are taken out at once.
func TestDetectTakesOutAShardFailingWholeAtOnce(t *testing.T) {
	// run runs Detect every quarter timeout up to d after t0 (as the
	// ordering server does), with c heard at cAt, and returns the first
	// reconfiguration proposed and when.
	run := func(cAt, d time.Duration) (control.ReconfigCommand, time.Duration) {
		w := replicatedWorld(t)
		for w.now.Sub(t0) < d {
			w.after(timeout / 8)
			if w.now.Sub(t0) == cAt {
				w.l.Beat("c", 1, w.now)
			}
			if got := w.reconfigs(); len(got) > 0 {
				return got[0], w.now.Sub(t0)
			}
		}
		return control.ReconfigCommand{}, 0
	}
	// a and b fall silent at t0, c a quarter timeout later.
	rc, at := run(timeout/4, 2*timeout)
	if !slices.Equal(rc.Remove, []string{"a", "b", "c"}) || at <= timeout*5/4 {
		t.Fatalf("proposed %+v at %v, want a, b and c taken out together once c was silent a timeout (after %v)", rc, at, timeout*5/4)
	}
	// c heard half a timeout after the others: a survivor.
	rc, at = run(timeout*5/8, 2*timeout)
	if !slices.Equal(rc.Remove, []string{"a", "b"}) || at > timeout*9/8 {
		t.Fatalf("proposed %+v at %v, want a and b taken out within a timeout and an eighth, while c was heard", rc, at)
	}
}
