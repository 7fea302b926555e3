package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/check"
)

var campaignFlag = flag.Bool("e2e.campaign", false,
	"run the long fault campaign: every fault, in eager and speculative mode, several runs")

var faultFlag = flag.String("e2e.faults", "",
	"with -e2e.campaign, inject only the faults whose names contain this text")

// Bounds of the fault campaign.
const (
	// faultHold is how long each fault lasts: several failure timeouts and
	// elections.
	faultHold = 3 * time.Second
	// faultDelay is the delay of the slow-link fault, per chunk each way.
	faultDelay = 30 * time.Millisecond
	// faultRecoverAcksMin is how many appends must be acknowledged after a
	// fault heals before the next one starts: the cluster recovered.
	faultRecoverAcksMin = 50
	// shortCampaignFaults is how many faults the CI version injects, chosen
	// by the seed; the long campaign injects all of them in each run.
	shortCampaignFaults = 2
	// campaignRuns is how many runs of each mode the long campaign makes.
	campaignRuns = 2
	// campaignInterval is the ordering interval; speculative mode runs
	// with specInterval and specWindowCuts like TestSpecProcess.
	campaignInterval = time.Millisecond
)

// fault is one fault of the campaign: inject starts it and returns what
// heals it.
type fault struct {
	name   string
	inject func(fc *faultCluster) (heal func())
}

// faultCluster is a cluster of processes behind a faultNet.
type faultCluster struct {
	t     *testing.T
	ctx   context.Context
	pc    *procCluster
	net   *faultNet
	admin *client.Client
	rng   *rand.Rand
}

// leader returns the current ordering leader and the other replicas.
func (fc *faultCluster) leader() (string, []string) {
	st := waitStatus(fc.t, fc.ctx, fc.admin, procPhaseTimeout, "a leader", func(st *pb.StatusResponse) string {
		return clusterReady(st, "a", "b")
	})
	var others []string
	for _, o := range fc.pc.cfg.Ordering {
		if o.ID != st.LeaderId {
			others = append(others, o.ID)
		}
	}
	return st.LeaderId, others
}

// groupServers returns a group's servers, primary first, picking the group
// with the seed.
func (fc *faultCluster) groupServers() []string {
	g := []string{"a", "b"}[fc.rng.IntN(2)]
	var ids []string
	for _, s := range fc.pc.cfg.Group(g) {
		ids = append(ids, s.ID)
	}
	return ids
}

var campaignFaults = []fault{
	{"partition the ordering leader from the other replicas", func(fc *faultCluster) func() {
		l, others := fc.leader()
		fc.t.Logf("  cut %s <-> %v", l, others)
		cut(fc.net.between(fc.t, []string{l}, others)...)
		return fc.net.healAll
	}},
	{"one-way: the ordering leader's messages to the other replicas stall", func(fc *faultCluster) func() {
		l, others := fc.leader()
		var ks []*link
		for _, o := range others {
			ks = append(ks, fc.net.link(fc.t, l, o))
		}
		fc.t.Logf("  stall %s -> %v (the other way flows)", l, others)
		stall(forward, ks...)
		return fc.net.healAll
	}},
	{"partition a group's primary from its backup", func(fc *faultCluster) func() {
		g := fc.groupServers()
		fc.t.Logf("  cut %s <-> %s", g[0], g[1])
		cut(fc.net.between(fc.t, g[:1], g[1:])...)
		return fc.net.healAll
	}},
	{"one-way: a backup's answers to its primary stall", func(fc *faultCluster) func() {
		g := fc.groupServers()
		fc.t.Logf("  stall the answers of %s to %s", g[1], g[0])
		stall(backward, fc.net.link(fc.t, g[0], g[1]))
		return fc.net.healAll
	}},
	{"slow links to and from a storage server", func(fc *faultCluster) func() {
		g := fc.groupServers()
		victim := g[fc.rng.IntN(len(g))]
		var rest []string
		for _, id := range fc.pc.ids() {
			if id != victim {
				rest = append(rest, id)
			}
		}
		fc.t.Logf("  delay %v on every link of %s", faultDelay, victim)
		delay(faultDelay, fc.net.between(fc.t, []string{victim}, rest)...)
		return fc.net.healAll
	}},
	{"SIGSTOP a group's primary", func(fc *faultCluster) func() {
		g := fc.groupServers()
		fc.t.Logf("  SIGSTOP %s", g[0])
		return fc.pc.pause(g[0])
	}},
	{"SIGSTOP the ordering leader", func(fc *faultCluster) func() {
		// TestPausedLeader asserts the bound on the stall; here the pause
		// is one fault among others, checked by the history.
		l, _ := fc.leader()
		fc.t.Logf("  SIGSTOP %s", l)
		return fc.pc.pause(l)
	}},
}

// TestFaultCampaign runs clusters of real processes behind fault-injecting
// proxies (withFaultNet) and injects faults one after another, each for
// faultHold and then healed, while clients append and read. After every
// fault the cluster must acknowledge appends again; at the end every
// acknowledged append is read back at its position by two subscribers and
// the history passes internal/check (Acknowledged, Order, StoredOnce,
// RealTime, and in eager mode Reads and porcupine's linearizability).
//
// Without -e2e.campaign it injects shortCampaignFaults faults chosen by the
// seed in eager mode (the CI version); with it, every fault in eager and
// speculative mode, campaignRuns runs each:
//
//	go test ./test/e2e -run FaultCampaign -e2e.campaign -v -timeout 30m
func TestFaultCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 7 server processes; skipped under -short")
	}
	seed := testSeed(t)
	if !*campaignFlag {
		rng := rand.New(rand.NewPCG(seed, 1))
		picked := rng.Perm(len(campaignFaults))[:shortCampaignFaults]
		var fs []fault
		for _, i := range picked {
			fs = append(fs, campaignFaults[i])
		}
		runCampaign(t, "eager", seed, fs)
		return
	}
	var fs []fault
	for _, f := range campaignFaults {
		if strings.Contains(f.name, *faultFlag) {
			fs = append(fs, f)
		}
	}
	for _, mode := range []string{"eager", "spec"} {
		for run := range campaignRuns {
			s := seed + uint64(run)
			t.Run(fmt.Sprintf("%s/run%d", mode, run), func(t *testing.T) {
				t.Logf("seed of this run: %d", s)
				runCampaign(t, mode, s, fs)
			})
		}
	}
}

// runCampaign runs one cluster in mode ("eager" or "spec") through faults.
func runCampaign(t *testing.T, mode string, seed uint64, faults []fault) {
	testStart := time.Now()
	bin := augurBinary(t)
	ctx := t.Context()
	spec := mode == "spec"
	var pc *procCluster
	if spec {
		pc = newProcCluster(t, bin, specInterval, fmt.Sprintf("mode: spec\nwindow_cuts: %d\n", specWindowCuts))
	} else {
		pc = newProcCluster(t, bin, campaignInterval, "")
	}
	fnet := withFaultNet(t, pc)
	pc.startAll()
	admin := pc.dial(ctx)
	st := waitStatus(t, ctx, admin, procReadyTimeout, "cluster ready", func(st *pb.StatusResponse) string {
		return clusterReady(st, "a", "b")
	})
	t.Logf("%s cluster ready after %v: leader %s", mode, time.Since(testStart).Round(time.Millisecond), st.LeaderId)
	fc := &faultCluster{t: t, ctx: ctx, pc: pc, net: fnet, admin: admin, rng: rand.New(rand.NewPCG(seed, 2))}

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
	if !spec {
		// Speculative order leaves no-op positions, which the random
		// reader and porcupine's dense model do not expect.
		readCl := pc.dial(ctx)
		wg.Go(func() { readPaced(opCtx, stop, readCl, h, clk, procAppenders, seed, true) })
	}
	waitAcks(t, h, clk, faultRecoverAcksMin, "before the faults")

	var outcomes []string
	for _, f := range faults {
		acked, _ := h.counts()
		t.Logf("at %v (%d acked): %s", clk.now().Round(time.Millisecond), acked, f.name)
		injectAt := clk.now()
		heal := f.inject(fc)
		held := time.NewTimer(faultHold)
		select {
		case <-held.C: // the fault's duration, not synchronisation
		case <-ctx.Done():
		}
		heal()
		acked, pending := h.counts()
		t.Logf("at %v (%d acked, %d in flight): healed", clk.now().Round(time.Millisecond), acked, pending)
		waitAcks(t, h, clk, faultRecoverAcksMin, "after healing: "+f.name)
		gap, at := maxGap(h.ackTimes(), injectAt, clk.now())
		t.Logf("  longest time without an acknowledgement from the fault on: %v, from %v", gap.Round(time.Millisecond), at.Round(time.Millisecond))
		outcomes = append(outcomes, fmt.Sprintf("%s: longest stall %v", f.name, gap.Round(time.Millisecond)))
		pc.checkAlive()
	}

	close(stop)
	drainAppends(t, h, &wg, giveUp, procDrainTimeout)
	appends, reads := h.snapshot()
	acked, _ := h.counts()
	failed := 0
	for _, op := range appends {
		if op.err != nil {
			failed++
		}
	}
	t.Logf("at %v: %d appends (%d acked, %d failed, per shard %v), %d reads",
		clk.now().Round(time.Millisecond), len(appends), acked, failed, h.ackedByShard(), len(reads))
	if acked == 0 {
		t.Fatal("no append was acknowledged")
	}
	// Every acknowledged position is ordered and read back by both
	// subscribers, which hold the whole log up to the largest of them.
	n := int(h.tail())
	if spec {
		// Subscribers skip no-op positions: they hold at least one entry
		// per acknowledged append, up to the largest acknowledged position.
		waitCollectors(t, procCatchUpTimeout, acked, subs...)
		for _, s := range subs {
			if es := s.entries(); es[len(es)-1].Position < uint64(n-1) {
				t.Errorf("subscriber %s ends at position %d, before the largest acknowledged position %d", s.name, es[len(es)-1].Position, n-1)
			}
		}
	} else {
		waitCollectors(t, procCatchUpTimeout, n, subs...)
	}
	var logs []check.Log
	for _, s := range subs {
		logs = append(logs, checkLog(t, s.name, s.entries(), appends, !spec))
	}
	failOn(t, check.Order(checkAppends(appends), logs...))
	failOn(t, check.RealTime(checkAppends(appends)))
	if !spec {
		if n != acked {
			t.Errorf("%d appends acknowledged but the largest acknowledged position is %d: positions are not dense or are shared", acked, n-1)
		}
		failOn(t, check.Reads(checkReadOps(reads), logs[0]))
		checkLinearizable(t, appends, reads, true)
	}
	pc.checkAlive()
	t.Logf("%s campaign (seed %d) of %d faults done in %v; failed %v:\n  %s", mode, seed, len(faults),
		time.Since(testStart).Round(time.Millisecond), t.Failed(), strings.Join(outcomes, "\n  "))
}
