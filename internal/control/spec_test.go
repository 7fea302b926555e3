package control

import (
	"bytes"
	"slices"
	"testing"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
)

func specTwoShards(t *testing.T, w uint64) *State {
	t.Helper()
	s := NewSpec("test", w)
	mustApply(t, s, reg("a", Replica{ID: "a1", Incarnation: 1}))
	mustApply(t, s, reg("b", Replica{ID: "b1", Incarnation: 1}))
	return s
}

func window(qs ...fixante.Quota) Command {
	return Command{Window: &WindowCommand{Quotas: qs, Groups: 1}}
}

// release proposes the next n cuts of s.
func release(s *State, n uint64) Command {
	return Command{Cut: &CutCommand{ReleaseThrough: s.LastCut.Index + n}}
}

// TestSpecReleaseFollowsWindow checks that released cuts are exactly the
// predetermined ones, that the next window starts where the current ends
// with each shard's base carried over, and that a release beyond the
// announced windows changes nothing.
func TestSpecReleaseFollowsWindow(t *testing.T) {
	s := specTwoShards(t, 3)
	if _, ok := s.Apply(release(s, 1)); ok {
		t.Fatal("released a cut with no window")
	}
	ev := mustApply(t, s, window(fixante.Quota{Shard: 0, PerCut: 2}, fixante.Quota{Shard: 1, PerCut: 1}))
	if ev.Window == nil || ev.Window.FirstCut != 1 || ev.Window.Start != 0 {
		t.Fatalf("window %+v", ev.Window)
	}
	ev = mustApply(t, s, release(s, 2))
	if len(ev.Cuts) != 2 || ev.Cut.Index != 2 || ev.Cut.End != 6 || ev.Cut.Len(0) != 4 || ev.Cut.Len(1) != 2 {
		t.Fatalf("release %+v", ev)
	}
	// A release an old leader left in flight, through a cut already
	// released, commits nothing twice.
	if _, ok := s.Apply(Command{Cut: &CutCommand{ReleaseThrough: 2}}); ok {
		t.Fatal("a stale release committed a cut")
	}
	ev = mustApply(t, s, window(fixante.Quota{Shard: 0, PerCut: 1}, fixante.Quota{Shard: 1, PerCut: 5}))
	if w := ev.Window; w.FirstCut != 4 || w.Start != 9 || w.Quotas[0].Base != 6 || w.Quotas[1].Base != 3 {
		t.Fatalf("next window %+v", w)
	}
	if _, ok := s.Apply(window(fixante.Quota{Shard: 0, PerCut: 1})); ok {
		t.Fatal("a third window was announced")
	}
	ev = mustApply(t, s, release(s, 10))
	if ev.Cut.Index != 6 || len(s.Spec.Windows) != 0 || ev.Cut.Len(0) != 9 || ev.Cut.Len(1) != 18 {
		t.Fatalf("release across windows %+v, windows %+v", ev.Cut, s.Spec.Windows)
	}
	// Every cut's positions agree with the window arithmetic.
	pos, _, _ := fixante.Window{Cuts: 3, Groups: 1, Start: 9, Quotas: []fixante.Quota{{Shard: 0, PerCut: 1, Base: 6}, {Shard: 1, PerCut: 5, Base: 3}}}.Locate(1, 17)
	if pos != 9+6*2+1+4 {
		t.Fatalf("predicted %d", pos)
	}
	// A new window after a gap starts at the last cut.
	ev = mustApply(t, s, window(fixante.Quota{Shard: 1, PerCut: 1}))
	if ev.Window.FirstCut != 7 || ev.Window.Start != s.LastCut.End {
		t.Fatalf("window after gap %+v", ev.Window)
	}
}

// TestSpecLeaveAtWindowEnd checks that a shard finalized without failure
// keeps its quota until the last window holding it ends, and a window may
// not give quota to a shard that is leaving.
func TestSpecLeaveAtWindowEnd(t *testing.T) {
	s := specTwoShards(t, 2)
	mustApply(t, s, window(fixante.Quota{Shard: 0, PerCut: 1}, fixante.Quota{Shard: 1, PerCut: 1}))
	mustApply(t, s, window(fixante.Quota{Shard: 0, PerCut: 1}, fixante.Quota{Shard: 1, PerCut: 1}))
	ev := mustApply(t, s, Command{Finalize: &FinalizeCommand{Shard: 1}})
	if ev.View != nil || s.Shard(1).State != Finalizing || s.Shard(1).FinalCut != 4 {
		t.Fatalf("leave: %+v %+v", ev, s.Shard(1))
	}
	mustApply(t, s, release(s, 3))
	if s.Shard(1).State != Finalizing {
		t.Fatal("left before its window ended")
	}
	ev = mustApply(t, s, release(s, 1))
	if s.Shard(1).State != Finalized || s.Shard(1).FinalLength != 4 || !ev.MembershipChanged {
		t.Fatalf("after the window: %+v", s.Shard(1))
	}
	if _, ok := s.Apply(window(fixante.Quota{Shard: 1, PerCut: 1})); ok {
		t.Fatal("a finalized shard got a quota")
	}
}

// TestSpecViewChange checks a whole-shard failure: a new view whose
// confirmed-gp is the last released cut's end, the failed shard's later
// slots void and given to the lowest live shard, cuts still released at
// their predetermined positions, and the void dropped once no window holds
// the shard.
func TestSpecViewChange(t *testing.T) {
	s := NewSpec("test", 2)
	for _, id := range []string{"a", "b", "c"} {
		mustApply(t, s, reg(id, Replica{ID: id + "1", Incarnation: 1}))
	}
	q := []fixante.Quota{{Shard: 0, PerCut: 1}, {Shard: 1, PerCut: 2}, {Shard: 2, PerCut: 1}}
	mustApply(t, s, window(q...))
	mustApply(t, s, release(s, 1))
	mustApply(t, s, window(q...))
	ev := mustApply(t, s, Command{Finalize: &FinalizeCommand{Shard: 0, Failed: true}})
	v := ev.View
	if v == nil || v.View != 1 || v.ConfirmedGP != 4 || v.Void.Shard != 0 || v.Void.From != 1 || v.Void.Filler != 1 {
		t.Fatalf("view change %+v", v)
	}
	// Shard 0's remaining slots: the first of each cut, in cut 2 and in
	// both cuts of the next window.
	if want := []fixante.Range{{Start: 4, Count: 1}, {Start: 8, Count: 1}, {Start: 12, Count: 1}}; !slices.Equal(v.Void.Slots, want) {
		t.Fatalf("void slots %v, want %v", v.Void.Slots, want)
	}
	// The filler fails too: its void passes on, and a second view starts.
	ev = mustApply(t, s, Command{Register: &RegisterCommand{Group: "b", Replicas: []Replica{{ID: "b1", Incarnation: 2}}}})
	if ev.View == nil || ev.View.View != 2 || ev.View.Void.Filler != 2 {
		t.Fatalf("second view %+v", ev.View)
	}
	if f, _ := s.Spec.VoidOf(0); f.Filler != 2 {
		t.Fatalf("void of 0 kept filler %d", f.Filler)
	}
	ev = mustApply(t, s, release(s, 3))
	if ev.Cut.Index != 4 || ev.Cut.End != 16 || ev.Cut.Len(0) != 4 {
		t.Fatalf("cuts after failures %+v", ev.Cut)
	}
	if len(s.Spec.Void) != 2 {
		t.Fatalf("voids %+v", s.Spec.Void)
	}
	// A failure of a shard outside every window is a plain finalize.
	mustApply(t, s, window(fixante.Quota{Shard: 2, PerCut: 1}))
	ev = mustApply(t, s, Command{Finalize: &FinalizeCommand{Shard: 3, Failed: true}})
	if ev.View != nil || s.Spec.View != 2 {
		t.Fatalf("unheld failure changed the view: %+v", ev)
	}
	// Snapshots carry the speculative state.
	n := New("")
	if err := n.Restore(s.Snapshot()); err != nil || !bytes.Equal(n.Snapshot(), s.Snapshot()) || n.Clone().Spec.Windows[0].Quotas[0].Shard != 2 {
		t.Fatalf("restore: %v", err)
	}
}

// TestSpecFillerNeedNotHoldAQuota fails the only shard the windows give a
// quota (the other excluded, as a straggler is): the other live shard must
// still fill its slots, or no subscriber could pass them.
func TestSpecFillerNeedNotHoldAQuota(t *testing.T) {
	s := specTwoShards(t, 4)
	mustApply(t, s, window(fixante.Quota{Shard: 0, PerCut: 2}, fixante.Quota{Shard: 1, PerCut: 0}))
	mustApply(t, s, release(s, 1))
	ev := mustApply(t, s, Command{Finalize: &FinalizeCommand{Shard: 0, Failed: true}})
	if ev.View == nil || ev.View.Void.Filler != 1 {
		t.Fatalf("view change %+v: want shard 1 to fill", ev.View)
	}
}

// TestSpecFillerThatStopsHandsItsSlotsOn stops the filler of a failed
// shard's slots, a shard no window holds (a straggler left out), by a
// failure and by a leave: the slots pass to the other live shard, or no
// server would stream them and every subscriber would wait at the first of
// them for good (spec seed 1473 of the simulator).
func TestSpecFillerThatStopsHandsItsSlotsOn(t *testing.T) {
	for _, failed := range []bool{true, false} {
		s := NewSpec("test", 2)
		for _, id := range []string{"a", "b", "c"} {
			mustApply(t, s, reg(id, Replica{ID: id + "1", Incarnation: 1}))
		}
		q := []fixante.Quota{{Shard: 0, PerCut: 1}, {Shard: 2, PerCut: 1}}
		mustApply(t, s, window(q...))
		mustApply(t, s, release(s, 1))
		ev := mustApply(t, s, Command{Finalize: &FinalizeCommand{Shard: 0, Failed: true}})
		if ev.View == nil || ev.View.Void.Filler != 1 {
			t.Fatalf("view change %+v: want shard 1 to fill", ev.View)
		}
		ev = mustApply(t, s, Command{Finalize: &FinalizeCommand{Shard: 1, Failed: failed}})
		if ev.View != nil {
			t.Fatalf("stopping shard 1, which no window holds, started view %+v", ev.View)
		}
		if v, _ := s.Spec.VoidOf(0); v.Filler != 2 {
			t.Fatalf("failed %v: shard 1 stopped, but the slots of shard 0 stay with shard %d, want 2", failed, v.Filler)
		}
	}
}

// TestSpecOrphanedVoidAdopted fails the last live shards while the only
// other one is leaving: nobody is left to fill their slots, so the voids
// are orphaned. The next shard to register takes every orphaned void over,
// slots unchanged and no new view, and a later one takes nothing.
func TestSpecOrphanedVoidAdopted(t *testing.T) {
	s := NewSpec("test", 2)
	for _, id := range []string{"a", "b", "c"} {
		mustApply(t, s, reg(id, Replica{ID: id + "1", Incarnation: 1}))
	}
	q := []fixante.Quota{{Shard: 0, PerCut: 1}, {Shard: 1, PerCut: 1}, {Shard: 2, PerCut: 1}}
	mustApply(t, s, window(q...))
	mustApply(t, s, release(s, 1))
	mustApply(t, s, window(q...))
	mustApply(t, s, Command{Finalize: &FinalizeCommand{Shard: 2}})
	ev := mustApply(t, s, Command{Finalize: &FinalizeCommand{Shard: 1, Failed: true}})
	if ev.View.Void.Filler != 0 {
		t.Fatalf("void of shard 1 filled by %d, want 0", ev.View.Void.Filler)
	}
	// Shard 0, the filler, fails too; shard 2 is leaving, so neither void
	// has a live filler.
	ev = mustApply(t, s, Command{Finalize: &FinalizeCommand{Shard: 0, Failed: true}})
	if ev.View == nil || ev.View.View != 2 {
		t.Fatalf("second failure: %+v", ev)
	}
	before := slices.Clone(s.Spec.Void)
	for _, v := range before {
		if !v.Orphaned() {
			t.Fatalf("void %+v has a filler, but no shard is live", v)
		}
	}
	ev = mustApply(t, s, reg("d", Replica{ID: "d1", Incarnation: 1}))
	if ev.Registered != 3 || ev.View != nil || s.Spec.View != 2 || !ev.MembershipChanged {
		t.Fatalf("register: %+v, view %d", ev, s.Spec.View)
	}
	for i, v := range s.Spec.Void {
		want := before[i]
		want.Filler = 3
		if v.Orphaned() || v.Filler != 3 || v.Shard != want.Shard || v.From != want.From || v.View != want.View ||
			v.ConfirmedGP != want.ConfirmedGP || !slices.Equal(v.Slots, want.Slots) {
			t.Fatalf("void %d after the register: %+v, want %+v", i, v, want)
		}
	}
	// Adopted voids keep their filler: a later shard takes nothing over.
	mustApply(t, s, reg("e", Replica{ID: "e1", Incarnation: 1}))
	for _, v := range s.Spec.Void {
		if v.Filler != 3 {
			t.Fatalf("void of shard %d moved to %d", v.Shard, v.Filler)
		}
	}
}

// TestSpecRestartedSoleShardFillsItsOwnSlots restarts the server of the
// only shard: the register that finalizes the old shard as failed finds no
// live filler for its slots, and the shard it creates takes them over in
// the same command.
func TestSpecRestartedSoleShardFillsItsOwnSlots(t *testing.T) {
	s := NewSpec("test", 2)
	mustApply(t, s, reg("a", Replica{ID: "a1", Incarnation: 1}))
	mustApply(t, s, window(fixante.Quota{Shard: 0, PerCut: 2}))
	ev := mustApply(t, s, reg("a", Replica{ID: "a1", Incarnation: 2}))
	if ev.View == nil || ev.Registered != 1 {
		t.Fatalf("restart: %+v", ev)
	}
	v, ok := s.Spec.VoidOf(0)
	if !ok || v.Filler != 1 || len(v.Slots) == 0 {
		t.Fatalf("void of the restarted shard %+v (found %v), want filled by the new shard 1", v, ok)
	}
}

// TestSpecReplicaFailureIsNoViewChange takes replicas of a shard out one at
// a time: while one survives the shard keeps its slots and the view stays;
// only the last one's removal is a whole-shard failure.
func TestSpecReplicaFailureIsNoViewChange(t *testing.T) {
	s := NewSpec("test", 2)
	mustApply(t, s, reg("a", Replica{ID: "a1", Incarnation: 1}, Replica{ID: "a2", Incarnation: 1}))
	mustApply(t, s, reg("b", Replica{ID: "b1", Incarnation: 1}))
	mustApply(t, s, window(fixante.Quota{Shard: 0, PerCut: 1}, fixante.Quota{Shard: 1, PerCut: 1}))
	ev := mustApply(t, s, reconfig(0, 1, nil, "a1"))
	if ev.View != nil || s.Spec.View != 0 || len(s.Spec.Void) != 0 || s.Shard(0).State != Live {
		t.Fatalf("a replica failure changed the view: %+v, spec %+v", ev, s.Spec)
	}
	ev = mustApply(t, s, reconfig(0, 2, nil, "a2"))
	if ev.View == nil || ev.View.Void.Shard != 0 || s.Shard(0).State != Finalized {
		t.Fatalf("the whole shard failed without a view change: %+v", ev)
	}
}

func confirm(shard cut.ShardID, epoch uint64) Command {
	return Command{Reconfig: &ReconfigCommand{Shard: shard, Epoch: epoch, Confirm: true}}
}

// TestSpecJoinedReplicaIsNoSurvivorUntilConfirmed: in speculative order a
// joined replica is pending: its primary may have acknowledged entries it
// lacks, so the primary's failure finalizes the shard (a view change, as
// without the join) rather than promote it. A Confirm of its epoch makes
// it a survivor; then the primary's failure is no view change.
func TestSpecJoinedReplicaIsNoSurvivorUntilConfirmed(t *testing.T) {
	s := NewSpec("test", 2)
	mustApply(t, s, reg("a", Replica{ID: "a1", Incarnation: 1}, Replica{ID: "a2", Incarnation: 1}))
	mustApply(t, s, reg("b", Replica{ID: "b1", Incarnation: 1}))
	mustApply(t, s, window(fixante.Quota{Shard: 0, PerCut: 1}, fixante.Quota{Shard: 1, PerCut: 1}))
	mustApply(t, s, reconfig(0, 1, nil, "a2"))
	mustApply(t, s, rejoin(0, 2, Replica{ID: "a2", Incarnation: 2}, 0))
	if sh := s.Shard(0); sh.Epoch != 3 || len(sh.Replicas) != 2 || sh.Replicas[1] != (Replica{ID: "a2", Incarnation: 2, Pending: true}) {
		t.Fatalf("after a speculative join %+v, want a2 pending", sh)
	}
	pendingState := s.Snapshot()
	for name, c := range map[string]Command{
		"confirm of an older epoch":   confirm(0, 2),
		"confirm of a newer epoch":    confirm(0, 4),
		"confirm with a removal":      {Reconfig: &ReconfigCommand{Shard: 0, Epoch: 3, Remove: []string{"a2"}, Confirm: true}},
		"confirm of an unknown shard": confirm(7, 3),
		"confirm of no pending":       confirm(1, 1),
	} {
		if _, ok := s.Apply(c); ok {
			t.Errorf("%s: applied", name)
		}
	}
	if !bytes.Equal(pendingState, s.Snapshot()) {
		t.Fatal("refused confirms changed the state")
	}

	ev := mustApply(t, s, reconfig(0, 3, nil, "a1"))
	if ev.View == nil || ev.View.Void.Shard != 0 || s.Shard(0).State != Finalized {
		t.Fatalf("the primary's failure promoted a pending replica: %+v, shard %+v", ev, s.Shard(0))
	}

	s = NewSpec("test", 2)
	if err := s.Restore(pendingState); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, confirm(0, 3))
	if sh := s.Shard(0); sh.Epoch != 3 || sh.Replicas[1].Pending {
		t.Fatalf("after the confirm %+v, want epoch 3 and a2 a survivor", sh)
	}
	ev = mustApply(t, s, reconfig(0, 3, nil, "a1"))
	if sh := s.Shard(0); ev.View != nil || sh.State != Live || sh.Replicas[0].ID != "a2" {
		t.Fatalf("the primary's failure after the confirm: %+v, shard %+v; want a2 primary, no view change", ev, sh)
	}
}

// TestSpecFailoverPromotesAConfirmedReplica: with a confirmed backup
// beside a pending one, the primary's failure promotes the confirmed one
// and the pending one stays pending.
func TestSpecFailoverPromotesAConfirmedReplica(t *testing.T) {
	s := NewSpec("test", 2)
	mustApply(t, s, reg("a", Replica{ID: "a1", Incarnation: 1}, Replica{ID: "a2", Incarnation: 1}, Replica{ID: "a3", Incarnation: 1}))
	mustApply(t, s, reconfig(0, 1, nil, "a2"))
	mustApply(t, s, rejoin(0, 2, Replica{ID: "a2", Incarnation: 2}, 0))
	ev := mustApply(t, s, reconfig(0, 3, nil, "a1"))
	if sh := s.Shard(0); ev.View != nil || sh.State != Live || len(sh.Replicas) != 2 || sh.Replicas[0].ID != "a3" || sh.Replicas[0].Pending || !sh.Replicas[1].Pending {
		t.Fatalf("after the primary failed: %+v, shard %+v; want a3 primary, a2 pending", ev, sh)
	}
}

// TestSpecFallbackCutsEagerBetweenWindows checks the leader's fallback in
// the replicated state: a cut of lengths commits nothing before the
// fallback, nor while the announced windows last, and commits as an eager
// cut once they are released; a shard that leaves then gets its grace
// cuts; the next window starts at the last eager cut and ends the
// fallback, after which cuts of lengths commit nothing again.
func TestSpecFallbackCutsEagerBetweenWindows(t *testing.T) {
	s := specTwoShards(t, 2)
	lengths := func(a, b uint64) Command {
		return Command{Cut: &CutCommand{Lengths: []cut.Length{{Shard: 0, Length: a}, {Shard: 1, Length: b}}}}
	}
	if _, ok := s.Apply(lengths(1, 1)); ok {
		t.Fatal("a cut of lengths committed before any window")
	}
	mustApply(t, s, window(fixante.Quota{Shard: 0, PerCut: 1}, fixante.Quota{Shard: 1, PerCut: 1}))
	ev := mustApply(t, s, Command{Window: &WindowCommand{Fallback: true}})
	if !ev.Fallback || !s.Spec.Fallback || s.Spec.Eager() {
		t.Fatalf("fallback event %+v, state fallback %v eager %v: want the fallback, not yet eager", ev, s.Spec.Fallback, s.Spec.Eager())
	}
	if _, ok := s.Apply(Command{Window: &WindowCommand{Fallback: true}}); ok {
		t.Fatal("a second fallback changed the state")
	}
	if _, ok := s.Apply(lengths(5, 5)); ok {
		t.Fatal("a cut of lengths committed while a window is announced")
	}
	mustApply(t, s, release(s, 2))
	if !s.Spec.Eager() {
		t.Fatal("not eager once the announced window is released")
	}
	ev = mustApply(t, s, lengths(4, 2))
	if ev.Cut == nil || ev.Cut.Index != 3 || ev.Cut.Len(0) != 4 || ev.Cut.Len(1) != 2 || ev.Cut.End != 6 {
		t.Fatalf("eager cut %+v", ev.Cut)
	}
	mustApply(t, s, Command{Finalize: &FinalizeCommand{Shard: 1, GraceCuts: 2}})
	if sh := s.Shard(1); sh.State != Finalizing || sh.FinalCut != 5 {
		t.Fatalf("leaving shard %+v, want finalizing until cut 5", *sh)
	}
	mustApply(t, s, Command{Cut: &CutCommand{Lengths: []cut.Length{{Shard: 1, Length: 3}}}})
	ev = mustApply(t, s, Command{Cut: &CutCommand{Force: true}})
	if sh := s.Shard(1); sh.State != Finalized || sh.FinalLength != 3 || !ev.MembershipChanged {
		t.Fatalf("left shard %+v, want finalized at 3", *sh)
	}
	ev = mustApply(t, s, window(fixante.Quota{Shard: 0, PerCut: 1}))
	if ev.Window.FirstCut != s.LastCut.Index+1 || ev.Window.Start != s.LastCut.End || ev.Window.Quotas[0].Base != 4 {
		t.Fatalf("window %+v after last cut %+v", *ev.Window, s.LastCut)
	}
	if s.Spec.Fallback || s.Spec.Eager() {
		t.Fatal("a window left the fallback on")
	}
	if _, ok := s.Apply(lengths(9, 3)); ok {
		t.Fatal("a cut of lengths committed after the next window")
	}
}
