// Package ptimer is a one-shot timer that fires within tens of microseconds
// of its deadline, where Go's own timers may fire up to a millisecond late.
//
// Go sleeps in epoll_wait, whose timeout is in whole milliseconds, whenever
// every goroutine of the process is blocked; a timer due sooner than that
// is rounded up to the next millisecond (golang/go#53824). On this cluster's
// hot path that rounding is paid once per cut: the leader waits out the rest
// of an ordering interval (typically a few hundred microseconds) before it
// proposes, and a storage server waits out the rest of its report gap. On
// Linux a Timer is a timerfd that the runtime's network poller watches, so
// its expiry wakes the poller at once; elsewhere it is a time.Timer.
package ptimer

import "time"

// Timer delivers the current time on C once its deadline passes. Like a
// time.Timer before Go 1.23, a value that was already in flight when Reset
// or Stop was called may still arrive, so receivers must treat a value on C
// as a hint to look at the clock, not as proof that the deadline passed.
type Timer struct {
	C <-chan time.Time
	c chan time.Time
	impl
}

// New returns a stopped timer. Close releases it.
func New() *Timer {
	c := make(chan time.Time, 1)
	t := &Timer{C: c, c: c}
	t.impl.init(t.fire)
	return t
}

func (t *Timer) fire() {
	select {
	case t.c <- time.Now():
	default:
		// A value is already waiting; one wake-up is enough.
	}
}

// Reset (re)arms the timer to fire d from now, replacing any earlier
// deadline. d <= 0 fires at once.
func (t *Timer) Reset(d time.Duration) {
	if d <= 0 {
		t.impl.stop()
		t.fire()
		return
	}
	t.impl.reset(d)
}

// Stop disarms the timer.
func (t *Timer) Stop() { t.impl.stop() }

// Close stops the timer for good and releases its resources.
func (t *Timer) Close() { t.impl.close() }
