package spec

// The world of the seeded whole-cluster simulation: an event queue over a
// simulated clock, FIFO links with random delays, the ordering leader
// (control state behind a simulated Raft commit delay, driven by a
// Sequencer the way the ordering server drives it), the shards (a
// spec.Shard each, over a log of records and no-ops that becomes durable
// after a replication delay) and their subscription streams, and the
// clients that append. Everything follows from the seed.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
)

const noop int64 = -1

// simEvent is one scheduled step.
type simEvent struct {
	at  time.Time
	seq uint64
	fn  func()
}

// simQueue is a binary min-heap of events by time, then by scheduling
// order.
type simQueue []simEvent

func (q simQueue) less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}

func (q *simQueue) push(ev simEvent) {
	*q = append(*q, ev)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *simQueue) pop() simEvent {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = simEvent{}
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

// stream is a subscription stream: a link and the message being filled.
type stream struct {
	link
	pending *subMsg
}

// link is a FIFO connection: a message arrives after its own random delay
// but never before one sent earlier on the same link.
type link struct{ last time.Time }

func (l *link) arrival(now time.Time, delay time.Duration) time.Time {
	at := now.Add(delay)
	if at.Before(l.last) {
		at = l.last
	}
	l.last = at
	return at
}

// sim is one seeded run.
type sim struct {
	seed  uint64
	r     *rand.Rand
	sc    scenario
	start time.Time
	now   time.Time
	q     simQueue
	seq   uint64
	steps uint64
	errs  []string
	trace func(string)

	ld      *simLeader
	shards  map[cut.ShardID]*simShard
	order   []*simShard // by id
	subs    []*simSub
	clients []*simClient

	// The truth: committed cuts, the eager sequence they define over the
	// shards' logs, the views, the failed shards' void points.
	lastCut  cut.Cut
	cutCount uint64
	eager    []int64
	// eagerShard is the shard of each eager position.
	eagerShard []cut.ShardID
	views      []control.ViewChange
	voidFrom   map[cut.ShardID]uint64
	finals     map[cut.ShardID]bool
	// orderedAt maps each record to its position; nextRec counts records.
	orderedAt map[int64]uint64
	nextRec   int64
	reroutes  int

	// failed is the shard the scenario failed, if any; joinRates gives a
	// joining shard's client rate by name.
	failed *simShard
	// failedSoleHolder says the failed shard held the newest window's
	// only quota (scenario.failSoleHolder).
	failedSoleHolder bool
	joinRates        map[string]float64
	// windowed marks the shards some window gave a quota.
	windowed map[cut.ShardID]bool

	stats simStats
}

type simStats struct {
	records, noops, noopRuns  uint64
	reports, lagFixMsgs       uint64
	lagFixes, quotaChanges    uint64
	windows, releases         uint64
	lostLagFix, dupResends    uint64
	specDeliveries, delivered uint64
	fails, voided             uint64
	specLead                  time.Duration // summed over confirmed speculative deliveries
	specLeadN                 uint64
	maxQuota                  uint64
}

func (s *sim) errorf(format string, args ...any) {
	if len(s.errs) < 10 {
		s.errs = append(s.errs, fmt.Sprintf("t=%v: ", s.now.Sub(s.start))+fmt.Sprintf(format, args...))
	}
}

func (s *sim) tracef(format string, args ...any) {
	if s.trace != nil {
		s.trace(fmt.Sprintf("%9.3fms ", float64(s.now.Sub(s.start).Microseconds())/1000) + fmt.Sprintf(format, args...))
	}
}

func (s *sim) at(t time.Time, fn func()) {
	if t.Before(s.now) {
		t = s.now
	}
	s.seq++
	s.q.push(simEvent{at: t, seq: s.seq, fn: fn})
}

func (s *sim) after(d time.Duration, fn func()) { s.at(s.now.Add(d), fn) }

// uniform returns a duration in [lo, hi).
func (s *sim) uniform(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.r.Int64N(int64(hi-lo)))
}

// netDelay is one message's delay: mostly short, sometimes a spike.
func (s *sim) netDelay() time.Duration {
	d := s.uniform(20*time.Microsecond, 150*time.Microsecond)
	if s.r.IntN(100) == 0 {
		d += s.uniform(300*time.Microsecond, 3*time.Millisecond)
	}
	return d
}

// run processes events until end.
func (s *sim) run(end time.Time) {
	for len(s.q) > 0 && len(s.errs) == 0 {
		if !s.q[0].at.Before(end) {
			break
		}
		ev := s.q.pop()
		s.now = ev.at
		s.steps++
		ev.fn()
	}
	s.now = end
}

// ---- the ordering leader ----

type simLeader struct {
	s     *sim
	st    *control.State
	seq   *Sequencer
	raft  link
	links map[cut.ShardID]*link

	// releases counts the leader's releases awaiting commit, and
	// releasedThrough is the furthest it proposed; windowInflight says a
	// window announcement awaits commit.
	releases        int
	releasedThrough uint64
	windowInflight  bool
	tickArmed       bool
	suspected       map[cut.ShardID]bool
	// term counts leader changes; flushAt is when the entries the old
	// leader left in flight commit.
	term    int
	flushAt time.Time
}

func (ld *simLeader) propose(c control.Command) {
	s := ld.s
	at := ld.raft.arrival(s.now, s.uniform(100*time.Microsecond, 400*time.Microsecond))
	term := ld.term
	s.at(at, func() { ld.apply(c, term) })
}

// apply is the ordering server's Raft apply: the command changes the
// control state, the sequencer observes the result, storage servers hear of
// the change, then the leader takes its next step.
func (ld *simLeader) apply(c control.Command, term int) {
	s := ld.s
	if term < ld.term && s.now.Before(ld.flushAt) {
		// An entry of an old term commits only along with the new
		// leader's first entry.
		s.at(ld.flushAt, func() { ld.apply(c, term) })
		return
	}
	ev, changed := ld.st.Apply(c)
	// Only the leader's own proposals free its in-flight slots.
	if c.Cut != nil && term == ld.term {
		ld.releases--
	}
	if c.Window != nil && term == ld.term {
		ld.windowInflight = false
	}
	snap := ld.st.Clone()
	if ld.seq != nil {
		ld.seq.Observe(snap, s.now)
	}
	if changed {
		s.learn(c, ev, snap)
		for _, sh := range s.order {
			if sh.alive {
				s.at(ld.link(sh.id).arrival(s.now, s.netDelay()), func() { sh.onState(ev, snap) })
			}
		}
	}
	ld.step()
}

// failover hands leadership to another ordering replica after an election
// gap: it starts a fresh sequencer from the replicated state, with nothing
// in flight; entries the old leader proposed still commit.
func (ld *simLeader) failover(gap time.Duration) {
	s := ld.s
	ld.term++
	ld.seq = nil
	// The old leader's entries in flight commit once the new leader
	// commits its first entry, a little after the election; the new
	// leader meanwhile works from the state it applied so far.
	ld.flushAt = s.now.Add(gap + s.uniform(100*time.Microsecond, 2*time.Millisecond))
	ld.raft.last = ld.flushAt
	s.tracef("leader: failover, next leader in %v", gap)
	s.after(gap, func() {
		ld.seq = NewSequencer(s.sc.cfg)
		ld.seq.Observe(ld.st.Clone(), s.now)
		ld.releases, ld.releasedThrough = 0, 0
		ld.windowInflight, ld.tickArmed = false, false
		ld.suspected = map[cut.ShardID]bool{}
		ld.step()
	})
}

func (ld *simLeader) link(id cut.ShardID) *link {
	l, ok := ld.links[id]
	if !ok {
		l = &link{}
		ld.links[id] = l
	}
	return l
}

// step is the ordering server's speculative step: plan the next window,
// release satisfied cuts (one proposal in flight), send lag-fixes, fail
// suspects.
func (ld *simLeader) step() {
	s := ld.s
	if ld.seq == nil {
		return // between leaders
	}
	if !ld.windowInflight {
		if w, ok := ld.seq.PlanWindow(s.now); ok {
			ld.windowInflight = true
			s.stats.windows++
			// A shard that joined gets a quota in the next window.
			for _, row := range ld.st.Shards {
				if row.State == control.Live && !s.windowed[row.ID] && !slices.ContainsFunc(w.Quotas, func(q fixante.Quota) bool { return q.Shard == row.ID }) {
					s.errorf("shard %d joined, but the next window leaves it out: %+v", row.ID, w.Quotas)
				}
			}
			s.tracef("leader: plan window %+v", *w)
			ld.propose(control.Command{Window: w})
		}
	}
	// Like the ordering server, pipeline up to 4 releases.
	if through := ld.st.LastCut.Index + ld.seq.Releasable(s.now); through > max(ld.st.LastCut.Index, ld.releasedThrough) && ld.releases < 4 {
		ld.releases++
		ld.releasedThrough = through
		s.stats.releases++
		s.tracef("leader: propose release through cut %d (last released %d)", through, ld.st.LastCut.Index)
		ld.propose(control.Command{Cut: &control.CutCommand{ReleaseThrough: through}})
	}
	for _, f := range ld.seq.LagFixes(s.now) {
		sh := s.shards[f.Shard]
		s.stats.lagFixMsgs++
		s.tracef("leader: lag-fix shard %d to %d", f.Shard, f.Length)
		if sh == nil || !sh.alive {
			continue
		}
		if s.r.Float64() < s.sc.lagFixLoss {
			s.stats.lostLagFix++
			continue
		}
		target := f.Length
		s.at(ld.link(f.Shard).arrival(s.now, s.netDelay()), func() { sh.onLagFix(target) })
	}
	for _, id := range ld.seq.Suspects(s.now) {
		if !ld.suspected[id] {
			ld.suspected[id] = true
			s.tracef("leader: shard %d suspected", id)
			ld.propose(control.Command{Finalize: &control.FinalizeCommand{Shard: id, Failed: true}})
		}
	}
	lf, qc := ld.seq.TakeStats()
	s.stats.lagFixes += lf
	s.stats.quotaChanges += qc
	// Like the ordering server, look again after half an interval while
	// time alone can change the answers.
	if ld.seq.Waiting() && !ld.tickArmed {
		ld.tickArmed = true
		s.after(s.sc.interval/2, func() {
			ld.tickArmed = false
			ld.step()
		})
	}
}

func (ld *simLeader) onReport(shard cut.ShardID, length, records, backlog uint64) {
	if ld.seq == nil {
		return // no leader: the report is lost
	}
	ld.s.stats.reports++
	ld.s.tracef("leader: report from shard %d: length %d, records %d", shard, length, records)
	// Like the ordering server, step only for news; a heartbeat that
	// repeats itself waits for the failure-detection tick.
	if ld.seq.Report(shard, length, records, backlog, ld.s.now) {
		ld.step()
	}
}

// detectTick steps the leader every quarter of SuspectAfter, as the
// ordering server's failure-detection ticker wakes its loop.
func (ld *simLeader) detectTick() {
	ld.step()
	ld.s.after(ld.s.sc.cfg.SuspectAfter/4, ld.detectTick)
}

// learn records the truth an applied change establishes and checks it.
func (s *sim) learn(c control.Command, ev control.Event, snap *control.State) {
	if c.Register != nil {
		s.addShard(ev.Registered, c.Register.Quota, snap)
		if rate, ok := s.joinRates[c.Register.Group]; ok {
			s.startClient(ev.Registered, rate)
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
	}
	cuts := ev.Cuts
	if len(cuts) == 0 && ev.Cut != nil {
		cuts = []cut.Cut{*ev.Cut}
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
		sh.accepting = false
		// Appends the cuts will never order were never acknowledged:
		// their clients retry them on another shard.
		for i := row.FinalLength; i < uint64(len(sh.log)); i++ {
			if id := sh.log[i]; id != noop {
				s.reroute(id)
			}
		}
	}
}

// checkSlots checks the void's slots against the window arithmetic: the
// failed shard's entries from From on, located in each announced window.
func (s *sim) checkSlots(v control.Void, snap *control.State) {
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

// commit extends the eager sequence with one committed cut: Scalog's
// interleaving of the shards' logs, no-ops included, a failed shard's
// entries after its void point counting as no-ops.
func (s *sim) commit(c cut.Cut) {
	parts, err := cut.Interleave(s.lastCut, c)
	if err != nil {
		s.errorf("cut %d: %v", c.Index, err)
		return
	}
	if uint64(len(s.eager)) != c.Start {
		s.errorf("cut %d starts at %d, eager sequence holds %d", c.Index, c.Start, len(s.eager))
	}
	for _, sl := range parts {
		sh := s.shards[sl.Shard]
		from, void := s.voidFrom[sl.Shard]
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
			if e != noop {
				if p, dup := s.orderedAt[e]; dup {
					s.errorf("record %d ordered twice: at %d and %d", e, p, pos)
				}
				s.orderedAt[e] = pos
			}
			s.eager = append(s.eager, e)
			s.eagerShard = append(s.eagerShard, sl.Shard)
		}
	}
	s.lastCut = c
	s.cutCount++
}

// pollStatus has each one-shard subscriber hear, a poll later, what the
// cluster status says now: every view change and the committed end. Its
// own shard's stream cannot tell it of that shard's failure, nor, once
// the shard is dead or gone, of later cuts.
func (s *sim) pollStatus() {
	var views []*viewMsg
	for _, v := range s.views {
		views = append(views, &viewMsg{view: v.View, cgp: v.ConfirmedGP, failed: v.Void.Shard})
	}
	end := s.lastCut.End
	for _, sb := range s.subs {
		if sb.oneShard {
			s.after(statusPollDelay, func() { sb.on(&subMsg{shard: sb.shard, views: views, confirm: end}) })
		}
	}
}

// ---- shards ----

type simShard struct {
	s   *sim
	id  cut.ShardID
	adh *Shard
	// log holds record ids and no-ops; durable is how much every replica
	// holds.
	log     []int64
	records uint64
	durable uint64

	flushPending bool
	durableAt    time.Time
	fillArmed    bool
	fillAt       time.Time

	alive, accepting, leaving, finalized bool

	// Subscription streams: sent is the next own entry to stream, filled
	// the voids whose slots went out.
	sent     uint64
	knownCut cut.Cut // the last cut the shard heard of
	filled   map[uint64]bool
	hist     []Item[int64]
	streams  []*stream
	report   link
	// lastReport is the last length reported, with the records then.
	lastReport, lastRecords uint64
	// straggle delays reports by extra while now is in [from, until).
	straggleFrom, straggleUntil time.Time
	straggleExtra               time.Duration
}

func (s *sim) addShard(id cut.ShardID, quota uint64, snap *control.State) {
	sh := &simShard{s: s, id: id, adh: NewShard(id, 0, s.sc.fillAfter, s.sc.interval*time.Duration(s.sc.windowCuts), s.now), alive: true, accepting: true, filled: map[uint64]bool{}}
	for range s.subs {
		sh.streams = append(sh.streams, &stream{})
	}
	s.shards[id] = sh
	s.order = append(s.order, sh)
	slices.SortFunc(s.order, func(a, b *simShard) int { return int(a.id) - int(b.id) })
	s.tracef("shard %d registered (quota %d)", id, quota)
	sh.onState(control.Event{}, snap)
	sh.heartbeat()
}

// onState is a storage server hearing of an applied change: a view change
// goes to every subscriber first, then the windows, a filler's no-ops and
// the confirmed end.
func (sh *simShard) onState(ev control.Event, snap *control.State) {
	s := sh.s
	if !sh.alive {
		return
	}
	if v := ev.View; v != nil {
		vc := &viewMsg{view: v.View, cgp: v.ConfirmedGP, failed: v.Void.Shard}
		sh.broadcast(func(m *subMsg) { m.views = append(m.views, vc) })
	}
	sh.adh.SetWindows(snap.Spec.Windows)
	sh.knownCut = snap.LastCut
	for _, v := range snap.Spec.Void {
		if v.Filler != sh.id || sh.filled[v.View] {
			continue
		}
		sh.filled[v.View] = true
		var items []Item[int64]
		for _, w := range snap.Spec.Windows {
			for _, rg := range voidRanges(w, v.Shard, v.From) {
				items = append(items, Item[int64]{Pos: rg.Start, Shard: sh.id, Skip: rg.Count})
			}
		}
		s.tracef("shard %d fills the slots of shard %d: %d runs", sh.id, v.Shard, len(items))
		sh.stream(items)
	}
	if ev.Cut != nil {
		end := snap.LastCut.End
		sh.broadcast(func(m *subMsg) { m.confirm = max(m.confirm, end) })
	}
	if row := snap.Shard(sh.id); row != nil && row.State == control.Finalized {
		sh.finalized = true
	}
	sh.poke()
}

func (sh *simShard) onLagFix(target uint64) {
	if !sh.alive || sh.finalized {
		return
	}
	n := sh.adh.LagFix(target)
	sh.s.tracef("shard %d: lag-fix to %d: %d no-ops (stored %d)", sh.id, target, n, len(sh.log))
	sh.appendNoops(n)
	sh.poke()
}

// poke is the storage server's speculative step: fill no-ops when due,
// report at a quota boundary, stream what became durable and predictable,
// arm the fill timer.
func (sh *simShard) poke() {
	s := sh.s
	if !sh.alive || sh.finalized {
		return
	}
	if n := sh.adh.Fill(s.now); n > 0 {
		sh.appendNoops(n)
	}
	if l, ok := sh.adh.Report(s.now); ok {
		sh.lastReport, sh.lastRecords = l, sh.adh.Records()
		sh.sendReport()
	}
	sh.streamDurable()
	if at, ok := sh.adh.FillAt(); ok {
		if at.Before(s.now) {
			at = s.now
		}
		if !sh.fillArmed || at.Before(sh.fillAt) {
			sh.fillArmed, sh.fillAt = true, at
			s.at(at, func() {
				if sh.fillArmed && sh.fillAt.Equal(at) {
					sh.fillArmed = false
					sh.poke()
				}
			})
		}
	}
}

// sendReport sends the last report to the leader, late while straggling.
func (sh *simShard) sendReport() {
	s := sh.s
	l, recs := sh.lastReport, sh.lastRecords
	backlog := sh.adh.Length() - min(l, sh.adh.Length())
	delay := s.netDelay()
	if !s.now.Before(sh.straggleFrom) && s.now.Before(sh.straggleUntil) {
		delay += sh.straggleExtra
	}
	id := sh.id
	s.at(sh.report.arrival(s.now, delay), func() { s.ld.onReport(id, l, recs, backlog) })
}

// heartbeat repeats the last report now and then, as a storage server's
// heartbeat does: a new leader learns the lengths from it.
func (sh *simShard) heartbeat() {
	s := sh.s
	s.after(s.sc.heartbeat, func() {
		if !sh.alive || sh.finalized {
			return
		}
		if sh.lastReport > 0 {
			sh.sendReport()
		}
		sh.heartbeat()
	})
}

func (sh *simShard) appendRecord(id int64) {
	sh.log = append(sh.log, id)
	sh.records++
	sh.s.stats.records++
	sh.adh.Stored(uint64(len(sh.log)), sh.records, sh.s.now)
	sh.replicate()
}

func (sh *simShard) appendNoops(n uint64) {
	if n == 0 {
		return
	}
	for range n {
		sh.log = append(sh.log, noop)
	}
	sh.s.stats.noops += n
	sh.s.stats.noopRuns++
	sh.adh.Stored(uint64(len(sh.log)), sh.records, sh.s.now)
	sh.replicate()
}

// replicate makes the log durable after a replication delay, in batches,
// in order.
func (sh *simShard) replicate() {
	s := sh.s
	if sh.flushPending {
		return
	}
	sh.flushPending = true
	s.after(s.uniform(5*time.Microsecond, 40*time.Microsecond), func() {
		sh.flushPending = false
		if !sh.alive {
			return
		}
		target := uint64(len(sh.log))
		at := s.now.Add(s.uniform(60*time.Microsecond, 300*time.Microsecond))
		if at.Before(sh.durableAt) {
			at = sh.durableAt
		}
		sh.durableAt = at
		s.at(at, func() {
			if !sh.alive || target <= sh.durable {
				return
			}
			sh.durable = target
			sh.adh.Durable(target)
			sh.poke()
		})
	})
}

// streamDurable sends every durable entry whose position is predictable:
// records as themselves, no-ops as skips.
func (sh *simShard) streamDurable() {
	var items []Item[int64]
	for sh.sent < sh.durable {
		pos, ok := sh.adh.Predict(sh.sent)
		if !ok {
			if sh.sent < sh.knownCut.Len(sh.id) {
				sh.s.errorf("shard %d: entry %d is ordered but no window predicts it", sh.id, sh.sent)
			}
			break
		}
		e := sh.log[sh.sent]
		sh.sent++
		if e == noop {
			if n := len(items); n > 0 && items[n-1].Skip > 0 && items[n-1].Pos+items[n-1].Skip == pos {
				items[n-1].Skip++
				continue
			}
			items = append(items, Item[int64]{Pos: pos, Shard: sh.id, Skip: 1})
			continue
		}
		items = append(items, Item[int64]{Pos: pos, Shard: sh.id, Rec: e})
	}
	sh.stream(items)
}

// stream sends items to every subscriber; now and then a stream
// reconnects and repeats a stretch of what it sent before.
func (sh *simShard) stream(items []Item[int64]) {
	s := sh.s
	if len(items) == 0 {
		return
	}
	sh.hist = append(sh.hist, items...)
	if len(sh.hist) > 4096 {
		sh.hist = slices.Clone(sh.hist[len(sh.hist)-64:])
	}
	for i := range sh.streams {
		sh.send(i, func(m *subMsg) { m.items = append(m.items, items...) })
		if s.r.Float64() < s.sc.dupProb {
			s.stats.dupResends++
			back := min(len(sh.hist), 1+s.r.IntN(40))
			rep := slices.Clone(sh.hist[len(sh.hist)-back:])
			sh.send(i, func(m *subMsg) { m.items = append(m.items, rep...) })
		}
	}
}

// send adds to the next message of stream i: the one not yet delivered,
// or a new one. Like a storage server's next response, a message carries
// a view change, then entries, then the confirmed end.
func (sh *simShard) send(i int, add func(*subMsg)) {
	s := sh.s
	st := sh.streams[i]
	if st.pending == nil {
		m := &subMsg{shard: sh.id}
		st.pending = m
		sb := s.subs[i]
		s.at(st.arrival(s.now, s.netDelay()), func() {
			if st.pending == m {
				st.pending = nil
			}
			sb.on(m)
		})
	}
	add(st.pending)
}

func (sh *simShard) broadcast(add func(*subMsg)) {
	for i := range sh.streams {
		sh.send(i, add)
	}
}

// fail stops the whole shard: every replica at once.
func (sh *simShard) fail() {
	sh.alive, sh.accepting, sh.fillArmed = false, false, false
	sh.s.tracef("shard %d fails (stored %d, durable %d)", sh.id, len(sh.log), sh.durable)
}

// ---- clients ----

// simClient appends records at a rate to one shard, moving to another when
// its shard stops taking appends.
type simClient struct {
	s      *sim
	target cut.ShardID
	rate   float64 // records per millisecond
	burst  float64 // multiplier while bursting
	until  time.Time
	stop   time.Time
}

func (s *sim) startClient(target cut.ShardID, rate float64) *simClient {
	c := &simClient{s: s, target: target, rate: rate, burst: 1, stop: s.start.Add(s.sc.appendFor)}
	s.clients = append(s.clients, c)
	c.schedule()
	return c
}

func (c *simClient) schedule() {
	s := c.s
	rate := c.rate
	if s.now.Before(c.until) {
		rate *= c.burst
	}
	if rate <= 0 {
		return
	}
	gap := time.Duration(-math.Log(1-s.r.Float64()) / rate * float64(time.Millisecond))
	at := s.now.Add(gap + time.Nanosecond)
	if !at.Before(c.stop) {
		return
	}
	s.at(at, func() {
		sh := s.shards[c.target]
		if sh == nil || !sh.accepting {
			alt := s.acceptingShard()
			if alt == nil {
				c.schedule()
				return
			}
			c.target = alt.id
			sh = alt
		}
		id := s.nextRec
		s.nextRec++
		sh.appendRecord(id)
		c.schedule()
	})
}

// acceptingShard picks a random shard that takes appends.
func (s *sim) acceptingShard() *simShard {
	var live []*simShard
	for _, sh := range s.order {
		if sh.accepting {
			live = append(live, sh)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[s.r.IntN(len(live))]
}

// reroute appends an unacknowledged record again on another shard after
// the client's timeout.
func (s *sim) reroute(id int64) {
	s.reroutes++
	var retry func()
	retry = func() {
		sh := s.acceptingShard()
		if sh == nil {
			s.after(time.Millisecond, retry)
			return
		}
		sh.appendRecord(id)
		s.stats.records--
	}
	s.after(s.uniform(2*time.Millisecond, 10*time.Millisecond), retry)
}
