package order

import (
	"errors"
	"testing"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
)

// rejoinWorld is one shard served by s0 (primary) and s1, with s1 taken
// out (epoch 2) after a cut of 4 entries, watched by an eager leader.
func rejoinWorld(t *testing.T) *world {
	st := control.New("test")
	st.Apply(control.Command{Register: &control.RegisterCommand{Group: "g",
		Replicas: []control.Replica{{ID: "s0", Addr: "a0", Incarnation: 1}, {ID: "s1", Addr: "a1", Incarnation: 1}}}})
	st.Apply(control.Command{Cut: &control.CutCommand{Lengths: []cut.Length{{Shard: 0, Length: 4}}}})
	st.Apply(control.Command{Reconfig: &control.ReconfigCommand{Shard: 0, Epoch: 1, Remove: []string{"s1"}}})
	w := &world{t: t, st: st, now: t0, ids: map[*control.CutCommand]string{}}
	w.l = NewLeader(NewEager(tord), timeout, st, w.now, idPrefix)
	w.settle()
	return w
}

var s1Again = control.Replica{ID: "s1", Addr: "a1", Incarnation: 2}

func TestRejoinRefusesAStaleOrUnknownRequest(t *testing.T) {
	w := rejoinWorld(t)
	for name, req := range map[string]RejoinRequest{
		"caught up from an old configuration": {Shard: 0, Replica: s1Again, Epoch: 1, Held: 10},
		"from a future one":                   {Shard: 0, Replica: s1Again, Epoch: 3, Held: 10},
		"unknown shard":                       {Shard: 7, Replica: s1Again, Epoch: 2, Held: 10},
		"nameless replica":                    {Shard: 0, Replica: control.Replica{Addr: "a1"}, Epoch: 2, Held: 10},
		"member with another incarnation":     {Shard: 0, Replica: control.Replica{ID: "s0", Addr: "a0", Incarnation: 9}, Epoch: 2, Held: 10},
	} {
		if cmd, member, err := w.l.Rejoin(req, w.now); err == nil || member || cmd.Reconfig != nil {
			t.Errorf("%s: got %+v member=%v err=%v, want a refusal", name, cmd, member, err)
		}
	}
	if _, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 1, Held: 10}, w.now); !errors.Is(err, ErrRejoinStale) {
		t.Fatalf("stale epoch: %v, want ErrRejoinStale", err)
	}
	// The refusals left nothing in flight: a good request goes through.
	if cmd, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 4}, w.now); err != nil || cmd.Reconfig == nil {
		t.Fatalf("good request after refusals: %+v %v", cmd, err)
	}
}

func TestRejoinRefusesACopyBehindWhatMayBeOrdered(t *testing.T) {
	w := rejoinWorld(t)
	// The last cut orders 4 entries.
	if _, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 3}, w.now); !errors.Is(err, ErrRejoinBehind) {
		t.Fatalf("behind the last cut: %v", err)
	}
	// The primary reported 9: a cut may order that much before the join
	// applies.
	w.report(0, 9)
	if _, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 8}, w.now); !errors.Is(err, ErrRejoinBehind) {
		t.Fatalf("behind the report: %v", err)
	}
	cmd, member, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 9}, w.now)
	if err != nil || member {
		t.Fatalf("caught-up copy refused: %v", err)
	}
	rc := cmd.Reconfig
	if rc == nil || rc.Shard != 0 || rc.Epoch != 2 || rc.Join == nil || *rc.Join != s1Again || rc.Held != 9 || len(rc.Remove) != 0 || cmd.ID == "" {
		t.Fatalf("command %+v", cmd)
	}
}

// TestRejoinHoldsBackReportsOfTheOldConfiguration checks that while a join
// is in flight no cut orders more than the joining copy holds, and that
// the join then takes the copy in.
func TestRejoinHoldsBackReportsOfTheOldConfiguration(t *testing.T) {
	w := rejoinWorld(t)
	w.report(0, 6)
	cmd, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 6}, w.now)
	if err != nil {
		t.Fatal(err)
	}
	// A second join of the shard waits for this one.
	if _, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: control.Replica{ID: "s2", Addr: "a2", Incarnation: 1}, Epoch: 2, Held: 6}, w.now); !errors.Is(err, ErrRejoinBusy) {
		t.Fatalf("second join: %v", err)
	}
	// The old primary goes on appending: its report of epoch 2 must not
	// reach a cut, which could commit after the join.
	if w.report(0, 20) {
		t.Fatal("a report of the configuration being replaced was news")
	}
	for _, c := range w.cuts(w.l.Step(w.now).Propose) {
		for _, l := range c.Lengths {
			if l.Shard == 0 && l.Length > 6 {
				t.Fatalf("cut proposed during the join orders %d entries, the joining copy holds 6", l.Length)
			}
		}
	}
	w.apply(cmd, true)
	sh := w.st.Shard(0)
	if sh.Epoch != 3 || len(sh.Replicas) != 2 || sh.Replicas[1] != s1Again || len(sh.Out) != 0 {
		t.Fatalf("after the join %+v", sh)
	}
	// Reports of the new configuration count again.
	if !w.report(0, 20) {
		t.Fatal("a report of the new configuration was not news")
	}
	// Asking again (the answer was lost) finds it a member.
	if cmd, member, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 6}, w.now); err != nil || !member || cmd.Reconfig != nil {
		t.Fatalf("repeated request: %+v member=%v %v", cmd, member, err)
	}
}

// TestRejoinForgetsWhatWasSaidOfTheOldCopy checks that a copy that was
// reported broken, once rejoined, is not taken out again for it.
func TestRejoinForgetsWhatWasSaidOfTheOldCopy(t *testing.T) {
	w := rejoinWorld(t)
	w.l.Broken(0, "s1", 0)
	cmd, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 4}, w.now)
	if err != nil {
		t.Fatal(err)
	}
	w.apply(cmd, true)
	w.l.Beat("s0", 1, w.now)
	w.l.Beat("s1", 2, w.now)
	if got := w.l.Detect(w.now); len(got) != 0 {
		t.Fatalf("rejoined copy taken out at once: %+v", got[0].Reconfig)
	}
}

// TestRejoinInFlightExpires checks that a join whose proposal was lost
// holds back the shard's reports for no longer than a failure timeout.
func TestRejoinInFlightExpires(t *testing.T) {
	w := rejoinWorld(t)
	if _, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 4}, w.now); err != nil {
		t.Fatal(err)
	}
	if w.report(0, 5) {
		t.Fatal("report taken during the join")
	}
	w.after(timeout)
	if !w.report(0, 5) {
		t.Fatal("report still held back after the join's proposal was lost")
	}
	if _, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 5}, w.now); err != nil {
		t.Fatalf("asking again after the lost proposal: %v", err)
	}
}

func TestRejoinRefusesAFinalizedShard(t *testing.T) {
	w := rejoinWorld(t)
	w.apply(control.Command{Finalize: &control.FinalizeCommand{Shard: 0, Failed: true}}, false)
	if _, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 4}, w.now); !errors.Is(err, ErrRejoinStale) {
		t.Fatalf("finalized shard: %v", err)
	}
}

// TestNewLeaderTakesReportsOnceSettled: a Join an earlier leader proposed
// may still be in the Raft log when a new leader starts. The new leader
// first proposes an empty command and takes no report until it applied:
// by then the Join applied too, and the old configuration's reports,
// which may go past what the joined replica holds, are refused.
func TestNewLeaderTakesReportsOnceSettled(t *testing.T) {
	st := control.New("test")
	st.Apply(control.Command{Register: &control.RegisterCommand{Group: "g",
		Replicas: []control.Replica{{ID: "s0", Addr: "a0", Incarnation: 1}, {ID: "s1", Addr: "a1", Incarnation: 1}}}})
	st.Apply(control.Command{Cut: &control.CutCommand{Lengths: []cut.Length{{Shard: 0, Length: 4}}}})
	st.Apply(control.Command{Reconfig: &control.ReconfigCommand{Shard: 0, Epoch: 1, Remove: []string{"s1"}}})
	w := &world{t: t, st: st, now: t0, ids: map[*control.CutCommand]string{}}
	w.l = NewLeader(NewEager(tord), timeout, st, w.now, idPrefix)
	out := w.l.Step(w.now)
	if len(out.Propose) != 1 || out.Propose[0] != (control.Command{ID: out.Propose[0].ID}) || out.Propose[0].ID == "" {
		t.Fatalf("a new leader's first step proposed %+v, want one empty command", out.Propose)
	}
	barrier := out.Propose[0]
	if w.report(0, 9) {
		t.Fatal("an unsettled leader took a report")
	}
	if _, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 9}, w.now); !errors.Is(err, ErrRejoinBusy) {
		t.Fatalf("an unsettled leader decided a rejoin: %v", err)
	}
	// The earlier leader's Join, ahead of the empty command in the log.
	w.apply(control.Command{ID: "old/7", Reconfig: &control.ReconfigCommand{Shard: 0, Epoch: 2, Join: &s1Again, Held: 4}}, false)
	w.none(w.l.Step(w.now)) // the empty command is in flight
	w.apply(barrier, true)
	if !w.l.Settled() {
		t.Fatal("not settled once its empty command applied")
	}
	if w.l.Report(Report{Shard: 0, Epoch: 2, Length: 9, Records: 9}, w.now) {
		t.Fatal("a report of the configuration the Join replaced was taken")
	}
	for _, c := range w.cuts(w.l.Step(w.now).Propose) {
		t.Fatalf("cut %+v proposed with no report of the current configuration", c)
	}
	if !w.report(0, 6) || w.st.Shard(0).Epoch != 3 {
		t.Fatal("a report of the current configuration was not taken")
	}
}

// TestSpecRejoinConfirmedOnceThePrimaryReports: in speculative order the
// leader takes a caught-up replica in as pending, and proposes the
// Confirm that makes it a survivor only once the primary reported in the
// new configuration (which it does only when every replica holds what it
// acknowledged); once per configuration while in flight.
func TestSpecRejoinConfirmedOnceThePrimaryReports(t *testing.T) {
	w := newSpecWorld(t, 1, 4)
	confirms := func(out Output) (n int) {
		for _, c := range out.Propose {
			if rc := c.Reconfig; rc != nil && rc.Confirm {
				if rc.Shard != 0 || rc.Epoch != w.st.Shard(0).Epoch {
					t.Fatalf("confirm %+v, shard %+v", rc, w.st.Shard(0))
				}
				n++
			}
		}
		return n
	}
	sh := w.st.Shard(0)
	req := RejoinRequest{Shard: 0, Replica: control.Replica{ID: "s9", Addr: "a9", Incarnation: 1}, Epoch: sh.Epoch, Held: 0}
	cmd, member, err := w.l.Rejoin(req, w.now)
	if err != nil || member || cmd.Reconfig == nil || cmd.Reconfig.Join == nil {
		t.Fatalf("rejoin in speculative order: %+v, %v, %v; want a Join", cmd, member, err)
	}
	w.apply(cmd, true)
	if sh := w.st.Shard(0); sh.Epoch != 2 || len(sh.Replicas) != 2 || !sh.Replicas[1].Pending {
		t.Fatalf("after the join %+v, want s9 pending in epoch 2", sh)
	}
	if n := confirms(w.l.Step(w.now)); n != 0 {
		t.Fatal("confirmed before the primary reported in the new configuration")
	}
	if w.l.Report(Report{Shard: 0, Epoch: 1, Length: 0}, w.now) || confirms(w.l.Step(w.now)) != 0 {
		t.Fatal("a report of the configuration before the join vouched for the joined replica")
	}
	if !w.report(0, 0) {
		t.Fatal("a report that makes a confirm due is no news")
	}
	out := w.l.Step(w.now)
	if n := confirms(out); n != 1 {
		t.Fatalf("%d confirms after the primary reported, want 1", n)
	}
	w.report(0, 0)
	w.after(tord)
	if n := confirms(w.l.Step(w.now)); n != 0 {
		t.Fatalf("confirm proposed again (%d) while in flight", n)
	}
	w.after(timeout)
	out = w.l.Step(w.now)
	if n := confirms(out); n != 1 {
		t.Fatalf("%d confirms once the first went stale, want 1", n)
	}
	for _, c := range out.Propose {
		if c.Reconfig != nil && c.Reconfig.Confirm {
			w.apply(c, true)
		}
	}
	if sh := w.st.Shard(0); sh.Epoch != 2 || sh.Replicas[1].Pending {
		t.Fatalf("after the confirm %+v", sh)
	}
	w.report(0, 0)
	w.after(2 * timeout)
	if n := confirms(w.l.Step(w.now)); n != 0 {
		t.Fatalf("confirmed (%d) with no replica pending", n)
	}
}

// TestRejoinedReplicaIsNotTakenForItsPastLife checks that a replica that
// restarted and rejoined is not taken for failed for what the leader
// heard of its previous incarnation: its last beat before the crash, or
// one of that life arriving late, after the join. Its new incarnation's
// heartbeats may lag behind the join (a slow heartbeat stream); its
// silence counts from the join, and a newer incarnation still fails it.
func TestRejoinedReplicaIsNotTakenForItsPastLife(t *testing.T) {
	w := rejoinWorld(t)
	w.l.Beat("s0", 1, w.now)
	w.l.Beat("s1", 1, w.now) // heard before it crashed
	cmd, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 4}, w.now)
	if err != nil {
		t.Fatal(err)
	}
	w.apply(cmd, true)
	if sh := w.st.Shard(0); sh.Epoch != 3 || len(sh.Replicas) != 2 {
		t.Fatalf("shard after the join %+v", sh)
	}
	// Detect runs every quarter timeout, as the ordering server runs it.
	quiet := func(why string) {
		t.Helper()
		w.l.Beat("s0", 1, w.now)
		if got := w.reconfigs(); len(got) != 0 {
			t.Fatalf("at %v: proposed %+v %s", w.now.Sub(t0), got, why)
		}
	}
	for range 2 {
		w.after(timeout / 4)
		quiet("for a beat heard before the restart")
	}
	w.l.Beat("s1", 2, w.now)
	w.l.Beat("s1", 1, w.now) // late, from before the crash
	for range 2 {
		w.after(timeout / 4)
		quiet("for a late beat of the past life")
	}
	// A timeout after the join: s1 was last heard, as itself, half a
	// timeout ago.
	w.after(1)
	quiet("though s1 was heard half a timeout ago (the late beat hid it)")
	w.l.Beat("s1", 3, w.now)
	got := w.reconfigs()
	if len(got) != 1 || got[0].Epoch != 3 || len(got[0].Remove) != 1 || got[0].Remove[0] != "s1" {
		t.Fatalf("proposed %+v, want s1 (restarted again) removed at epoch 3", got)
	}
}

// TestRejoinRefusesAFullConfiguration: a shard holds at most
// control.ReplicasMax replicas; the leader says so to a new server.
func TestRejoinRefusesAFullConfiguration(t *testing.T) {
	st := control.New("test")
	st.Apply(control.Command{Register: &control.RegisterCommand{Group: "g", Replicas: []control.Replica{
		{ID: "s0", Addr: "a0", Incarnation: 1}, {ID: "s1", Addr: "a1", Incarnation: 1}, {ID: "s2", Addr: "a2", Incarnation: 1}}}})
	w := &world{t: t, st: st, now: t0, ids: map[*control.CutCommand]string{}}
	w.l = NewLeader(NewEager(tord), timeout, st, w.now, idPrefix)
	w.settle()
	cmd, member, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: control.Replica{ID: "s3", Addr: "a3", Incarnation: 1}, Epoch: 1}, w.now)
	if !errors.Is(err, ErrRejoinStale) || member || cmd.Reconfig != nil {
		t.Fatalf("join of a fourth replica: %+v member=%v err=%v, want a refusal", cmd, member, err)
	}
}

// TestConfirmRejoinClearsOnlyThatPendingReplicaInItsConfiguration: a lazy
// joiner's word that it caught up is taken for the configuration it names
// only, and only while it is pending there.
func TestConfirmRejoinClearsOnlyThatPendingReplicaInItsConfiguration(t *testing.T) {
	w := rejoinWorld(t)
	w.st.Lazy = &lazy.SeqConfig{View: 1, Replicas: []lazy.ReplicaID{1}, Leader: 1}
	cmd, _, err := w.l.Rejoin(RejoinRequest{Shard: 0, Replica: s1Again, Epoch: 2, Held: 4}, w.now)
	if err != nil {
		t.Fatal(err)
	}
	if ev, ok := w.st.Apply(cmd); !ok || !ev.MembershipChanged || !w.st.Shard(0).Replicas[1].Pending {
		t.Fatalf("the lazy join is not pending: %+v", w.st.Shard(0))
	}
	for name, c := range map[string]struct {
		shard   cut.ShardID
		replica string
		epoch   uint64
	}{
		"old configuration": {0, "s1", 2},
		"unknown shard":     {7, "s1", 3},
		"not a member":      {0, "s9", 3},
	} {
		if _, _, err := w.l.ConfirmRejoin(c.shard, c.replica, c.epoch); err == nil {
			t.Errorf("%s: confirmed", name)
		}
	}
	if _, done, err := w.l.ConfirmRejoin(0, "s0", 3); err != nil || !done {
		t.Fatalf("a replica not pending: done %v, %v", done, err)
	}
	cmd, done, err := w.l.ConfirmRejoin(0, "s1", 3)
	if err != nil || done || cmd.Reconfig == nil || !cmd.Reconfig.Confirm || cmd.Reconfig.Vouched != "s1" {
		t.Fatalf("confirm: %+v, done %v, %v", cmd, done, err)
	}
	if ev, ok := w.st.Apply(cmd); !ok || !ev.MembershipChanged || w.st.Shard(0).Replicas[1].Pending || w.st.Shard(0).Epoch != 3 {
		t.Fatalf("after the confirm: %+v", w.st.Shard(0))
	}
}
