package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/check"
)

// Bounds of TestPausedLeader.
const (
	// pauseFor is how long the ordering leader stays SIGSTOPped: many
	// failure timeouts, as a long GC stall or a frozen VM would be.
	pauseFor = 5 * time.Second
	// pauseAfter is how long the test keeps appending and watching the
	// shard table once the old leader runs again.
	pauseAfter = 3 * time.Second
	// pauseAppendersPerShard append to each shard, every procAppendPace.
	pauseAppendersPerShard = 2
	// pauseWarmAcksMin is how many appends each shard acknowledges before
	// the pause.
	pauseWarmAcksMin = 50
	// pauseElectionTicksMax is the longest election timeout, in raft
	// ticks: raftnode's 20 election ticks, which raft randomizes up to
	// twice that.
	pauseElectionTicksMax = 40
	// pauseGapSlack covers what the bound leaves out: the moves of the
	// storage servers and clients to the new leader and the first cuts,
	// on a loaded machine.
	pauseGapSlack = 700 * time.Millisecond
	// pausePollEvery paces the checks of the shard table during the pause.
	pausePollEvery = 100 * time.Millisecond
	// pauseFailureLog is what an ordering replica logs when it proposes
	// to finalize a shard it takes for failed.
	pauseFailureLog = "finalizing failed shard"
)

// TestPausedLeader SIGSTOPs the ordering leader for pauseFor while clients
// append to every shard. A new leader takes over, so appends must stall no
// longer than an election plus one failure timeout; no live shard may be
// finalized, neither during the pause nor once the old leader runs again;
// every acknowledged append is read back at its position.
func TestPausedLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 7 server processes; skipped under -short")
	}
	testStart := time.Now()
	bin := augurBinary(t)
	ctx := t.Context()
	pc := newProcCluster(t, bin, time.Millisecond, "")
	pc.startAll()
	admin := pc.dial(ctx)
	st := waitStatus(t, ctx, admin, procReadyTimeout, "cluster ready", func(st *pb.StatusResponse) string {
		return clusterReady(st, "a", "b")
	})
	var shards []uint32
	for _, g := range []string{"a", "b"} {
		shards = append(shards, liveShard(st, g).Id)
	}
	t.Logf("cluster ready after %v: leader %s, live shards %v", time.Since(testStart).Round(time.Millisecond), st.LeaderId, shards)
	replicas := dialOrderingReplicas(t, pc)

	clk := newClock()
	h := &history{}
	sub := collect(ctx, "s1", subscribe(t, ctx, pc.dial(ctx)))
	opCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	worker := 0
	for _, shard := range shards {
		for range pauseAppendersPerShard {
			cl, w := pc.dial(ctx), worker
			worker++
			wg.Go(func() { appendToShardPaced(opCtx, stop, cl, h, clk, w, shard, procAppendPace) })
		}
	}
	if !eventually(t, procPhaseTimeout, func() bool {
		for _, id := range shards {
			if h.ackedBy(id) < pauseWarmAcksMin {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("appends did not start: per shard %v", h.ackedByShard())
	}

	st = waitStatus(t, ctx, admin, procStatusTimeout*2, "status before the pause", func(st *pb.StatusResponse) string {
		return clusterReady(st, "a", "b")
	})
	leader := st.LeaderId
	stoppedAt := clk.now()
	t.Logf("at %v (per shard %v acked): SIGSTOP ordering leader %s", stoppedAt.Round(time.Millisecond), h.ackedByShard(), leader)
	resume := pc.pause(leader)
	defer resume()

	// During the pause the other replicas hold the committed shard table.
	others := map[string]pb.OrderingClient{}
	for id, oc := range replicas {
		if id != leader {
			others[id] = oc
		}
	}
	watchShards(t, ctx, pc.cfg.ClusterID, others, shards, clk, clk.now()+pauseFor, "while "+leader+" is stopped")
	resumedAt := clk.now()
	resume()
	t.Logf("at %v (per shard %v acked): SIGCONT %s", resumedAt.Round(time.Millisecond), h.ackedByShard(), leader)
	watchShards(t, ctx, pc.cfg.ClusterID, replicas, shards, clk, clk.now()+pauseAfter, "after "+leader+" resumed")
	endAt := clk.now()
	pc.checkAlive()
	// Not even a proposal: no replica, the stopped one included, took a
	// live shard for failed.
	for _, o := range pc.cfg.Ordering {
		if lines := pc.logLines(o.ID, pauseFailureLog); len(lines) > 0 {
			t.Errorf("ordering replica %s set out to finalize shards as failed:\n%s", o.ID, strings.Join(lines, "\n"))
		}
	}

	close(stop)
	drainAppends(t, h, &wg, giveUp, procDrainTimeout)
	appends, _ := h.snapshot()
	acked, _ := h.counts()
	t.Logf("at %v: %d appends, %d acked, per shard %v", clk.now().Round(time.Millisecond), len(appends), acked, h.ackedByShard())
	checkAppendsReturned(t, appends)

	// No shard stalled for longer than an election and a failure timeout.
	limit := pauseElectionTicksMax*pc.cfg.RaftTick.D() + pc.cfg.FailureTimeout.D() + pauseGapSlack
	for _, id := range shards {
		gap, at := maxGap(shardAckTimes(appends, id), stoppedAt, endAt)
		t.Logf("shard %d: largest gap between acks from the pause on: %v at %v (limit %v)", id, gap.Round(time.Millisecond), at.Round(time.Millisecond), limit)
		if gap > limit {
			t.Errorf("shard %d acknowledged nothing for %v from %v (leader stopped at %v for %v); the limit is %v",
				id, gap.Round(time.Millisecond), at.Round(time.Millisecond), stoppedAt.Round(time.Millisecond), pauseFor, limit)
		}
	}

	// Every acknowledged append is read back at its position.
	n := int(h.tail())
	if n != acked {
		t.Errorf("%d appends acknowledged but the largest acknowledged position is %d: positions are not dense or are shared", acked, n-1)
	}
	waitCollectors(t, procCatchUpTimeout, n, sub)
	checkLog(t, sub.name, sub.entries(), appends, true)
	failOn(t, check.RealTime(checkAppends(appends)))
	pc.checkAlive()
	t.Logf("done in %v", time.Since(testStart).Round(time.Millisecond))
}

// pause SIGSTOPs server id and returns what SIGCONTs it; calling that
// again does nothing, so a test can both defer it and call it.
func (pc *procCluster) pause(id string) (resume func()) {
	t := pc.t
	t.Helper()
	p := pc.proc(id)
	pc.mu.Lock()
	p.expected = true // a stopped process may be killed by the cleanup
	pc.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %s: %v", id, err)
	}
	resumed := false
	return func() {
		if !resumed {
			resumed = true
			if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil && err != os.ErrProcessDone {
				t.Errorf("SIGCONT %s: %v", id, err)
			}
		}
	}
}

// appendToShardPaced appends "w<worker>-<n>" to shard every pace until stop
// is closed, recording each append.
func appendToShardPaced(ctx context.Context, stop <-chan struct{}, cl *client.Client, h *history, clk clock, worker int, shard uint32, pace time.Duration) {
	appendEvery(ctx, stop, h, clk, worker, pace, func(ctx context.Context, rec client.Record) (client.Ack, error) {
		return cl.AppendToShard(ctx, rec, shard)
	})
}

// shardAckTimes returns the return times of shard's acknowledged appends,
// ascending.
func shardAckTimes(appends []appendOp, shard uint32) []time.Duration {
	var ts []time.Duration
	for _, op := range appends {
		if op.err == nil && op.ack.Shard == shard {
			ts = append(ts, op.ret)
		}
	}
	slices.Sort(ts)
	return ts
}

// dialOrderingReplicas connects to each ordering replica on its own, so
// the test can ask the ones still running while another is stopped.
func dialOrderingReplicas(t *testing.T, pc *procCluster) map[string]pb.OrderingClient {
	t.Helper()
	out := map[string]pb.OrderingClient{}
	for _, o := range pc.cfg.Ordering {
		conn, err := grpc.NewClient(o.Addr, pc.dialOption())
		if err != nil {
			t.Fatalf("dial %s: %v", o.ID, err)
		}
		t.Cleanup(func() { conn.Close() })
		out[o.ID] = pb.NewOrderingClient(conn)
	}
	return out
}

// watchShards asks every replica of replicas for the shard table until
// clk reaches until, and fails the test for every shard of live that a
// replica shows as not live.
func watchShards(t *testing.T, ctx context.Context, clusterID string, replicas map[string]pb.OrderingClient, live []uint32, clk clock, until time.Duration, phase string) {
	t.Helper()
	tick := time.NewTicker(pausePollEvery)
	defer tick.Stop()
	reported := map[uint32]bool{}
	for clk.now() < until {
		for id, oc := range replicas {
			sctx, cancel := context.WithTimeout(ctx, pausePollEvery)
			st, err := oc.Status(sctx, &pb.StatusRequest{ClusterId: clusterID})
			cancel()
			if err != nil {
				continue // a replica that does not answer holds no news
			}
			for _, shard := range live {
				sh := shardByID(st, shard)
				if !reported[shard] && (sh == nil || sh.State != pb.ShardState_SHARD_LIVE) {
					reported[shard] = true
					t.Errorf("at %v, %s: %s shows shard %d as %v", clk.now().Round(time.Millisecond), phase, id, shard, sh)
				}
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// logLines returns the lines of server id's log that contain text.
func (pc *procCluster) logLines(id, text string) []string {
	data, err := os.ReadFile(filepath.Join(pc.logDir, id+".log"))
	if err != nil {
		pc.t.Errorf("read the log of %s: %v", id, err)
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, text) {
			out = append(out, l)
		}
	}
	return out
}

// TestPausedPrimaryRejoins SIGSTOPs a group's primary while clients append
// to its shard, until the ordering leader has taken it out of the shard's
// configuration (its backup took over), then SIGCONTs it. The copy, fenced
// while its process ran, must rejoin the configuration without a restart,
// and the shard must keep acknowledging appends with it as a backup (a
// rejoined old primary once stalled its shard for good: TestFaultCampaign,
// seed 1795600833821682285). The shard keeps its id; every acknowledged
// append is read back at its position.
func TestPausedPrimaryRejoins(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 7 server processes; skipped under -short")
	}
	testStart := time.Now()
	bin := augurBinary(t)
	ctx := t.Context()
	pc := newProcCluster(t, bin, time.Millisecond, "")
	pc.startAll()
	admin := pc.dial(ctx)
	st := waitStatus(t, ctx, admin, procReadyTimeout, "cluster ready", func(st *pb.StatusResponse) string {
		return clusterReady(st, "a", "b")
	})
	sh := liveShard(st, "a")
	id, victim := sh.Id, sh.Replicas[0].Id
	t.Logf("cluster ready after %v: shard %d, primary %s", time.Since(testStart).Round(time.Millisecond), id, victim)

	clk := newClock()
	h := &history{}
	sub := collect(ctx, "s1", subscribe(t, ctx, pc.dial(ctx)))
	opCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range pauseAppendersPerShard {
		cl := pc.dial(ctx)
		wg.Go(func() { appendToShardPaced(opCtx, stop, cl, h, clk, w, id, procAppendPace) })
	}
	if !eventually(t, procPhaseTimeout, func() bool { return h.ackedBy(id) >= pauseWarmAcksMin }) {
		t.Fatalf("appends did not start: %d acknowledged", h.ackedBy(id))
	}

	inConfig := func(st *pb.StatusResponse) (bool, string) {
		s := shardByID(st, id)
		if s == nil || s.State != pb.ShardState_SHARD_LIVE {
			return false, fmt.Sprintf("shard %d is not live: %v", id, s)
		}
		return slices.ContainsFunc(s.Replicas, func(r *pb.ReplicaAddr) bool { return r.Id == victim }), ""
	}
	t.Logf("at %v (%d acked): SIGSTOP %s", clk.now().Round(time.Millisecond), h.ackedBy(id), victim)
	resume := pc.pause(victim)
	defer resume()
	waitStatus(t, ctx, admin, procPhaseTimeout, victim+" taken out of shard's configuration", func(st *pb.StatusResponse) string {
		if in, why := inConfig(st); why != "" || in {
			return fmt.Sprintf("%s still in the configuration %s", victim, why)
		}
		return ""
	})
	resume()
	t.Logf("at %v (%d acked): taken out; SIGCONT %s", clk.now().Round(time.Millisecond), h.ackedBy(id), victim)
	waitStatus(t, ctx, admin, procPhaseTimeout, victim+" back in the shard's configuration", func(st *pb.StatusResponse) string {
		if in, why := inConfig(st); why != "" || !in {
			return fmt.Sprintf("%s not back in the configuration %s", victim, why)
		}
		return ""
	})
	back := h.ackedBy(id)
	t.Logf("at %v (%d acked): %s rejoined without a restart", clk.now().Round(time.Millisecond), back, victim)
	if !eventually(t, procPhaseTimeout, func() bool { return h.ackedBy(id) >= back+pauseWarmAcksMin }) {
		t.Fatalf("shard %d acknowledged %d appends in %v after %s rejoined, want %d", id, h.ackedBy(id)-back, procPhaseTimeout, victim, pauseWarmAcksMin)
	}
	waitStatus(t, ctx, admin, procStatusTimeout*2, "status after the rejoin", func(st *pb.StatusResponse) string {
		if in, why := inConfig(st); why != "" || !in {
			return fmt.Sprintf("%s left the configuration again %s", victim, why)
		}
		return ""
	})
	pc.checkAlive()

	close(stop)
	drainAppends(t, h, &wg, giveUp, procDrainTimeout)
	appends, _ := h.snapshot()
	acked, _ := h.counts()
	t.Logf("at %v: %d appends, %d acked", clk.now().Round(time.Millisecond), len(appends), acked)
	checkAppendsReturned(t, appends)
	n := int(h.tail())
	waitCollectors(t, procCatchUpTimeout, n, sub)
	checkLog(t, sub.name, sub.entries(), appends, true)
	failOn(t, check.RealTime(checkAppends(appends)))
	t.Logf("done in %v", time.Since(testStart).Round(time.Millisecond))
}
