package player

import "fmt"

// Stream says which fetcher an entry comes from.
type Stream uint8

const (
	// Main is the never-ending main stream, read from the start index the
	// last PlayerRestart chose.
	Main Stream = iota
	// Recovery is a bounded recovery stream for one target and term.
	Recovery
)

// Event is one input of the core.
type Event interface{ isEvent() }

// EntryFetched is an entry read by a fetcher. Main-stream entries come in
// index order from the StartMain index, one after the other, and only while
// MainWait is false. A recovery fetch's entries come in index order within
// its range, tagged with its Target and Term, and only while RecoveryWait is
// false for that target; entries of an expired term may still arrive and
// are dropped.
type EntryFetched struct {
	Stream Stream
	// Target and Term identify a recovery fetch; the main stream leaves
	// them zero.
	Target TargetID
	Term   Term
	Entry  Entry
}

// WriteDone reports that the stream of Target opened under Term finished
// writing the last Send (the paper's write tag on the completion queue).
type WriteDone struct {
	Target TargetID
	Term   Term
}

// AckReceived reports that Target, on the stream opened under Term, has
// applied everything up to and including Index (the paper's read tag).
type AckReceived struct {
	Target TargetID
	Term   Term
	Index  Index
}

// TargetDown reports that Target disconnected or stopped acknowledging.
// The server must have closed the target's stream, so that nothing it sent
// is applied after the target answers LastApplied on its next connection.
type TargetDown struct{ Target TargetID }

// TargetUp reports that Target is connected again on a fresh stream and
// answered LastApplied. The stream is bound to the term the core assigns
// while handling this event (Core.Term right after Step).
type TargetUp struct {
	Target      TargetID
	LastApplied Index
}

// RecoveryFetchDone reports that the recovery fetch of Target under Term
// has handed over every entry of its range.
type RecoveryFetchDone struct {
	Target TargetID
	Term   Term
}

// PlayerRestart (re)starts the core from nothing but the targets' durable
// state: it is the first event of every run, after a crash or a fresh
// start. LastApplied holds the answer of every target that answered
// LastApplied; the others start Suspended and recover when they come up.
// Whatever the core held before is forgotten: the server must have stopped
// every fetcher and closed every stream of the previous run.
type PlayerRestart struct {
	LastApplied map[TargetID]Index
}

func (EntryFetched) isEvent()      {}
func (WriteDone) isEvent()         {}
func (AckReceived) isEvent()       {}
func (TargetDown) isEvent()        {}
func (TargetUp) isEvent()          {}
func (RecoveryFetchDone) isEvent() {}
func (PlayerRestart) isEvent()     {}

// Send is one batch to write on a target's stream.
type Send struct {
	Target TargetID
	Term   Term
	Batch  Batch
}

// RecoveryFetch is a bounded read of the log, [From, To], for one target
// and term.
type RecoveryFetch struct {
	Target   TargetID
	Term     Term
	From, To Index
}

// Release hands back a batch the core no longer holds: its target
// acknowledged it, or the target went down and the batch died with its
// stream.
type Release struct {
	Target TargetID
	Batch  Batch
}

// Flow is a change of back-pressure on one fetcher.
type Flow struct {
	Stream Stream
	// Target is the recovery fetch's target; zero for the main stream.
	Target TargetID
	// Wait says the fetcher must hand over no more entries until a Flow
	// with Wait false.
	Wait bool
}

// Output is what the server must do after one Step. Its slices are reused:
// they are valid until the next Step.
type Output struct {
	// StartMain, when not zero, is the index the main fetcher starts reading
	// at; any earlier main fetcher must be gone before it starts.
	StartMain Index
	// StopRecovery lists recovery fetches to stop. Stop them before starting
	// those of StartRecovery; a stopped fetch may still deliver entries
	// already under way, which its expired term makes harmless.
	StopRecovery []RecoveryFetch
	// StartRecovery lists recovery fetches to start.
	StartRecovery []RecoveryFetch
	// Sends are batches to write. Write each only on the stream of its
	// target opened under its Term (drop it if that stream is gone), after
	// the WriteDone of the previous Send to that target, and in slice order
	// per target; the core never has two writes outstanding on one stream.
	Sends []Send
	// Releases are batches whose memory may be reused now: the target
	// acknowledged them or their stream is gone.
	Releases []Release
	// Flow lists back-pressure changes. Apply them before taking the next
	// entry from a fetcher.
	Flow []Flow
	// Misbehaving lists targets that acknowledged an index they were never
	// sent; the server should disconnect them (TargetDown).
	Misbehaving []TargetID
}

func (o *Output) reset() {
	o.StartMain = 0
	o.StopRecovery = o.StopRecovery[:0]
	o.StartRecovery = o.StartRecovery[:0]
	o.Sends = o.Sends[:0]
	o.Releases = o.Releases[:0]
	o.Flow = o.Flow[:0]
	o.Misbehaving = o.Misbehaving[:0]
}

// Core is the player's state machine: the target queues, the dispatcher and
// the recovery rules. It is driven by one goroutine (see the package doc).
type Core struct {
	cfg    Config
	router router
	q      []targetQueue
	// started is set by the first PlayerRestart.
	started bool
	// currentIndex is the index of the last main-stream entry dispatched
	// (the paper's current_index); before the first, the main stream's start
	// index minus one. Every entry above it reaches every up target through
	// the main stream, so a recovery fetch ends at it.
	currentIndex Index
	// sinceEmpty counts the main-stream entries since the last round of
	// empty messages.
	sinceEmpty uint64
	// mainWait is the back-pressure on the main fetcher last reported.
	mainWait bool
	out      Output
	// relBuf is scratch space for released batches.
	relBuf []Batch
	// bug plants a protocol bug; only tests set it, to show the exploration
	// catches it.
	bug bug
}

// bug names a deliberately wrong rule for the tests that check the
// exploration finds violations.
type bug uint8

const (
	bugNone bug = iota
	// bugSkipPushTerm pushes recovery entries of an expired term.
	bugSkipPushTerm
	// bugRecoverFromLastApplied starts a recovery fetch at the last applied
	// index instead of the one after it.
	bugRecoverFromLastApplied
	// bugSkipLastAckCheck dispatches entries a target already applied.
	bugSkipLastAckCheck
	// bugRecoverToBeforeCurrent ends a recovery fetch one entry before the
	// current index.
	bugRecoverToBeforeCurrent
	// bugRestartFromMax starts the main stream after the largest last
	// applied index instead of the smallest.
	bugRestartFromMax
)

// New returns a core for cfg, which must be valid. It does nothing until
// its first PlayerRestart.
func New(cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("player config: %w", err)
	}
	return &Core{cfg: cfg, router: newRouter(cfg), q: make([]targetQueue, len(cfg.Targets))}, nil
}

// Step handles one event and returns what to do; the Output is valid until
// the next Step.
func (c *Core) Step(ev Event) *Output {
	c.out.reset()
	if _, ok := ev.(PlayerRestart); !ok && !c.started {
		panic("player: event before the first PlayerRestart")
	}
	switch ev := ev.(type) {
	case PlayerRestart:
		c.restart(ev)
	case EntryFetched:
		if ev.Stream == Main {
			c.dispatchMain(&ev.Entry)
		} else {
			c.dispatchRecovery(ev.Target, ev.Term, &ev.Entry)
		}
	case WriteDone:
		c.writeDone(ev.Target, ev.Term)
	case AckReceived:
		c.ack(ev.Target, ev.Term, ev.Index)
	case TargetDown:
		c.targetDown(ev.Target)
	case TargetUp:
		c.targetUp(ev.Target, ev.LastApplied)
	case RecoveryFetchDone:
		c.recoveryDone(ev.Target, ev.Term)
	default:
		panic("player: unknown event")
	}
	c.updateFlow()
	return &c.out
}

// restart is Algorithm 5's "upon LogPlayer restart": every target that
// answered starts Normal at its last applied index, the others Suspended,
// and the main stream starts after the smallest answer, so that no up
// target misses an entry. A target that did not answer gets what it missed
// from a recovery fetch when it comes up, wherever the main stream starts.
func (c *Core) restart(ev PlayerRestart) {
	c.started = true
	var start Index
	first := true
	for i := range c.q {
		q := &c.q[i]
		*q = targetQueue{term: 1}
		la, up := ev.LastApplied[TargetID(i)]
		if !up {
			q.state = Suspended
			continue
		}
		q.state, q.writable, q.lastAck, q.lastMain = Normal, true, la, la
		if first || la < start || (c.bug == bugRestartFromMax && la > start) {
			start, first = la, false
		}
	}
	// With no target up, any start is safe: every target recovers what the
	// main stream skipped.
	c.currentIndex = start
	c.sinceEmpty = 0
	c.mainWait = false
	c.out.StartMain = start + 1
}

// dispatchMain is Algorithm 3's dispatch for the main stream, followed by
// Algorithm 5's empty messages.
func (c *Core) dispatchMain(e *Entry) {
	if c.mainWait {
		panic("player: main-stream entry fed while the main fetcher must wait")
	}
	if e.Index != c.currentIndex+1 {
		panic(fmt.Sprintf("player: main-stream entry %d after %d", e.Index, c.currentIndex))
	}
	for _, id := range c.router.targets(e) {
		q := &c.q[id]
		if (q.lastAck < e.Index || c.bug == bugSkipLastAckCheck) && q.push(message(e), true, q.term, false) {
			c.sendNext(id)
		}
	}
	c.currentIndex = e.Index
	c.sinceEmpty++
	if c.cfg.EmptyEvery == 0 || c.sinceEmpty < c.cfg.EmptyEvery {
		return
	}
	c.sinceEmpty = 0
	for i := range c.q {
		q := &c.q[i]
		// An empty message only advances a target's index: skip it when the
		// target already is there, had something to apply lately, or its
		// queue is full (the next round will do).
		if q.lastAck >= c.currentIndex || q.lastMain+Index(c.cfg.EmptyEvery) > c.currentIndex ||
			q.normal.full(c.cfg.QueueEntriesMax, c.cfg.QueueBytesMax) {
			continue
		}
		if q.push(Message{Index: c.currentIndex, Empty: true}, true, q.term, false) {
			c.sendNext(TargetID(i))
		}
	}
}

// dispatchRecovery is Algorithm 3's dispatch for a recovery stream: the
// entry goes to the catch-up queue of the fetch's target only, if it routes
// there, and only under the target's current term.
func (c *Core) dispatchRecovery(id TargetID, term Term, e *Entry) {
	q := &c.q[id]
	if term == q.term && q.catchupFull {
		panic(fmt.Sprintf("player: recovery entry for target %d fed while its fetcher must wait", id))
	}
	if (q.lastAck >= e.Index && c.bug != bugSkipLastAckCheck) || !c.router.routes(e, id) {
		return
	}
	if q.push(message(e), false, term, c.bug == bugSkipPushTerm) {
		c.sendNext(id)
	}
}

// recoveryDone is Algorithm 1's fetchingCompleted, called when a recovery
// fetch ends. When the range ended with entries that were not the target's,
// an empty message at its end advances the target's index past them.
func (c *Core) recoveryDone(id TargetID, term Term) {
	q := &c.q[id]
	if q.state != RecoveryFetching || term != q.term {
		return
	}
	if f := q.fetch; f != nil && q.lastCatchup < f.To && q.lastAck < f.To &&
		!q.catchup.full(c.cfg.QueueEntriesMax, c.cfg.QueueBytesMax) {
		q.push(Message{Index: f.To, Empty: true}, false, term, false)
	}
	q.fetchingCompleted(term)
	c.sendNext(id)
}

// writeDone is Algorithm 4's write case: the stream may take the next batch.
func (c *Core) writeDone(id TargetID, term Term) {
	q := &c.q[id]
	if q.state == Suspended || term != q.term {
		return
	}
	q.writable = true
	c.sendNext(id)
}

// ack is Algorithm 4's read case: the target applied everything up to index,
// so the batches ending there are released.
func (c *Core) ack(id TargetID, term Term, index Index) {
	q := &c.q[id]
	if q.state == Suspended || term != q.term {
		return
	}
	// Batches are applied whole and in order, so an acknowledgement names
	// the last index of one of the popped batches.
	if len(q.popped) == 0 || index < q.popped[0].Last() || index > q.popped[len(q.popped)-1].Last() {
		c.out.Misbehaving = append(c.out.Misbehaving, id)
		return
	}
	q.lastAck = index
	c.relBuf = q.erase(index, c.relBuf[:0])
	for _, b := range c.relBuf {
		c.out.Releases = append(c.out.Releases, Release{Target: id, Batch: b})
	}
	clear(c.relBuf)
	c.sendNext(id)
}

// targetDown is the health checker's suspend: the queue drops what it
// holds, its popped batches are released and its recovery fetch stops.
func (c *Core) targetDown(id TargetID) {
	q := &c.q[id]
	if q.state == Suspended {
		return
	}
	if q.fetch != nil {
		c.out.StopRecovery = append(c.out.StopRecovery, *q.fetch)
	}
	for _, b := range q.suspend() {
		c.out.Releases = append(c.out.Releases, Release{Target: id, Batch: b})
	}
}

// targetUp is Algorithm 5's "upon target restart": a new term, and either a
// recovery fetch of exactly the entries the target missed, (lastApplied,
// currentIndex], or straight back to Normal when it missed none.
func (c *Core) targetUp(id TargetID, lastApplied Index) {
	q := &c.q[id]
	if q.state != Suspended {
		// The server saw a reconnect without noticing the disconnect.
		c.targetDown(id)
	}
	q.term++
	q.state, q.writable, q.lastAck = RecoveryFetching, true, lastApplied
	q.lastCatchup = 0
	if lastApplied >= c.currentIndex {
		q.state = Normal
		return
	}
	from := lastApplied + 1
	if c.bug == bugRecoverFromLastApplied && lastApplied > 0 {
		from = lastApplied
	}
	to := c.currentIndex
	if c.bug == bugRecoverToBeforeCurrent {
		to--
	}
	q.fetch = &RecoveryFetch{Target: id, Term: q.term, From: from, To: to}
	c.out.StartRecovery = append(c.out.StartRecovery, *q.fetch)
}

// sendNext is Algorithm 3's sendNext: when the target's stream has no write
// outstanding and room for another unacknowledged batch, the next batch
// goes out.
func (c *Core) sendNext(id TargetID) {
	q := &c.q[id]
	if q.state == Suspended || !q.writable || len(q.popped) >= c.cfg.InflightBatchesMax {
		return
	}
	b, ok := q.nextBatch(c.cfg.BatchEntriesMax, c.cfg.BatchBytesMax)
	if !ok {
		return
	}
	q.writable = false
	c.out.Sends = append(c.out.Sends, Send{Target: id, Term: q.term, Batch: b})
}

// updateFlow reports the back-pressure changes: the main fetcher waits while
// the normal queue of any target that is not suspended is full, and a
// recovery fetcher while its target's catch-up queue is full.
func (c *Core) updateFlow() {
	mainWait := false
	for i := range c.q {
		q := &c.q[i]
		if q.state != Suspended && q.normal.full(c.cfg.QueueEntriesMax, c.cfg.QueueBytesMax) {
			mainWait = true
		}
		catchupFull := q.fetch != nil && q.catchup.full(c.cfg.QueueEntriesMax, c.cfg.QueueBytesMax)
		if catchupFull != q.catchupFull {
			q.catchupFull = catchupFull
			c.out.Flow = append(c.out.Flow, Flow{Stream: Recovery, Target: TargetID(i), Wait: catchupFull})
		}
	}
	if mainWait != c.mainWait {
		c.mainWait = mainWait
		c.out.Flow = append(c.out.Flow, Flow{Stream: Main, Wait: mainWait})
	}
}

func message(e *Entry) Message {
	return Message{Index: e.Index, Key: e.Key, Payload: e.Payload}
}

// Started reports whether the core has seen its first PlayerRestart.
func (c *Core) Started() bool { return c.started }

// MainWait reports whether the main fetcher must wait.
func (c *Core) MainWait() bool { return c.mainWait }

// RecoveryWait reports whether the recovery fetcher of target id must wait.
func (c *Core) RecoveryWait(id TargetID) bool { return c.q[id].catchupFull }

// NormalFull reports whether the normal queue of target id is full: while
// it stays so and the target is not suspended, the main fetcher waits for
// it, which is what the server's "full for too long" rule watches.
func (c *Core) NormalFull(id TargetID) bool {
	q := &c.q[id]
	return q.state != Suspended && q.normal.full(c.cfg.QueueEntriesMax, c.cfg.QueueBytesMax)
}

// Term returns the current term of target id.
func (c *Core) Term(id TargetID) Term { return c.q[id].term }

// CurrentIndex returns the index of the last main-stream entry dispatched.
func (c *Core) CurrentIndex() Index { return c.currentIndex }

// TargetStatus is what `augur player status` shows of one target.
type TargetStatus struct {
	State State
	Term  Term
	// LastAck is the last index the target is known to have applied.
	LastAck Index
	// Queued counts the messages in its normal and catch-up queues.
	Queued int
	// Inflight counts the batches sent and not yet acknowledged.
	Inflight int
	// HeldBytes is the message bytes queued or in flight.
	HeldBytes int
}

// Status returns the status of target id; its lag is CurrentIndex minus
// LastAck.
func (c *Core) Status(id TargetID) TargetStatus {
	q := &c.q[id]
	return TargetStatus{
		State: q.state, Term: q.term, LastAck: q.lastAck,
		Queued: q.normal.len() + q.catchup.len(), Inflight: len(q.popped), HeldBytes: q.held(),
	}
}
