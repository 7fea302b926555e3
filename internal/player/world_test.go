package player

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
)

// world is a model of the whole pipeline around one Core: the main fetcher,
// the recovery fetchers, each target's stream (batches on the wire, write
// completions, acknowledgements on the way back) and each target, which
// applies a batch and records its last index in one atomic step. The
// exploration and the randomized runs drive it one action at a time.
type world struct {
	m *model
	// core is the player; a player restart replaces it.
	core *Core
	// mainNext is the index the main fetcher hands over next.
	mainNext Index
	fetches  []fetch
	tg       []modelTarget
	// faults counts the target failures and player restarts so far.
	faults int
	// violation is the first broken property, if any.
	violation string
}

// model is what every world of one run shares and never changes.
type model struct {
	cfg Config
	// log is the ordered log; log[i] has index i+1.
	log []Entry
	// routed lists, per target, the indices routed to it, in order.
	routed [][]Index
	// faultsMax is the fault budget: target failures plus player restarts.
	faultsMax int
	// restarts allows player restarts as faults.
	restarts bool
	bug      bug
	// covered records which situations some world reached, to show an
	// exploration is not vacuous.
	covered map[string]bool
}

// fetch is a recovery fetcher: it hands over [next, to] for its target and
// term, then reports done. Once stopped it may still hand over entries (they
// were under way) or vanish.
type fetch struct {
	target   TargetID
	term     Term
	next, to Index
	stopped  bool
}

type modelTarget struct {
	up          bool
	lastApplied Index
	// applied counts the entries of routed[t] applied so far.
	applied int
	// wire holds the batches written to the target's stream and not yet
	// applied, oldest first.
	wire []wireBatch
	// writes holds the write completions not yet reported, by term.
	writes []Term
	// acks holds the acknowledgements on their way back.
	acks []AckReceived
}

type wireBatch struct {
	term  Term
	batch Batch
}

// action kinds; the fault kinds are the only ones that spend the budget.
const (
	actMain = iota
	actRecoveryEntry
	actRecoveryDone
	actRecoveryVanish
	actWriteDone
	actApply
	actAck
	actTargetUp
	actTargetDown // fault
	actRestart    // fault
)

type action struct {
	kind int
	t    int // target, or fetch for the recovery kinds
}

func (a action) fault() bool { return a.kind == actTargetDown || a.kind == actRestart }

func (a action) String() string {
	names := [...]string{"main", "rec-entry", "rec-done", "rec-vanish", "write-done", "apply", "ack", "up", "down", "restart"}
	return names[a.kind] + "(" + strconv.Itoa(a.t) + ")"
}

// newModel builds a model of n entries over cfg's targets.
func newModel(cfg Config, log []Entry, faultsMax int, restarts bool, b bug) *model {
	m := &model{cfg: cfg, log: log, faultsMax: faultsMax, restarts: restarts, bug: b, covered: map[string]bool{}}
	r := newRouter(cfg)
	m.routed = make([][]Index, len(cfg.Targets))
	for i := range log {
		for _, id := range r.targets(&log[i]) {
			m.routed[id] = append(m.routed[id], log[i].Index)
		}
	}
	return m
}

// start returns the world in which every target has applied what it was
// routed up to lastApplied[t] and the player starts.
func (m *model) start(lastApplied []Index) *world {
	w := &world{m: m, tg: make([]modelTarget, len(m.cfg.Targets))}
	for t := range w.tg {
		w.tg[t].up = true
		w.tg[t].lastApplied = lastApplied[t]
		for _, ix := range m.routed[t] {
			if ix <= lastApplied[t] {
				w.tg[t].applied++
			}
		}
	}
	w.restartPlayer()
	return w
}

func (w *world) restartPlayer() {
	c, err := New(w.m.cfg)
	if err != nil {
		panic(err)
	}
	c.bug = w.m.bug
	w.core = c
	w.fetches = nil
	w.mainNext = 0
	la := map[TargetID]Index{}
	for t := range w.tg {
		// The player's streams die with it.
		w.tg[t].wire, w.tg[t].writes, w.tg[t].acks = nil, nil, nil
		if w.tg[t].up {
			la[TargetID(t)] = w.tg[t].lastApplied
		}
	}
	w.step(PlayerRestart{LastApplied: la})
}

// step feeds ev to the core and carries out its output.
func (w *world) step(ev Event) {
	w.cover(ev)
	out := w.core.Step(ev)
	if out.StartMain != 0 {
		w.mainNext = out.StartMain
	}
	for _, f := range out.StopRecovery {
		for i := range w.fetches {
			if w.fetches[i].target == f.Target && w.fetches[i].term == f.Term {
				w.fetches[i].stopped = true
			}
		}
	}
	for _, f := range out.StartRecovery {
		w.fetches = append(w.fetches, fetch{target: f.Target, term: f.Term, next: f.From, to: f.To})
	}
	for _, r := range out.Releases {
		for _, wb := range w.tg[r.Target].wire {
			if wb.batch.Last() == r.Batch.Last() {
				w.fail("target %d: batch ending at %d released while still on the wire", r.Target, r.Batch.Last())
			}
		}
	}
	for _, s := range out.Sends {
		tg := &w.tg[s.Target]
		if !tg.up || s.Term != w.core.Term(s.Target) {
			continue // no stream under that term
		}
		tg.wire = append(tg.wire, wireBatch{term: s.Term, batch: s.Batch})
		tg.writes = append(tg.writes, s.Term)
	}
	if len(out.Misbehaving) > 0 {
		w.fail("targets %v reported misbehaving", out.Misbehaving)
	}
}

func (w *world) fail(format string, args ...any) {
	if w.violation == "" {
		w.violation = fmt.Sprintf(format, args...)
	}
}

// actions appends the actions enabled in w to as.
func (w *world) actions(as []action) []action {
	if w.mainNext != 0 && int(w.mainNext) <= len(w.m.log) && !w.core.MainWait() {
		as = append(as, action{actMain, 0})
	}
	for i, f := range w.fetches {
		switch {
		case f.next <= f.to && (f.term != w.core.Term(f.target) || !w.core.RecoveryWait(f.target)):
			as = append(as, action{actRecoveryEntry, i})
		case f.next > f.to:
			as = append(as, action{actRecoveryDone, i})
		}
		if f.stopped {
			as = append(as, action{actRecoveryVanish, i})
		}
	}
	for t := range w.tg {
		tg := &w.tg[t]
		if len(tg.writes) > 0 {
			as = append(as, action{actWriteDone, t})
		}
		if tg.up && len(tg.wire) > 0 {
			as = append(as, action{actApply, t})
		}
		if len(tg.acks) > 0 {
			as = append(as, action{actAck, t})
		}
		if !tg.up {
			as = append(as, action{actTargetUp, t})
		} else if w.faults < w.m.faultsMax {
			as = append(as, action{actTargetDown, t})
		}
	}
	if w.m.restarts && w.faults < w.m.faultsMax {
		as = append(as, action{actRestart, 0})
	}
	return as
}

// do carries out a, which must be enabled.
func (w *world) do(a action) {
	switch a.kind {
	case actMain:
		e := w.m.log[w.mainNext-1]
		w.mainNext++
		w.step(EntryFetched{Stream: Main, Entry: e})
	case actRecoveryEntry:
		f := &w.fetches[a.t]
		e := w.m.log[f.next-1]
		f.next++
		w.step(EntryFetched{Stream: Recovery, Target: f.target, Term: f.term, Entry: e})
	case actRecoveryDone:
		f := w.fetches[a.t]
		w.fetches = slices.Delete(w.fetches, a.t, a.t+1)
		w.step(RecoveryFetchDone{Target: f.target, Term: f.term})
	case actRecoveryVanish:
		w.fetches = slices.Delete(w.fetches, a.t, a.t+1)
	case actWriteDone:
		tg := &w.tg[a.t]
		term := tg.writes[0]
		tg.writes = tg.writes[1:]
		w.step(WriteDone{Target: TargetID(a.t), Term: term})
	case actApply:
		w.apply(a.t)
	case actAck:
		tg := &w.tg[a.t]
		ack := tg.acks[0]
		tg.acks = tg.acks[1:]
		w.step(ack)
	case actTargetUp:
		w.tg[a.t].up = true
		w.step(TargetUp{Target: TargetID(a.t), LastApplied: w.tg[a.t].lastApplied})
	case actTargetDown:
		w.faults++
		tg := &w.tg[a.t]
		// The stream breaks: what was on the wire is lost. Write
		// completions and acknowledgements already under way may still
		// reach the player, late and under the old term.
		tg.up, tg.wire = false, nil
		w.step(TargetDown{Target: TargetID(a.t)})
	case actRestart:
		w.faults++
		w.restartPlayer()
	}
}

// apply is the target applying the oldest batch on its wire and recording
// its last index, atomically; it checks that every entry routed to the
// target is applied once, in order, with no gap.
func (w *world) apply(t int) {
	tg := &w.tg[t]
	wb := tg.wire[0]
	tg.wire = tg.wire[1:]
	routed := w.m.routed[t]
	for _, m := range wb.batch.Messages {
		if m.Index <= tg.lastApplied {
			w.fail("target %d: entry %d applied after %d (duplicate or out of order)", t, m.Index, tg.lastApplied)
			return
		}
		next := Index(0)
		if tg.applied < len(routed) {
			next = routed[tg.applied]
		}
		switch {
		case !m.Empty && m.Index != next:
			w.fail("target %d: entry %d applied, next routed is %d (gap or misrouted)", t, m.Index, next)
			return
		case !m.Empty:
			tg.applied++
		default:
			w.m.covered["empty message applied"] = true
		case next != 0 && next <= m.Index:
			w.fail("target %d: empty at %d skips routed entry %d", t, m.Index, next)
			return
		}
		tg.lastApplied = m.Index
	}
	tg.acks = append(tg.acks, AckReceived{Target: TargetID(t), Term: wb.term, Index: tg.lastApplied})
}

// cover records the situations ev meets.
func (w *world) cover(ev Event) {
	c, cov := w.core, w.m.covered
	if c.started {
		if c.mainWait {
			cov["main fetcher waits"] = true
		}
		for i := range c.q {
			switch q := &c.q[i]; {
			case q.catchupFull:
				cov["recovery fetcher waits"] = true
			case q.state == FetchingCompleted:
				cov["fetching completed"] = true
			case len(q.popped) > 1:
				cov["several batches in flight"] = true
			}
		}
	}
	switch ev := ev.(type) {
	case EntryFetched:
		if ev.Stream == Recovery && ev.Term != c.Term(ev.Target) {
			cov["recovery entry of an expired term"] = true
		}
	case WriteDone:
		if ev.Term != c.Term(ev.Target) {
			cov["write completion of an expired term"] = true
		}
	case AckReceived:
		if ev.Term != c.Term(ev.Target) {
			cov["acknowledgement of an expired term"] = true
		}
	case RecoveryFetchDone:
		if ev.Term != c.Term(ev.Target) {
			cov["recovery done of an expired term"] = true
		}
	case TargetUp:
		if ev.LastApplied >= c.currentIndex {
			cov["target up with nothing missed"] = true
		}
	case PlayerRestart:
		if len(ev.LastApplied) < len(c.q) {
			cov["player restart with a target down"] = true
		}
	}
}

// coverage lists what every exploration of two targets must reach.
var coverage = []string{
	"main fetcher waits", "recovery fetcher waits", "fetching completed", "several batches in flight",
	"recovery entry of an expired term", "write completion of an expired term",
	"acknowledgement of an expired term", "recovery done of an expired term",
	"target up with nothing missed", "player restart with a target down", "empty message applied",
}

// done reports whether every target applied every entry routed to it.
func (w *world) done() bool {
	for t := range w.tg {
		if w.tg[t].applied != len(w.m.routed[t]) {
			return false
		}
	}
	return true
}

// checkQuiet checks a world where nothing more can happen without a fault:
// everything is applied and the player holds no memory.
func (w *world) checkQuiet() {
	if !w.done() {
		var s []string
		for t := range w.tg {
			s = append(s, fmt.Sprintf("t%d applied %d/%d up=%v %+v", t, w.tg[t].applied, len(w.m.routed[t]), w.tg[t].up, w.core.Status(TargetID(t))))
		}
		w.fail("stuck before everything was applied: %v", s)
		return
	}
	for t := range w.tg {
		if st := w.core.Status(TargetID(t)); st.Queued != 0 || st.Inflight != 0 || st.HeldBytes != 0 {
			w.fail("target %d: the player still holds %+v when all is applied", t, st)
		}
	}
}

// clone returns a deep copy of w that shares only what never changes.
func (w *world) clone() *world {
	c := *w
	c.core = w.core.clone()
	c.fetches = slices.Clone(w.fetches)
	c.tg = slices.Clone(w.tg)
	for t := range c.tg {
		c.tg[t].wire = slices.Clone(c.tg[t].wire)
		c.tg[t].writes = slices.Clone(c.tg[t].writes)
		c.tg[t].acks = slices.Clone(c.tg[t].acks)
	}
	return &c
}

// clone returns a deep copy of c; batches are shared, since nothing changes
// a batch once it is made.
func (c *Core) clone() *Core {
	d := *c
	d.out, d.relBuf = Output{}, nil
	d.router.buf = nil
	d.q = slices.Clone(c.q)
	for i := range d.q {
		q := &d.q[i]
		q.normal.msgs = slices.Clone(q.normal.msgs)
		q.catchup.msgs = slices.Clone(q.catchup.msgs)
		q.popped = slices.Clone(q.popped)
	}
	return &d
}

// encode appends a canonical form of w's state to b: two worlds with the
// same encoding behave the same from then on.
func (w *world) encode(b []byte) []byte {
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	msgs := func(ms []Message) {
		u(uint64(len(ms)))
		for _, m := range ms {
			v := uint64(m.Index) << 1
			if m.Empty {
				v |= 1
			}
			u(v)
		}
	}
	c := w.core
	u(uint64(c.currentIndex))
	u(c.sinceEmpty)
	u(boolBit(c.mainWait))
	for i := range c.q {
		q := &c.q[i]
		u(uint64(q.state))
		u(uint64(q.term))
		msgs(q.normal.msgs[q.normal.head:])
		msgs(q.catchup.msgs[q.catchup.head:])
		u(uint64(len(q.popped)))
		for _, p := range q.popped {
			msgs(p.Messages)
		}
		u(boolBit(q.writable))
		u(uint64(q.lastAck))
		u(uint64(q.lastMain))
		u(uint64(q.lastCatchup))
		if q.fetch != nil {
			u(1)
			u(uint64(q.fetch.From))
			u(uint64(q.fetch.To))
		} else {
			u(0)
		}
		u(boolBit(q.catchupFull))
	}
	u(uint64(w.mainNext))
	fs := slices.Clone(w.fetches)
	slices.SortFunc(fs, func(a, b fetch) int {
		if a.target != b.target {
			return int(a.target) - int(b.target)
		}
		return int(a.term) - int(b.term)
	})
	u(uint64(len(fs)))
	for _, f := range fs {
		u(uint64(f.target))
		u(uint64(f.term))
		u(uint64(f.next))
		u(uint64(f.to))
		u(boolBit(f.stopped))
	}
	for t := range w.tg {
		tg := &w.tg[t]
		u(boolBit(tg.up))
		u(uint64(tg.lastApplied))
		u(uint64(tg.applied))
		u(uint64(len(tg.wire)))
		for _, wb := range tg.wire {
			u(uint64(wb.term))
			msgs(wb.batch.Messages)
		}
		u(uint64(len(tg.writes)))
		for _, term := range tg.writes {
			u(uint64(term))
		}
		u(uint64(len(tg.acks)))
		for _, a := range tg.acks {
			u(uint64(a.Term))
			u(uint64(a.Index))
		}
	}
	u(uint64(w.faults))
	return b
}

func boolBit(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}
