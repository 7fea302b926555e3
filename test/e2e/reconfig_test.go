package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/check"
	"github.com/augur-log/augur/internal/devcluster"
)

// Workload and time bounds of TestReconfig.
const (
	reconfAppenders        = 4
	reconfOrderingInterval = time.Millisecond
	// reconfWarmup is left out of the steady-state window: connections
	// open and caches fill.
	reconfWarmup = 300 * time.Millisecond
	// reconfSteady is the steady-state window the reconfiguration gaps
	// are compared with.
	reconfSteady = 1500 * time.Millisecond
	// reconfAfter is how long appends go on after the finalization.
	reconfAfter = time.Second
	// reconfGraceCuts is how many cuts the finalized shard may still order.
	reconfGraceCuts = 5
	// reconfGapIntervals and reconfGapRatio bound the largest gap between
	// acknowledgements during the reconfiguration: at most the larger of
	// that many ordering intervals and that many steady-state gaps.
	reconfGapIntervals = 50
	reconfGapRatio     = 5
	reconfReadyTimeout = 20 * time.Second
	reconfStepTimeout  = 10 * time.Second
	// reconfUseTimeout bounds the wait for a new live shard's first ack.
	reconfUseTimeout   = 5 * time.Second
	reconfDrainTimeout = 60 * time.Second
	reconfCatchUp      = 30 * time.Second
	reconfLogTailLines = 60
)

func TestReconfig(t *testing.T) {
	testStart := time.Now()
	ctx := t.Context()
	logPath := filepath.Join(t.TempDir(), "servers.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logFile.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("--- last %d lines of the servers' log %s ---\n%s", reconfLogTailLines, logPath, logTail(string(data), reconfLogTailLines))
		}
	})
	dc, err := devcluster.Start(ctx, devcluster.Options{
		ClusterID:        "e2e-reconfig",
		Dir:              filepath.Join(t.TempDir(), "data"),
		Shards:           2,
		Replicas:         2,
		OrderingInterval: reconfOrderingInterval,
		Logger:           slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatalf("start the dev cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := dc.Close(); err != nil {
			t.Errorf("close the dev cluster: %v", err)
		}
	})
	readyCtx, cancel := context.WithTimeout(ctx, reconfReadyTimeout)
	err = dc.WaitReady(readyCtx)
	cancel()
	if err != nil {
		t.Fatalf("dev cluster not ready: %v", err)
	}
	dial := func() *client.Client {
		t.Helper()
		cl, err := dc.Dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	admin := dial()
	st, err := admin.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bShard := liveShard(st, "b")
	if bShard == nil {
		t.Fatalf("no live shard of group b: %v", st)
	}
	t.Logf("cluster ready after %v: leader %s, shards %v", time.Since(testStart).Round(time.Millisecond), st.LeaderId, st.Shards)

	clk := newClock()
	h := &history{}
	sub := collect(ctx, "s1", subscribe(t, ctx, dial()))
	opCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range reconfAppenders {
		cl := dial()
		wg.Go(func() { appendClosedLoop(opCtx, stop, cl, h, clk, i) })
	}

	// Steady state.
	steadyFrom := reconfWarmup
	if !eventually(t, reconfStepTimeout, func() bool { a, _ := h.counts(); return a > 0 && clk.now() >= steadyFrom+reconfSteady }) {
		t.Fatal("no append was acknowledged")
	}
	reconfFrom := clk.now()

	// Reconfiguration: a second shard in group a, a new group c.
	added, err := admin.AddShard(ctx, "a")
	if err != nil {
		t.Fatalf("add a shard to group a: %v", err)
	}
	t.Logf("at %v: added shard %d to group a", clk.now().Round(time.Millisecond), added)
	waitShardUsed(t, ctx, admin, h, added, "the shard added to group a")
	groupCtx, cancel := context.WithTimeout(ctx, reconfStepTimeout)
	err = dc.AddGroup(groupCtx, "c")
	cancel()
	if err != nil {
		t.Fatalf("add group c: %v", err)
	}
	st, err = admin.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cShard := liveShard(st, "c")
	if cShard == nil {
		t.Fatalf("AddGroup returned but group c has no live shard: %v", st)
	}
	t.Logf("at %v: group c formed shard %d", clk.now().Round(time.Millisecond), cShard.Id)
	waitShardUsed(t, ctx, admin, h, cShard.Id, "the shard of group c")

	// Finalize group b's shard; appends routed to it move elsewhere.
	finalizeAt := clk.now()
	if err := admin.FinalizeShard(ctx, bShard.Id, reconfGraceCuts); err != nil {
		t.Fatalf("finalize shard %d: %v", bShard.Id, err)
	}
	st = waitStatus(t, ctx, admin, reconfStepTimeout, fmt.Sprintf("shard %d finalized", bShard.Id), func(st *pb.StatusResponse) string {
		if sh := shardByID(st, bShard.Id); sh == nil || sh.State != pb.ShardState_SHARD_FINALIZED {
			return fmt.Sprintf("shard %d is %v", bShard.Id, sh)
		}
		return ""
	})
	finalizedAt := clk.now()
	final := shardByID(st, bShard.Id)
	t.Logf("at %v: shard %d finalized at cut %d with %d records (asked at %v)",
		finalizedAt.Round(time.Millisecond), final.Id, final.FinalCut, final.FinalLength, finalizeAt.Round(time.Millisecond))
	if !eventually(t, reconfStepTimeout, func() bool { return clk.now() >= finalizedAt+reconfAfter }) {
		t.Fatal("clock did not advance")
	}
	reconfTo := clk.now()
	close(stop)
	drainAppends(t, h, &wg, giveUp, reconfDrainTimeout)
	appends, _ := h.snapshot()
	acked, _ := h.counts()
	t.Logf("at %v: %d appends, %d acked, per shard %v", clk.now().Round(time.Millisecond), len(appends), acked, h.ackedByShard())
	checkAppendsReturned(t, appends)
	if acked == 0 {
		t.Fatal("no append was acknowledged")
	}

	// Appends never stopped: compare the largest gaps between acks.
	acks := h.ackTimes()
	steadyGap, steadyAt := maxGap(acks, steadyFrom, reconfFrom)
	reconfGap, reconfAt := maxGap(acks, reconfFrom, reconfTo)
	limit := max(reconfGapIntervals*reconfOrderingInterval, reconfGapRatio*steadyGap)
	t.Logf("largest gap between acks: steady %v (at %v, window %v..%v), reconfiguration %v (at %v, window %v..%v), limit %v",
		steadyGap, steadyAt.Round(time.Millisecond), steadyFrom, reconfFrom.Round(time.Millisecond),
		reconfGap, reconfAt.Round(time.Millisecond), reconfFrom.Round(time.Millisecond), reconfTo.Round(time.Millisecond), limit)
	if reconfGap > limit {
		t.Errorf("appends stalled for %v from %v during the reconfiguration; the limit is %v (steady-state gap %v)",
			reconfGap, reconfAt.Round(time.Millisecond), limit, steadyGap)
	}

	// The subscriber sees every acknowledged append once, at its position.
	n := int(h.tail())
	if n != acked {
		t.Errorf("%d appends acknowledged but the largest acknowledged position is %d: positions are not dense or are shared", acked, n-1)
	}
	waitCollectors(t, reconfCatchUp, n, sub)
	entries := sub.entries()
	log := checkLog(t, sub.name, entries, appends, true)
	failOn(t, check.RealTime(checkAppends(appends)))
	payloads := map[uint64]string{}
	for _, e := range log.Entries {
		payloads[e.Pos] = e.Record
	}

	// The finalized shard ordered exactly FinalLength records, acked none
	// beyond them, and took no append invoked after its finalization.
	var inLog []uint64
	for _, e := range entries {
		if e.Shard == final.Id {
			inLog = append(inLog, e.Position)
		}
	}
	if uint64(len(inLog)) != final.FinalLength {
		t.Errorf("the log holds %d records of finalized shard %d, its final length is %d", len(inLog), final.Id, final.FinalLength)
	}
	ackedByFinal := 0
	for _, op := range appends {
		if op.err != nil || op.ack.Shard != final.Id {
			continue
		}
		ackedByFinal++
		if op.call > finalizedAt {
			t.Errorf("append %q invoked at %v, after shard %d was finalized at %v, was acknowledged by it at position %d",
				op.payload, op.call, final.Id, finalizedAt, op.ack.Position)
		}
	}
	if uint64(ackedByFinal) > final.FinalLength {
		t.Errorf("finalized shard %d acknowledged %d appends, beyond its final length %d", final.Id, ackedByFinal, final.FinalLength)
	}

	// Its records stay readable.
	if len(inLog) == 0 {
		t.Errorf("finalized shard %d holds no records in the log", final.Id)
	} else {
		for _, pos := range []uint64{inLog[0], inLog[len(inLog)-1]} {
			rctx, cancel := context.WithTimeout(ctx, reconfStepTimeout)
			e, err := admin.Read(rctx, pos)
			cancel()
			switch {
			case err != nil:
				t.Errorf("read position %d of finalized shard %d: %v", pos, final.Id, err)
			case e.Position != pos || e.Shard != final.Id || string(e.Record.Payload) != payloads[pos]:
				t.Errorf("read position %d of finalized shard %d: got (pos %d, shard %d, %q), want %q",
					pos, final.Id, e.Position, e.Shard, e.Record.Payload, payloads[pos])
			}
		}
	}
	t.Logf("done in %v", time.Since(testStart).Round(time.Millisecond))
}

// waitShardUsed waits until shard is live and has acknowledged an append.
func waitShardUsed(t *testing.T, ctx context.Context, admin *client.Client, h *history, shard uint32, what string) {
	t.Helper()
	waitStatus(t, ctx, admin, reconfStepTimeout, what+" live", func(st *pb.StatusResponse) string {
		if sh := shardByID(st, shard); sh == nil || sh.State != pb.ShardState_SHARD_LIVE {
			return fmt.Sprintf("shard %d is %v", shard, sh)
		}
		return ""
	})
	if !eventually(t, reconfUseTimeout, func() bool { return h.ackedBy(shard) > 0 }) {
		t.Errorf("%s (shard %d) is live but acknowledged no append within %v", what, shard, reconfUseTimeout)
	}
}

// appendClosedLoop appends "w<worker>-<n>" back to back until stop is
// closed, recording each append.
func appendClosedLoop(ctx context.Context, stop <-chan struct{}, cl *client.Client, h *history, clk clock, worker int) {
	key := fmt.Sprintf("w%d", worker)
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		payload := fmt.Sprintf("w%d-%d", worker, n)
		h.begin()
		call := clk.now()
		ack, err := cl.Append(ctx, client.Record{Key: key, Payload: []byte(payload)})
		h.addAppend(appendOp{worker: worker, payload: payload, call: call, ret: clk.now(), ack: ack, err: err})
	}
}
