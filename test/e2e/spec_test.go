package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/config"
)

// Bounds of TestSpecProcess.
const (
	specWindowCuts = 20
	// specInterval sets the straggler threshold (ten intervals) above
	// specReportDelay.
	specInterval = 10 * time.Millisecond
	// specLoadWorkers append to shard b at specLoadPace each before it
	// is killed.
	specLoadWorkers = 8
	specLoadPace    = 2 * time.Millisecond
	// specLoadAcks is how many of them are acknowledged before the kill.
	specLoadAcks = 100
	// specReportDelay holds back b1's reports: well under a straggler's
	// delay at specInterval, but long enough that what b delivers stays
	// speculative for a while.
	specReportDelay = 60 * time.Millisecond
	specBurst       = 400
	specAppenders   = 3
)

// rollbackApp is the downstream application of SpecLog's Figure 6: it
// computes over speculative deliveries at once (here: a count per record
// key), keeps an undo log of what is not confirmed, and on fail_spec(k)
// undoes its changes for positions from k on before recomputing from the
// redelivered records.
type rollbackApp struct {
	name string
	mu   sync.Mutex
	// state is the application state; undo holds its unconfirmed changes
	// in position order; applied is the sequence computed over.
	state   map[string]int
	undo    []client.Entry
	applied []client.Entry
	// Counters of the speculation's outcome. firstViewMax is the highest
	// position delivered speculatively before any whole-shard failure.
	speculative, rollbacks, undone int
	firstViewMax                   uint64
	err                            error
	done                           chan struct{}
}

func runRollbackApp(ctx context.Context, name string, sub *client.SpecSubscription) *rollbackApp {
	a := &rollbackApp{name: name, state: map[string]int{}, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for {
			ev, err := sub.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					a.mu.Lock()
					a.err = err
					a.mu.Unlock()
				}
				return
			}
			a.mu.Lock()
			a.handle(ev)
			a.mu.Unlock()
		}
	}()
	return a
}

func (a *rollbackApp) handle(ev client.Event) {
	switch ev.Kind {
	case client.EventDeliver:
		a.state[ev.Entry.Record.Key]++
		a.applied = append(a.applied, ev.Entry)
		if ev.Speculative {
			a.speculative++
			a.undo = append(a.undo, ev.Entry)
			if ev.View == 0 {
				a.firstViewMax = max(a.firstViewMax, ev.Entry.Position)
			}
		}
	case client.EventConfirm:
		i := 0
		for i < len(a.undo) && a.undo[i].Position < ev.Position {
			i++
		}
		a.undo = a.undo[i:]
	case client.EventFail:
		a.rollbacks++
		for len(a.undo) > 0 && a.undo[len(a.undo)-1].Position >= ev.Position {
			e := a.undo[len(a.undo)-1]
			a.state[e.Record.Key]--
			a.undo = a.undo[:len(a.undo)-1]
			a.undone++
		}
		for len(a.applied) > 0 && a.applied[len(a.applied)-1].Position >= ev.Position {
			a.applied = a.applied[:len(a.applied)-1]
		}
	}
}

func (a *rollbackApp) snapshot() (applied []client.Entry, state map[string]int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]client.Entry(nil), a.applied...), maps.Clone(a.state), a.err
}

// agrees checks that the application computed what the confirmed order
// gives up to position last, which it must have reached: its sequence
// starts with the order's (a speculative tail may run past it) and, if it
// holds no more, its state is the order's.
func (a *rollbackApp) agrees(t *testing.T, want []client.Entry, last uint64) {
	t.Helper()
	if !eventually(t, procCatchUpTimeout, func() bool { return a.reached(last) }) {
		applied, _, err := a.snapshot()
		t.Errorf("%s did not reach position %d within %v: %d records applied, err %v", a.name, last, procCatchUpTimeout, len(applied), err)
		return
	}
	applied, state, err := a.snapshot()
	if err != nil {
		t.Errorf("%s: %v", a.name, err)
		return
	}
	for i := range min(len(applied), len(want)) {
		x, y := applied[i], want[i]
		if x.Position != y.Position || string(x.Record.Payload) != string(y.Record.Payload) {
			t.Errorf("%s disagrees with the confirmed order at index %d: (pos %d, %q) vs (pos %d, %q)",
				a.name, i, x.Position, x.Record.Payload, y.Position, y.Record.Payload)
			return
		}
	}
	wantState := map[string]int{}
	for _, e := range want {
		wantState[e.Record.Key]++
	}
	if len(applied) == len(want) && !maps.Equal(state, wantState) {
		t.Errorf("%s computed state %v, the confirmed order gives %v", a.name, state, wantState)
	}
}

// speculatingOn reports whether the app computed on a record of shard that
// is not confirmed yet.
func (a *rollbackApp) speculatingOn(shard uint32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.undo {
		if e.Shard == shard {
			return true
		}
	}
	return false
}

// reached reports whether the app computed over position pos or beyond.
func (a *rollbackApp) reached(pos uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.applied) > 0 && a.applied[len(a.applied)-1].Position >= pos
}

// TestSpecProcess runs a speculative-mode cluster as 7 processes: steady
// appends with a burst on one shard, a shard added and removed, then both
// servers of a shard killed with kill -9 (a whole-shard failure, so a view
// change). Two rollback applications consume speculatively and one eager
// subscriber consumes confirmed records. It checks that the applications'
// final sequences and states equal the eager order, and that every
// acknowledged append sits there exactly once at its acknowledged position.
func TestSpecProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 7 server processes; skipped under -short")
	}
	testStart := time.Now()
	bin := augurBinary(t)
	ctx := t.Context()
	// Its sparse load would have the leader fall back to eager cuts, and
	// the test needs speculation to void.
	pc := newProcCluster(t, bin, specInterval, fmt.Sprintf("mode: spec\nwindow_cuts: %d\nno_eager_fallback: true\n", specWindowCuts))
	// b1 reports late (but is no straggler): what it delivers stays
	// speculative for a while, so its death voids some speculation.
	for i := range pc.cfg.Storage {
		if pc.cfg.Storage[i].ID == "b1" {
			pc.cfg.Storage[i].ReportDelay = config.Duration(specReportDelay)
		}
	}
	if err := pc.cfg.Save(pc.cfgPath); err != nil {
		t.Fatal(err)
	}
	pc.startAll()
	admin := pc.dial(ctx)
	st := waitStatus(t, ctx, admin, procReadyTimeout, "cluster ready", func(st *pb.StatusResponse) string {
		if st.Spec == nil {
			return "the cluster is not in speculative mode"
		}
		return clusterReady(st, "a", "b")
	})
	shardA, shardB := liveShard(st, "a").Id, liveShard(st, "b").Id
	t.Logf("cluster ready after %v: shards a=%d b=%d", time.Since(testStart).Round(time.Millisecond), shardA, shardB)

	var apps []*rollbackApp
	for _, name := range []string{"app1", "app2"} {
		sub, err := pc.dial(ctx).SubscribeSpec(ctx, 0, client.Filter{}, false)
		if err != nil {
			t.Fatalf("speculative subscription: %v", err)
		}
		t.Cleanup(sub.Close)
		apps = append(apps, runRollbackApp(ctx, name, sub))
	}
	eager := collect(ctx, "eager", subscribe(t, ctx, pc.dial(ctx)))

	clk := newClock()
	h := &history{}
	opCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range specAppenders {
		cl := pc.dial(ctx)
		wg.Go(func() { appendPaced(opCtx, stop, cl, h, clk, i, procAppendPace) })
	}
	waitAcks(t, h, clk, procPhaseAcksMin, "steady")

	// A burst on shard a: specBurst appends at once, on top of the steady
	// load. Shard b lags behind and is lag-fixed; nothing misspeculates.
	burstCl := pc.dial(ctx)
	var burst sync.WaitGroup
	for n := range specBurst {
		payload := fmt.Sprintf("burst-%d", n)
		h.begin()
		burst.Go(func() {
			call := clk.now()
			ack, err := burstCl.AppendToShard(opCtx, client.Record{Key: "burst", Payload: []byte(payload)}, shardA)
			h.addAppend(appendOp{worker: specAppenders, payload: payload, call: call, ret: clk.now(), ack: ack, err: err})
		})
	}
	burst.Wait()
	t.Logf("at %v: burst of %d on shard %d acknowledged", clk.now().Round(time.Millisecond), specBurst, shardA)

	// A shard joins group a at the next window, takes appends, and leaves
	// at the end of a later one.
	added, err := admin.AddShard(ctx, "a")
	if err != nil {
		t.Fatalf("add shard: %v", err)
	}
	if !eventually(t, procPhaseTimeout, func() bool { return h.ackedBy(added) > 0 }) {
		t.Fatalf("added shard %d acknowledged no append within %v", added, procPhaseTimeout)
	}
	if err := admin.FinalizeShard(ctx, added, 0); err != nil {
		t.Fatalf("finalize shard %d: %v", added, err)
	}
	waitStatus(t, ctx, admin, procPhaseTimeout, "added shard left", func(st *pb.StatusResponse) string {
		if sh := shardByID(st, added); sh == nil || sh.State != pb.ShardState_SHARD_FINALIZED {
			return fmt.Sprintf("shard %d is %v", added, sh)
		}
		return ""
	})
	t.Logf("at %v: shard %d joined, took %d appends and left", clk.now().Round(time.Millisecond), added, h.ackedBy(added))
	for _, a := range apps {
		if _, _, err := a.snapshot(); err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		a.mu.Lock()
		rollbacks := a.rollbacks
		a.mu.Unlock()
		if rollbacks != 0 {
			t.Fatalf("%s rolled back %d times before any shard failed", a.name, rollbacks)
		}
	}

	// Kill shard a's primary: the shard fails over to its backup and keeps
	// its id, with no view change and no misspeculation, and appends go on.
	before := shardByID(st, shardA)
	t.Logf("at %v: kill -9 %s, primary of shard %d", clk.now().Round(time.Millisecond), before.Replicas[0].Id, shardA)
	pc.kill9(before.Replicas[0].Id)
	waitStatus(t, ctx, admin, procPhaseTimeout, "shard a failed over", func(st *pb.StatusResponse) string {
		sh := shardByID(st, shardA)
		if sh == nil || sh.State != pb.ShardState_SHARD_LIVE || sh.Epoch <= before.Epoch || len(sh.Replicas) == 0 || sh.Replicas[0].Id == before.Replicas[0].Id {
			return fmt.Sprintf("shard %d is %v", shardA, sh)
		}
		return ""
	})
	waitAcks(t, h, clk, procPhaseAcksMin, "after shard a's failover")
	if st, err := admin.Status(ctx); err != nil || st.Spec == nil || st.Spec.View != 0 {
		t.Fatalf("a replica's failure changed the view: %v %v", st.GetSpec(), err)
	}
	for _, a := range apps {
		a.mu.Lock()
		rollbacks := a.rollbacks
		a.mu.Unlock()
		if rollbacks != 0 {
			t.Fatalf("%s rolled back %d times after a replica's failure", a.name, rollbacks)
		}
	}
	t.Logf("at %v: shard %d failed over, no view change, no rollback", clk.now().Round(time.Millisecond), shardA)

	// Kill shard b whole, both its servers, under load: with its reports
	// held back, records it made durable and subscribers computed on are
	// not yet in a cut. The leader starts a new view; speculation from
	// confirmed-gp on fails, the applications roll back, and appends move
	// to shard a. The burst's appends in flight end with an unknown
	// outcome: no copy of the shard is left to settle them.
	for i := range specLoadWorkers {
		cl := pc.dial(ctx)
		worker := specAppenders + 1 + i
		wg.Go(func() {
			tick := time.NewTicker(specLoadPace)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-opCtx.Done():
					return
				case <-tick.C:
				}
				payload := fmt.Sprintf("b%d-%d", worker, n)
				h.begin()
				call := clk.now()
				ack, err := cl.AppendToShard(opCtx, client.Record{Key: "b-load", Payload: []byte(payload)}, shardB)
				h.addAppend(appendOp{worker: worker, payload: payload, call: call, ret: clk.now(), ack: ack, err: err})
			}
		})
	}
	loadAcked := func() int {
		n := 0
		appends, _ := h.snapshot()
		for _, op := range appends {
			if op.worker > specAppenders && op.err == nil {
				n++
			}
		}
		return n
	}
	if !eventually(t, procPhaseTimeout, func() bool { return loadAcked() >= specLoadAcks }) {
		t.Fatalf("the load on shard %d got %d acknowledgements within %v, want %d", shardB, loadAcked(), procPhaseTimeout, specLoadAcks)
	}
	// Kill when both applications computed on a record of shard b that is
	// not confirmed yet.
	if !eventually(t, procPhaseTimeout, func() bool {
		for _, a := range apps {
			if !a.speculatingOn(shardB) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the applications never held an unconfirmed record of shard %d", shardB)
	}
	ackedBefore, _ := h.counts()
	t.Logf("at %v (%d acked): kill -9 b1 and b2 (shard %d) under load", clk.now().Round(time.Millisecond), ackedBefore, shardB)
	pc.kill9("b1")
	pc.kill9("b2")
	var voidFrom uint64
	waitStatus(t, ctx, admin, procPhaseTimeout, "view change", func(st *pb.StatusResponse) string {
		if st.Spec == nil || st.Spec.View == 0 || len(st.Spec.Void) == 0 {
			return "no view change yet"
		}
		voidFrom = st.Spec.Void[0].ConfirmedGp
		return ""
	})
	t.Logf("at %v: view change, positions from %d void", clk.now().Round(time.Millisecond), voidFrom)

	waitAcks(t, h, clk, procPhaseAcksMin, "after the whole-shard failure")
	t.Logf("at %v: %d appends acknowledged after the failure", clk.now().Round(time.Millisecond), procPhaseAcksMin)

	close(stop)
	drainAppends(t, h, &wg, giveUp, procDrainTimeout)
	t.Logf("at %v: appenders drained", clk.now().Round(time.Millisecond))
	appends, _ := h.snapshot()
	var last uint64
	for _, op := range appends {
		if op.err == nil {
			last = max(last, op.ack.Position)
		}
	}
	// Appends to shard b in flight when it died cannot be settled: no
	// copy of it is left to say whether they were stored. Later appends
	// to shard b by name fail: it is finalized. Every other append
	// returns.
	failed := 0
	for _, op := range appends {
		if op.err != nil {
			failed++
			if !errors.Is(op.err, client.ErrOutcomeUnknown) && !(op.worker > specAppenders && errors.Is(op.err, client.ErrShardFinalized)) {
				t.Errorf("append %q failed: %v", op.payload, op.err)
			}
		}
	}
	t.Logf("%d appends, %d failed, per shard %v", len(appends), failed, h.ackedByShard())

	if !eventually(t, procCatchUpTimeout, func() bool {
		es := eager.entries()
		done := len(es) > 0 && es[len(es)-1].Position >= last
		for _, a := range apps {
			done = done && a.reached(last)
		}
		return done
	}) {
		var at []string
		if es := eager.entries(); len(es) > 0 {
			at = append(at, fmt.Sprintf("eager at %d (err %v)", es[len(es)-1].Position, eager.failed()))
		}
		for _, a := range apps {
			applied, _, err := a.snapshot()
			if len(applied) > 0 {
				at = append(at, fmt.Sprintf("%s at %d (err %v)", a.name, applied[len(applied)-1].Position, err))
			}
		}
		st, _ := admin.Status(ctx)
		t.Fatalf("subscribers did not reach position %d within %v: %v; spec %v", last, procCatchUpTimeout, at, st.GetSpec())
	}
	want := eager.entries()
	checkLog(t, "eager", want, appends, false)
	wantState := map[string]int{}
	for _, e := range want {
		wantState[e.Record.Key]++
	}
	for _, a := range apps {
		applied, state, err := a.snapshot()
		if err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		// Compare the prefix both have: the app may be ahead of the
		// eager subscriber by speculative records.
		n := min(len(applied), len(want))
		for i := range n {
			x, y := applied[i], want[i]
			if x.Position != y.Position || string(x.Record.Payload) != string(y.Record.Payload) {
				t.Fatalf("%s disagrees with the eager order at index %d: (pos %d, %q) vs (pos %d, %q)",
					a.name, i, x.Position, x.Record.Payload, y.Position, y.Record.Payload)
			}
		}
		if len(applied) == len(want) && !maps.Equal(state, wantState) {
			t.Fatalf("%s computed state %v, the eager order gives %v", a.name, state, wantState)
		}
		a.mu.Lock()
		t.Logf("%s: %d records, %d delivered speculatively, %d rollbacks undoing %d records", a.name, len(applied), a.speculative, a.rollbacks, a.undone)
		// The applications held unconfirmed records of shard b when it
		// died; those the failure voided (delivered at or past its void
		// point) must be rolled back. A cut may still have confirmed all
		// they held (an application behind under load): then nothing is
		// void for them.
		switch {
		case a.firstViewMax >= voidFrom && a.rollbacks == 0:
			t.Errorf("%s delivered position %d speculatively before the view change voided positions from %d, and never rolled back", a.name, a.firstViewMax, voidFrom)
		case a.firstViewMax < voidFrom:
			t.Logf("%s had delivered speculatively only up to %d before the void point %d: nothing to roll back", a.name, a.firstViewMax, voidFrom)
		}
		a.mu.Unlock()
	}
	t.Logf("done in %v", time.Since(testStart).Round(time.Millisecond))
}
