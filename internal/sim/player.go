package sim

// The player: in some seeds an exactly-once player (player.Core) runs in
// the simulated world. Its main fetcher is a confirmed-only subscriber of
// the cluster, built like the others (the same merger, fed by the shards'
// streams); its recovery fetches read the committed sequence; its targets
// apply batches and record their last index in one atomic step, and
// acknowledge over links with delays. Targets crash and restart, the
// player restarts, and at the end each target's applied sequence must be
// the log's entries routed to it (invariant 6).

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/augur-log/augur/internal/check"
	"github.com/augur-log/augur/internal/player"
)

// playerTick is how often the player's main fetcher looks for entries its
// subscriber confirmed since it last looked: a real fetcher is woken by
// each one, so the tick only has to be short next to the link delays.
const playerTick = 200 * time.Microsecond

// playerDetect is how long the player's health checker takes to notice a
// target that crashed; a crashed target stays down longer than this, so a
// reconnect never races the notice of the crash it follows.
const playerDetect = 3 * time.Millisecond

// targetCrash crashes target for down.
type targetCrash struct {
	at, down time.Duration
	target   int
}

// playerRestartAt crashes the player at and starts it again down later.
type playerRestartAt struct{ at, down time.Duration }

// playerScenario is what a seed that runs the player chose.
type playerScenario struct {
	cfg player.Config
	// linkSpike is the chance a message between the player and a target
	// is delayed by a spike.
	linkSpike float64
	crashes   []targetCrash
	restarts  []playerRestartAt
}

// newPlayerScenario draws a player's scenario; on says whether the seed
// runs it. Every draw happens either way, so a seed's other choices do
// not depend on the switches.
func newPlayerScenario(r *rand.Rand, f Faults, healAt time.Duration) (sc *playerScenario, on bool) {
	t := time.Millisecond
	on = r.IntN(3) == 0
	n := 2 + r.IntN(4)
	// The bounds stay small, so that queues fill and the fetchers wait,
	// yet let a target take the clients' few records per millisecond
	// over a link's round trip: the heal phase must catch up.
	cfg := player.Config{
		Route:              []player.Route{player.RouteKeyHash, player.RouteKeyHash, player.RouteAll}[r.IntN(3)],
		BatchEntriesMax:    4 + r.IntN(29),
		BatchBytesMax:      []int{64, 1 << 20}[r.IntN(2)],
		QueueEntriesMax:    8 + r.IntN(121),
		QueueBytesMax:      []int{256, 1 << 20}[r.IntN(2)],
		InflightBatchesMax: 2 + r.IntN(7),
		EmptyEvery:         []uint64{0, 3, 40}[r.IntN(3)],
	}
	for i := range n {
		cfg.Targets = append(cfg.Targets, fmt.Sprintf("t%d", i))
	}
	sc = &playerScenario{cfg: cfg, linkSpike: 0.01}
	spike := []float64{0.01, 0.02, 0.05}[r.IntN(3)]
	var crashes []targetCrash
	for range r.IntN(4) {
		at := time.Duration(10+r.IntN(250)) * t
		down := playerDetect + time.Duration(1+r.IntN(30))*t
		crashes = append(crashes, targetCrash{at: at, down: min(down, healAt-at), target: r.IntN(n)})
	}
	var restarts []playerRestartAt
	for range r.IntN(3) {
		at := time.Duration(10+r.IntN(250)) * t
		restarts = append(restarts, playerRestartAt{at: at, down: min(time.Duration(1+r.IntN(20))*t, healAt-at)})
	}
	if f.Delay {
		sc.linkSpike = spike
	}
	if f.Crash {
		sc.crashes, sc.restarts = crashes, restarts
	}
	return sc, on
}

func (sc *playerScenario) String() string {
	var b strings.Builder
	route := map[player.Route]string{player.RouteKeyHash: "key hash", player.RouteAll: "all"}[sc.cfg.Route]
	c := sc.cfg
	fmt.Fprintf(&b, "; a player with %d targets (route %s, batches ≤%d entries ≤%d bytes, queues ≤%d entries ≤%d bytes, ≤%d in flight, empty every %d, link spikes %.0f%%)",
		len(c.Targets), route, c.BatchEntriesMax, c.BatchBytesMax, c.QueueEntriesMax, c.QueueBytesMax, c.InflightBatchesMax, c.EmptyEvery, 100*sc.linkSpike)
	for _, x := range sc.crashes {
		fmt.Fprintf(&b, "; target %d crashes at %v for %v", x.target, x.at, x.down)
	}
	for _, x := range sc.restarts {
		fmt.Fprintf(&b, "; the player restarts at %v after %v", x.at, x.down)
	}
	return b.String()
}

// simTarget is one target: what it applied, and its last applied index,
// which it records with each batch in one atomic step (it survives a
// crash).
type simTarget struct {
	up bool
	// conn is the connection the target serves (0: none): it applies
	// only what arrives on it, as a target whose old stream was closed.
	conn    uint64
	last    player.Index
	applied []check.Entry
}

// playerConn is the player's stream to one target.
type playerConn struct {
	id   uint64
	term player.Term
	// writing says a Send was written and its WriteDone has not come.
	writing bool
	out     link
	back    link
}

// recoveryFetch is a running recovery fetch and the next index it reads.
type recoveryFetch struct {
	f    player.RecoveryFetch
	next player.Index
}

type simPlayer struct {
	s   *cluster
	sc  *playerScenario
	cfg player.Config
	// sb is the main fetcher's confirmed-only subscription, from the
	// start of the log; a restarted fetcher reads it from its new start.
	sb *sub
	// core is nil while the player is down; gen counts its starts, so
	// that what a dead run's streams carry is dropped.
	core  *player.Core
	gen   uint64
	next  player.Index // the main fetcher's next index; 0: not running
	fetch []*recoveryFetch
	conns []*playerConn
	// held counts, per target, the batches this run of the core sent and
	// has not released: a Release of a batch it does not hold is a leak's
	// mirror image, and at the end it holds what it reports in flight.
	held []int
	tgts []*simTarget
	// connSeq numbers connections.
	connSeq uint64
	stats   struct{ sends, releases, restarts, targetCrashes, recoveries uint64 }
}

func newSimPlayer(s *cluster, sc *playerScenario) *simPlayer {
	n := len(sc.cfg.Targets)
	p := &simPlayer{s: s, sc: sc, cfg: sc.cfg, fetch: make([]*recoveryFetch, n), conns: make([]*playerConn, n)}
	for range n {
		p.tgts = append(p.tgts, &simTarget{up: true})
	}
	p.sb = &sub{s: s, id: len(s.subs), confirmedOnly: true}
	p.sb.init()
	s.subs = append(s.subs, p.sb)
	s.after(time.Millisecond, p.start)
	s.after(playerTick, p.tick)
	for _, x := range sc.crashes {
		s.after(x.at, func() { p.crashTarget(player.TargetID(x.target), x.down) })
	}
	for _, x := range sc.restarts {
		s.after(x.at, func() { p.crash(x.down) })
	}
	return p
}

func (p *simPlayer) delay() time.Duration {
	s := p.s
	d := s.uniform(20*time.Microsecond, 200*time.Microsecond)
	if s.r.Float64() < p.sc.linkSpike {
		d += s.uniform(300*time.Microsecond, 4*time.Millisecond)
	}
	return d
}

// start starts the player: it connects to every target up, asks each its
// last applied index, and restarts the core from the answers.
func (p *simPlayer) start() {
	s := p.s
	core, err := player.New(p.cfg)
	if err != nil {
		s.errorf("player: %v", err)
		return
	}
	p.core = core
	p.held = make([]int, len(p.tgts))
	la := map[player.TargetID]player.Index{}
	for i, tg := range p.tgts {
		if tg.up {
			la[player.TargetID(i)] = tg.last
			p.connSeq++
			tg.conn = p.connSeq
			p.conns[i] = &playerConn{id: p.connSeq}
		}
	}
	s.tracef("player starts (run %d): last applied %v", p.gen, la)
	p.step(player.PlayerRestart{LastApplied: la})
	p.pump()
}

// crash stops the player for down: its fetchers stop, its streams close.
func (p *simPlayer) crash(down time.Duration) {
	if p.core == nil {
		return
	}
	p.s.tracef("player crashes for %v", down)
	p.stats.restarts++
	p.core, p.next = nil, 0
	p.gen++
	clear(p.fetch)
	clear(p.conns)
	for _, tg := range p.tgts {
		tg.conn = 0
	}
	p.s.after(down, p.start)
}

// crashTarget crashes target id for down; the player's health checker
// notices after playerDetect.
func (p *simPlayer) crashTarget(id player.TargetID, down time.Duration) {
	s := p.s
	tg := p.tgts[id]
	if !tg.up {
		return
	}
	s.tracef("target %d crashes for %v (last applied %d)", id, down, tg.last)
	p.stats.targetCrashes++
	tg.up, tg.conn = false, 0
	gen := p.gen
	s.after(playerDetect, func() {
		if p.core == nil || p.gen != gen || tg.up {
			return
		}
		p.conns[id] = nil
		p.step(player.TargetDown{Target: id})
		p.pump()
	})
	s.after(down, func() {
		tg.up = true
		s.tracef("target %d restarts (last applied %d)", id, tg.last)
		p.reconnect(id)
	})
}

// reconnect opens a stream to target id and asks its last applied index.
func (p *simPlayer) reconnect(id player.TargetID) {
	if p.core == nil {
		return // the player's start asks it
	}
	s, tg, gen := p.s, p.tgts[id], p.gen
	p.connSeq++
	conn := p.connSeq
	s.after(p.delay(), func() {
		if !tg.up || p.gen != gen {
			return
		}
		tg.conn = conn
		la := tg.last
		s.after(p.delay(), func() {
			if p.gen != gen || tg.conn != conn {
				return
			}
			p.conns[id] = &playerConn{id: conn}
			p.step(player.TargetUp{Target: id, LastApplied: la})
			s.tracef("player: target %d up at %d, term %d", id, la, p.core.Term(id))
			p.pump()
		})
	})
}

func (p *simPlayer) tick() {
	p.pump()
	p.s.after(playerTick, p.tick)
}

// drain runs the cluster on past the end of the run, after its checks,
// drainStep at a time while some target is behind and one that is behind
// applies something in each step, up to runFor more. A player is bounded
// by its targets' links and small queues, and may still be working off
// the backlog of the fault phase when the run ends (seed 8998: five
// targets fed by one fetcher, with batches of one or two entries and
// links whose spikes stall the slowest, applied the last records about 20
// ms late). A target that is stuck applies nothing in a step, and the
// player is checked at once.
func (p *simPlayer) drain() {
	s := p.s
	end := s.now.Add(s.sc.runFor)
	for s.now.Before(end) && len(s.errs) == 0 {
		behind := p.behind()
		if len(behind) == 0 {
			return
		}
		s.run(s.now.Add(drainStep))
		if !slices.ContainsFunc(behind, func(b applied) bool { return p.tgts[b.target].last > b.last }) {
			return
		}
	}
}

// drainStep is the time a draining player gets to apply another entry.
const drainStep = 10 * time.Millisecond

// applied is how far a target applied.
type applied struct {
	target int
	last   player.Index
}

// behind lists the targets that are not yet where verify wants them: one
// that has yet to apply a record of the committed log routed to it, or is
// off the main stream.
func (p *simPlayer) behind() []applied {
	owes := make([]bool, len(p.tgts))
	for pos, v := range p.s.eager {
		if v == noop {
			continue
		}
		e := player.Entry{Index: player.Index(pos + 1), Key: p.s.name(v)}
		for _, id := range player.TargetsOf(p.cfg, &e) {
			owes[id] = owes[id] || p.tgts[id].last < e.Index
		}
	}
	var b []applied
	for i, tg := range p.tgts {
		if owes[i] || p.core == nil || p.core.Status(player.TargetID(i)).State != player.Normal {
			b = append(b, applied{target: i, last: tg.last})
		}
	}
	return b
}

// entry returns the log's entry at index i from the sequence the
// committed cuts define.
func (p *simPlayer) entry(i player.Index, held []int64) player.Entry {
	e := player.Entry{Index: i, Noop: true}
	if pos := uint64(i - 1); pos < uint64(len(held)) && held[pos] != noop {
		e.Key, e.Noop = p.s.name(held[pos]), false
	}
	return e
}

// pump has the fetchers hand over what they can: recovery fetches their
// ranges, the main fetcher what its subscriber confirmed, each only while
// the core lets it.
func (p *simPlayer) pump() {
	if p.core == nil {
		return
	}
	for id, f := range p.fetch {
		for f != nil && p.fetch[id] == f && !p.core.RecoveryWait(player.TargetID(id)) {
			if f.next > f.f.To {
				p.fetch[id] = nil
				p.step(player.RecoveryFetchDone{Target: f.f.Target, Term: f.f.Term})
				break
			}
			e := p.entry(f.next, p.s.eager)
			f.next++
			p.step(player.EntryFetched{Stream: player.Recovery, Target: f.f.Target, Term: f.f.Term, Entry: e})
		}
	}
	end := player.Index(p.sb.confirmedEnd())
	for p.core != nil && p.next > 0 && p.next <= end && !p.core.MainWait() {
		e := p.entry(p.next, p.sb.cur)
		p.next++
		p.step(player.EntryFetched{Stream: player.Main, Entry: e})
	}
}

// step runs one event through the core and carries out its output.
func (p *simPlayer) step(ev player.Event) {
	s := p.s
	out := p.core.Step(ev)
	// A stream opened for PlayerRestart or TargetUp is bound to the term
	// the core assigned while handling it, before any of its Sends.
	switch ev := ev.(type) {
	case player.PlayerRestart:
		for i, c := range p.conns {
			if c != nil {
				c.term = p.core.Term(player.TargetID(i))
			}
		}
	case player.TargetUp:
		p.conns[ev.Target].term = p.core.Term(ev.Target)
	}
	if out.StartMain != 0 {
		p.next = out.StartMain
	}
	for _, f := range out.StopRecovery {
		if r := p.fetch[f.Target]; r != nil && r.f.Term == f.Term {
			p.fetch[f.Target] = nil
		}
	}
	for _, f := range out.StartRecovery {
		p.stats.recoveries++
		s.tracef("player: target %d recovers [%d, %d] under term %d", f.Target, f.From, f.To, f.Term)
		p.fetch[f.Target] = &recoveryFetch{f: f, next: f.From}
	}
	for _, x := range out.Sends {
		p.held[x.Target]++
		p.send(x)
	}
	p.stats.releases += uint64(len(out.Releases))
	for _, r := range out.Releases {
		if p.held[r.Target]--; p.held[r.Target] < 0 {
			s.errorf("player: released a batch of target %d (ending at %d) it did not hold", r.Target, r.Batch.Last())
			p.held[r.Target] = 0
		}
	}
	for _, id := range out.Misbehaving {
		s.errorf("player: target %d acknowledged an index it was never sent", id)
	}
}

// send writes one batch on its target's stream, if the stream of its term
// is still open.
func (p *simPlayer) send(x player.Send) {
	s := p.s
	c := p.conns[x.Target]
	if c == nil || c.term != x.Term {
		return // the stream is gone
	}
	if c.writing {
		s.errorf("player: a second write to target %d under term %d before the first's WriteDone", x.Target, x.Term)
		return
	}
	p.stats.sends++
	c.writing = true
	msgs := slices.Clone(x.Batch.Messages)
	tg, gen := p.tgts[x.Target], p.gen
	s.after(s.uniform(5*time.Microsecond, 30*time.Microsecond), func() {
		if p.gen == gen && p.conns[x.Target] == c {
			c.writing = false
			p.step(player.WriteDone{Target: x.Target, Term: x.Term})
			p.pump()
		}
	})
	s.at(c.out.arrival(s.now, p.delay()), func() {
		if tg.conn != c.id {
			return // the target crashed, or the player closed the stream
		}
		if s.plant == bugTargetStalls && x.Target == 0 && !s.now.Before(s.start.Add(s.sc.appendFor-50*time.Millisecond)) &&
			slices.ContainsFunc(msgs, func(m player.Message) bool { return !m.Empty }) {
			s.planted = true
			return
		}
		// Apply the batch and record its last index in one step.
		for _, m := range msgs {
			if !m.Empty {
				tg.applied = append(tg.applied, check.Entry{Pos: uint64(m.Index - 1), Record: m.Key})
			}
		}
		tg.last = msgs[len(msgs)-1].Index
		if s.plant == bugApplyTwice && !s.planted && len(tg.applied) > 2 {
			s.planted = true
			tg.applied = append(tg.applied, tg.applied[len(tg.applied)-1])
		}
		ack := tg.last
		s.at(c.back.arrival(s.now, p.delay()), func() {
			if p.gen == gen && p.conns[x.Target] == c {
				p.step(player.AckReceived{Target: x.Target, Term: x.Term, Index: ack})
				p.pump()
			}
		})
	})
}

// verify checks invariant 6 once the faults stopped, and that every
// target rejoined the main stream.
func (p *simPlayer) verify() {
	s := p.s
	_, final := s.history()
	report := s.report
	routes := func(e check.Entry) []string {
		var names []string
		for _, id := range player.TargetsOf(p.cfg, &player.Entry{Index: player.Index(e.Pos + 1), Key: e.Record}) {
			names = append(names, p.cfg.Targets[id])
		}
		return names
	}
	var applied []check.Applied
	for i, tg := range p.tgts {
		applied = append(applied, check.Applied{Target: p.cfg.Targets[i], Entries: tg.applied})
	}
	report(check.ExactlyOnce(final, routes, applied, true))
	if p.core == nil {
		s.errorf("player: down at the end of the run")
		return
	}
	// Every target is back on the main stream. Its queues may still hold
	// messages: a speculative cluster keeps ordering no-ops, which keep
	// the main stream and the empty messages going to the end.
	for i := range p.tgts {
		st := p.core.Status(player.TargetID(i))
		if st.State != player.Normal {
			s.errorf("player: target %d still %v at the end of the run (%d queued, %d in flight)", i, st.State, st.Queued, st.Inflight)
		}
		if st.Inflight != p.held[i] {
			s.errorf("player: target %d has %d batches in flight, but %d were sent and not released", i, st.Inflight, p.held[i])
		}
	}
}

func (p *simPlayer) summary() string {
	st := p.stats
	applied := 0
	for _, tg := range p.tgts {
		applied += len(tg.applied)
	}
	return fmt.Sprintf("; player: %d batches sent, %d released, %d entries applied, %d recovery fetches, %d target crashes, %d player restarts",
		st.sends, st.releases, applied, st.recoveries, st.targetCrashes, st.restarts)
}
