package sim

// Lazy order in the simulator: the cores of package lazy — sequencing
// replicas (one of them leading the background orderer), shard replicas
// (primary and backup), the control plane's view change — driven over a
// simulated network with delay, reorder and loss, through crashes of
// sequencing replicas (the leader included), shard replicas and clients,
// then healed. The control plane is the ordering replicas' (lazyctl.go):
// lazy.Control over etcd raft, through crashes and a cut-off leader.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/augur-log/augur/internal/check"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
)

// Lazy is LazyLog's lazy order (Erwin-st): one-round-trip appends, ordered
// in the background, read below stable-gp.
const Lazy Mode = "lazy"

// Bounds and timings of a lazy run.
const (
	lazyBatchMax     = 8
	lazyRingMax      = 64
	lazyInflightMax  = 2
	lazyNoopAfter    = 2 * time.Millisecond
	lazyDetectAfter  = 3 * time.Millisecond
	lazyResendEvery  = 2 * time.Millisecond
	lazyRetryEvery   = 2 * time.Millisecond
	lazyReadDeadline = 8 * time.Millisecond
	lazyScrubEvery   = 5 * time.Millisecond
)

// lazyScenario is what a seed chose.
type lazyScenario struct {
	shards, seqs, clients, readers int
	// faultyFor is the safety phase; appends stop at stopAppends; the run
	// ends at runFor.
	faultyFor, stopAppends, runFor time.Duration
	appendEvery                    time.Duration
	orderEvery                     time.Duration
	delayLo, delayHi               time.Duration
	spikeOneIn                     int
	lossOneIn                      int
	reorder                        bool
	crashes                        []lazyCrash
	// addShardAt is when a shard is added (registered through Raft, as
	// `augur shard add` does); loseShardAt when every replica of a shard
	// dies for good, so that it is finalized. Zero: not in this run.
	addShardAt, loseShardAt time.Duration
}

type lazyCrashKind int

const (
	crashSeqLeader lazyCrashKind = iota
	crashSeqFollower
	crashShardPrimary
	crashShardBackup
	crashClient
	crashOrdLeader
	crashOrdFollower
	cutOffOrdLeader
	lazyCrashKinds
)

func (k lazyCrashKind) String() string {
	return [...]string{"sequencing leader", "sequencing follower", "shard primary", "shard backup", "client",
		"ordering leader", "ordering follower", "cut off ordering leader"}[k]
}

type lazyCrash struct {
	kind     lazyCrashKind
	at, down time.Duration
}

func newLazyScenario(r *rand.Rand, f Faults) lazyScenario {
	sc := lazyScenario{
		shards: 1 + r.IntN(3), seqs: 2 + r.IntN(2), clients: 3, readers: 2,
		faultyFor: 60 * time.Millisecond,
		delayLo:   50 * time.Microsecond, delayHi: 250 * time.Microsecond,
		appendEvery: time.Duration(150+r.IntN(450)) * time.Microsecond,
		orderEvery:  time.Duration(300+r.IntN(700)) * time.Microsecond,
	}
	sc.stopAppends = sc.faultyFor + 10*time.Millisecond
	sc.runFor = sc.stopAppends + 60*time.Millisecond
	if f.Delay {
		sc.spikeOneIn = 20
	}
	if f.Reorder {
		sc.reorder = true
		sc.delayHi = 600 * time.Microsecond
	}
	if f.Loss {
		sc.lossOneIn = 30
	}
	if f.Crash {
		for range 2 + r.IntN(4) {
			sc.crashes = append(sc.crashes, lazyCrash{
				kind: lazyCrashKind(r.IntN(int(lazyCrashKinds))),
				at:   time.Duration(3+r.IntN(int(sc.faultyFor/time.Millisecond)-13)) * time.Millisecond,
				down: time.Duration(2+r.IntN(12)) * time.Millisecond,
			})
		}
	}
	if r.IntN(3) == 0 {
		sc.addShardAt = time.Duration(5+r.IntN(40)) * time.Millisecond
	}
	if f.Crash && r.IntN(3) == 0 {
		sc.loseShardAt = time.Duration(5+r.IntN(40)) * time.Millisecond
	}
	return sc
}

func (sc lazyScenario) String() string {
	s := fmt.Sprintf("%d shards, %d sequencing replicas, %d clients (an append every %v), order every %v, delay %v–%v",
		sc.shards, sc.seqs, sc.clients, sc.appendEvery, sc.orderEvery, sc.delayLo, sc.delayHi)
	if sc.spikeOneIn > 0 {
		s += fmt.Sprintf(", spikes 1/%d", sc.spikeOneIn)
	}
	if sc.reorder {
		s += ", reordered"
	}
	if sc.lossOneIn > 0 {
		s += fmt.Sprintf(", loss 1/%d", sc.lossOneIn)
	}
	for _, c := range sc.crashes {
		s += fmt.Sprintf("; crash %v at %v for %v", c.kind, c.at, c.down)
	}
	if sc.addShardAt > 0 {
		s += fmt.Sprintf("; a shard added at %v", sc.addShardAt)
	}
	if sc.loseShardAt > 0 {
		s += fmt.Sprintf("; every replica of a shard dies for good at %v", sc.loseShardAt)
	}
	return s
}

// lazyStats counts what a run did.
type lazyStats struct {
	acked, unknown, batches, views, noops, scrubbed   uint64
	seqCrashes, leaderCrashes, shardCrashes, clientCr uint64
	fastReads, slowReads, readTimeouts, lost, dups    uint64
	failovers                                         uint64
	// rejoins counts the replicas taken back into their configuration;
	// sourceDeaths the primaries that died while a replica copied their
	// log; primaryDeathsOnJoin those that died as a replica rejoined.
	rejoins, sourceDeaths, primaryDeathsOnJoin uint64
	// ringFull counts the appends a full sequencing ring pushed back.
	ringFull uint64
	// ordCrashes and ordPartitions count the ordering replicas' crashes
	// and the leaders cut off from the others.
	ordCrashes, ordPartitions uint64
	// added counts the shards added mid-run; lostAcked the acknowledged
	// appends lost with a shard whose every replica died.
	added, lostAcked uint64
}

// node is a process of the run: it receives a message only in the
// incarnation it was sent to.
type node struct {
	name string
	up   bool
	inc  int
}

// lazyRun is one seeded run of lazy order.
type lazyRun struct {
	world
	f       Faults
	sc      lazyScenario
	plant   bug
	planted bool

	// The control plane: the ordering replicas' raft, each replica's
	// node and control plane; truth is the committed control state as the
	// world learns it (each entry applied once, when the first replica
	// applies it).
	raft *raftGroup
	ords []*ordNode
	// lead is the ordering replica raft elected last (nil while none
	// leads, or while the last one is cut off or down).
	lead       *ordNode
	truth      *control.State
	truthIndex uint64
	terms      int
	proposals  int

	seqs    []*seqNode
	shards  [][]*shardNode
	clients []*lazyClient
	readers []*lazyReader
	links   map[[2]string]*link

	// shardConf is each shard's configuration (lazyfailover.go).
	shardConf []lazyShardConf

	recs   []lazyRec
	byID   map[lazy.RecordID]int
	reads  []check.Read
	noopRd []check.Read
	stats  lazyStats

	// replicas is how many servers each shard has (2 or 3).
	replicas int
	// lost is the shard whose every replica died for good (-1: none);
	// finalizedAt is when the control state finalized it, and endAt the
	// stable end the live shards served then.
	lost        int
	finalizedAt time.Duration
	endAt       uint64
}

// lazyRec is one append as its client saw it.
type lazyRec struct {
	id           lazy.RecordID
	name         string
	shard        cut.ShardID
	call, ret    time.Duration
	acked, known bool
}

func newLazyRun(seed uint64, f Faults, replicas int, trace func(string), plant bug) *lazyRun {
	r := rand.New(rand.NewPCG(seed, 0x1a2e))
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &lazyRun{
		world: world{seed: seed, r: r, start: start, now: start, trace: trace},
		f:     f, sc: newLazyScenario(r, f), plant: plant,
		links: map[[2]string]*link{}, byID: map[lazy.RecordID]int{}, lost: -1, replicas: replicas,
	}
	for i := range w.sc.seqs {
		q := &seqNode{node: node{name: fmt.Sprintf("q%d", i), up: true}, w: w, id: lazy.ReplicaID(i + 1)}
		q.core = lazy.NewSequencer(lazy.SequencerConfig{RingMax: lazyRingMax}, lazy.SequencerState{})
		w.seqs = append(w.seqs, q)
	}
	for s := range w.sc.shards {
		conf := lazyShardConf{epoch: 1}
		var reps []*shardNode
		for j := range replicas {
			conf.members = append(conf.members, j)
			n := &shardNode{node: node{name: shardNodeName(cut.ShardID(s), j), up: true}, w: w, shard: cut.ShardID(s), idx: j}
			reps = append(reps, n)
		}
		w.shardConf = append(w.shardConf, conf)
		w.shards = append(w.shards, reps)
	}
	for _, n := range w.allShardNodes() {
		n.boot()
	}
	// The control plane records the first view and starts it.
	w.startOrdering()
	for range w.sc.clients {
		w.addClient()
	}
	for i := range w.sc.readers {
		rd := &lazyReader{node: node{name: fmt.Sprintf("r%d", i), up: true}, w: w}
		w.readers = append(w.readers, rd)
		w.after(w.uniform(0, time.Millisecond), rd.step)
	}
	for _, c := range w.sc.crashes {
		w.at(w.start.Add(c.at), func() { w.crash(c) })
	}
	if w.sc.addShardAt > 0 {
		w.at(w.start.Add(w.sc.addShardAt), w.addShard)
	}
	if w.sc.loseShardAt > 0 {
		w.at(w.start.Add(w.sc.loseShardAt), w.loseShard)
	}
	return w
}

// liveShards are the shards of the shard table (as the world learned it)
// that may still grow.
func (w *lazyRun) liveShards() []cut.ShardID {
	var out []cut.ShardID
	for _, row := range w.truth.Shards {
		if row.State != control.Finalized {
			out = append(out, row.ID)
		}
	}
	return out
}

// addShard registers a new shard of the run's replica count through the ordering
// leader's Raft, as `augur shard add` (or a storage group registering)
// does; its replicas start once the registration is applied (syncShards).
// A proposal lost with its leader is made again.
func (w *lazyRun) addShard() {
	id := w.truth.NextShardID
	if int(id) > w.sc.shards {
		return
	}
	if o := w.lead; o != nil && o.ctl != nil {
		o.propose(control.Command{Register: &control.RegisterCommand{Group: "sim", Replicas: w.shardReplicas(id)}})
	}
	w.after(3*lazyDetectAfter, w.addShard)
}

// loseShard kills every replica of a live shard for good (not the last
// live shard); the failure detector takes them out, and the last removal
// finalizes the shard.
func (w *lazyRun) loseShard() {
	if !w.faulty() {
		return
	}
	live := w.liveShards()
	var cands []cut.ShardID
	for _, s := range live {
		// Every replica in its configuration, caught up and running: a
		// shard whose replicas are all alive dies at once.
		if int(s) < len(w.shards) && len(w.members(s)) == len(w.shards[s]) && len(w.shardConf[s].pending) == 0 &&
			!slices.ContainsFunc(w.shards[s], func(n *shardNode) bool { return !n.up || n.doomed }) {
			cands = append(cands, s)
		}
	}
	if len(live) < 2 || len(cands) == 0 {
		w.after(2*time.Millisecond, w.loseShard)
		return
	}
	s := cands[w.r.IntN(len(cands))]
	w.lost = int(s)
	w.tracef("shard %d: every replica dies for good", s)
	for _, n := range w.shards[s] {
		n.gone = true
		w.crashShard(n, 0)
	}
}

func (w *lazyRun) faulty() bool { return w.now.Before(w.start.Add(w.sc.faultyFor)) }

func (w *lazyRun) elapsed() time.Duration { return w.now.Sub(w.start) }

// send delivers fn at to after the network's delay, unless it is lost or
// to restarted (or is down) by then.
func (w *lazyRun) send(from string, to *node, fn func()) {
	if w.faulty() && w.sc.lossOneIn > 0 && w.r.IntN(w.sc.lossOneIn) == 0 {
		w.stats.lost++
		return
	}
	d := w.uniform(w.sc.delayLo, w.sc.delayHi)
	if w.faulty() && w.sc.spikeOneIn > 0 && w.r.IntN(w.sc.spikeOneIn) == 0 {
		d += w.uniform(0, 3*time.Millisecond)
	}
	at := w.now.Add(d)
	if !w.sc.reorder {
		k := [2]string{from, to.name}
		l := w.links[k]
		if l == nil {
			l = &link{}
			w.links[k] = l
		}
		at = l.arrival(w.now, d)
	}
	inc := to.inc
	w.at(at, func() {
		if to.up && to.inc == inc {
			fn()
		}
	})
}

// every runs fn every d while n lives in the incarnation it has now.
func (w *lazyRun) every(n *node, d time.Duration, fn func()) {
	inc := n.inc
	var loop func()
	loop = func() {
		if !n.up || n.inc != inc {
			return
		}
		fn()
		w.after(d, loop)
	}
	w.after(d, loop)
}

func (w *lazyRun) shardIDs() []cut.ShardID {
	ids := make([]cut.ShardID, len(w.shards))
	for i := range ids {
		ids[i] = cut.ShardID(i)
	}
	return ids
}

func (w *lazyRun) seq(id lazy.ReplicaID) *seqNode { return w.seqs[id-1] }

// crash carries out one crash of the scenario, if the cluster can take it
// now (one sequencing replica down at a time, none during a view change,
// a survivor left); otherwise it tries again a little later.
func (w *lazyRun) crash(c lazyCrash) {
	if !w.faulty() {
		return
	}
	retry := func() { w.after(2*time.Millisecond, func() { w.crash(c) }) }
	switch c.kind {
	case crashSeqLeader, crashSeqFollower:
		if !w.canCrashSeq() {
			retry()
			return
		}
		cfg := w.truth.Lazy
		victim := w.seq(cfg.Leader)
		if c.kind == crashSeqFollower {
			for _, id := range cfg.Replicas {
				if id != cfg.Leader {
					victim = w.seq(id)
					break
				}
			}
		} else {
			w.stats.leaderCrashes++
		}
		w.stats.seqCrashes++
		victim.crash(c.down)
	case crashShardPrimary, crashShardBackup:
		s := cut.ShardID(w.r.IntN(len(w.shards)))
		sh := w.members(s)
		if len(sh) < 2 {
			retry()
			return
		}
		n := sh[0]
		if c.kind == crashShardBackup {
			n = sh[1+w.r.IntN(len(sh)-1)]
		}
		if !w.canCrashShard(n) {
			retry()
			return
		}
		w.crashShard(n, c.down)
	case crashOrdLeader, crashOrdFollower:
		if !w.crashOrdering(c.kind == crashOrdLeader, c.down) {
			retry()
		}
	case cutOffOrdLeader:
		if !w.cutOffLeader(c.down) {
			retry()
		}
	case crashClient:
		for _, cl := range w.clients {
			if cl.up {
				w.stats.clientCr++
				cl.crash()
				w.addClient()
				return
			}
		}
	}
}

// canCrashSeq says a sequencing replica may crash within the fault
// budget: no view change under way, every replica up and running the
// view (a restarted one is sealed until a view takes it back).
func (w *lazyRun) canCrashSeq() bool {
	cfg := w.truth.Lazy
	if w.changing() || len(cfg.Replicas) < 2 {
		return false
	}
	for _, q := range w.seqs {
		if !q.up || !slices.Contains(cfg.Replicas, q.id) {
			return false
		}
		if v, sealed := q.core.View(); sealed || v != cfg.View {
			return false
		}
	}
	return true
}

func (w *lazyRun) broadcastStable(from *node, st lazy.StableGP) {
	for _, sh := range w.shards {
		for _, n := range sh {
			w.send(from.name, &n.node, func() { n.stable(st) })
		}
	}
}

// seqNode is a sequencing replica; the leader of its view runs the
// orderer.
type seqNode struct {
	node
	w       *lazyRun
	id      lazy.ReplicaID
	core    *lazy.Sequencer
	saved   lazy.SequencerState
	orderer *lazy.Orderer
	// tabled is the orderer that read the shard table: it orders only
	// then, as the server's loop reads the table before its first batch.
	tabled *lazy.Orderer
}

// start applies a StartView; it says whether the replica runs the view.
func (q *seqNode) start(sv lazy.StartView) bool {
	if _, err := q.core.Start(sv); err != nil {
		return false
	}
	q.saved = q.core.State()
	if v, _ := q.core.View(); v != sv.View {
		return false
	}
	if sv.Leader == q.id && (q.orderer == nil) {
		q.orderer = lazy.NewOrderer(lazy.OrdererConfig{BatchMax: lazyBatchMax}, sv.View, sv.Ordered, nil, sv.Replicas)
		q.orderer.AtLeast(sv.Shards)
		o := q.orderer
		q.readTable(o)
		q.w.every(&q.node, q.w.sc.orderEvery, func() { q.order(o) })
		q.w.every(&q.node, lazyResendEvery, func() { q.resend(o) })
	}
	return true
}

func (q *seqNode) order(o *lazy.Orderer) {
	if q.orderer != o || q.tabled != o || o.Busy() {
		return
	}
	out, err := o.Order(q.core.Unordered(o.BatchMax()))
	if err != nil {
		q.w.errorf("%s: %v", q.name, err)
		return
	}
	if out.Map != nil {
		q.w.stats.batches++
		q.w.tracef("%s: orders [%d, %d) in view %d", q.name, out.Map.From, out.Map.End(), out.Map.View)
	}
	if out.WaitFor != nil {
		q.w.tracef("%s: waits for shard %d to be in its table", q.name, *out.WaitFor)
		q.readTable(o)
	}
	q.carry(o, out)
}

func (q *seqNode) resend(o *lazy.Orderer) {
	if q.orderer != o {
		return
	}
	p := o.Pending()
	if p.Map != nil {
		q.sendMap(o, *p.Map)
	}
	if p.GC != nil {
		q.sendGC(o, *p.GC, o.MissingReplicas())
	}
	q.w.broadcastStable(&q.node, *p.Stable)
	q.readTable(o)
}

// sendMap sends a batch's mapping to the primary of every shard the
// orderer waits for.
func (q *seqNode) sendMap(o *lazy.Orderer, m lazy.Mapping) {
	for _, s := range o.MissingShards() {
		if p := q.w.primary(s); p != nil {
			p.sendMap(&q.node, m, q.mapAcked(o))
		}
	}
}

// readTable asks an ordering replica for its shard table (which may lag
// the one clients have) and hands it to the orderer.
func (q *seqNode) readTable(o *lazy.Orderer) {
	w := q.w
	r := w.ords[w.r.IntN(len(w.ords))]
	w.send(q.name, &r.node, func() {
		var live []cut.ShardID
		next := r.r.st.NextShardID
		for _, row := range r.r.st.Shards {
			if row.State != control.Finalized || w.plant == bugLazyMapFinalized {
				live = append(live, row.ID)
			}
		}
		w.send(r.name, &q.node, func() {
			if q.orderer == o {
				q.tabled = o
				q.carry(o, o.SetShards(live, next))
			}
		})
	})
}

func (q *seqNode) mapAcked(o *lazy.Orderer) func(lazy.MappingAck) {
	return func(a lazy.MappingAck) {
		if q.orderer == o {
			q.carry(o, o.MapAcked(a))
		}
	}
}

func (q *seqNode) carry(o *lazy.Orderer, out lazy.OrdererOutput) {
	w := q.w
	if out.Map != nil {
		q.sendMap(o, *out.Map)
	}
	if out.GC != nil {
		if w.plant == bugLazyEarlyStable {
			// The paper's incorrect protocol: stable-gp before the
			// followers collected. The fault it brings: once, the leader
			// crashes right after, before its GC goes out.
			w.broadcastStable(&q.node, lazy.StableGP{View: out.GC.View, Stable: out.GC.End})
			if !w.planted && w.elapsed() > 10*time.Millisecond && w.canCrashSeq() {
				w.planted = true
				w.stats.seqCrashes++
				w.stats.leaderCrashes++
				q.crash(5 * time.Millisecond)
				return
			}
		}
		q.sendGC(o, *out.GC, o.MissingReplicas())
	}
	if out.Stable != nil {
		w.tracef("%s: stable %d", q.name, out.Stable.Stable)
		w.broadcastStable(&q.node, *out.Stable)
	}
}

func (q *seqNode) sendGC(o *lazy.Orderer, gc lazy.GC, to []lazy.ReplicaID) {
	w := q.w
	for _, id := range to {
		r := w.seq(id)
		collect := func() {
			if err := r.core.Collect(gc); err != nil {
				return
			}
			r.saved = r.core.State()
			c := lazy.Collected{Replica: r.id, View: gc.View, End: r.core.Ordered()}
			reply := func() {
				if q.orderer == o {
					q.carry(o, o.Collected(c))
				}
			}
			if r == q {
				reply()
				return
			}
			w.send(r.name, &q.node, reply)
		}
		if r == q {
			collect()
			continue
		}
		w.send(q.name, &r.node, collect)
	}
}

func (q *seqNode) crash(down time.Duration) {
	w := q.w
	w.tracef("%s: crashes for %v", q.name, down)
	q.up, q.inc, q.orderer = false, q.inc+1, nil
	q.core = nil
	w.after(down, func() {
		q.up = true
		q.core = lazy.NewSequencer(lazy.SequencerConfig{RingMax: lazyRingMax}, q.saved)
		w.tracef("%s: restarts", q.name)
	})
}

// logRec is one record in a shard replica's log.
type logRec struct {
	rec  int
	view uint64
}

// shardNode is one replica of one shard; replica 0 is the primary.
type shardNode struct {
	node
	w     *lazyRun
	shard cut.ShardID
	idx   int
	core  *lazy.Shard[int]
	// What survives a crash: the log (records in arrival order), the
	// placements in the order applied, the last stable-gp.
	log    []logRec
	places []lazy.Placement
	st     lazy.StableGP
	// reads are the held reads' answers by waiter.
	reads   map[int]func(lazy.ReadAnswer[int], error)
	nextRd  int
	wakeGen int
	// ackTo answers the sender of the last mapping.
	ackTo func(lazy.MappingAck)
	// doomed says it crashed and the detector has not taken it out yet.
	doomed bool
	// cursor is how far it copied src's log (lazyrejoin.go).
	cursor uint64
	src    string
	// gone says the replica died for good: it never restarts.
	gone bool
	// outs counts the times it was taken out of its configuration.
	outs int
	// askedAt is when it last asked the ordering leader to join it or
	// confirm it.
	askedAt time.Time
}

func shardNodeName(s cut.ShardID, j int) string { return fmt.Sprintf("s%d.%d", s, j) }

func (n *shardNode) boot() {
	st := lazy.ShardState{Len: uint64(len(n.log)), Placements: slices.Clone(n.places), Stable: n.st.Stable, StableView: n.st.View}
	for i, r := range n.log {
		st.Records = append(st.Records, lazy.StoredRecord{ID: n.w.recs[r.rec].id, Local: uint64(i), View: r.view})
	}
	var out lazy.ShardOutput[int]
	n.core = lazy.OpenShard(n.shardConfig(), st, &out)
	if !n.w.isMember(n) && n.w.plant != bugLazyOutStaysIn {
		n.core.Leave(n.w.shardConf[n.shard].epoch)
	}
	n.reads = map[int]func(lazy.ReadAnswer[int], error){}
	n.carry(out)
	n.w.every(&n.node, lazyResendEvery, func() {
		if n.core.Epoch() < n.w.shardConf[n.shard].epoch {
			// The shard table's events reach every server in the end
			// (they catch up on missed ones).
			n.follow()
		}
		if !n.core.Primary() {
			return
		}
		for _, b := range n.w.members(n.shard)[1:] {
			if ps := n.core.Resend(b.name); len(ps) > 0 {
				n.w.send(n.name, &b.node, func() { b.place(ps) })
			}
		}
	})
	n.w.every(&n.node, lazyScrubEvery, func() { n.w.stats.scrubbed += uint64(len(n.core.Scrub())) })
	n.w.every(&n.node, lazyResendEvery, n.copyStep)
}

func (n *shardNode) crash(down time.Duration) {
	w := n.w
	w.tracef("%s: crashes for %v", n.name, down)
	n.up, n.inc, n.core = false, n.inc+1, nil
	if n.gone {
		return
	}
	w.after(down, func() {
		n.up = true
		n.boot()
		w.tracef("%s: restarts", n.name)
	})
}

func (n *shardNode) accept(rec int, view, epoch uint64) error {
	if err := n.core.FenceData(epoch); err != nil && n.w.plant != bugLazyNoDataFence {
		return err
	} else if err != nil {
		n.w.planted = true
	}
	var out lazy.ShardOutput[int]
	local, fresh, err := n.core.Accept(n.w.recs[rec].id, view, &out)
	if err != nil {
		return err
	}
	switch {
	case fresh:
		n.log = append(n.log, logRec{rec: rec, view: view})
	case local < uint64(len(n.log)):
		// A retry in a newer view keeps the record from the scrub of the
		// views before it, across a restart too: the view it was last
		// appended in is persisted with it (with the view it was first
		// stored in, a restarted replica scrubbed an acknowledged
		// record whose metadata the newer view ordered, and bound a
		// no-op for it once it became primary).
		n.log[local].view = max(n.log[local].view, view)
		n.w.stats.dups++
	default:
		n.w.stats.dups++
	}
	n.carry(out)
	return nil
}

// sendMap sends a mapping to this primary; ack carries its answer back to
// from.
func (n *shardNode) sendMap(from *node, m lazy.Mapping, ack func(lazy.MappingAck)) {
	w := n.w
	w.send(from.name, &n.node, func() {
		var out lazy.ShardOutput[int]
		if err := n.core.Map(m, w.now, &out); err != nil {
			w.tracef("%s: mapping [%d, %d) of view %d: %v", n.name, m.From, m.End(), m.View, err)
		}
		n.ackTo = func(a lazy.MappingAck) { w.send(n.name, from, func() { ack(a) }) }
		n.carry(out)
	})
}

func (n *shardNode) carry(out lazy.ShardOutput[int]) {
	w := n.w
	if p := out.Place; p != nil {
		n.places = append(n.places, *p)
		if n.core.Primary() {
			for _, b := range w.members(n.shard)[1:] {
				ps := []lazy.Placement{*p}
				w.send(n.name, &b.node, func() { b.place(ps) })
			}
		}
	}
	w.stats.noops += uint64(len(out.Voided))
	if len(out.Fetch) > 0 {
		p := w.primary(n.shard)
		ids := out.Fetch
		w.send(n.name, &p.node, func() {
			var found []lazy.RecordID
			for _, id := range ids {
				if _, ok := p.core.LocalOf(id); ok {
					found = append(found, id)
				}
			}
			w.send(p.name, &n.node, func() {
				for _, id := range found {
					var o lazy.ShardOutput[int]
					_, fresh, err := n.core.Copy(id, &o)
					if err != nil {
						w.errorf("%s: copy %v: %v", n.name, id, err)
						continue
					}
					if fresh {
						n.log = append(n.log, logRec{rec: w.byID[id], view: 0})
					}
					n.carry(o)
				}
			})
		})
	}
	if out.Applied {
		p := w.primary(n.shard)
		term, seq, name := out.AppliedTerm, out.AppliedSeq, n.name
		w.send(n.name, &p.node, func() {
			var o lazy.ShardOutput[int]
			p.core.BackupApplied(name, term, seq, &o)
			p.carry(o)
		})
	}
	if out.Ack != nil && n.ackTo != nil {
		n.ackTo(*out.Ack)
	}
	for _, a := range out.Reads {
		if reply := n.reads[a.Waiter]; reply != nil {
			delete(n.reads, a.Waiter)
			reply(a, nil)
		}
	}
	if !out.WakeAt.IsZero() {
		n.wakeGen++
		gen, inc := n.wakeGen, n.inc
		w.at(out.WakeAt, func() {
			if n.up && n.inc == inc && n.wakeGen == gen {
				var o lazy.ShardOutput[int]
				n.core.Tick(w.now, &o)
				n.carry(o)
			}
		})
	}
}

func (n *shardNode) place(ps []lazy.Placement) {
	for _, p := range ps {
		var out lazy.ShardOutput[int]
		if err := n.core.Place(p, &out); err != nil {
			n.w.tracef("%s: placement [%d, %d): %v", n.name, p.From, p.End, err)
			return
		}
		n.carry(out)
	}
}

func (n *shardNode) stable(st lazy.StableGP) {
	var out lazy.ShardOutput[int]
	n.core.Stable(st, &out)
	// What survives a restart is the stable end as far as its placements
	// are the shard's (its readable end): a replica out of its
	// configuration, or one that rejoined and has not applied its
	// primary's base yet, may hold placements above it that the shard's
	// order overrode.
	if r := n.core.Readable(); !n.core.Out() && (r > n.st.Stable || st.View > n.st.View) {
		n.st = lazy.StableGP{View: max(n.st.View, st.View), Stable: max(n.st.Stable, r)}
	}
	n.carry(out)
}

// read reads pos; reply gets the answer, or an error at the deadline.
func (n *shardNode) read(pos uint64, reply func(lazy.ReadAnswer[int], error)) {
	w := n.w
	n.nextRd++
	id := n.nextRd
	n.reads[id] = reply
	var out lazy.ShardOutput[int]
	if err := n.core.Read(id, pos, &out); err != nil {
		delete(n.reads, id)
		reply(lazy.ReadAnswer[int]{}, err)
		return
	}
	if len(out.Reads) == 0 && w.plant == bugLazyReadAhead {
		if a, ok := n.readAhead(id, pos); ok {
			n.core.Cancel(id)
			out.Reads = append(out.Reads, a)
			w.planted = true
		}
	}
	if len(out.Reads) > 0 {
		w.stats.fastReads++
	} else {
		w.stats.slowReads++
		inc := n.inc
		w.after(lazyReadDeadline, func() {
			if r := n.reads[id]; r != nil && n.up && n.inc == inc {
				n.core.Cancel(id)
				delete(n.reads, id)
				w.stats.readTimeouts++
				r(lazy.ReadAnswer[int]{}, errors.New("deadline exceeded"))
			}
		})
	}
	n.carry(out)
}

// name of the record at local index local.
func (n *shardNode) recordAt(local uint64) (int, bool) {
	if local >= uint64(len(n.log)) {
		return 0, false
	}
	return n.log[local].rec, true
}

// readAhead answers a read of pos from the newest placement that binds
// it, stable or not: the bug bugLazyReadAhead plants.
func (n *shardNode) readAhead(w int, pos uint64) (lazy.ReadAnswer[int], bool) {
	for i := len(n.places) - 1; i >= 0; i-- {
		p := n.places[i]
		if pos < p.From || pos >= p.End {
			continue
		}
		a := lazy.ReadAnswer[int]{Waiter: w, Pos: pos}
		for _, r := range p.Runs {
			if pos >= r.From && pos < r.End {
				a.Shard = r.Shard
			}
		}
		if a.Shard != n.shard {
			return a, true
		}
		for _, sl := range p.Slots {
			if sl.Pos != pos {
				continue
			}
			if sl.Noop {
				a.Noop = true
				return a, true
			}
			local, ok := n.core.LocalOf(sl.ID)
			a.Local = local
			return a, ok
		}
	}
	return lazy.ReadAnswer[int]{}, false
}
