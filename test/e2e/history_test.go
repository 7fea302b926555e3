package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/augur-log/augur/client"
)

// Bounds shared by the tests.
const (
	// pollInterval paces eventually's checks.
	pollInterval = 10 * time.Millisecond
	// linearizabilityTimeout bounds porcupine's search.
	linearizabilityTimeout = 60 * time.Second
	// reportOpsMax bounds how many offending operations a failure lists.
	reportOpsMax = 10
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

// checkAppendsReturned fails the test for every append that returned an
// error: the faults of these tests stay within the fault budget, so the SDK
// must complete every append.
func checkAppendsReturned(t *testing.T, appends []appendOp) {
	t.Helper()
	var bad []appendOp
	for _, op := range appends {
		if op.err != nil {
			bad = append(bad, op)
		}
	}
	for i, op := range bad {
		if i == reportOpsMax {
			t.Errorf("... and %d more failed appends", len(bad)-reportOpsMax)
			break
		}
		t.Errorf("append %q (worker %d, invoked at %v, returned at %v) failed: %v", op.payload, op.worker, op.call, op.ret, op.err)
	}
}

// checkLog checks a subscriber's sequence against the acknowledged appends:
// positions increasing (dense from 0 when dense is set; speculative order
// leaves no-op positions out), every acknowledged append exactly once at its
// acknowledged position and shard, no record that nobody appended. It
// returns the payload of each entry.
func checkLog(t *testing.T, name string, entries []client.Entry, appends []appendOp, dense bool) []string {
	t.Helper()
	acked := map[string]appendOp{}
	invoked := map[string]bool{}
	unknown := map[string]bool{}
	for _, op := range appends {
		invoked[op.payload] = true
		if op.err == nil {
			acked[op.payload] = op
		}
		if errors.Is(op.err, client.ErrOutcomeUnknown) {
			unknown[op.payload] = true
		}
	}
	payloads := make([]string, len(entries))
	seen := map[string]uint64{}
	errs := 0
	fail := func(format string, args ...any) {
		errs++
		if errs <= reportOpsMax {
			t.Errorf("subscriber %s: "+format, append([]any{name}, args...)...)
		}
	}
	for i, e := range entries {
		p := string(e.Record.Payload)
		payloads[i] = p
		if dense && e.Position != uint64(i) {
			fail("entry %d has position %d: positions are not dense from 0", i, e.Position)
		}
		if i > 0 && e.Position <= entries[i-1].Position {
			fail("entry %d has position %d after %d: positions do not increase", i, e.Position, entries[i-1].Position)
		}
		if prev, dup := seen[p]; dup {
			fail("payload %q at positions %d and %d: stored twice", p, prev, e.Position)
			continue
		}
		seen[p] = e.Position
		op, ok := acked[p]
		switch {
		case !ok && !invoked[p]:
			fail("position %d holds %q, which no worker appended", e.Position, p)
		case !ok && unknown[p]:
			// Its shard died before answering: it may or may not be here.
		case !ok:
			fail("position %d holds %q, whose append failed", e.Position, p)
		case op.ack.Position != e.Position:
			fail("%q was acknowledged at position %d but sits at %d", p, op.ack.Position, e.Position)
		case op.ack.Shard != e.Shard:
			fail("%q was acknowledged by shard %d but comes from shard %d", p, op.ack.Shard, e.Shard)
		}
	}
	for p, op := range acked {
		if _, ok := seen[p]; !ok && len(entries) > 0 && op.ack.Position <= entries[len(entries)-1].Position {
			fail("acknowledged append %q (position %d) is missing", p, op.ack.Position)
		}
	}
	if errs > reportOpsMax {
		t.Errorf("subscriber %s: ... and %d more problems", name, errs-reportOpsMax)
	}
	return payloads
}

// checkSameSequence fails unless two subscribers saw the same records at the
// same positions over their common prefix.
func checkSameSequence(t *testing.T, a, b *collector, n int) {
	t.Helper()
	ea, eb := a.entries(), b.entries()
	for i := 0; i < n && i < len(ea) && i < len(eb); i++ {
		x, y := ea[i], eb[i]
		if x.Position != y.Position || x.Shard != y.Shard || string(x.Record.Payload) != string(y.Record.Payload) {
			t.Errorf("subscribers disagree at index %d: %s has (pos %d, shard %d, %q), %s has (pos %d, shard %d, %q)",
				i, a.name, x.Position, x.Shard, x.Record.Payload, b.name, y.Position, y.Shard, y.Record.Payload)
			return
		}
	}
}

// checkRealTimeOrder checks invariant 3 directly, with a clearer message
// than porcupine's: if append A returned before append B was invoked, A's
// position is lower.
func checkRealTimeOrder(t *testing.T, appends []appendOp) {
	t.Helper()
	var ok []appendOp
	for _, op := range appends {
		if op.err == nil {
			ok = append(ok, op)
		}
	}
	byRet := slices.Clone(ok)
	slices.SortFunc(byRet, func(a, b appendOp) int { return int(a.ret - b.ret) })
	byCall := slices.Clone(ok)
	slices.SortFunc(byCall, func(a, b appendOp) int { return int(a.call - b.call) })
	// Sweep B by invoke time, folding in every A that returned strictly
	// before B was invoked; keep the highest position among them.
	var best *appendOp
	i, errs := 0, 0
	for _, b := range byCall {
		for i < len(byRet) && byRet[i].ret < b.call {
			if best == nil || byRet[i].ack.Position > best.ack.Position {
				best = &byRet[i]
			}
			i++
		}
		if best != nil && best.ack.Position >= b.ack.Position {
			errs++
			if errs <= reportOpsMax {
				t.Errorf("real-time order violated: %q returned at %v with position %d, but %q invoked later at %v got position %d",
					best.payload, best.ret, best.ack.Position, b.payload, b.call, b.ack.Position)
			}
		}
	}
	if errs > reportOpsMax {
		t.Errorf("... and %d more real-time order violations", errs-reportOpsMax)
	}
}

// checkReads checks every successful read against the log the subscribers
// agreed on: a read of position p returns the record at p.
func checkReads(t *testing.T, reads []readOp, payloads []string) {
	t.Helper()
	errs := 0
	for _, r := range reads {
		if r.err != nil {
			errs++
			if errs <= reportOpsMax {
				t.Errorf("read of position %d (invoked at %v, returned at %v) failed: %v", r.pos, r.call, r.ret, r.err)
			}
			continue
		}
		switch {
		case r.pos >= uint64(len(payloads)):
			t.Errorf("read of position %d returned %q, but the log has only %d records", r.pos, r.payload, len(payloads))
		case payloads[r.pos] != r.payload:
			errs++
			if errs <= reportOpsMax {
				t.Errorf("read of position %d returned %q, but the subscribers have %q there", r.pos, r.payload, payloads[r.pos])
			}
		}
	}
	if errs > reportOpsMax {
		t.Errorf("... and %d more bad reads", errs-reportOpsMax)
	}
}

// Porcupine model of the log: the state is the number of records ordered.

type appendInput struct{ payload string }

type readInput struct{ pos uint64 }

var logModel = porcupine.Model{
	Init: func() any { return 0 },
	Step: func(state, input, output any) (bool, any) {
		n := state.(int)
		switch in := input.(type) {
		case appendInput:
			// An append takes the next position.
			if output.(uint64) == uint64(n) {
				return true, n + 1
			}
			return false, n
		case readInput:
			// A read sees a position only once it is ordered.
			return in.pos < uint64(n), n
		}
		panic(fmt.Sprintf("unknown input %T", input))
	},
	DescribeOperation: func(input, output any) string {
		switch in := input.(type) {
		case appendInput:
			return fmt.Sprintf("append(%s) -> %d", in.payload, output)
		case readInput:
			return fmt.Sprintf("read(%d) -> %s", in.pos, output)
		}
		return fmt.Sprint(input, output)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%d records", state) },
}

// checkLinearizable runs porcupine over the successful appends and reads.
// Failed operations have no output; the tests fail on them separately.
func checkLinearizable(t *testing.T, appends []appendOp, reads []readOp) {
	t.Helper()
	var ops []porcupine.Operation
	for _, a := range appends {
		if a.err != nil {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: a.worker, Input: appendInput{a.payload},
			Call: int64(a.call), Output: a.ack.Position, Return: int64(a.ret)})
	}
	for _, r := range reads {
		if r.err != nil {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: r.worker, Input: readInput{r.pos},
			Call: int64(r.call), Output: r.payload, Return: int64(r.ret)})
	}
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(logModel, ops, linearizabilityTimeout)
	t.Logf("porcupine: %d operations, result %v, in %v", len(ops), res, time.Since(start).Round(time.Millisecond))
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		t.Errorf("linearizability check of %d operations timed out after %v: result unknown", len(ops), linearizabilityTimeout)
		return
	}
	f, err := os.CreateTemp("", "augur-e2e-linearizability-*.html")
	if err == nil {
		err = errors.Join(porcupine.Visualize(logModel, info, f), f.Close())
	}
	where := "could not write a visualization: " + fmt.Sprint(err)
	if err == nil {
		where = "visualization in " + f.Name()
	}
	t.Errorf("history of %d operations is not linearizable (%s)", len(ops), where)
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
