package player

import (
	"slices"
	"testing"
)

func msg(ix Index) Message { return Message{Index: ix, Payload: []byte{byte(ix)}} }

func indices(ms []Message) []Index {
	var out []Index
	for _, m := range ms {
		out = append(out, m.Index)
	}
	return out
}

// drain takes every message front and pop hand out, in order.
func drain(q *targetQueue) []Index {
	var out []Index
	for m := q.front(); m != nil; m = q.front() {
		out = append(out, m.Index)
		q.pop()
	}
	return out
}

// TestQueuePushTermRule checks Algorithm 1's push: a normal push is taken
// under any term, a catch-up push only under the current term, and a
// suspended queue takes nothing.
func TestQueuePushTermRule(t *testing.T) {
	q := &targetQueue{state: RecoveryFetching, term: 3}
	if !q.push(msg(1), false, 3, false) {
		t.Fatal("catch-up push under the current term dropped")
	}
	if q.push(msg(2), false, 2, false) {
		t.Fatal("catch-up push under an expired term taken")
	}
	if !q.push(msg(5), true, 2, false) {
		t.Fatal("normal push dropped")
	}
	if got := indices(q.catchup.msgs); !slices.Equal(got, []Index{1}) {
		t.Fatalf("catch-up queue %v, want [1]", got)
	}
	q.suspend()
	if q.push(msg(6), true, 3, false) || q.push(msg(6), false, 3, false) {
		t.Fatal("a suspended queue took a push")
	}
	if q.normal.len() != 0 || q.catchup.len() != 0 {
		t.Fatal("suspend left messages queued")
	}
}

// TestQueueFrontByState checks Algorithm 1's front and pop: while recovery
// is under way the catch-up queue is served and the normal queue waits; a
// queue in FetchingCompleted turns Normal when its catch-up queue drains.
func TestQueueFrontByState(t *testing.T) {
	q := &targetQueue{state: RecoveryFetching, term: 2}
	q.push(msg(5), true, 2, false)
	q.push(msg(6), true, 2, false)
	if q.front() != nil {
		t.Fatal("recovery-fetching queue with an empty catch-up queue served the normal queue")
	}
	q.push(msg(3), false, 2, false)
	q.push(msg(4), false, 2, false)
	if m := q.front(); m == nil || m.Index != 3 {
		t.Fatalf("front %v, want 3", m)
	}
	q.pop()
	if q.state != RecoveryFetching {
		t.Fatalf("state %v after a pop while fetching", q.state)
	}
	if !q.fetchingCompleted(2) || q.state != FetchingCompleted {
		t.Fatalf("fetchingCompleted with a non-empty catch-up queue: state %v, want fetching-completed", q.state)
	}
	if got := drain(q); !slices.Equal(got, []Index{4, 5, 6}) {
		t.Fatalf("served %v, want catch-up 4 then normal 5 6", got)
	}
	if q.state != Normal {
		t.Fatalf("state %v after the catch-up queue drained, want normal", q.state)
	}
}

// TestQueueFrontTurnsNormal checks front's own transition: a queue in
// FetchingCompleted with nothing to catch up serves its normal queue.
func TestQueueFrontTurnsNormal(t *testing.T) {
	q := &targetQueue{state: FetchingCompleted, term: 1}
	q.push(msg(7), true, 1, false)
	if m := q.front(); m == nil || m.Index != 7 || q.state != Normal {
		t.Fatalf("front %v in state %v, want 7 in normal", m, q.state)
	}
}

// TestQueueFetchingCompleted checks Algorithm 1's fetchingCompleted: only
// the current term's fetch counts, only in RecoveryFetching, and an empty
// catch-up queue goes straight to Normal.
func TestQueueFetchingCompleted(t *testing.T) {
	q := &targetQueue{state: RecoveryFetching, term: 4}
	if q.fetchingCompleted(3) || q.state != RecoveryFetching {
		t.Fatal("an expired term's fetch completed the recovery")
	}
	if !q.fetchingCompleted(4) || q.state != Normal {
		t.Fatalf("state %v, want normal", q.state)
	}
	s := &targetQueue{state: Suspended, term: 4}
	if s.fetchingCompleted(4) || s.state != Suspended {
		t.Fatal("a suspended queue left suspension on fetchingCompleted")
	}
}

// TestQueueBatchBounds checks Algorithm 2's nextBatch: batches stop at the
// count and the byte bound, a message larger than the byte bound goes
// alone, and each batch is kept as popped until erased.
func TestQueueBatchBounds(t *testing.T) {
	q := &targetQueue{state: Normal, term: 1}
	for ix := Index(1); ix <= 5; ix++ {
		q.push(msg(ix), true, 1, false)
	}
	b, _ := q.nextBatch(3, 1000)
	if got := indices(b.Messages); !slices.Equal(got, []Index{1, 2, 3}) || b.Bytes != 3 {
		t.Fatalf("batch %v (%d bytes), want [1 2 3] (3 bytes)", got, b.Bytes)
	}
	b, _ = q.nextBatch(3, 1)
	if got := indices(b.Messages); !slices.Equal(got, []Index{4}) {
		t.Fatalf("batch %v, want [4] by the byte bound", got)
	}
	q.push(Message{Index: 6, Payload: make([]byte, 10)}, true, 1, false)
	b, _ = q.nextBatch(3, 4)
	if got := indices(b.Messages); !slices.Equal(got, []Index{5}) {
		t.Fatalf("batch %v, want [5]: the large one waits for its own batch", got)
	}
	b, _ = q.nextBatch(3, 4)
	if got := indices(b.Messages); !slices.Equal(got, []Index{6}) {
		t.Fatalf("batch %v, want [6] alone though over the byte bound", got)
	}
	if _, ok := q.nextBatch(3, 4); ok {
		t.Fatal("a batch out of an empty queue")
	}
	if len(q.popped) != 4 || q.held() != 15 {
		t.Fatalf("%d popped holding %d bytes, want 4 holding 15", len(q.popped), q.held())
	}
	released := q.erase(4, nil)
	if len(released) != 2 || len(q.popped) != 2 || released[1].Last() != 4 {
		t.Fatalf("erase(4) released %d, kept %d; want 2 and 2", len(released), len(q.popped))
	}
}

// TestQueueSuspendReleasesPopped checks suspend: the popped batches come
// back for release and the stream is no longer writable.
func TestQueueSuspendReleasesPopped(t *testing.T) {
	q := &targetQueue{state: Normal, term: 1, writable: true}
	q.push(msg(1), true, 1, false)
	q.nextBatch(10, 10)
	if popped := q.suspend(); len(popped) != 1 || q.writable || q.held() != 0 {
		t.Fatalf("suspend returned %d batches, writable %v, held %d", len(popped), q.writable, q.held())
	}
}
