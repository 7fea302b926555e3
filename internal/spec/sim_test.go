package spec

// A seeded whole-cluster simulation of speculative order: one ordering
// leader, shards that join, leave, burst, straggle and fail, and
// subscribers that merge the shards' speculative streams. Each seed picks
// its own mix of scenarios; a failing seed replays exactly:
//
//	go test ./internal/spec -run TestSim -sim.seed=N -sim.trace -v

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
)

var (
	flagSimSeeds = flag.Int("sim.seeds", 300, "how many seeds TestSim runs")
	flagSimSeed  = flag.Int64("sim.seed", -1, "run only this seed")
	flagSimTrace = flag.Bool("sim.trace", false, "log every step of the run (with -sim.seed)")
	flagSimShow  = flag.Int("sim.show", 5, "how many failing seeds TestSim details")
)

type simBurst struct {
	shard    int // index among the initial shards
	at, dur  time.Duration
	multiply float64
}

type simRateChange struct {
	shard  int
	at     time.Duration
	factor float64
}

type simJoin struct {
	at    time.Duration
	rate  float64
	quota uint64
}

type simStraggle struct {
	at, dur, extra time.Duration
}

type scenario struct {
	interval   time.Duration
	fillAfter  time.Duration
	windowCuts uint64
	cfg        Config

	shards    int
	rates     []float64 // records per millisecond, per initial shard
	quotas    []uint64  // requested at registration
	appendFor time.Duration
	runFor    time.Duration

	bursts      []simBurst
	rateChanges []simRateChange
	joins       []simJoin
	leaves      []time.Duration
	straggle    *simStraggle
	failAt      time.Duration // 0: no whole-shard failure
	// failSoleHolder times the whole-shard failure for when the failing
	// shard is the only one with a quota in the newest window, the other
	// excluded as a straggler: a filler must then come from the shards
	// without a quota.
	failSoleHolder bool
	failoverAt     time.Duration // 0: no leader failover
	electionGap    time.Duration
	heartbeat      time.Duration

	lagFixLoss float64
	dupProb    float64
	subs       int
	eagerSub   bool
	lateFrom   uint64
	// oneShard is the index of the shard an extra subscriber follows
	// alone, from oneShardFrom, confirmed-only if oneShardConfirmed.
	oneShard          int
	oneShardFrom      uint64
	oneShardConfirmed bool
}

func newScenario(r *rand.Rand) scenario {
	t := time.Millisecond
	sc := scenario{
		interval:   t,
		fillAfter:  t * 3 / 2,
		windowCuts: []uint64{6, 8, 12, 16, 32}[r.IntN(5)],
		cfg:        DefaultConfig(t),
		shards:     2 + r.IntN(3),
		appendFor:  250 * t,
		runFor:     600 * t,
		subs:       2 + r.IntN(2),
		eagerSub:   r.IntN(2) == 0,
		dupProb:    []float64{0, 0, 0.02}[r.IntN(3)],
		lagFixLoss: []float64{0, 0, 0.2}[r.IntN(3)],
	}
	// Whole-shard failures are detected after SuspectAfter; the default's
	// one-second floor would only make runs longer.
	sc.cfg.SuspectAfter = 150 * t
	if r.IntN(3) == 0 {
		sc.cfg.StaggerAbove = 2
	}
	if r.IntN(2) == 0 {
		sc.lateFrom = uint64(r.IntN(200))
	}
	for range sc.shards {
		rate := 0.3 + r.Float64()*5
		if r.IntN(6) == 0 {
			rate = 0.05 // nearly idle: its quota is met by no-ops
		}
		sc.rates = append(sc.rates, rate)
		q := uint64(0)
		if r.IntN(2) == 0 {
			q = 1 + uint64(r.IntN(6))
		}
		sc.quotas = append(sc.quotas, q)
	}
	for range r.IntN(3) {
		sc.bursts = append(sc.bursts, simBurst{
			shard: r.IntN(sc.shards), at: time.Duration(10+r.IntN(200)) * t,
			dur: time.Duration(3+r.IntN(20)) * t, multiply: 4 + 8*r.Float64(),
		})
	}
	if r.IntN(2) == 0 {
		f := 0.3 + 0.4*r.Float64()
		if r.IntN(2) == 0 {
			f = 2 + 2*r.Float64()
		}
		sc.rateChanges = append(sc.rateChanges, simRateChange{shard: r.IntN(sc.shards), at: time.Duration(20+r.IntN(150)) * t, factor: f})
	}
	for range r.IntN(3) {
		sc.joins = append(sc.joins, simJoin{at: time.Duration(10+r.IntN(180)) * t, rate: 0.3 + 4*r.Float64(), quota: uint64(r.IntN(5))})
	}
	for range r.IntN(2) + r.IntN(2) {
		sc.leaves = append(sc.leaves, time.Duration(20+r.IntN(200))*t)
	}
	if r.IntN(4) == 0 {
		// A leave once the appends stopped: the shards have gone idle.
		sc.leaves = append(sc.leaves, sc.appendFor+time.Duration(20+r.IntN(100))*t)
	}
	if r.IntN(3) == 0 {
		sc.straggle = &simStraggle{at: time.Duration(10+r.IntN(120)) * t, dur: time.Duration(30+r.IntN(60)) * t, extra: time.Duration(12+r.IntN(20)) * t}
	}
	if r.IntN(3) == 0 {
		sc.failAt = time.Duration(30+r.IntN(150)) * t
	}
	if r.IntN(12) == 0 {
		// Two shards, one straggling long enough to be excluded; the
		// other fails once it holds the newest window's only quota.
		sc.shards, sc.rates, sc.quotas, sc.joins, sc.leaves = 2, sc.rates[:2], sc.quotas[:2], nil, nil
		for i := range sc.bursts {
			sc.bursts[i].shard %= 2
		}
		for i := range sc.rateChanges {
			sc.rateChanges[i].shard %= 2
		}
		sc.straggle = &simStraggle{at: time.Duration(10+r.IntN(40)) * t, dur: 150 * t, extra: time.Duration(12+r.IntN(20)) * t}
		sc.failAt, sc.failSoleHolder = sc.straggle.at, true
	}
	sc.heartbeat = sc.cfg.SuspectAfter / 5
	if r.IntN(4) == 0 {
		sc.failoverAt = time.Duration(10+r.IntN(220)) * t
		sc.electionGap = time.Duration(1+r.IntN(10)) * t
	}
	sc.oneShard = r.IntN(sc.shards)
	if r.IntN(3) == 0 {
		sc.oneShardFrom = uint64(r.IntN(200))
	}
	sc.oneShardConfirmed = r.IntN(4) == 0
	return sc
}

func (sc scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d shards (rates %.2f/ms, quotas %v), W=%d, stagger above %d, %d subscribers (eager %v, late from %d) and one of shard #%d (from %d, confirmed only %v)",
		sc.shards, sc.rates, sc.quotas, sc.windowCuts, sc.cfg.StaggerAbove, sc.subs, sc.eagerSub, sc.lateFrom, sc.oneShard, sc.oneShardFrom, sc.oneShardConfirmed)
	for _, x := range sc.bursts {
		fmt.Fprintf(&b, "; burst on #%d at %v for %v ×%.1f", x.shard, x.at, x.dur, x.multiply)
	}
	for _, x := range sc.rateChanges {
		fmt.Fprintf(&b, "; rate of #%d ×%.2f at %v", x.shard, x.factor, x.at)
	}
	for _, x := range sc.joins {
		fmt.Fprintf(&b, "; join at %v (rate %.2f, quota %d)", x.at, x.rate, x.quota)
	}
	for _, x := range sc.leaves {
		fmt.Fprintf(&b, "; leave at %v", x)
	}
	if x := sc.straggle; x != nil {
		fmt.Fprintf(&b, "; straggler at %v for %v, reports +%v", x.at, x.dur, x.extra)
	}
	if sc.failSoleHolder {
		fmt.Fprintf(&b, "; whole-shard failure of the sole quota holder after %v", sc.failAt)
	} else if sc.failAt > 0 {
		fmt.Fprintf(&b, "; whole-shard failure at %v", sc.failAt)
	}
	if sc.failoverAt > 0 {
		fmt.Fprintf(&b, "; leader failover at %v (election %v)", sc.failoverAt, sc.electionGap)
	}
	if sc.lagFixLoss > 0 {
		fmt.Fprintf(&b, "; lag-fix loss %.0f%%", 100*sc.lagFixLoss)
	}
	if sc.dupProb > 0 {
		fmt.Fprintf(&b, "; stream repeats %.0f%%", 100*sc.dupProb)
	}
	return b.String()
}

// newSim builds the cluster of one seed and schedules its scenario.
func newSim(seed uint64, trace func(string)) *sim {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	sc := newScenario(r)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &sim{
		seed: seed, r: r, sc: sc, start: start, now: start, trace: trace,
		shards:    map[cut.ShardID]*simShard{},
		voidFrom:  map[cut.ShardID]uint64{},
		finals:    map[cut.ShardID]bool{},
		orderedAt: map[int64]uint64{},
		windowed:  map[cut.ShardID]bool{},
	}
	s.ld = &simLeader{s: s, st: control.NewSpec("sim", sc.windowCuts), seq: NewSequencer(sc.cfg),
		links: map[cut.ShardID]*link{}, suspected: map[cut.ShardID]bool{}}
	s.ld.seq.Observe(s.ld.st.Clone(), s.now)
	s.after(sc.cfg.SuspectAfter/4, s.ld.detectTick)
	for i := range sc.subs {
		sb := &simSub{s: s, id: i}
		if i == 1 && sc.eagerSub {
			sb.confirmedOnly = true
		}
		if i == sc.subs-1 {
			sb.from = sc.lateFrom
		}
		sb.m = NewMerger[int64](sb.from, sb.confirmedOnly)
		s.subs = append(s.subs, sb)
	}
	one := &simSub{s: s, id: sc.subs, oneShard: true, shard: cut.ShardID(sc.oneShard),
		from: sc.oneShardFrom, confirmedOnly: sc.oneShardConfirmed}
	one.m = NewShardMerger[int64](one.from, one.confirmedOnly)
	s.subs = append(s.subs, one)
	joinRates := map[string]float64{}
	register := func(name string, quota uint64) {
		s.ld.propose(control.Command{Register: &control.RegisterCommand{
			Group: name, Replicas: []control.Replica{{ID: name, Addr: name, Incarnation: 1}}, Quota: quota}})
	}
	for i := range sc.shards {
		register(fmt.Sprintf("s%d", i), sc.quotas[i])
	}
	initial := make([]*simClient, sc.shards)
	s.after(2*time.Millisecond, func() {
		for i := range sc.shards {
			initial[i] = s.startClient(cut.ShardID(i), sc.rates[i])
		}
	})
	for _, x := range sc.bursts {
		s.after(x.at, func() {
			c := initial[x.shard]
			c.burst, c.until = x.multiply, s.now.Add(x.dur)
			s.tracef("burst on client of shard %d ×%.1f", c.target, x.multiply)
		})
	}
	for _, x := range sc.rateChanges {
		s.after(x.at, func() {
			c := initial[x.shard]
			c.rate *= x.factor
			s.tracef("client of shard %d: rate ×%.2f", c.target, x.factor)
		})
	}
	for i, x := range sc.joins {
		name := fmt.Sprintf("j%d", i)
		joinRates[name] = x.rate
		s.after(x.at, func() { register(name, x.quota) })
	}
	s.joinRates = joinRates
	for _, at := range sc.leaves {
		s.after(at, func() {
			sh := s.pick(2, func(sh *simShard) bool { return sh.accepting })
			if sh == nil {
				return
			}
			sh.accepting, sh.leaving = false, true
			s.tracef("shard %d leaves", sh.id)
			s.ld.propose(control.Command{Finalize: &control.FinalizeCommand{Shard: sh.id}})
		})
	}
	if x := sc.straggle; x != nil {
		s.after(x.at, func() {
			sh := s.pick(1, func(sh *simShard) bool { return sh.alive && !sh.leaving })
			if sh == nil {
				return
			}
			sh.straggleFrom, sh.straggleUntil, sh.straggleExtra = s.now, s.now.Add(x.dur), x.extra
			s.tracef("shard %d straggles", sh.id)
		})
	}
	if sc.failoverAt > 0 {
		s.after(sc.failoverAt, func() { s.ld.failover(sc.electionGap) })
	}
	switch {
	case sc.failSoleHolder:
		s.after(sc.failAt, s.failSoleHolder)
	case sc.failAt > 0:
		s.after(sc.failAt, func() {
			if sh := s.pick(2, func(sh *simShard) bool { return sh.accepting }); sh != nil {
				s.failed = sh
				sh.fail()
			}
		})
	}
	return s
}

// failSoleHolder fails the shard that holds the only quota of the newest
// window, as soon as there is one, looking again every millisecond until
// the straggler stops straggling.
func (s *sim) failSoleHolder() {
	if ws := s.ld.st.Spec.Windows; len(ws) > 0 {
		var holders []cut.ShardID
		for _, q := range ws[len(ws)-1].Quotas {
			if q.PerCut > 0 {
				holders = append(holders, q.Shard)
			}
		}
		if len(holders) == 1 {
			if sh := s.shards[holders[0]]; sh.accepting && s.now.After(sh.straggleUntil) {
				s.failed, s.failedSoleHolder = sh, true
				s.tracef("shard %d holds the only quota of window %d", sh.id, ws[len(ws)-1].Index)
				sh.fail()
				return
			}
		}
	}
	if s.now.Before(s.start.Add(s.sc.straggle.at + s.sc.straggle.dur)) {
		s.after(time.Millisecond, s.failSoleHolder)
	}
}

// pick returns a random shard that ok accepts, or nil when fewer than
// least do.
func (s *sim) pick(least int, ok func(*simShard) bool) *simShard {
	var cand []*simShard
	for _, sh := range s.order {
		if ok(sh) {
			cand = append(cand, sh)
		}
	}
	if len(cand) < least {
		return nil
	}
	return cand[s.r.IntN(len(cand))]
}

// check runs the end-of-run assertions.
func (s *sim) check() {
	if len(s.errs) > 0 {
		return
	}
	if s.failed == nil {
		if len(s.views) > 0 {
			s.errorf("no shard failed, but the leader started view %d: %+v", len(s.views), s.views[0])
		}
	}
	for _, sb := range s.subs {
		sb.finish()
		if s.failed == nil && sb.fails > 0 {
			s.errorf("sub %d: %d misspeculations without a whole-shard failure", sb.id, sb.fails)
		}
	}
	// Liveness: every append was ordered, once (a client retries those
	// that a failed or departed shard never got ordered).
	missing := 0
	for id := int64(0); id < s.nextRec; id++ {
		if _, ok := s.orderedAt[id]; !ok {
			if missing == 0 {
				where := "nowhere"
				for _, sh := range s.order {
					for i, e := range sh.log {
						if e == id {
							where = fmt.Sprintf("shard %d local %d (stored %d, durable %d, ordered %d, alive %v, finalized %v)",
								sh.id, i, len(sh.log), sh.durable, s.lastCut.Len(sh.id), sh.alive, sh.finalized)
						}
					}
				}
				s.errorf("record %d was never ordered; it sits at %s", id, where)
			}
			missing++
		}
	}
	if missing > 0 {
		s.errorf("%d of %d records never ordered", missing, s.nextRec)
	}
	// Every leave ended, busy or idle.
	for _, sh := range s.order {
		if sh.leaving && sh.alive && !sh.finalized {
			s.errorf("shard %d began to leave but was never finalized", sh.id)
		}
	}
	// Every shard still live has all it holds ordered.
	for _, sh := range s.order {
		if !sh.alive || sh.finalized {
			continue
		}
		ordered := s.lastCut.Len(sh.id)
		for i := ordered; i < uint64(len(sh.log)); i++ {
			if sh.log[i] != noop {
				s.errorf("live shard %d: record at local %d not ordered (ordered %d, stored %d)", sh.id, i, ordered, len(sh.log))
				break
			}
		}
	}
}

func runSeed(seed uint64, trace func(string)) *sim {
	s := newSim(seed, trace)
	s.run(s.start.Add(s.sc.runFor))
	s.check()
	return s
}

func (s *sim) summary() string {
	st := s.stats
	lead := time.Duration(0)
	if st.specLeadN > 0 {
		lead = st.specLead / time.Duration(st.specLeadN)
	}
	return fmt.Sprintf("%d steps, %d cuts, %d windows planned; %d records, %d no-ops in %d runs (%.1f%% of entries); "+
		"%d reports, %d lag-fixes started (%d messages, %d lost), %d quota changes (largest quota %d); %d views, %d reroutes; "+
		"%d deliveries (%d speculative, mean %v before confirmation), %d fails, %d voided deliveries, %d stream repeats",
		s.steps, s.cutCount, st.windows, st.records, st.noops, st.noopRuns, 100*float64(st.noops)/float64(max(1, st.noops+st.records)),
		st.reports, st.lagFixes, st.lagFixMsgs, st.lostLagFix, st.quotaChanges, st.maxQuota, len(s.views), s.reroutes,
		st.delivered, st.specDeliveries, lead, st.fails, st.voided, st.dupResends)
}

func TestSim(t *testing.T) {
	if *flagSimSeed >= 0 {
		var trace func(string)
		if *flagSimTrace {
			trace = func(line string) { t.Log(line) }
		}
		s := runSeed(uint64(*flagSimSeed), trace)
		t.Logf("seed %d: %v", s.seed, s.sc)
		t.Logf("%s", s.summary())
		for _, e := range s.errs {
			t.Errorf("seed %d: %s", s.seed, e)
		}
		return
	}
	seeds := *flagSimSeeds
	if testing.Short() {
		seeds = min(seeds, 40)
	}
	type result struct {
		seed    uint64
		sc      string
		summary string
		errs    []string
		failure bool
		sole    bool
		fails   uint64
	}
	results := make([]result, seeds)
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s := runSeed(uint64(i), nil)
				results[i] = result{seed: s.seed, sc: s.sc.String(), summary: s.summary(), errs: s.errs, failure: s.failed != nil, sole: s.failedSoleHolder, fails: s.stats.fails}
			}
		}()
	}
	for i := range seeds {
		next <- i
	}
	close(next)
	wg.Wait()
	bad, withFailure, soleHolder, fails := 0, 0, 0, uint64(0)
	for _, r := range results {
		if r.failure {
			withFailure++
			fails += r.fails
		}
		if r.sole {
			soleHolder++
		}
		if len(r.errs) == 0 {
			continue
		}
		bad++
		if bad <= *flagSimShow {
			t.Errorf("seed %d (%s):\n  %s", r.seed, r.sc, strings.Join(r.errs, "\n  "))
		}
	}
	if bad > *flagSimShow {
		t.Errorf("... %d failing seeds in all", bad)
	}
	t.Logf("%d seeds, %d with a whole-shard failure (%d Fail events in those), %d of them of the sole quota holder",
		seeds, withFailure, fails, soleHolder)
	// The seeds are fixed, so this holds or fails the same way every run;
	// it keeps the sole-holder case from silently dropping out of the mix.
	if seeds >= 40 && soleHolder == 0 {
		t.Errorf("no seed failed a shard while it held the only quota")
	}
	// One busy seed without a whole-shard failure, for the counts.
	show := min(2, seeds-1)
	t.Logf("seed %d: %s", show, results[show].sc)
	t.Logf("seed %d: %s", show, results[show].summary)
}
