package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/check"
	"github.com/augur-log/augur/internal/config"
)

// newLazyProcCluster writes a lazy cluster file: 3 ordering replicas, two
// groups of two storage servers, two sequencing replicas.
func newLazyProcCluster(t *testing.T, bin string) *procCluster {
	t.Helper()
	return newProcClusterShape(t, bin, time.Millisecond, "mode: lazy\nfsync: interval\n",
		procShape{groupServers: config.DefaultGroupServers, sequencing: config.DefaultSequencingReplicas})
}

// lazyReady says what a lazy cluster still lacks to take appends.
func lazyReady(st *pb.StatusResponse) string {
	if why := clusterReady(st, "a", "b"); why != "" {
		return why
	}
	if lz := st.GetLazy(); lz.GetView() == 0 || lz.GetSealed() {
		return fmt.Sprintf("no open sequencing view (%v)", lz)
	}
	return ""
}

// readLazyPaced reads a random position below the durable tail every
// procReadPace: it waits, bounded by procReadTimeout, for stable-gp to
// cover it. A read that runs out of time is not an error of the log (the
// wait is bounded by design); it is counted and left out of the history.
func readLazyPaced(ctx context.Context, stop <-chan struct{}, cl *client.Client, h *history, clk clock, worker int, seed uint64, timedOut *int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	tick := time.NewTicker(procReadPace)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		tctx, cancel := context.WithTimeout(ctx, procStatusTimeout)
		tail, err := cl.CheckTail(tctx)
		cancel()
		if err != nil || tail == 0 {
			continue
		}
		pos := rng.Uint64N(tail)
		call := clk.now()
		rctx, cancel := context.WithTimeout(ctx, procReadTimeout)
		e, err := cl.Read(rctx, pos)
		cancel()
		ret := clk.now()
		switch {
		case err != nil && rctx.Err() != nil:
			*timedOut++
			continue
		case err == nil && e.Position != pos:
			err = fmt.Errorf("read of position %d returned the entry at position %d", pos, e.Position)
		}
		h.addRead(readOp{worker: worker, pos: pos, call: call, ret: ret, payload: string(e.Record.Payload), err: err})
	}
}

// TestLazyProcessFaults runs a lazy cluster as separate processes, with
// appenders, a reader and two subscribers, kill -9s the sequencing leader
// mid-run and restarts it, then kill -9s a shard's backup and restarts it,
// then the other shard's primary, and checks the history:
// every append returns, every acknowledged append is in each subscriber's
// log exactly once, the logs agree, real-time order holds, and porcupine
// finds the appends and reads linearizable. A lazy append's position is
// not in its acknowledgement; the checks take it from the log.
func TestLazyProcessFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 9 server processes; skipped under -short")
	}
	testStart := time.Now()
	bin := augurBinary(t)
	ctx := t.Context()
	pc := newLazyProcCluster(t, bin)
	pc.startAll()
	admin := pc.dial(ctx)
	st := waitStatus(t, ctx, admin, procReadyTimeout, "lazy cluster ready", lazyReady)
	pc.checkAlive()
	t.Logf("cluster ready after %v: sequencing view %v", time.Since(testStart).Round(time.Millisecond), st.GetLazy())

	clk := newClock()
	h := &history{}
	subs := []*collector{
		collect(ctx, "s1", subscribe(t, ctx, pc.dial(ctx))),
		collect(ctx, "s2", subscribe(t, ctx, pc.dial(ctx))),
	}
	opCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range procAppenders {
		cl := pc.dial(ctx)
		wg.Go(func() { appendPaced(opCtx, stop, cl, h, clk, i, procAppendPace) })
	}
	seed := testSeed(t)
	readCl := pc.dial(ctx)
	timedOut := 0
	wg.Go(func() { readLazyPaced(opCtx, stop, readCl, h, clk, procAppenders, seed, &timedOut) })

	// Phase 1: healthy.
	waitAcks(t, h, clk, procPhaseAcksMin, "before the faults")

	// Phase 2: kill -9 the sequencing leader. The control plane seals its
	// view, flushes the survivor's ring and starts a view without it;
	// appends go on in that view.
	st = waitStatus(t, ctx, admin, procStatusTimeout*2, "status before the faults", lazyReady)
	seqLeader := st.GetLazy().GetReplicas()[0].GetId()
	ackedBefore, _ := h.counts()
	t.Logf("at %v (%d acked): kill -9 sequencing leader %s", clk.now().Round(time.Millisecond), ackedBefore, seqLeader)
	pc.kill9(seqLeader)
	pc.checkAlive()
	waitStatus(t, ctx, admin, procPhaseTimeout, "a sequencing view without "+seqLeader, func(st *pb.StatusResponse) string {
		lz := st.GetLazy()
		if lz.GetView() <= 1 || lz.GetSealed() {
			return fmt.Sprintf("view %v", lz)
		}
		for _, r := range lz.GetReplicas() {
			if r.GetId() == seqLeader {
				return fmt.Sprintf("view %d still lists %s", lz.GetView(), seqLeader)
			}
		}
		return ""
	})
	waitAcks(t, h, clk, procPhaseAcksMin, "while "+seqLeader+" is down")

	// Phase 3: restart it (its ring is gone); it rejoins in a later view.
	t.Logf("at %v: restart %s", clk.now().Round(time.Millisecond), seqLeader)
	pc.start(seqLeader)
	waitStatus(t, ctx, admin, procPhaseTimeout, seqLeader+" back in a view", func(st *pb.StatusResponse) string {
		if why := lazyReady(st); why != "" {
			return why
		}
		for _, r := range st.GetLazy().GetReplicas() {
			if r.GetId() == seqLeader {
				return ""
			}
		}
		return fmt.Sprintf("view %v lacks %s", st.GetLazy(), seqLeader)
	})
	waitAcks(t, h, clk, procPhaseAcksMin, "after "+seqLeader+" rejoined")

	// Phase 4: kill -9 a shard's backup and restart it. Failover takes it
	// out of its shard at a newer epoch; a lazy append and a placement
	// need every replica of the current configuration, so appends and the
	// order go on without it (the primary stops waiting for its
	// placements, clients stop sending it data). Restarted, it copies the
	// primary's log, joins pending, catches up and counts again.
	groups := []string{"a", "b"}
	back := killShardReplica(t, ctx, pc, admin, h, clk, groups[seed%2], 1)
	// Phase 5: kill -9 the other shard's primary and restart it. Failover
	// takes it out and promotes its backup, which restates its order to
	// the shard; the orderer sends the mapping in flight to the new
	// primary, clients send data to the new configuration, and nothing
	// acknowledged is lost (the checks below). It rejoins as a backup.
	killShardReplica(t, ctx, pc, admin, h, clk, groups[(seed+1)%2], 0)
	// Phase 6: kill -9 the replica that served the first shard while its
	// backup was away: the rejoined copy, alone now, must hold every
	// append acknowledged before, during and after its rejoin.
	killOthers(t, ctx, pc, admin, h, clk, groups[seed%2], back)

	close(stop)
	drainAppends(t, h, &wg, giveUp, procDrainTimeout)
	appends, reads := h.snapshot()
	acked, _ := h.counts()
	t.Logf("at %v: %d appends (%d acked), %d reads (%d more ran out of time waiting for stable-gp)", clk.now().Round(time.Millisecond), len(appends), acked, len(reads), timedOut)
	checkAppendsReturned(t, appends)
	if acked == 0 {
		t.Fatal("no append was acknowledged")
	}
	waitCollectors(t, procCatchUpTimeout, acked, subs...)
	// Each acknowledged append takes the position the log gave it.
	at := map[string]uint64{}
	for _, e := range subs[0].entries() {
		at[string(e.Record.Payload)] = e.Position
	}
	for i, op := range appends {
		if op.err == nil {
			appends[i].ack.Position = at[op.payload]
		}
	}
	var logs []check.Log
	for _, s := range subs {
		logs = append(logs, checkLog(t, s.name, s.entries(), appends, false))
	}
	failOn(t, check.Order(checkAppends(appends), logs...))
	failOn(t, check.RealTime(checkAppends(appends)))
	failOn(t, check.Returned(nil, checkReadOps(reads)))
	failOn(t, check.Reads(checkReadOps(reads), logs[0]))
	checkLinearizable(t, appends, reads, true)
	pc.checkAlive()
	t.Logf("done in %v", time.Since(testStart).Round(time.Millisecond))
}

// killShardReplica kill -9s replica idx (0: the primary) of the live shard
// of group, waits until the control plane took it out of the shard's
// configuration at a newer epoch and appends go on, restarts it, and
// waits until it is back in the configuration, caught up (not pending),
// with appends going on. It returns the replica's id.
func killShardReplica(t *testing.T, ctx context.Context, pc *procCluster, admin *client.Client, h *history, clk clock, group string, idx int) string {
	t.Helper()
	st := waitStatus(t, ctx, admin, procStatusTimeout*2, "status before the shard fault", lazyReady)
	victimShard := liveShard(st, group)
	if len(victimShard.Replicas) < 2 {
		t.Fatalf("live shard %d of group %s has one replica: %v", victimShard.Id, group, victimShard)
	}
	victim := victimShard.Replicas[idx].Id
	role := "backup"
	if idx == 0 {
		role = "primary"
	}
	acked, _ := h.counts()
	t.Logf("at %v (%d acked): kill -9 %s, %s of shard %d", clk.now().Round(time.Millisecond), acked, victim, role, victimShard.Id)
	pc.kill9(victim)
	pc.checkAlive()
	without := func(st *pb.StatusResponse) string {
		now := shardByID(st, victimShard.Id)
		if now == nil || now.State != pb.ShardState_SHARD_LIVE || now.Epoch <= victimShard.Epoch || len(now.Replicas) == 0 || slices.ContainsFunc(now.Replicas, func(r *pb.ReplicaAddr) bool { return r.Id == victim }) {
			return fmt.Sprintf("shard %d is %v, want live at a newer epoch than %d without %s", victimShard.Id, now, victimShard.Epoch, victim)
		}
		return lazyReady(st)
	}
	waitStatus(t, ctx, admin, procPhaseTimeout, fmt.Sprintf("shard %d without %s", victimShard.Id, victim), without)
	waitAcks(t, h, clk, procPhaseAcksMin, "while "+victim+" is out of its shard")
	t.Logf("at %v: restart %s", clk.now().Round(time.Millisecond), victim)
	pc.start(victim)
	waitAcks(t, h, clk, procPhaseAcksMin, "after "+victim+" restarted")
	waitStatus(t, ctx, admin, procPhaseTimeout, fmt.Sprintf("%s back in shard %d, caught up", victim, victimShard.Id), func(st *pb.StatusResponse) string {
		now := shardByID(st, victimShard.Id)
		if now == nil || now.State != pb.ShardState_SHARD_LIVE || !slices.ContainsFunc(now.Replicas, func(r *pb.ReplicaAddr) bool { return r.Id == victim && !r.Pending }) {
			return fmt.Sprintf("shard %d is %v, want %s in it, not pending", victimShard.Id, now, victim)
		}
		return lazyReady(st)
	})
	waitAcks(t, h, clk, procPhaseAcksMin, "after "+victim+" rejoined")
	pc.checkAlive()
	return victim
}

// killOthers kill -9s every replica of the live shard of group but kept
// and waits until kept serves the shard alone, appends going on.
func killOthers(t *testing.T, ctx context.Context, pc *procCluster, admin *client.Client, h *history, clk clock, group, kept string) {
	t.Helper()
	st := waitStatus(t, ctx, admin, procStatusTimeout*2, "status before killing all but "+kept, lazyReady)
	sh := liveShard(st, group)
	for _, r := range sh.Replicas {
		if r.Id != kept {
			t.Logf("at %v: kill -9 %s of shard %d, leaving %s alone", clk.now().Round(time.Millisecond), r.Id, sh.Id, kept)
			pc.kill9(r.Id)
		}
	}
	waitStatus(t, ctx, admin, procPhaseTimeout, fmt.Sprintf("shard %d served by %s alone", sh.Id, kept), func(st *pb.StatusResponse) string {
		now := shardByID(st, sh.Id)
		if now == nil || now.State != pb.ShardState_SHARD_LIVE || len(now.Replicas) != 1 || now.Replicas[0].Id != kept {
			return fmt.Sprintf("shard %d is %v, want %s alone", sh.Id, now, kept)
		}
		return lazyReady(st)
	})
	waitAcks(t, h, clk, procPhaseAcksMin, "with "+kept+" alone")
	pc.checkAlive()
}
