package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/augur-log/augur/internal/ptimer"
)

// pacerIntervalMin is the shortest interval one pacer is asked to keep
// between two operations; shorter ones are below what timers and a single
// goroutine issuing appends can honour.
const pacerIntervalMin = time.Microsecond

// Schedule is an open-loop arrival schedule: operation k (from 0) of the
// whole load is due at Start + k/Rate seconds. It is exact over any horizon:
// times are computed from k, never accumulated, so they do not drift.
type Schedule struct {
	Start time.Time
	Rate  int // operations per second, > 0
}

// At is when operation k is due.
func (s Schedule) At(k int64) time.Time {
	r := int64(s.Rate)
	return s.Start.Add(time.Duration((k/r)*int64(time.Second) + (k%r)*int64(time.Second)/r))
}

// Due is how many operations are due at or before t.
func (s Schedule) Due(t time.Time) int64 {
	d := t.Sub(s.Start)
	if d < 0 {
		return 0
	}
	// Operation k is due at or before t when floor(k*1s/r) <= d, that is
	// when k*1s < (d+1ns)*r: ceil((d+1ns)*r/1s) operations are due.
	r := int64(s.Rate)
	d++
	sec, frac := int64(d/time.Second), int64(d%time.Second)
	return sec*r + (frac*r+int64(time.Second)-1)/int64(time.Second)
}

// Pacer hands one of several clients its share of a Schedule: client c of n
// takes operations c, c+n, c+2n, ..., so the clients together offer exactly
// the schedule's rate, evenly interleaved.
type Pacer struct {
	sched   Schedule
	client  int64
	clients int64
	next    int64 // index of this client's next operation
}

// NewPacer returns client's pacer, client in [0, clients).
func NewPacer(s Schedule, client, clients int) *Pacer {
	return &Pacer{sched: s, client: int64(client), clients: int64(clients)}
}

// Next returns when this client's next operation is due and moves past it.
// An operation whose time has passed is due at once: the load stays open
// loop, and its latency is measured from the time it was due.
func (p *Pacer) Next() time.Time {
	t := p.sched.At(p.next*p.clients + p.client)
	p.next++
	return t
}

// CheckRate rejects an offered load that cannot be paced: a negative rate,
// one too fast for a pacer per client, or one so slow that some client
// would not send a single operation during the run. Rate 0 is closed loop.
func CheckRate(rate, clients int, d time.Duration) error {
	switch {
	case rate < 0:
		return fmt.Errorf("rate must be 0 (closed loop) or positive, got %d", rate)
	case rate == 0:
		return nil
	case clients <= 0:
		return fmt.Errorf("clients must be positive, got %d", clients)
	}
	perClient := float64(rate) / float64(clients)
	if interval := time.Duration(float64(time.Second) / perClient); interval < pacerIntervalMin {
		return fmt.Errorf("rate %d/s over %d clients needs one operation every %v per client, below the pacer's %v; use more clients or a lower rate (at most %d/s per client)",
			rate, clients, interval, pacerIntervalMin, int64(time.Second/pacerIntervalMin))
	}
	if perClient*d.Seconds() < 1 {
		return fmt.Errorf("rate %d/s over %d clients sends less than one operation per client in %v; raise the rate or the duration, or use fewer clients",
			rate, clients, d)
	}
	return nil
}

// Alarm wakes one goroutine of the load at the times it is due. Go's own
// timers fire up to a millisecond late in a process whose goroutines all
// wait (see package ptimer), and an open-loop latency counts from when an
// operation was due: with them, eager append p50 at 500 appends/s read
// 1.3-1.7 ms, and 0.9-1.1 ms with this alarm. Speculative runs, whose
// servers wake more often, were hurt less, so the comparisons were skewed
// too.
type Alarm struct{ t *ptimer.Timer }

// NewAlarm returns an alarm; Close releases it.
func NewAlarm() *Alarm { return &Alarm{t: ptimer.New()} }

// SleepUntil waits until t or until ctx ends.
func (a *Alarm) SleepUntil(ctx context.Context, t time.Time) error {
	for {
		d := time.Until(t)
		if d <= 0 {
			return ctx.Err()
		}
		a.t.Reset(d)
		select {
		case <-a.t.C:
			// A wake-up from an earlier deadline is only a hint: the
			// clock decides.
		case <-ctx.Done():
			a.t.Stop()
			return ctx.Err()
		}
	}
}

// Close releases the alarm's timer.
func (a *Alarm) Close() { a.t.Close() }
