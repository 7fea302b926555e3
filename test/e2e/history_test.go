package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/check"
)

// Bounds shared by the tests.
const (
	// pollInterval paces eventually's checks.
	pollInterval = 10 * time.Millisecond
	// linearizabilityTimeout bounds porcupine's search.
	linearizabilityTimeout = 60 * time.Second
)

// eventually polls cond every pollInterval until it holds or timeout passes,
// and reports whether it held. It never sleeps blindly: a ticker paces it.
func eventually(t testing.TB, timeout time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
}

// clock gives every recorded operation a timestamp from one monotonic
// clock, so invoke and return times of different goroutines compare.
type clock struct{ start time.Time }

func newClock() clock { return clock{start: time.Now()} }

func (c clock) now() time.Duration { return time.Since(c.start) }

// appendOp is one Append as the test saw it.
type appendOp struct {
	worker  int
	payload string
	call    time.Duration
	ret     time.Duration
	ack     client.Ack
	err     error
}

// readOp is one Read as the test saw it.
type readOp struct {
	worker  int
	pos     uint64
	call    time.Duration
	ret     time.Duration
	payload string
	err     error
}

// history collects the operations of all workers.
type history struct {
	mu      sync.Mutex
	appends []appendOp
	reads   []readOp
	// maxAcked is the largest acknowledged position, valid when acked > 0.
	maxAcked uint64
	acked    int
	// byShard counts the acknowledged appends of each shard.
	byShard map[uint32]int
	// pending counts appends invoked but not returned.
	pending int
}

func (h *history) begin() {
	h.mu.Lock()
	h.pending++
	h.mu.Unlock()
}

func (h *history) addAppend(op appendOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pending--
	h.appends = append(h.appends, op)
	if op.err == nil {
		h.acked++
		h.maxAcked = max(h.maxAcked, op.ack.Position)
		if h.byShard == nil {
			h.byShard = map[uint32]int{}
		}
		h.byShard[op.ack.Shard]++
	}
}

func (h *history) addRead(op readOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads = append(h.reads, op)
}

// tail returns one past the largest acknowledged position (0 if none): every
// position below it is ordered.
func (h *history) tail() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.acked == 0 {
		return 0
	}
	return h.maxAcked + 1
}

// ackedPosition returns the position of an acknowledged append chosen by
// rng; there must be one.
func (h *history) ackedPosition(rng *rand.Rand) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		if op := h.appends[rng.IntN(len(h.appends))]; op.err == nil {
			return op.ack.Position
		}
	}
}

// ackedBy returns how many appends shard acknowledged.
func (h *history) ackedBy(shard uint32) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.byShard[shard]
}

// ackedByShard returns the acknowledged appends of every shard.
func (h *history) ackedByShard() map[uint32]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.byShard)
}

func (h *history) counts() (acked, pending int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.acked, h.pending
}

// snapshot returns copies of the recorded operations.
func (h *history) snapshot() ([]appendOp, []readOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.appends), slices.Clone(h.reads)
}

// ackTimes returns the return times of the acknowledged appends, ascending.
func (h *history) ackTimes() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ts []time.Duration
	for _, op := range h.appends {
		if op.err == nil {
			ts = append(ts, op.ret)
		}
	}
	slices.Sort(ts)
	return ts
}

// collector reads a subscription into memory until its context ends.
type collector struct {
	name string
	mu   sync.Mutex
	got  []client.Entry
	err  error
	done chan struct{}
}

func collect(ctx context.Context, name string, sub *client.Subscription) *collector {
	c := &collector{name: name, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			e, err := sub.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					c.mu.Lock()
					c.err = err
					c.mu.Unlock()
				}
				return
			}
			c.mu.Lock()
			c.got = append(c.got, e)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

func (c *collector) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *collector) entries() []client.Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// waitCollectors waits until every collector holds at least n entries.
func waitCollectors(t *testing.T, timeout time.Duration, n int, cs ...*collector) {
	t.Helper()
	ok := eventually(t, timeout, func() bool {
		done := true
		for _, c := range cs {
			if c.failed() != nil {
				return true // reported below
			}
			done = done && c.len() >= n
		}
		return done
	})
	for _, c := range cs {
		if err := c.failed(); err != nil {
			t.Fatalf("subscriber %s failed after %d entries: %v", c.name, c.len(), err)
		}
	}
	if !ok {
		var have []string
		for _, c := range cs {
			have = append(have, fmt.Sprintf("%s has %d", c.name, c.len()))
		}
		t.Fatalf("subscribers did not reach %d entries within %v: %s", n, timeout, strings.Join(have, ", "))
	}
}

// waitCollectorsAt waits until every collector received position pos or
// one past it (a log with no-ops, whose positions are not dense).
func waitCollectorsAt(t *testing.T, timeout time.Duration, pos uint64, cs ...*collector) {
	t.Helper()
	at := func(c *collector) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.got) > 0 && c.got[len(c.got)-1].Position >= pos
	}
	ok := eventually(t, timeout, func() bool {
		done := true
		for _, c := range cs {
			if c.failed() != nil {
				return true // reported below
			}
			done = done && at(c)
		}
		return done
	})
	for _, c := range cs {
		if err := c.failed(); err != nil {
			t.Fatalf("subscriber %s failed after %d entries: %v", c.name, c.len(), err)
		}
	}
	if !ok {
		var have []string
		for _, c := range cs {
			have = append(have, fmt.Sprintf("%s has %d entries", c.name, c.len()))
		}
		t.Fatalf("subscribers did not reach position %d within %v: %s", pos, timeout, strings.Join(have, ", "))
	}
}

// checkAppends returns the appends as internal/check reads them: the
// worker is the client, the operation's index its sequence number (the SDK
// retries inside one operation), the payload names the record.
func checkAppends(appends []appendOp) []check.Append {
	out := make([]check.Append, len(appends))
	for i, op := range appends {
		a := check.Append{Client: uint64(op.worker), Seq: uint64(i), Record: op.payload,
			Call: op.call, Return: op.ret, Err: op.err}
		switch {
		case op.err == nil:
			a.Outcome, a.Position, a.Shard = check.Acked, op.ack.Position, op.ack.Shard
		case errors.Is(op.err, client.ErrOutcomeUnknown):
			// Its shard died before answering: it may or may not be stored.
			a.Outcome = check.Unknown
		default:
			a.Outcome = check.Failed
		}
		out[i] = a
	}
	return out
}

// checkReadOps returns the reads as internal/check reads them.
func checkReadOps(reads []readOp) []check.Read {
	out := make([]check.Read, len(reads))
	for i, r := range reads {
		out[i] = check.Read{Client: uint64(r.worker), Pos: r.pos, Call: r.call, Return: r.ret, Record: r.payload, Err: r.err}
	}
	return out
}

// logOf returns what a subscriber received as a log for internal/check:
// positions from 0 up to the last one received.
func logOf(name string, entries []client.Entry, dense bool) check.Log {
	es := make([]check.Entry, len(entries))
	for i, e := range entries {
		es[i] = check.Entry{Pos: e.Position, Shard: e.Shard, Record: string(e.Record.Payload)}
	}
	return check.LogOf(name, 0, dense, es)
}

// failOn reports a checker's violations as test errors.
func failOn(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Error(err)
	}
}

// checkAppendsReturned fails the test for every append that did not
// succeed: the faults of these tests stay within the fault budget, so the
// SDK must complete every append.
func checkAppendsReturned(t *testing.T, appends []appendOp) {
	t.Helper()
	failOn(t, check.Returned(checkAppends(appends), nil))
}

// checkLog checks a subscriber's sequence against the appends (dense from
// 0 when dense is set; speculative order leaves no-op positions out):
// invariants 1, 2 and 5 over one reader. It returns the log it checked.
func checkLog(t *testing.T, name string, entries []client.Entry, appends []appendOp, dense bool) check.Log {
	t.Helper()
	l := logOf(name, entries, dense)
	as := checkAppends(appends)
	failOn(t, check.Acknowledged(as, l))
	failOn(t, check.Order(as, l))
	failOn(t, check.StoredOnce(as, l))
	return l
}

// checkLinearizable runs porcupine over the successful appends and reads
// of a log, without no-ops if dense, and on failure writes its
// visualization to a temporary file.
func checkLinearizable(t *testing.T, appends []appendOp, reads []readOp, dense bool) {
	t.Helper()
	start := time.Now()
	err := check.Linearizable(checkAppends(appends), checkReadOps(reads), dense, linearizabilityTimeout)
	t.Logf("porcupine: %d appends, %d reads, in %v", len(appends), len(reads), time.Since(start).Round(time.Millisecond))
	var nl *check.NotLinearizable
	if !errors.As(err, &nl) {
		failOn(t, err)
		return
	}
	f, ferr := os.CreateTemp("", "augur-e2e-linearizability-*.html")
	if ferr == nil {
		ferr = errors.Join(nl.Visualize(f), f.Close())
	}
	where := "could not write a visualization: " + fmt.Sprint(ferr)
	if ferr == nil {
		where = "visualization in " + f.Name()
	}
	t.Errorf("%v (%s)", err, where)
}

// maxGap returns the largest interval in [from, to] without an
// acknowledgement, the window's edges included, and where it began.
func maxGap(acks []time.Duration, from, to time.Duration) (gap, at time.Duration) {
	prev := from
	for _, a := range acks {
		if a < from {
			continue
		}
		if a > to {
			break
		}
		if a-prev > gap {
			gap, at = a-prev, prev
		}
		prev = a
	}
	if to-prev > gap {
		gap, at = to-prev, prev
	}
	return gap, at
}

// logTail returns the last n lines of s.
func logTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// drainAppends waits for the appenders in wg to return, for at most
// timeout; past it, it reports the appends still in flight and cancels them
// through giveUp.
func drainAppends(t *testing.T, h *history, wg *sync.WaitGroup, giveUp func(), timeout time.Duration) {
	t.Helper()
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(timeout):
		_, pending := h.counts()
		giveUp()
		<-drained
		t.Errorf("%d appends were still in flight %v after the appenders stopped", pending, timeout)
	}
}
