package order

import (
	"slices"
	"testing"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
)

func newEagerWorld(t *testing.T, shards int) *world {
	return newWorld(t, control.New("test"), shards, NewEager(tord))
}

// TestEagerProposesWhenAReportGrows checks that a cut is proposed only when
// a shard reported more than the last cut holds, with every shard's
// reported length.
func TestEagerProposesWhenAReportGrows(t *testing.T) {
	w := newEagerWorld(t, 2)
	if out := w.l.Step(w.now); len(out.Propose) != 0 || out.Wake != 0 {
		t.Fatalf("with no reports: %+v, want nothing and no wake-up", out)
	}
	if !w.report(0, 5) {
		t.Fatal("a longer report is not news")
	}
	w.report(1, 2)
	c := w.oneCut(w.l.Step(w.now))
	if want := []cut.Length{{Shard: 0, Length: 5}, {Shard: 1, Length: 2}}; !slices.Equal(c.Lengths, want) || c.Force {
		t.Fatalf("cut %+v, want lengths %v", c, want)
	}
	w.apply(control.Command{Cut: c}, true)
	if w.report(0, 5) {
		t.Fatal("a repeated report is news")
	}
	w.after(10 * tord)
	w.none(w.l.Step(w.now))
	w.report(1, 3)
	if c := w.oneCut(w.l.Step(w.now)); c.Lengths[1].Length != 3 {
		t.Fatalf("cut %+v, want shard 1 at 3", c)
	}
}

// TestEagerPacesAtTheOrderingInterval checks that while a cut is in flight
// further cuts come at most one per ordering interval, and that the leader
// is told to wake when the interval is over.
func TestEagerPacesAtTheOrderingInterval(t *testing.T) {
	w := newEagerWorld(t, 1)
	w.report(0, 1)
	out := w.l.Step(w.now)
	w.oneCut(out)
	if out.Wake != tord {
		t.Fatalf("wake after a cut %v, want the ordering interval %v", out.Wake, tord)
	}
	w.after(tord / 4)
	w.report(0, 2)
	out = w.l.Step(w.now)
	w.none(out)
	if out.Wake != tord*3/4 {
		t.Fatalf("wake %v, want the rest of the interval %v", out.Wake, tord*3/4)
	}
	w.after(tord * 3 / 4)
	if c := w.oneCut(w.l.Step(w.now)); c.Lengths[0].Length != 2 {
		t.Fatalf("cut %+v, want length 2", c)
	}
}

// TestEagerCutsAtOnceWhenNothingIsInFlight checks that a report that finds
// no cut in flight is cut at once, AtOnceCutSpacing after the last cut:
// there is nothing to batch it with, so an interval tick would only add
// latency.
func TestEagerCutsAtOnceWhenNothingIsInFlight(t *testing.T) {
	w := newEagerWorld(t, 2)
	w.report(0, 1)
	w.apply(control.Command{Cut: w.oneCut(w.l.Step(w.now))}, true)
	for i := range uint64(5) {
		w.after(AtOnceCutSpacing(tord))
		if !w.report(1, i+1) {
			t.Fatal("a longer report is not news")
		}
		c := w.oneCut(w.l.Step(w.now))
		if want := []cut.Length{{Shard: 0, Length: 1}, {Shard: 1, Length: i + 1}}; !slices.Equal(c.Lengths, want) {
			t.Fatalf("cut %+v, want lengths %v", c, want)
		}
		w.apply(control.Command{Cut: c}, true)
	}
}

// TestEagerSpacesAtOnceCuts checks that a sparse report arriving sooner
// than AtOnceCutSpacing after the last cut waits until
// then, not for the whole interval: each cut costs CPU whatever it
// carries, and reports that come that close together can share one.
func TestEagerSpacesAtOnceCuts(t *testing.T) {
	w := newEagerWorld(t, 2)
	w.report(0, 1)
	w.apply(control.Command{Cut: w.oneCut(w.l.Step(w.now))}, true)
	spacing := AtOnceCutSpacing(tord)
	w.after(spacing / 5)
	w.report(1, 1)
	out := w.l.Step(w.now)
	w.none(out)
	if out.Wake != spacing*4/5 {
		t.Fatalf("wake %v, want the rest of the spacing %v", out.Wake, spacing*4/5)
	}
	w.after(spacing / 5)
	w.report(0, 2)
	w.none(w.l.Step(w.now))
	w.after(spacing * 3 / 5)
	c := w.oneCut(w.l.Step(w.now))
	if want := []cut.Length{{Shard: 0, Length: 2}, {Shard: 1, Length: 1}}; !slices.Equal(c.Lengths, want) {
		t.Fatalf("cut %+v, want both reports in it %v", c, want)
	}
}

// TestEagerBatchesWhileACutIsInFlight checks the group commit: reports that
// arrive while a cut awaits commit wait for it, and its commit (news)
// releases them in one cut before the interval is over, as they are few
// (a record per shard) and the cut in flight went out AtOnceCutSpacing
// ago.
func TestEagerBatchesWhileACutIsInFlight(t *testing.T) {
	w := newEagerWorld(t, 2)
	w.report(0, 1)
	first := w.oneCut(w.l.Step(w.now))
	w.after(tord / 10)
	w.report(0, 2)
	out := w.l.Step(w.now)
	w.none(out)
	if out.Wake != tord*9/10 {
		t.Fatalf("wake %v while a cut is in flight, want the rest of the interval %v", out.Wake, tord*9/10)
	}
	w.after(tord / 10)
	w.report(1, 1)
	w.none(w.l.Step(w.now))
	w.after(AtOnceCutSpacing(tord))
	if !w.apply(control.Command{Cut: first}, true) {
		t.Fatal("the commit of the cut in flight is not news")
	}
	c := w.oneCut(w.l.Step(w.now))
	if want := []cut.Length{{Shard: 0, Length: 2}, {Shard: 1, Length: 1}}; !slices.Equal(c.Lengths, want) {
		t.Fatalf("cut %+v, want the batched lengths %v", c, want)
	}
}

// TestEagerFullBatchWaitsForTheInterval checks that reports adding more
// than SparseRecordsPerShardMax records per shard are not cut at once even
// with nothing in flight: a load that fills cuts gets one per interval.
func TestEagerFullBatchWaitsForTheInterval(t *testing.T) {
	const shards = 2
	w := newEagerWorld(t, shards)
	w.report(0, 1)
	w.apply(control.Command{Cut: w.oneCut(w.l.Step(w.now))}, true)
	w.after(tord / 4)
	w.report(0, 1+SparseRecordsPerShardMax*shards+1)
	out := w.l.Step(w.now)
	w.none(out)
	if out.Wake != tord*3/4 {
		t.Fatalf("wake %v with a full batch, want the rest of the interval %v", out.Wake, tord*3/4)
	}
	w.after(tord * 3 / 4)
	full := uint64(1 + SparseRecordsPerShardMax*shards + 1)
	c := w.oneCut(w.l.Step(w.now))
	if c.Lengths[0].Length != full {
		t.Fatalf("cut %+v, want shard 0 at %d", c, full)
	}
	w.apply(control.Command{Cut: c}, true)
	// A batch one record smaller goes at once.
	w.after(AtOnceCutSpacing(tord))
	w.report(0, full+SparseRecordsPerShardMax*shards)
	if c := w.oneCut(w.l.Step(w.now)); c.Lengths[0].Length != full+SparseRecordsPerShardMax*shards {
		t.Fatalf("cut %+v, want shard 0 at %d", c, full+SparseRecordsPerShardMax*shards)
	}
}

// TestEagerPipelinedCutsDoNotRepeat checks that a cut in flight is not
// proposed again while it awaits commit.
func TestEagerPipelinedCutsDoNotRepeat(t *testing.T) {
	w := newEagerWorld(t, 1)
	w.report(0, 5)
	w.oneCut(w.l.Step(w.now))
	w.after(tord)
	if out := w.l.Step(w.now); len(out.Propose) != 0 || out.Wake != 0 {
		t.Fatalf("the cut in flight was proposed again: %+v", out)
	}
	w.report(0, 6)
	if c := w.oneCut(w.l.Step(w.now)); c.Lengths[0].Length != 6 {
		t.Fatalf("cut %+v, want length 6", c)
	}
}

// fill proposes cutsInflightMax cuts, one per interval, none committed.
func (w *world) fill() []*control.CutCommand {
	w.t.Helper()
	var out []*control.CutCommand
	for i := range cutsInflightMax {
		w.report(0, uint64(i+1))
		out = append(out, w.oneCut(w.l.Step(w.now)))
		w.after(tord)
	}
	return out
}

// TestEagerInflightBound checks that no more than cutsInflightMax cuts
// await commit, and that a commit of the leader's own cut frees a slot
// (another replica's does not).
func TestEagerInflightBound(t *testing.T) {
	w := newEagerWorld(t, 1)
	sent := w.fill()
	w.report(0, 10)
	out := w.l.Step(w.now)
	w.none(out)
	if out.Wake != tord {
		t.Fatalf("wake with every slot taken %v, want %v", out.Wake, tord)
	}
	if w.apply(control.Command{Cut: &control.CutCommand{Lengths: []cut.Length{{Shard: 0, Length: 1}}}}, false) {
		t.Fatal("another replica's cut is news")
	}
	w.none(w.l.Step(w.now))
	if !w.apply(control.Command{Cut: sent[0]}, true) {
		t.Fatal("the commit of an own cut is not news")
	}
	if c := w.oneCut(w.l.Step(w.now)); c.Lengths[0].Length != 10 {
		t.Fatalf("cut %+v, want length 10", c)
	}
}

// TestEagerStaleSlotsFreed checks that cuts that never commit free their
// slots proposalStaleAfter after the newest, and that what they carried is
// proposed again.
func TestEagerStaleSlotsFreed(t *testing.T) {
	w := newEagerWorld(t, 1)
	w.fill()
	newest := w.now.Add(-tord)
	w.now = newest.Add(proposalStaleAfter)
	w.none(w.l.Step(w.now))
	w.after(1)
	if c := w.oneCut(w.l.Step(w.now)); c.Lengths[0].Length != cutsInflightMax {
		t.Fatalf("cut %+v, want the lost length %d again", c, cutsInflightMax)
	}
}

// TestEagerFailedProposalFreesItsSlot checks that a cut Raft refused frees
// its slot and is proposed again at the next interval.
func TestEagerFailedProposalFreesItsSlot(t *testing.T) {
	w := newEagerWorld(t, 1)
	sent := w.fill()
	w.none(w.l.Step(w.now))
	w.l.Failed(w.proposal(sent[2]))
	if c := w.oneCut(w.l.Step(w.now)); c.Lengths[0].Length != cutsInflightMax {
		t.Fatalf("cut %+v, want the failed length %d again", c, cutsInflightMax)
	}
}

// TestEagerFinalizingForcesCuts checks that while a shard is finalizing the
// leader proposes forced cuts every interval without new reports, until
// the shard is finalized.
func TestEagerFinalizingForcesCuts(t *testing.T) {
	w := newEagerWorld(t, 2)
	w.report(0, 1)
	w.report(1, 1)
	w.apply(control.Command{Cut: w.oneCut(w.l.Step(w.now))}, true)
	w.apply(control.Command{Finalize: &control.FinalizeCommand{Shard: 1, GraceCuts: 2}}, false)
	for i := range 2 {
		w.after(tord)
		c := w.oneCut(w.l.Step(w.now))
		if !c.Force {
			t.Fatalf("cut %d while finalizing %+v is not forced", i, c)
		}
		w.apply(control.Command{Cut: c}, true)
	}
	if sh := w.st.Shard(1); sh.State != control.Finalized {
		t.Fatalf("shard 1 is %v after its grace cuts", sh.State)
	}
	w.after(tord)
	if out := w.l.Step(w.now); len(out.Propose) != 0 || out.Wake != 0 {
		t.Fatalf("after the final cut: %+v, want nothing", out)
	}
}

// TestEagerExpiredCutFreesNoSlot checks that a cut that commits after its
// slot expired frees no slot of a newer cut: at most cutsInflightMax cuts
// are in flight at once.
func TestEagerExpiredCutFreesNoSlot(t *testing.T) {
	w := newEagerWorld(t, 1)
	stale := w.fill()
	w.after(proposalStaleAfter)
	w.report(0, 10)
	w.oneCut(w.l.Step(w.now))
	for _, c := range stale {
		if w.apply(control.Command{Cut: c}, true) {
			t.Fatalf("the late commit of the expired cut %+v is news", c)
		}
	}
	more := 0
	for i := range cutsInflightMax {
		w.after(tord)
		w.report(0, uint64(11+i))
		more += len(w.cuts(w.l.Step(w.now).Propose))
	}
	if more != cutsInflightMax-1 {
		t.Fatalf("%d more cuts proposed beside the one in flight, want %d", more, cutsInflightMax-1)
	}
}
