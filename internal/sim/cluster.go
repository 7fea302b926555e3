package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/spec"
)

// noop marks a no-op entry in a shard's log and a position without a
// record.
const noop int64 = -1

// cluster is one seeded run: the world, the ordering leader, the shards,
// clients and subscribers, and the truth the committed cuts establish.
type cluster struct {
	world
	mode Mode
	// md is the cluster's ordering mode: the parts the servers and the
	// client build per mode come from it.
	md mode.Mode
	sc scenario

	ld      *leader
	shards  map[cut.ShardID]*shard
	order   []*shard // by id
	subs    []*sub
	clients []*client
	// probes are the liveness probes, appended by probeClient (see
	// pause.go).
	probes      []probe
	probeClient *client
	// player is the exactly-once player, in the seeds that run one.
	player *simPlayer

	// The truth: committed cuts, the sequence they define over the
	// shards' logs, the views, the failed shards' void points.
	lastCut  cut.Cut
	cutCount uint64
	// cutHist lists the committed cuts after initialCut, for a restarted
	// storage server's watch to catch up on.
	cutHist    []cut.Cut
	initialCut cut.Cut
	eager      []int64
	// eagerShard is the shard of each position.
	eagerShard []cut.ShardID
	views      []control.ViewChange
	voidFrom   map[cut.ShardID]uint64
	finals     map[cut.ShardID]bool
	// orderedAt maps each record to its position; nextRec counts records.
	orderedAt map[int64]uint64
	nextRec   int64
	// recs holds each record's append: its client, first call and name.
	recs     []recordInfo
	reroutes int
	// pbRecs holds each record as eager streams carry it, built once.
	pbRecs map[int64]*pb.Record

	// failed is the shard the scenario failed, if any; joinRates gives a
	// joining shard's client rate by name.
	failed *shard
	// failedShards holds the shards a crash of every server of their
	// configuration failed; crashedReplicas those that lost one server
	// and must fail over (keep their id, stay live).
	failedShards    map[cut.ShardID]bool
	crashedReplicas map[cut.ShardID]bool
	// splitShards holds the shards whose primary a partition cut off
	// from its backup.
	splitShards map[cut.ShardID]bool
	// failedSoleHolder says the failed shard held the newest window's
	// only quota (scenario.failSoleHolder).
	failedSoleHolder bool
	// cutOff holds the shards some partition cut off from the leader:
	// the failure detector may rightly take them for failed.
	cutOff    map[cut.ShardID]bool
	joinRates map[string]float64
	// windowed marks the shards some window gave a quota.
	windowed map[cut.ShardID]bool
	// rescues counts the shards registered because none took appends;
	// rescuing says one is being registered.
	rescues  int
	rescuing bool
	// adopted says a shard that registered took over the slots of a
	// failed shard that no live shard filled.
	adopted bool
	// replacements counts the shards registered in place of crashed ones.
	replacements int

	stats stats
	// plant is the bug a test planted (noBug: none); planted says it
	// struck.
	plant   bug
	planted bool
	// powerLoss asks for Options.powerLoss; powerLost says it struck.
	powerLoss, powerLost bool
	// raftPowerLoss asks for Options.raftPowerLoss, raftSyncOptOut for
	// Options.raftSyncOptOut; raftPowerLost says it struck.
	raftPowerLoss, raftSyncOptOut, raftPowerLost bool
}

// recordInfo is what the history records of one append: its client,
// first call and name; the shard it last went to (at), whether a retry on
// another shard is under way; and, once a shard answered it ordered (or a
// resolution said so), its position and return.
type recordInfo struct {
	client    int
	call      time.Time
	name      string
	at        cut.ShardID
	rerouting bool
	acked     bool
	pos       uint64
	ret       time.Time
}

type stats struct {
	records, noops, noopRuns  uint64
	reports, lagFixMsgs       uint64
	lagFixes, quotaChanges    uint64
	windows, proposals        uint64
	lostLagFix, dupResends    uint64
	lostReports, lostPolls    uint64
	specDeliveries, delivered uint64
	fails, voided             uint64
	crashes, raftCrashes      uint64
	lostTails                 uint64 // crashes that lost an unsynced tail
	retries                   uint64
	failovers                 uint64
	// joins counts the backups that joined a new configuration,
	// pairCrashes the crashes of two servers of three at once.
	joins, pairCrashes uint64
	specLead           time.Duration // summed over confirmed speculative deliveries
	specLeadN          uint64
	maxQuota           uint64
	// damaged counts the restarts with a damaged file, repairs the
	// ranges repaired from the other copy, sourceDeaths the repairs
	// whose source died mid-copy.
	damaged, repairs, sourceDeaths uint64
	// rejoins counts the copies taken back into their configuration,
	// rejoinsBehind those of them that asked behind (bugRejoinBehind).
	rejoins, rejoinsBehind uint64
	// eagerCuts counts the cuts a speculative cluster made between
	// windows.
	eagerCuts uint64
	// primaryDeathsOnJoin counts the primaries crashed as a copy was
	// taken back in (see planRejoin).
	primaryDeathsOnJoin uint64
	// pauses counts the storage servers paused (see pause.go).
	pauses uint64
	// raisedInReplicated counts the backups' durable lengths a
	// replicated batch raised under group commit (a fsync ended before
	// its notice reached the core).
	raisedInReplicated uint64
}

// newCluster builds the cluster of one seed and schedules its scenario.
func newCluster(seed uint64, mode Mode, f Faults, replicas int, trace func(string), plant bug) *cluster {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	sc := newScenario(r, mode, f)
	sc.planCopies(replicas, rand.New(rand.NewPCG(seed, 0xc0b1e5)))
	sc.planDamage(rand.New(rand.NewPCG(seed, 0xda3a6e)))
	sc.planRejoin(rand.New(rand.NewPCG(seed, 0x2e7015)))
	// Its own stream, so that the other choices of a seed stay as they were.
	sc.eagerAbove = []float64{0, spec.EagerAboveDefault, 0.01}[rand.New(rand.NewPCG(seed, 0xea9e2)).IntN(3)]
	sc.planPauses(rand.New(rand.NewPCG(seed, 0x9a05e)), f)
	if sc.sync == syncAlways && rand.New(rand.NewPCG(seed, 0x6c0)).IntN(2) == 0 {
		// Half the durable seeds run group commit, the configuration's
		// default; the others fsync each write, which group commit
		// must be indistinguishable from (its own stream keeps the
		// seed's other choices).
		sc.sync = syncGroup
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &cluster{
		world: world{seed: seed, r: r, start: start, now: start, trace: trace},
		mode:  mode, md: newMode(mode, &sc), sc: sc, plant: plant,
		failedShards:    map[cut.ShardID]bool{},
		crashedReplicas: map[cut.ShardID]bool{},
		splitShards:     map[cut.ShardID]bool{},
		shards:          map[cut.ShardID]*shard{},
		voidFrom:        map[cut.ShardID]uint64{},
		finals:          map[cut.ShardID]bool{},
		orderedAt:       map[int64]uint64{},
		windowed:        map[cut.ShardID]bool{},
		cutOff:          map[cut.ShardID]bool{},
	}
	s.ld = newLeader(s)
	s.initialCut = s.ld.st.LastCut
	for i := range sc.subs {
		sb := &sub{s: s, id: i}
		if i == 1 && sc.eagerSub {
			sb.confirmedOnly = true
		}
		if i == sc.subs-1 {
			sb.from = sc.lateFrom
		}
		sb.init()
		s.subs = append(s.subs, sb)
	}
	one := &sub{s: s, id: sc.subs, oneShard: true, shard: cut.ShardID(sc.oneShard),
		from: sc.oneShardFrom, confirmedOnly: sc.oneShardConfirmed}
	one.init()
	s.subs = append(s.subs, one)
	if plant == bugApplyTwice || plant == bugTargetStalls {
		s.sc.playerOn = true
	}
	if s.sc.playerOn {
		s.player = newSimPlayer(s, s.sc.player)
	}
	joinRates := map[string]float64{}
	register := func(name string, quota uint64) {
		s.ld.operator(control.Command{Register: &control.RegisterCommand{
			Group: name, Replicas: groupReplicas(name, s.sc.replicas), Quota: quota}})
	}
	for i := range sc.shards {
		register(fmt.Sprintf("s%d", i), sc.quotas[i])
	}
	initial := make([]*client, sc.shards)
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
			sh := s.pick(2, func(sh *shard) bool { return sh.accepting })
			if sh == nil {
				return
			}
			sh.accepting, sh.leaving = false, true
			s.tracef("shard %d leaves", sh.id)
			s.leave(sh)
		})
	}
	if x := sc.straggle; x != nil {
		s.after(x.at, func() {
			sh := s.pick(1, func(sh *shard) bool { return sh.alive && !sh.leaving })
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
			if sh := s.pick(2, func(sh *shard) bool { return sh.accepting && sh.whole() }); sh != nil {
				s.failed = sh
				sh.fail()
			}
		})
	}
	for _, p := range sc.partitions {
		s.after(p.at, func() { s.partition(cut.ShardID(p.shard), p.dur, p.dir) })
	}
	if sc.splitAt > 0 {
		s.after(sc.splitAt, func() {
			if sh := s.pick(2, func(sh *shard) bool { return sh.alive && !sh.leaving && !sh.finalized && !sh.degraded() }); sh != nil {
				p, bks := sh.primary(), sh.backups()
				bk := bks[0]
				if len(bks) > 1 {
					bk = bks[s.r.IntN(len(bks))]
				}
				sh.split, sh.splitSeen = &[2]*copyOf{p, bk}, s.now.Add(crashReportDelay)
				s.splitShards[sh.id] = true
				s.tracef("shard %d: primary %s cut off from its backup %s", sh.id, p.server, bk.server)
			}
		})
	}
	for _, x := range sc.crashes {
		s.after(x.at, func() {
			// A crash that loses what the crashed servers did not sync
			// needs a serving server that holds it: fewer are beyond the
			// fault budget.
			sh := s.pick(2, func(sh *shard) bool {
				return sh.alive && !sh.leaving && !sh.finalized && (s.sc.sync.durable() || sh.serving() > len(x.copies))
			})
			if sh == nil {
				return
			}
			target := sh.copies[x.copies[0]]
			// A damaged file is within the fault budget only while
			// another copy holds what it damages: not once the shard
			// serves on fewer servers than it has.
			damage := x.damage && !sh.degraded()
			target.damage, target.killSource = damage, damage && x.sourceDies
			target.rejoinSourceDies, target.diesRejoining, target.primaryDies = x.rejoinSourceDies, x.diesRejoining, x.primaryDies
			if len(x.copies) == len(sh.copies) {
				// A power loss takes the whole replica group.
				s.tracef("shard %d loses power", sh.id)
			}
			if len(x.copies) == 2 && len(sh.copies) == 3 {
				s.stats.pairCrashes++
			}
			for _, c := range x.copies {
				sh.crash(sh.copies[c], x.keep, x.down)
			}
		})
	}
	for _, x := range sc.raftOneWay {
		s.after(x.at, func() { s.ld.oneWay(x.node, x.dur, x.dir) })
	}
	for _, x := range sc.raftCrashes {
		s.after(x.at, func() { s.ld.crash(x.node, x.down) })
	}
	for _, x := range sc.pauses {
		s.after(x.at, func() { s.startPause(x) })
	}
	s.after(sc.healAt, s.startProbes)
	// Once the faults stop, a one-shard subscriber's next poll tells it
	// what the lost ones did, and an operator makes sure some shard takes
	// the appends that must still complete.
	s.after(sc.healAt, s.pollStatus)
	s.after(sc.healAt, s.rescue)
	return s
}

// leave asks the ordering layer to finalize a leaving shard, and asks
// again until it is: a request the old leader took may be lost in a
// failover, and finalizing is idempotent.
func (s *cluster) leave(sh *shard) {
	if sh.finalized || s.finals[sh.id] {
		return
	}
	s.ld.operator(control.Command{Finalize: &control.FinalizeCommand{Shard: sh.id, GraceCuts: leaveGraceCuts}})
	s.after(leaveRetryEvery, func() { s.leave(sh) })
}

// leaveRetryEvery is how often a leave is asked for again until the shard
// is finalized.
const leaveRetryEvery = 50 * time.Millisecond

// leaveGraceCuts is how many more cuts a leaving shard's records may be
// ordered in (eager order; speculative order ends a leave at a window).
const leaveGraceCuts = 2

// failSoleHolder fails the shard that holds the only quota of the newest
// window, as soon as there is one, looking again every millisecond until
// the straggler stops straggling.
func (s *cluster) failSoleHolder() {
	if sp := s.ld.st.Spec; sp != nil && len(sp.Windows) > 0 {
		ws := sp.Windows
		var holders []cut.ShardID
		for _, q := range ws[len(ws)-1].Quotas {
			if q.PerCut > 0 {
				holders = append(holders, q.Shard)
			}
		}
		if len(holders) == 1 {
			if sh := s.shards[holders[0]]; sh.accepting && sh.whole() && s.now.After(sh.straggleUntil) {
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
func (s *cluster) pick(least int, ok func(*shard) bool) *shard {
	var cand []*shard
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

// netDelay is one message's delay: mostly short, sometimes a spike; with
// a spread, messages on different links overtake each other often.
func (s *cluster) netDelay() time.Duration {
	d := s.uniform(20*time.Microsecond, 150*time.Microsecond)
	if s.sc.spread > 0 {
		d += s.uniform(0, s.sc.spread)
	}
	if s.r.Float64() < max(s.sc.spikeProb, 0.01) {
		d += s.uniform(300*time.Microsecond, 3*time.Millisecond)
	}
	return d
}

// partition cuts shard id off from the leader for dur, one way or both:
// while the leader is deaf to the shard its reports are lost; while the
// shard is deaf to the leader its lag-fixes are lost and the control
// events it watches wait for the heal.
func (s *cluster) partition(id cut.ShardID, dur time.Duration, dir linkDir) {
	sh := s.shards[id]
	if sh == nil {
		return
	}
	// The safety phase ends at healAt: every partition heals by then.
	until := s.now.Add(dur)
	if heal := s.start.Add(s.sc.healAt); until.After(heal) {
		until = heal
	}
	if dir != toShardOnly && until.After(sh.deafUntil) {
		sh.deafUntil = until
		s.cutOff[id] = true
	}
	if dir != fromShardOnly && until.After(sh.muteUntil) {
		sh.muteUntil = until
	}
	s.tracef("shard %d cut off from the leader (%v) until %v", id, dir, until.Sub(s.start))
}

// faulty reports whether the run is in its safety phase, where the lossy
// channels lose and repeat messages.
func (s *cluster) faulty() bool { return s.now.Before(s.start.Add(s.sc.healAt)) }

// addReplacement registers a fresh shard in place of one a crash failed
// (Scalog's finalize-and-add).
func (s *cluster) addReplacement() {
	name := fmt.Sprintf("replacement%d", s.replacements)
	s.replacements++
	s.ld.operator(control.Command{Register: &control.RegisterCommand{
		Group: name, Replicas: groupReplicas(name, s.sc.replicas)}})
}

// rescueEvery is how often, once the faults stop, the operator looks for
// a shard that takes appends.
const rescueEvery = 10 * time.Millisecond

// rescue registers a fresh shard when none takes appends (leaves and
// failures, real or suspected, took them all), as an operator would:
// the appends still in flight need one to complete.
func (s *cluster) rescue() {
	if s.acceptingShard() == nil && !s.rescuing {
		s.rescuing = true
		name := fmt.Sprintf("rescue%d", s.rescues)
		s.rescues++
		s.tracef("no shard takes appends: registering %s", name)
		s.ld.operator(control.Command{Register: &control.RegisterCommand{
			Group: name, Replicas: groupReplicas(name, s.sc.replicas)}})
	}
	if s.now.Before(s.start.Add(s.sc.runFor - s.sc.healAt/2)) {
		s.after(rescueEvery, s.rescue)
	}
}

// deliverWatch sends a control event to shard sh on its watch stream: in
// order, and not before a partition heals.
func (s *cluster) deliverWatch(sh *shard, fn func()) {
	at := linkOf(s.ld.watch, sh.id).arrival(s.now, s.netDelay())
	if at.Before(sh.muteUntil) {
		at = linkOf(s.ld.watch, sh.id).arrival(sh.muteUntil, s.netDelay())
	}
	s.at(at, fn)
}

// checkWindow checks a window the leader plans: a shard that joined gets
// a quota in the next window.
func (s *cluster) checkWindow(quotas []fixante.Quota) {
	for _, row := range s.ld.st.Shards {
		if row.State == control.Live && !s.windowed[row.ID] && !slices.ContainsFunc(quotas, func(q fixante.Quota) bool { return q.Shard == row.ID }) {
			s.errorf("shard %d joined, but the next window leaves it out: %+v", row.ID, quotas)
		}
	}
}

// learn records the truth an applied change establishes and checks it.
func (s *cluster) learn(c control.Command, ev control.Event, snap *control.State) {
	if c.Register != nil {
		s.rescuing = false
		s.addShard(ev.Registered, c.Register.Group, c.Register.Quota, snap)
		if rate, ok := s.joinRates[c.Register.Group]; ok {
			s.startClient(ev.Registered, rate)
		}
		if snap.Spec != nil {
			for _, vd := range snap.Spec.Void {
				if vd.Filler == ev.Registered {
					s.adopted = true
					s.tracef("leader: shard %d adopts the slots of shard %d (view %d)", vd.Filler, vd.Shard, vd.View)
				}
			}
		}
	}
	if v := ev.View; v != nil {
		s.tracef("leader: view %d, confirmed-gp %d, void %+v", v.View, v.ConfirmedGP, v.Void)
		if v.ConfirmedGP != s.lastCut.End {
			s.errorf("view %d: confirmed-gp %d, but the last cut ends at %d", v.View, v.ConfirmedGP, s.lastCut.End)
		}
		s.views = append(s.views, *v)
		s.voidFrom[v.Void.Shard] = v.Void.From
		s.checkSlots(v.Void, snap)
		for _, vd := range snap.Spec.Void {
			if vd.Orphaned() {
				s.tracef("leader: no live shard fills the slots of shard %d (view %d) until one registers", vd.Shard, vd.View)
			}
		}
	}
	if snap.Spec != nil {
		s.checkFillers(snap)
	}
	cuts := ev.Cuts
	if len(cuts) == 0 && ev.Cut != nil {
		cuts = []cut.Cut{*ev.Cut}
		if snap.Spec != nil {
			s.stats.eagerCuts++ // between windows (spec.Config.EagerAbove)
		}
	}
	for _, c := range cuts {
		s.commit(c)
	}
	if ev.View != nil || len(cuts) > 0 {
		s.pollStatus()
	}
	if ev.Window != nil {
		for _, q := range ev.Window.Quotas {
			s.stats.maxQuota = max(s.stats.maxQuota, q.PerCut)
			s.windowed[q.Shard] = true
		}
		s.tracef("leader: window %d cuts [%d,%d) from %d: %+v", ev.Window.Index, ev.Window.FirstCut, ev.Window.FirstCut+ev.Window.Cuts, ev.Window.Start, ev.Window.Quotas)
	}
	for _, row := range snap.Shards {
		if row.State != control.Finalized || s.finals[row.ID] {
			continue
		}
		s.finals[row.ID] = true
		sh := s.shards[row.ID]
		if sh == nil {
			continue
		}
		s.tracef("leader: shard %d finalized at %d (failed %v)", row.ID, row.FinalLength, row.Failed)
		// The appends it will never order are answered Abandoned when
		// the shard hears of it, or resolved if its primary is down.
		sh.accepting = false
	}
}

// checkFillers checks that a live shard fills every void once one exists:
// subscribers cannot pass a void slot no live shard streams. With none
// live, a void waits for the next shard to register.
func (s *cluster) checkFillers(snap *control.State) {
	i := slices.IndexFunc(snap.Shards, func(row control.Shard) bool { return row.State == control.Live })
	if i < 0 {
		return
	}
	for _, v := range snap.Spec.Void {
		if v.Orphaned() {
			s.errorf("shard %d is live, but no live shard fills the slots of shard %d (view %d)", snap.Shards[i].ID, v.Shard, v.View)
		}
	}
}

// checkSlots checks the void's slots against the window arithmetic: the
// failed shard's entries from From on, located in each announced window.
func (s *cluster) checkSlots(v control.Void, snap *control.State) {
	var want []fixante.Range
	for _, w := range snap.Spec.Windows {
		want = append(want, voidRanges(w, v.Shard, v.From)...)
	}
	// The void lists one range per cut; ranges of adjacent cuts touch when
	// the failed shard was the only one with a quota.
	if got := coalesce(v.Slots); !slices.Equal(coalesce(want), got) {
		s.errorf("void of shard %d from %d: slots %v, windows locate %v", v.Shard, v.From, got, want)
	}
}

// coalesce merges touching ranges.
func coalesce(rs []fixante.Range) []fixante.Range {
	var out []fixante.Range
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].Start+out[n-1].Count == r.Start {
			out[n-1].Count += r.Count
			continue
		}
		out = append(out, r)
	}
	return out
}

// voidRanges locates shard's entries in w from local index from on, as
// runs of consecutive positions.
func voidRanges(w fixante.Window, shard cut.ShardID, from uint64) []fixante.Range {
	q, ok := w.Quota(shard)
	if !ok {
		return nil
	}
	end, _ := w.ShardEnd(shard)
	var out []fixante.Range
	for l := max(from, q.Base); l < end; l++ {
		pos, _, ok := w.Locate(shard, l)
		if !ok {
			break
		}
		if n := len(out); n > 0 && out[n-1].Start+out[n-1].Count == pos {
			out[n-1].Count++
			continue
		}
		out = append(out, fixante.Range{Start: pos, Count: 1})
	}
	return out
}

// commit extends the sequence with one committed cut: Scalog's
// interleaving of the shards' logs, no-ops included, a failed shard's
// entries after its void point counting as no-ops. Whether a record is
// ordered twice is for check.StoredOnce to say.
func (s *cluster) commit(c cut.Cut) {
	parts, err := cut.Interleave(s.lastCut, c)
	if err != nil {
		s.errorf("cut %d: %v", c.Index, err)
		return
	}
	if uint64(len(s.eager)) != c.Start {
		s.errorf("cut %d starts at %d, the sequence holds %d", c.Index, c.Start, len(s.eager))
	}
	if s.raftPowerLoss && !s.raftPowerLost && s.now.After(s.start.Add(50*time.Millisecond)) &&
		s.now.Sub(s.start)%raftWritebackEvery >= raftWritebackEvery/2 {
		// The power fails on every ordering replica as this cut commits,
		// at least half a writeback interval after the opt-out's last
		// writeback (the same moment under either setting): cuts commit
		// often enough that one just after a writeback would find the
		// WAL already on disk, and the run would test nothing.
		s.raftPowerLost = true
		s.after(0, func() { s.ld.powerLoss(5 * time.Millisecond) })
	}
	for _, sl := range parts {
		sh := s.shards[sl.Shard]
		from, void := s.voidFrom[sl.Shard]
		// A failed shard's entries from its void point on are no-ops of
		// the new view, whatever its copies hold there: nothing there
		// needs a fsync (a paused primary's group commit may never have
		// synced them).
		end := sl.LocalStart + sl.Count
		if void {
			end = min(end, from)
		}
		if sh != nil && end > sl.LocalStart {
			sh.checkSynced(c.Index, end)
		}
		if s.powerLoss && !s.powerLost && sl.Count > 0 && sh != nil && sh.alive && !sh.leaving &&
			s.now.After(s.start.Add(50*time.Millisecond)) {
			// The power fails on the shard's servers as the cut commits,
			// before they hear of it: the entries it orders must survive
			// in their logs.
			s.powerLost = true
			s.tracef("shard %d loses power", sh.id)
			for _, c := range sh.copies {
				sh.crash(c, 0, 5*time.Millisecond)
			}
		}
		for k := uint64(0); k < sl.Count; k++ {
			local := sl.LocalStart + k
			pos := sl.GlobalStart + k
			e := noop
			switch {
			case void && local >= from:
			case sh == nil || local >= sh.durable:
				s.errorf("cut %d orders entry %d of shard %d, which is not durable", c.Index, local, sl.Shard)
				return
			default:
				e = sh.log[local]
			}
			if _, dup := s.orderedAt[e]; e != noop && !dup {
				s.orderedAt[e] = pos
				if s.plant == bugRetryTwice && !s.planted && s.shards[sl.Shard].accepting {
					// A client that forgot its identity retries an
					// ordered append: the shard's dedup cannot tell.
					s.planted = true
					s.after(time.Millisecond, func() { s.shards[sl.Shard].appendRecord(e, forgetfulClient) })
				}
			}
			s.eager = append(s.eager, e)
			s.eagerShard = append(s.eagerShard, sl.Shard)
		}
	}
	s.lastCut = c
	s.cutHist = append(s.cutHist, c)
	s.cutCount++
}

// pollStatus has each one-shard subscriber hear, a poll later, what the
// cluster status says now: every view change and the committed end. Its
// own shard's stream cannot tell it of that shard's failure, nor, once
// the shard is dead or gone, of later cuts. A poll may be lost; a later
// one says the same and more.
func (s *cluster) pollStatus() {
	var views []*viewMsg
	for _, v := range s.views {
		views = append(views, &viewMsg{view: v.View, cgp: v.ConfirmedGP, failed: v.Void.Shard})
	}
	end := s.lastCut.End
	for _, sb := range s.subs {
		if !sb.oneShard {
			continue
		}
		if s.faulty() && s.r.Float64() < s.sc.pollLoss {
			s.stats.lostPolls++
			continue
		}
		s.after(statusPollDelay, func() { sb.on(&subMsg{shard: sb.shard, views: views, confirm: end, status: true}) })
	}
}

// name returns the name of record id in the history.
func (s *cluster) name(id int64) string { return s.recs[id].name }

func recordName(id int64) string { return "r" + strconv.FormatInt(id, 10) }

// recordID returns the id recordName named.
func recordID(name string) int64 {
	id, err := strconv.ParseInt(strings.TrimPrefix(name, "r"), 10, 64)
	if err != nil {
		panic("sim: not a record name: " + name)
	}
	return id
}

// pbRecord returns record id as the wire carries it: its name as the key.
func (s *cluster) pbRecord(id int64) *pb.Record {
	if s.pbRecs == nil {
		s.pbRecs = map[int64]*pb.Record{}
	}
	r, ok := s.pbRecs[id]
	if !ok {
		r = &pb.Record{Key: s.name(id)}
		s.pbRecs[id] = r
	}
	return r
}
