package order

import (
	"slices"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
)

func (w *world) detect(want ...cut.ShardID) {
	w.t.Helper()
	if got := w.l.Detect(w.now); !slices.Equal(got, want) {
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
	w.l.Broken(0)
	w.detect(0)
}

// TestDetectOnceWithinTheTimeout checks that a shard the leader proposed
// to finalize is not proposed again within a failure timeout (nor as a
// policy's suspect), and is proposed again after it, in case the first
// proposal was lost.
func TestDetectOnceWithinTheTimeout(t *testing.T) {
	w := newEagerWorld(t, 1)
	w.l.Broken(0)
	w.detect(0)
	if w.l.det.Suspect(0, w.now) {
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
		t.Fatalf("the old incarnation's shard is %v", sh.State)
	}
	w.l.Registered(reps)
	w.detect()
}
