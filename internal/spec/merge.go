package spec

import (
	"container/heap"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/merge"
)

// Item is one entry a shard's subscription stream carries: a record at a
// global position (predicted before its cut is committed, final after), or
// a run of positions with nothing to deliver.
type Item[R any] struct {
	// Pos is the entry's global position, predicted or final.
	Pos uint64
	// Shard is the shard whose stream sent the item (for a filler's no-ops,
	// the filler, not the failed shard whose slots they fill).
	Shard cut.ShardID
	// Skip, when positive, says positions [Pos, Pos+Skip) hold no-ops or
	// records the subscription filters out: nothing to deliver.
	Skip uint64
	// Rec is the record when Skip is 0.
	Rec R
}

// end is the position after the item.
func (it Item[R]) end() uint64 {
	if it.Skip == 0 {
		return it.Pos + 1
	}
	return it.Pos + it.Skip
}

// clip returns the part of a skip item at or after pos (pos inside it).
func (it Item[R]) clip(pos uint64) Item[R] {
	it.Skip = it.end() - pos
	it.Pos = pos
	return it
}

// EventKind tells what an Event says; every mode's merger shares it.
type EventKind = merge.EventKind

// The kinds of Event.
const (
	// EventDeliver hands over the record at Pos.
	EventDeliver = merge.EventDeliver
	// EventConfirm says every position below Pos is final: confirm_spec.
	EventConfirm = merge.EventConfirm
	// EventFail says every position at or after Pos delivered so far is
	// void; deliveries resume at Pos with the correct records: fail_spec.
	EventFail = merge.EventFail
)

// Event is one step of a subscription, in the order the application must
// see them.
type Event[R any] struct {
	Kind EventKind
	// Pos is, for Deliver, the record's position; for Confirm, the end of
	// the final prefix (exclusive); for Fail, the first void position.
	Pos uint64
	Rec R
	// Speculative is set on a Deliver whose position was not confirmed yet.
	Speculative bool
	// View is the view the event belongs to.
	View uint64
}

// Merger is a subscriber's side of speculative order: it merges the item
// streams of every shard into one sequence of positions from a start
// position on, delivering each position once per view as soon as its
// record (predicted or final) is there, confirming what committed cuts
// make final, and failing and rewinding what a view change voids. Streams
// may arrive in any order and repeat themselves (reconnects). It is pure:
// no I/O, clocks or goroutines, and not safe for concurrent use.
//
// Each stream must carry a view change before anything it sends in the
// new view (in particular before a filler's no-ops for the failed shard's
// slots and before confirmations of cuts released in the new view).
type Merger[R any] struct {
	confirmedOnly bool
	// oneStream: the items come from a single shard's stream, so the
	// positions between them belong to shards the subscriber does not
	// follow, and nobody will fill them: the merger must not wait for
	// them.
	oneStream bool
	from      uint64
	// next is the first position not yet delivered in this view.
	next uint64
	// high is the highest confirmed end heard; confirmed is the last
	// Confirm emitted, min(high, next) at the time.
	high, confirmed uint64
	view            uint64
	// failed maps each failed shard to the confirmed-gp of its view: its
	// records at or after it are void.
	failed map[cut.ShardID]uint64

	// pending holds items at or after next by position; keys is a heap of
	// their positions (with stale keys popped lazily).
	pending map[uint64]Item[R]
	keys    posHeap
	// done holds the items delivered or skipped in this view that are not
	// confirmed yet, in position order: what a rewind takes back.
	done []Item[R]

	out  []Event[R]
	head int
}

// NewMerger returns a merger that delivers positions from from on. With
// confirmedOnly it delivers only confirmed positions, never speculates and
// never fails: eager delivery.
func NewMerger[R any](from uint64, confirmedOnly bool) *Merger[R] {
	return &Merger[R]{
		confirmedOnly: confirmedOnly,
		from:          from,
		next:          from,
		confirmed:     from,
		failed:        map[cut.ShardID]uint64{},
		pending:       map[uint64]Item[R]{},
	}
}

// NewShardMerger returns a merger of one shard's stream from from on: the
// positions between the shard's items belong to other shards and are
// never waited for, so a record is delivered as soon as its shard sends
// it. Confirmations and view changes mean what they mean for NewMerger.
func NewShardMerger[R any](from uint64, confirmedOnly bool) *Merger[R] {
	m := NewMerger[R](from, confirmedOnly)
	m.oneStream = true
	return m
}

// Add takes items from any shard stream, in any order, repeats included.
func (m *Merger[R]) Add(items ...Item[R]) {
	for _, it := range items {
		m.add(it)
	}
	m.pump()
}

func (m *Merger[R]) add(it Item[R]) {
	if m.oneStream && it.Skip != 0 {
		// Nothing to deliver, and a filler's skips of a failed shard's
		// slots run ahead of the stream's own records.
		return
	}
	if m.void(it) {
		return
	}
	if it.end() <= m.next {
		return // delivered in this view already, or before from
	}
	if it.Pos < m.next {
		if it.Skip == 0 {
			return
		}
		it = it.clip(m.next)
	}
	m.put(it)
}

// put stores an item at or after next; of two items at one position it
// keeps the record, or the longer skip.
func (m *Merger[R]) put(it Item[R]) {
	old, ok := m.pending[it.Pos]
	if ok {
		if old.Skip == 0 || (it.Skip != 0 && it.Skip <= old.Skip) {
			return
		}
		m.pending[it.Pos] = it
		return
	}
	m.pending[it.Pos] = it
	heap.Push(&m.keys, it.Pos)
}

// Confirm takes a committed cut's end: every position below end is final.
// Any stream may say it, repeatedly, in any order.
func (m *Merger[R]) Confirm(end uint64) {
	if end > m.high {
		m.high = end
		m.pump()
	}
}

// ViewChange takes a whole-shard failure: view starts, failed's entries at
// or after confirmedGP are void. Every stream repeats it; only the first
// report of a view newer than the current one counts. If anything at or
// after confirmedGP was delivered, a Fail event says so and delivery
// rewinds to confirmedGP, delivering again the live shards' records (whose
// positions do not change) and whatever fills the failed shard's slots.
func (m *Merger[R]) ViewChange(view, confirmedGP uint64, failed cut.ShardID) {
	if view <= m.view {
		return
	}
	m.view = view
	if _, ok := m.failed[failed]; !ok {
		m.failed[failed] = confirmedGP
	}
	// Positions already confirmed never change.
	rewind := max(confirmedGP, m.confirmed)
	voided := false
	keep := m.done[:0]
	var back []Item[R]
	for _, it := range m.done {
		if it.end() <= rewind {
			keep = append(keep, it)
			continue
		}
		if it.Pos < rewind {
			// A skip across the rewind point: keep the part below it.
			head := it
			head.Skip = rewind - it.Pos
			keep = append(keep, head)
			it = it.clip(rewind)
		} else if it.Skip == 0 {
			voided = true
		}
		back = append(back, it)
	}
	m.done = keep
	if len(back) > 0 {
		m.next = rewind
	}
	// Drop the failed shard's void records, wherever they wait.
	for pos, it := range m.pending {
		if m.void(it) {
			delete(m.pending, pos)
		}
	}
	for _, it := range back {
		m.add(it)
	}
	if voided {
		m.emit(Event[R]{Kind: EventFail, Pos: confirmedGP, View: m.view})
	}
	m.pump()
}

// void reports whether a view change voided it: a record of a failed
// shard at or after the confirmed-gp of its view. A failed shard's skips
// stay valid: every position they cover is a no-op in every later view
// too (its own slots past the void point, or the slots of another failed
// shard it filled), and a skip the merger keeps may be the only copy of
// one another filler sent (it keeps one of two equal skips).
func (m *Merger[R]) void(it Item[R]) bool {
	gp, ok := m.failed[it.Shard]
	return ok && it.Skip == 0 && it.Pos >= gp
}

// Next pops the next event, if any.
func (m *Merger[R]) Next() (Event[R], bool) {
	if m.head == len(m.out) {
		return Event[R]{}, false
	}
	ev := m.out[m.head]
	var zero Event[R]
	m.out[m.head] = zero
	m.head++
	if m.head == len(m.out) {
		m.out, m.head = m.out[:0], 0
	}
	return ev, true
}

// View is the current view.
func (m *Merger[R]) View() uint64 { return m.view }

// Position is the first position not delivered yet in this view.
func (m *Merger[R]) Position() uint64 { return m.next }

// Buffered is how many items the merger holds: waiting for earlier
// positions, or delivered but not confirmed.
func (m *Merger[R]) Buffered() int { return len(m.pending) + len(m.done) }

func (m *Merger[R]) emit(ev Event[R]) { m.out = append(m.out, ev) }

// pump delivers what it can, then confirms what it delivered.
func (m *Merger[R]) pump() {
	for len(m.keys) > 0 {
		pos := m.keys[0]
		it, ok := m.pending[pos]
		if !ok || it.Pos != pos {
			heap.Pop(&m.keys) // stale key
			continue
		}
		if pos < m.next {
			heap.Pop(&m.keys)
			delete(m.pending, pos)
			if it.Skip != 0 && it.end() > m.next {
				m.put(it.clip(m.next))
			}
			continue
		}
		if (pos > m.next && !m.oneStream) || (m.confirmedOnly && pos >= m.high) {
			break
		}
		heap.Pop(&m.keys)
		delete(m.pending, pos)
		if it.Skip == 0 {
			m.emit(Event[R]{Kind: EventDeliver, Pos: pos, Rec: it.Rec, Speculative: pos >= m.high, View: m.view})
		}
		m.next = it.end()
		m.done = append(m.done, it)
	}
	k := min(m.high, m.next)
	if m.oneStream {
		// The other shards' positions below high are final too; a record
		// of this stream below high that comes later is delivered final.
		k = m.high
	}
	if k > m.confirmed {
		m.confirmed = k
		m.emit(Event[R]{Kind: EventConfirm, Pos: k, View: m.view})
		n := 0
		for n < len(m.done) && m.done[n].end() <= k {
			n++
		}
		if n > 0 {
			clear(m.done[:n])
			m.done = m.done[n:]
		}
	}
}

// posHeap is a min-heap of positions.
type posHeap []uint64

func (h posHeap) Len() int           { return len(h) }
func (h posHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h posHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *posHeap) Push(x any)        { *h = append(*h, x.(uint64)) }
func (h *posHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
