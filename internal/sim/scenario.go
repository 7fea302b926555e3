package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/augur-log/augur/internal/spec"
)

// The scenario generator: each seed picks its own mix of load, membership
// changes, failures and network faults.

type burst struct {
	shard    int // index among the initial shards
	at, dur  time.Duration
	multiply float64
}

type rateChange struct {
	shard  int
	at     time.Duration
	factor float64
}

type join struct {
	at    time.Duration
	rate  float64
	quota uint64
}

type straggle struct {
	at, dur, extra time.Duration
}

// partition cuts one shard off from the ordering leader for a while, both
// ways: its reports, heartbeats and lag-fixes are lost, and the control
// events it watches wait until the partition heals (the watch resumes
// where it stopped).
type partition struct {
	shard   int // index among the initial shards
	at, dur time.Duration
	dir     linkDir
}

// linkDir says which way a partition cuts a link.
type linkDir int

const (
	// bothWays: neither end hears the other.
	bothWays linkDir = iota
	// fromShardOnly: the leader does not hear the shard, which hears the
	// leader (a one-way link).
	fromShardOnly
	// toShardOnly: the shard does not hear the leader, which hears the
	// shard.
	toShardOnly
)

func (d linkDir) String() string {
	switch d {
	case fromShardOnly:
		return "leader deaf to the shard"
	case toShardOnly:
		return "shard deaf to the leader"
	}
	return "both ways"
}

// crash crashes storage servers of a live shard at once: copies are the
// crashed copies' indexes (primaryCopy is the primary at registration),
// all of them a power loss (only with the durable default, which promises
// to survive it); keep is how many whole unsynced frames each log keeps
// (a torn write), down how long until they restart.
type crash struct {
	at, down time.Duration
	// kind is what the seed drew (crashPrimary, crashBackup, crashAll),
	// which planCopies turns into copies once the shard size is known.
	kind   int
	copies []int
	keep   int
	// damage restarts the crashed server with a range of its log
	// damaged, which it repairs from the other copy; sourceDies crashes
	// that copy after the repair's first batch (see planDamage).
	damage, sourceDies bool
	// rejoinSourceDies crashes the source of the rejoin that follows the
	// restart after its first batch, diesRejoining the rejoining copy
	// (see planRejoin).
	rejoinSourceDies, diesRejoining bool
	primaryDies                     primaryDeath
}

// primaryDeath says when a rejoin's primary crashes: never, as the
// configuration that takes the copy back in commits (before the primary
// resent what the copy lacks), or once the copy is confirmed (in eager
// order, the same).
type primaryDeath int

const (
	primaryLives primaryDeath = iota
	primaryDiesAtJoin
	primaryDiesAtConfirm
)

// What a crash takes, as drawn.
const (
	crashPrimary = iota
	crashBackup
	crashAll
	crashKinds
)

// raftCrash crashes ordering replica node for down.
type raftCrash struct {
	at, down time.Duration
	node     int
}

// raftOneWay cuts ordering replica node's links one way for dur: dir is
// fromShardOnly (the others do not hear it) or toShardOnly (it does not
// hear them).
type raftOneWay struct {
	at, dur time.Duration
	node    int
	dir     linkDir
}

type scenario struct {
	// The cluster file's mode parameters (see mode.Params).
	mode         Mode
	interval     time.Duration
	windowCuts   uint64
	staggerAbove int
	// eagerAbove is the leader's spec.Config.EagerAbove: 0 (never eager
	// cuts), the default, or nearly always once rates are measured.
	eagerAbove float64
	// failureTimeout is how long a storage server may stay silent before
	// the leader's failure detector finalizes its shards.
	failureTimeout time.Duration
	// replicas is how many storage servers each group has: the copies of
	// its shard (copiesMin or copiesMax).
	replicas int

	shards    int
	rates     []float64 // records per millisecond, per initial shard
	quotas    []uint64  // requested at registration
	appendFor time.Duration
	// healAt ends the safety phase: no fault starts or lasts past it, so
	// the cluster must converge by runFor.
	healAt time.Duration
	runFor time.Duration

	bursts      []burst
	rateChanges []rateChange
	joins       []join
	leaves      []time.Duration
	straggle    *straggle
	failAt      time.Duration // 0: no whole-shard failure
	// failSoleHolder times the whole-shard failure for when the failing
	// shard is the only one with a quota in the newest window, the other
	// excluded as a straggler: a filler must then come from the shards
	// without a quota.
	failSoleHolder bool
	failoverAt     time.Duration // 0: no leader failover
	electionGap    time.Duration
	heartbeat      time.Duration

	// Network faults (Faults picks which may happen).
	//
	// spikeProb is the chance a message is delayed by a spike; spread
	// widens every delay, so messages on different links overtake each
	// other more often.
	spikeProb float64
	spread    time.Duration
	// lagFixLoss, reportLoss and pollLoss drop messages on the lossy
	// channels: lag-fixes (dropped when the stream cannot take them),
	// reports (a later report supersedes a lost one) and status polls.
	lagFixLoss, reportLoss, pollLoss float64
	// reportDup repeats a report (a heartbeat resent on reconnection).
	reportDup float64
	// dupProb makes a subscription stream reconnect and repeat a stretch
	// of what it sent.
	dupProb    float64
	partitions []partition
	raftOneWay []raftOneWay
	// splitAt, if not 0, cuts a shard's primary off from one of its
	// backups for good (a partition between two storage servers).
	splitAt time.Duration
	// crashes and raftCrashes crash and restart storage and ordering
	// servers.
	crashes     []crash
	raftCrashes []raftCrash
	// pauses stop storage servers without a crash (see pause.go).
	pauses []pause
	// sync is the storage servers' fsync policy, syncEvery its interval.
	sync      syncPolicy
	syncEvery time.Duration

	subs     int
	eagerSub bool
	lateFrom uint64
	// oneShard is the index of the shard an extra subscriber follows
	// alone, from oneShardFrom, confirmed-only if oneShardConfirmed.
	oneShard          int
	oneShardFrom      uint64
	oneShardConfirmed bool

	// player is the exactly-once player's scenario, run when playerOn.
	player   *playerScenario
	playerOn bool
}

func newScenario(r *rand.Rand, mode Mode, f Faults) scenario {
	t := time.Millisecond
	sc := scenario{
		mode:         mode,
		interval:     t,
		windowCuts:   []uint64{6, 8, 12, 16, 32}[r.IntN(5)],
		staggerAbove: spec.DefaultConfig(t).StaggerAbove,
		shards:       2 + r.IntN(3),
		appendFor:    250 * t,
		healAt:       300 * t,
		runFor:       600 * t,
		subs:         2 + r.IntN(2),
		eagerSub:     r.IntN(2) == 0,
		dupProb:      []float64{0, 0, 0.02}[r.IntN(3)],
		lagFixLoss:   []float64{0, 0, 0.2}[r.IntN(3)],
	}
	// Whole-shard failures are detected after the failure timeout; the
	// default's one-second floor would only make runs longer.
	sc.failureTimeout = 150 * t
	if r.IntN(3) == 0 {
		sc.staggerAbove = 2
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
		sc.bursts = append(sc.bursts, burst{
			shard: r.IntN(sc.shards), at: time.Duration(10+r.IntN(200)) * t,
			dur: time.Duration(3+r.IntN(20)) * t, multiply: 4 + 8*r.Float64(),
		})
	}
	if r.IntN(2) == 0 {
		f := 0.3 + 0.4*r.Float64()
		if r.IntN(2) == 0 {
			f = 2 + 2*r.Float64()
		}
		sc.rateChanges = append(sc.rateChanges, rateChange{shard: r.IntN(sc.shards), at: time.Duration(20+r.IntN(150)) * t, factor: f})
	}
	for range r.IntN(3) {
		sc.joins = append(sc.joins, join{at: time.Duration(10+r.IntN(180)) * t, rate: 0.3 + 4*r.Float64(), quota: uint64(r.IntN(5))})
	}
	for range r.IntN(2) + r.IntN(2) {
		sc.leaves = append(sc.leaves, time.Duration(20+r.IntN(200))*t)
	}
	if r.IntN(4) == 0 {
		// A leave once the appends stopped: the shards have gone idle.
		sc.leaves = append(sc.leaves, sc.appendFor+time.Duration(20+r.IntN(100))*t)
	}
	if r.IntN(3) == 0 {
		sc.straggle = &straggle{at: time.Duration(10+r.IntN(120)) * t, dur: time.Duration(30+r.IntN(60)) * t, extra: time.Duration(12+r.IntN(20)) * t}
	}
	if r.IntN(3) == 0 {
		sc.failAt = time.Duration(30+r.IntN(150)) * t
	}
	if r.IntN(12) == 0 && mode == Spec {
		// Two shards, one straggling long enough to be excluded; the
		// other fails once it holds the newest window's only quota.
		sc.shards, sc.rates, sc.quotas, sc.joins, sc.leaves = 2, sc.rates[:2], sc.quotas[:2], nil, nil
		for i := range sc.bursts {
			sc.bursts[i].shard %= 2
		}
		for i := range sc.rateChanges {
			sc.rateChanges[i].shard %= 2
		}
		sc.straggle = &straggle{at: time.Duration(10+r.IntN(40)) * t, dur: 150 * t, extra: time.Duration(12+r.IntN(20)) * t}
		sc.failAt, sc.failSoleHolder = sc.straggle.at, true
	}
	sc.heartbeat = sc.failureTimeout / 5
	if r.IntN(4) == 0 {
		sc.failoverAt = time.Duration(10+r.IntN(220)) * t
		sc.electionGap = time.Duration(1+r.IntN(10)) * t
	}
	sc.oneShard = r.IntN(sc.shards)
	if r.IntN(3) == 0 {
		sc.oneShardFrom = uint64(r.IntN(200))
	}
	sc.oneShardConfirmed = r.IntN(4) == 0

	// Network faults, each behind its switch; the draws happen either
	// way, so a seed's other choices do not depend on the switches.
	spike, spread := []float64{0.01, 0.01, 0.05}[r.IntN(3)], time.Duration(r.IntN(3))*400*time.Microsecond
	reportLoss, reportDup, pollLoss := []float64{0, 0.05, 0.3}[r.IntN(3)], []float64{0, 0.05}[r.IntN(2)], []float64{0, 0.2}[r.IntN(2)]
	var parts []partition
	for range r.IntN(3) {
		parts = append(parts, partition{shard: r.IntN(sc.shards), at: time.Duration(10+r.IntN(200)) * t,
			dur: []time.Duration{5 * t, 40 * t, 90 * t}[r.IntN(3)] + time.Duration(r.IntN(20))*t, dir: linkDir(r.IntN(3))})
	}
	var oneWays []raftOneWay
	for range r.IntN(2) {
		oneWays = append(oneWays, raftOneWay{at: time.Duration(10+r.IntN(250)) * t, dur: time.Duration(1+r.IntN(30)) * t,
			node: r.IntN(replicasN), dir: fromShardOnly + linkDir(r.IntN(2))})
	}
	var crashes []crash
	for range r.IntN(3) {
		crashes = append(crashes, crash{at: time.Duration(15+r.IntN(220)) * t, kind: r.IntN(crashKinds), keep: r.IntN(3),
			down: time.Duration(2+r.IntN(60)) * t})
	}
	var raftCrashes []raftCrash
	for range r.IntN(3) {
		raftCrashes = append(raftCrashes, raftCrash{at: time.Duration(10+r.IntN(250)) * t, node: r.IntN(replicasN),
			down: time.Duration(1+r.IntN(40)) * t})
	}
	if r.IntN(3) == 0 {
		sc.sync, sc.syncEvery = syncInterval, time.Duration(200+r.IntN(2800))*time.Microsecond
	}
	var splitAt time.Duration
	if r.IntN(3) == 0 {
		splitAt = time.Duration(15+r.IntN(200)) * t
	}
	if f.Delay {
		sc.spikeProb = spike
	}
	if f.Reorder {
		sc.spread = spread
	}
	if f.Loss {
		sc.reportLoss, sc.reportDup, sc.pollLoss = reportLoss, reportDup, pollLoss
	} else {
		sc.lagFixLoss, sc.dupProb = 0, 0
	}
	if f.Partition {
		sc.partitions, sc.raftOneWay, sc.splitAt = parts, oneWays, splitAt
	}
	if f.Crash {
		sc.crashes, sc.raftCrashes = crashes, raftCrashes
	}
	for i := range sc.crashes {
		if sc.crashes[i].kind == crashAll && !sc.sync.durable() {
			// Beyond the budget: another replica holds what a crash
			// loses unsynced, unless all crash.
			sc.crashes[i].kind = crashPrimary
		}
	}
	if mode != Spec {
		sc.lagFixLoss = 0
	}
	sc.player, sc.playerOn = newPlayerScenario(r, f, sc.healAt)
	return sc
}

// planCopies sets the copies per shard to n and turns each crash's kind
// into the copies it takes, drawing from its own random source so that the
// rest of the scenario stays as the seed drew it. A shard of three may
// lose a backup of its choosing, and some crashes take two copies at once
// (the third holds everything durable).
func (sc *scenario) planCopies(n int, r *rand.Rand) {
	sc.replicas = n
	for i := range sc.crashes {
		x := &sc.crashes[i]
		switch x.kind {
		case crashAll:
			for c := range n {
				x.copies = append(x.copies, c)
			}
			continue
		case crashPrimary:
			x.copies = []int{primaryCopy}
		default:
			x.copies = []int{1 + r.IntN(n-1)}
		}
		if n > copiesMin && r.IntN(3) == 0 {
			other := (x.copies[0] + 1 + r.IntN(n-1)) % n
			x.copies = append(x.copies, other)
		}
	}
}

// copyNames says which copies a crash takes.
func (x crash) copyNames(n int) string {
	if len(x.copies) == n {
		return "servers"
	}
	var names []string
	for _, c := range x.copies {
		if c == primaryCopy {
			names = append(names, "primary")
		} else {
			names = append(names, "backup "+itoa(c))
		}
	}
	return strings.Join(names, " and ")
}

func (sc scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d servers per shard; ", sc.replicas)
	if sc.mode == Spec {
		fmt.Fprintf(&b, "%d shards (rates %.2f/ms, quotas %v), W=%d, stagger above %d, %d subscribers (confirmed only %v, late from %d) and one of shard #%d (from %d, confirmed only %v)",
			sc.shards, sc.rates, sc.quotas, sc.windowCuts, sc.staggerAbove, sc.subs, sc.eagerSub, sc.lateFrom, sc.oneShard, sc.oneShardFrom, sc.oneShardConfirmed)
		fmt.Fprintf(&b, ", eager cuts above %.2f fills per record", sc.eagerAbove)
	} else {
		fmt.Fprintf(&b, "%d shards (rates %.2f/ms), %d subscribers (late from %d) and one of shard #%d (from %d)",
			sc.shards, sc.rates, sc.subs, sc.lateFrom, sc.oneShard, sc.oneShardFrom)
	}
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
	if sc.spikeProb > 0 {
		fmt.Fprintf(&b, "; delay spikes %.0f%%", 100*sc.spikeProb)
	}
	if sc.spread > 0 {
		fmt.Fprintf(&b, "; delay spread +%v", sc.spread)
	}
	if sc.lagFixLoss > 0 {
		fmt.Fprintf(&b, "; lag-fix loss %.0f%%", 100*sc.lagFixLoss)
	}
	if sc.reportLoss > 0 || sc.reportDup > 0 {
		fmt.Fprintf(&b, "; report loss %.0f%%, repeats %.0f%%", 100*sc.reportLoss, 100*sc.reportDup)
	}
	if sc.pollLoss > 0 {
		fmt.Fprintf(&b, "; status poll loss %.0f%%", 100*sc.pollLoss)
	}
	if sc.dupProb > 0 {
		fmt.Fprintf(&b, "; stream repeats %.0f%%", 100*sc.dupProb)
	}
	for _, p := range sc.partitions {
		fmt.Fprintf(&b, "; partition of #%d from the leader at %v for %v (%v)", p.shard, p.at, p.dur, p.dir)
	}
	if sc.splitAt > 0 {
		fmt.Fprintf(&b, "; a shard's primary cut off from a backup at %v", sc.splitAt)
	}
	for _, x := range sc.raftOneWay {
		fmt.Fprintf(&b, "; ordering replica %d %s at %v for %v", x.node+1, map[linkDir]string{fromShardOnly: "unheard", toShardOnly: "deaf"}[x.dir], x.at, x.dur)
	}
	fmt.Fprintf(&b, "; fsync %v", sc.sync)
	if sc.sync == syncInterval {
		fmt.Fprintf(&b, " every %v", sc.syncEvery)
	}
	for _, x := range sc.crashes {
		fmt.Fprintf(&b, "; a shard's %s crash at %v (keep %d unsynced frames), restart %v later", x.copyNames(sc.replicas), x.at, x.keep, x.down)
		if x.damage {
			b.WriteString(" with a damaged file")
		}
		if x.sourceDies {
			b.WriteString(", whose repair's source dies mid-copy")
		}
	}
	for _, x := range sc.raftCrashes {
		fmt.Fprintf(&b, "; ordering replica %d crashes at %v for %v", x.node+1, x.at, x.down)
	}
	for _, x := range sc.pauses {
		fmt.Fprintf(&b, "; %v", x)
	}
	if sc.playerOn {
		b.WriteString(sc.player.String())
	}
	return b.String()
}
