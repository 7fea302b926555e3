package player

import "fmt"

// State is the state of a target queue (the paper's Figure 2).
type State uint8

const (
	// Normal: the target is up and no recovery is under way; the queue
	// serves its normal queue.
	Normal State = iota
	// RecoveryFetching: the target is up, it missed entries of the main
	// stream, and its recovery fetch has not pushed all of them yet; the
	// queue serves its catch-up queue.
	RecoveryFetching
	// FetchingCompleted: the recovery fetch has pushed every missed entry,
	// some are still in the catch-up queue; once it drains the queue turns
	// Normal.
	FetchingCompleted
	// Suspended: the target is down or disconnected; nothing is pushed.
	Suspended
)

func (s State) String() string {
	switch s {
	case Normal:
		return "normal"
	case RecoveryFetching:
		return "recovery-fetching"
	case FetchingCompleted:
		return "fetching-completed"
	case Suspended:
		return "suspended"
	}
	return fmt.Sprintf("State(%d)", s)
}

// Message is what one target receives for one entry: the entry's index and
// record, or, when Empty, only an index that advances the target's last
// applied index.
type Message struct {
	Index   Index
	Empty   bool
	Key     string
	Payload []byte
}

// size is what a message counts against the byte bounds.
func (m *Message) size() int { return len(m.Key) + len(m.Payload) }

// Batch is a run of consecutive messages of one target's queue, sent in one
// stream write. Its indices increase; a target applies it and records its
// last index in one transaction.
type Batch struct {
	Messages []Message
	// Bytes is the sum of the messages' sizes.
	Bytes int
}

// Last is the index of the batch's last message: the index the target
// acknowledges once it applied the batch.
func (b *Batch) Last() Index { return b.Messages[len(b.Messages)-1].Index }

// fifo is a queue of messages with its byte count.
type fifo struct {
	msgs  []Message
	head  int
	bytes int
}

func (f *fifo) len() int { return len(f.msgs) - f.head }

func (f *fifo) push(m Message) {
	if f.head > 0 && f.head == len(f.msgs) {
		f.msgs, f.head = f.msgs[:0], 0
	}
	f.msgs = append(f.msgs, m)
	f.bytes += m.size()
}

func (f *fifo) front() *Message { return &f.msgs[f.head] }

func (f *fifo) pop() {
	f.bytes -= f.msgs[f.head].size()
	f.msgs[f.head] = Message{} // drop the payload reference
	f.head++
	if f.head == len(f.msgs) {
		f.msgs, f.head = f.msgs[:0], 0
	}
}

func (f *fifo) clear() {
	clear(f.msgs)
	f.msgs, f.head, f.bytes = f.msgs[:0], 0, 0
}

// full reports whether the queue reached one of its bounds.
func (f *fifo) full(entriesMax, bytesMax int) bool {
	return f.len() >= entriesMax || f.bytes >= bytesMax
}

// targetQueue is the paper's target queue (Algorithms 1 and 2) together with
// the per-target state of the dispatcher and the stream.
type targetQueue struct {
	state State
	// term is the target's current term; pushes and completions under any
	// other term are dropped.
	term    Term
	normal  fifo
	catchup fifo
	// popped holds the batches sent and not yet acknowledged, oldest first;
	// their Last indices increase. They are released on acknowledgement or
	// suspension, never earlier: the stream may still be reading them.
	popped []Batch
	// writable is the paper's write_status: no write is outstanding on the
	// target's stream.
	writable bool
	// lastAck is the last index the target has applied, as far as the
	// player knows (its LastApplied answer, then its acknowledgements).
	// Entries at or below it are never pushed again.
	lastAck Index
	// lastMain is the index of the last main-stream message pushed to the
	// normal queue, empty ones included; it decides who gets an empty
	// message.
	lastMain Index
	// lastCatchup is the index of the last message pushed to the catch-up
	// queue in this term.
	lastCatchup Index
	// fetch is the recovery fetch running for this term, if any.
	fetch *RecoveryFetch
	// catchupFull is the back-pressure on the recovery fetch last reported.
	catchupFull bool
}

// push is Algorithm 1's push: it adds m to the normal queue (isNormal) or to
// the catch-up queue, unless the queue is suspended or a catch-up push comes
// under an expired term. It reports whether m was queued.
func (q *targetQueue) push(m Message, isNormal bool, term Term, skipTermCheck bool) bool {
	if q.state == Suspended || !(isNormal || term == q.term || skipTermCheck) {
		return false
	}
	if isNormal {
		q.normal.push(m)
		q.lastMain = m.Index
	} else {
		q.catchup.push(m)
		q.lastCatchup = m.Index
	}
	return true
}

// front is Algorithm 1's front: the next message to send, or nil. A queue in
// FetchingCompleted whose catch-up queue is empty turns Normal here.
func (q *targetQueue) front() *Message {
	switch {
	case (q.state == RecoveryFetching || q.state == FetchingCompleted) && q.catchup.len() > 0:
		return q.catchup.front()
	case q.state == FetchingCompleted:
		q.state = Normal
		if q.normal.len() > 0 {
			return q.normal.front()
		}
	case q.state == Normal && q.normal.len() > 0:
		return q.normal.front()
	}
	return nil
}

// pop is Algorithm 1's pop: it removes what front returned. A queue in
// FetchingCompleted whose catch-up queue drains turns Normal.
func (q *targetQueue) pop() {
	switch {
	case (q.state == RecoveryFetching || q.state == FetchingCompleted) && q.catchup.len() > 0:
		q.catchup.pop()
		if q.state == FetchingCompleted && q.catchup.len() == 0 {
			q.state = Normal
		}
	case q.state == Normal && q.normal.len() > 0:
		q.normal.pop()
	}
}

// suspend is Algorithm 1's suspend: the queue drops everything it holds and
// turns Suspended. It returns the popped batches, which the caller releases.
func (q *targetQueue) suspend() []Batch {
	q.state = Suspended
	q.normal.clear()
	q.catchup.clear()
	popped := q.popped
	q.popped = nil
	q.writable = false
	q.fetch = nil
	return popped
}

// fetchingCompleted is Algorithm 1's fetchingCompleted: when the recovery
// fetch of the current term has pushed everything, the queue turns Normal
// if the catch-up queue already drained and FetchingCompleted otherwise. It
// reports whether the state changed.
func (q *targetQueue) fetchingCompleted(term Term) bool {
	if q.state != RecoveryFetching || term != q.term {
		return false
	}
	if q.catchup.len() == 0 {
		q.state = Normal
	} else {
		q.state = FetchingCompleted
	}
	q.fetch = nil
	return true
}

// nextBatch is Algorithm 2's nextBatch and popBatch: it takes messages from
// the front while the batch has room, records the batch as popped and
// returns it. It returns false when nothing is ready to send.
func (q *targetQueue) nextBatch(entriesMax, bytesMax int) (Batch, bool) {
	var b Batch
	if n := min(entriesMax, q.normal.len()+q.catchup.len()); n > 0 {
		b.Messages = make([]Message, 0, n)
	}
	for len(b.Messages) < entriesMax {
		m := q.front()
		if m == nil {
			break
		}
		if len(b.Messages) > 0 && b.Bytes+m.size() > bytesMax {
			break
		}
		b.Messages = append(b.Messages, *m)
		b.Bytes += m.size()
		q.pop()
	}
	if len(b.Messages) == 0 {
		return Batch{}, false
	}
	q.popped = append(q.popped, b)
	return b, true
}

// erase is Algorithm 2's erase, cumulative: an acknowledgement of index
// covers every popped batch that ends at or below it. It appends the
// released batches to released and returns it.
func (q *targetQueue) erase(index Index, released []Batch) []Batch {
	n := 0
	for n < len(q.popped) && q.popped[n].Last() <= index {
		n++
	}
	released = append(released, q.popped[:n]...)
	// Shift the rest down rather than reslice, so the slice keeps its
	// capacity and sending the next batch does not allocate.
	k := copy(q.popped, q.popped[n:])
	clear(q.popped[k:]) // the queue no longer refers to their messages
	q.popped = q.popped[:k]
	return released
}

// held is the message bytes the queue holds: queued or sent and not yet
// acknowledged.
func (q *targetQueue) held() int {
	n := q.normal.bytes + q.catchup.bytes
	for i := range q.popped {
		n += q.popped[i].Bytes
	}
	return n
}
