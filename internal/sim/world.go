package sim

// The world of one seeded run: an event queue over a simulated clock, the
// network between the roles, and the errors and trace of the run.
// Everything follows from the seed; nothing reads the wall clock.

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// event is one scheduled step.
type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

// queue is a binary min-heap of events by time, then by scheduling order.
type queue []event

func (q queue) less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}

func (q *queue) push(ev event) {
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

func (q *queue) pop() event {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = event{}
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

// link is a FIFO connection, as a gRPC stream is: a message arrives after
// its own random delay but never before one sent earlier on the same link.
// Messages on different links may overtake each other.
type link struct{ last time.Time }

func (l *link) arrival(now time.Time, delay time.Duration) time.Time {
	at := now.Add(delay)
	if at.Before(l.last) {
		at = l.last
	}
	l.last = at
	return at
}

// errorsMax bounds the errors one run keeps: the first few tell the story.
const errorsMax = 10

// world is the clock, the queue and the randomness of one run.
type world struct {
	seed  uint64
	r     *rand.Rand
	start time.Time
	now   time.Time
	q     queue
	seq   uint64
	steps uint64
	errs  []string
	trace func(string)
}

func (w *world) errorf(format string, args ...any) {
	if len(w.errs) < errorsMax {
		w.errs = append(w.errs, fmt.Sprintf("t=%v: ", w.now.Sub(w.start))+fmt.Sprintf(format, args...))
	}
}

func (w *world) tracef(format string, args ...any) {
	if w.trace != nil {
		w.trace(fmt.Sprintf("%9.3fms ", float64(w.now.Sub(w.start).Microseconds())/1000) + fmt.Sprintf(format, args...))
	}
}

func (w *world) at(t time.Time, fn func()) {
	if t.Before(w.now) {
		t = w.now
	}
	w.seq++
	w.q.push(event{at: t, seq: w.seq, fn: fn})
}

func (w *world) after(d time.Duration, fn func()) { w.at(w.now.Add(d), fn) }

// uniform returns a duration in [lo, hi).
func (w *world) uniform(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.r.Int64N(int64(hi-lo)))
}

// run processes events until end, or until the first error.
func (w *world) run(end time.Time) {
	for len(w.q) > 0 && len(w.errs) == 0 {
		if !w.q[0].at.Before(end) {
			break
		}
		ev := w.q.pop()
		w.now = ev.at
		w.steps++
		ev.fn()
	}
	w.now = end
}
