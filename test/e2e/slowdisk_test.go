package e2e

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/check"
	"github.com/augur-log/augur/internal/synctrace"
)

// Bounds of TestSlowDisk.
const (
	// slowDiskDelay is added before every fsync of the slow server.
	slowDiskDelay = 100 * time.Millisecond
	// slowDiskAcksMin is how many appends each shard must acknowledge.
	slowDiskAcksMin = 60
	// slowDiskAppenders append to each shard; with group commit several
	// appends share one slow fsync.
	slowDiskAppenders = 2
)

// TestSlowDisk runs the default durability settings (fsync: group) with
// every fsync of one backup (group a's second server) slowed by
// slowDiskDelay through the synctrace hook (AUGUR_SYNC_DELAY). An append
// is acknowledged only after every copy of its shard synced it, so group
// a's median append latency must carry the slow fsync (at least a quarter
// of it, since one fsync covers every append that arrived meanwhile)
// while group b's does not; nothing is lost or reordered, and the history
// passes internal/check.
func TestSlowDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 7 server processes; skipped under -short")
	}
	testStart := time.Now()
	bin := augurBinary(t)
	ctx := t.Context()
	pc := newProcClusterSettings(t, bin, time.Millisecond, "")
	slow := pc.cfg.Group("a")[1].ID
	pc.env = func(id string) []string {
		if id == slow {
			return []string{synctrace.DelayEnvVar + "=" + slowDiskDelay.String()}
		}
		return nil
	}
	pc.startAll()
	admin := pc.dial(ctx)
	st := waitStatus(t, ctx, admin, procReadyTimeout, "cluster ready", func(st *pb.StatusResponse) string {
		return clusterReady(st, "a", "b")
	})
	shardA, shardB := liveShard(st, "a").Id, liveShard(st, "b").Id
	t.Logf("cluster ready after %v: every fsync of %s (group a, shard %d) waits %v first",
		time.Since(testStart).Round(time.Millisecond), slow, shardA, slowDiskDelay)

	clk := newClock()
	h := &history{}
	sub := collect(ctx, "s1", subscribe(t, ctx, pc.dial(ctx)))
	opCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	worker := 0
	for _, shard := range []uint32{shardA, shardB} {
		for range slowDiskAppenders {
			cl, w := pc.dial(ctx), worker
			worker++
			wg.Go(func() { appendToShardPaced(opCtx, stop, cl, h, clk, w, shard, procAppendPace) })
		}
	}
	if !eventually(t, procPhaseTimeout, func() bool {
		return h.ackedBy(shardA) >= slowDiskAcksMin && h.ackedBy(shardB) >= slowDiskAcksMin
	}) {
		t.Fatalf("appends stalled: per shard %v", h.ackedByShard())
	}
	close(stop)
	drainAppends(t, h, &wg, giveUp, procDrainTimeout)
	appends, _ := h.snapshot()
	checkAppendsReturned(t, appends)

	medA, medB := medianLatency(appends, shardA), medianLatency(appends, shardB)
	t.Logf("median append latency: shard %d (slow %s) %v, shard %d %v; per shard %v",
		shardA, slow, medA.Round(time.Millisecond), shardB, medB.Round(time.Millisecond), h.ackedByShard())
	if medA < slowDiskDelay/4 || medA <= medB {
		t.Errorf("group a's appends were acknowledged in %v (median) with %s's fsyncs %v slow, group b's in %v: acknowledgements do not wait for every copy's fsync",
			medA.Round(time.Millisecond), slow, slowDiskDelay, medB.Round(time.Millisecond))
	}

	acked, _ := h.counts()
	n := int(h.tail())
	if n != acked {
		t.Errorf("%d appends acknowledged but the largest acknowledged position is %d: positions are not dense or are shared", acked, n-1)
	}
	waitCollectors(t, procCatchUpTimeout, n, sub)
	checkLog(t, sub.name, sub.entries(), appends, true)
	failOn(t, check.RealTime(checkAppends(appends)))
	checkLinearizable(t, appends, nil, true)
	pc.checkAlive()
	t.Logf("done in %v", time.Since(testStart).Round(time.Millisecond))
}

// medianLatency returns the median time from call to return of shard's
// acknowledged appends.
func medianLatency(appends []appendOp, shard uint32) time.Duration {
	var ls []time.Duration
	for _, op := range appends {
		if op.err == nil && op.ack.Shard == shard {
			ls = append(ls, op.ret-op.call)
		}
	}
	if len(ls) == 0 {
		return 0
	}
	slices.Sort(ls)
	return ls[len(ls)/2]
}
