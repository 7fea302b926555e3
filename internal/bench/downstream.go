package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// downstream is one downstream task, after SpecLog §6.1: a reader per
// consumer takes its events and queues delivered records; a compute loop
// takes everything queued as one batch and "computes" over it for the
// compute time by waiting (so the machine's cores stay with the cluster).
// A record is finished once its batch is computed and its position is
// final; a speculative delivery is final at the EventConfirm covering it,
// and void at an EventFail below it from its consumer (its result is
// rolled back and it comes again). A task has one consumer of the whole
// log, or one per shard (FollowShards), whose deliveries interleave.
//
// Lock order: downstream.mu before series.mu and Latency.mu.
type downstream struct {
	idx         int
	run         *loadRun
	cons        []Consumer
	compute     time.Duration
	speculative bool
	// wake (capacity 1) tells the compute loop that the queue grew.
	wake chan struct{}
	// reached is closed once every record up to target is finished.
	reached chan struct{}

	mu sync.Mutex
	// queue holds delivered items not yet taken into a batch.
	queue []*item
	// open counts delivered items neither finished nor void.
	open int
	// streams follow each consumer's progress; ended says their targets
	// are set.
	streams []streamPos
	ended   bool
	// failedViews are the views whose Fail events were counted.
	failedViews map[uint64]bool
	seen        map[recID]struct{}
	finished    []finishedRec
	// finishedWindow counts finished records started in the measured window.
	finishedWindow int64
	misspec        int64
	rolledBack     int64
	// view is the last view seen; viewChanges counts its growth within the
	// measured window.
	view        uint64
	viewChanges int64
	sums        breakdownSums
	err         error
}

// streamPos is one consumer's progress. A consumer's confirmations and
// failures settle only its own deliveries: another consumer may still hold
// void ones below a confirmed end, its Fail not seen yet.
type streamPos struct {
	// pending holds the speculative deliveries not yet confirmed,
	// positions strictly ascending.
	pending []*item
	// last is the highest position delivered and not void, -1 before the
	// first delivery.
	last int64
	// target is the last acknowledged position the consumer must reach
	// once the load ended, -1 if none.
	target int64
}

// String shows the consumer's progress in drain errors: last/target.
func (s streamPos) String() string { return fmt.Sprintf("%d/%d", s.last, s.target) }

// item is one delivery of a record to a downstream task.
type item struct {
	pos      uint64
	stream   int // the consumer that delivered it
	id       recID
	start    time.Time // the append's start
	measured bool      // started in the measured window
	// delivered, batchStart, computed and confirmed are when each step
	// happened (zero until then).
	delivered, batchStart, computed, confirmed time.Time
	void                                       bool
}

type finishedRec struct {
	pos    uint64
	stream int
	hash   uint64
}

// breakdownSums add up the e2e parts of finished measured records.
type breakdownSums struct {
	n                              int64
	delivery, queue, compute, wait time.Duration
}

func newDownstream(idx int, run *loadRun, cons []Consumer, compute time.Duration, speculative bool) *downstream {
	d := &downstream{
		idx:         idx,
		run:         run,
		cons:        cons,
		compute:     compute,
		speculative: speculative,
		wake:        make(chan struct{}, 1),
		reached:     make(chan struct{}),
		failedViews: map[uint64]bool{},
		seen:        map[recID]struct{}{},
	}
	for range cons {
		d.streams = append(d.streams, streamPos{last: -1, target: -1})
	}
	return d
}

// readLoop takes consumer s's events until ctx ends or it fails.
func (d *downstream) readLoop(ctx context.Context, s int) {
	for {
		ev, err := d.cons[s].Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				d.mu.Lock()
				d.failLocked(fmt.Errorf("subscriber %d: %w", d.idx+1, err))
				d.mu.Unlock()
			}
			return
		}
		now := time.Now()
		d.mu.Lock()
		d.handleLocked(s, ev, now)
		d.mu.Unlock()
		if ev.Kind == EventDeliver {
			select {
			case d.wake <- struct{}{}:
			default:
			}
		}
	}
}

// computeLoop computes batches until ctx ends.
func (d *downstream) computeLoop(ctx context.Context) {
	alarm := NewAlarm()
	defer alarm.Close()
	for {
		select {
		case <-d.wake:
		case <-ctx.Done():
			return
		}
		for {
			d.mu.Lock()
			batch := d.queue
			d.queue = nil
			d.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			t0 := time.Now()
			if alarm.SleepUntil(ctx, t0.Add(d.compute)) != nil {
				return
			}
			t1 := time.Now()
			d.mu.Lock()
			for _, it := range batch {
				if it.void {
					continue
				}
				it.batchStart, it.computed = t0, t1
				if !it.confirmed.IsZero() {
					d.finishLocked(it)
				}
			}
			d.checkReachedLocked()
			d.mu.Unlock()
		}
	}
}

func (d *downstream) handleLocked(s int, ev ConsumerEvent, now time.Time) {
	st := &d.streams[s]
	if ev.View > d.view {
		if d.run.inWindow(now) {
			d.viewChanges += int64(ev.View - d.view)
		}
		d.view = ev.View
	}
	switch ev.Kind {
	case EventDeliver:
		if st.last >= 0 && int64(ev.Position) <= st.last {
			d.failLocked(fmt.Errorf("subscriber %d: delivered position %d after %d", d.idx+1, ev.Position, st.last))
			return
		}
		st.last = int64(ev.Position)
		start, id, ok := readHeader(ev.Payload, d.run.id)
		if !ok {
			return // another writer's record, or a no-op
		}
		it := &item{pos: ev.Position, stream: s, id: id, start: start, measured: d.run.inWindow(start), delivered: now}
		if _, again := d.seen[id]; !again {
			d.seen[id] = struct{}{}
			if it.measured {
				d.run.delivery.Record(now.Sub(start))
			}
			d.run.series.delivered(now, now.Sub(start))
		}
		if ev.Speculative {
			st.pending = append(st.pending, it)
		} else {
			it.confirmed = now
		}
		d.queue = append(d.queue, it)
		d.open++
	case EventConfirm:
		n := 0
		for _, it := range st.pending {
			if it.pos >= ev.Position {
				break
			}
			n++
			it.confirmed = now
			if it.measured {
				d.run.confirm.Record(now.Sub(it.start))
			}
			if !it.computed.IsZero() {
				d.finishLocked(it)
			}
		}
		st.pending = slices.Delete(st.pending, 0, n)
		d.checkReachedLocked()
	case EventFail:
		// Each consumer that delivered past confirmed-gp fails; count
		// the view's misspeculation once.
		if !d.failedViews[ev.View] {
			d.failedViews[ev.View] = true
			d.misspec++
			if d.idx == 0 {
				// Every subscriber sees the same failures; count them once.
				d.run.series.failed(now)
			}
		}
		for len(st.pending) > 0 && st.pending[len(st.pending)-1].pos >= ev.Position {
			it := st.pending[len(st.pending)-1]
			st.pending = st.pending[:len(st.pending)-1]
			it.void = true
			d.open--
			d.rolledBack++
		}
		st.last = min(st.last, int64(ev.Position)-1)
	default:
		d.failLocked(fmt.Errorf("subscriber %d: unknown event kind %v", d.idx+1, ev.Kind))
	}
}

// finishLocked records a record computed over at a final position.
func (d *downstream) finishLocked(it *item) {
	d.open--
	done := it.computed
	if it.confirmed.After(done) {
		done = it.confirmed
	}
	d.finished = append(d.finished, finishedRec{pos: it.pos, stream: it.stream, hash: positionHash(d.run.hashSeed, it.pos, it.id)})
	d.run.series.finished(done, done.Sub(it.start))
	if !it.measured {
		return
	}
	d.finishedWindow++
	d.run.e2e.Record(done.Sub(it.start))
	d.sums.n++
	d.sums.delivery += it.delivered.Sub(it.start)
	d.sums.queue += it.batchStart.Sub(it.delivered)
	d.sums.compute += it.computed.Sub(it.batchStart)
	d.sums.wait += done.Sub(it.computed)
}

// setTargets says the load ended with the last acknowledged record of
// consumer i's part of the log at position targets[i] (-1: none).
func (d *downstream) setTargets(targets []int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, t := range targets {
		d.streams[i].target = t
	}
	d.ended = true
	d.checkReachedLocked()
}

func (d *downstream) checkReachedLocked() {
	if !d.ended || d.open != 0 {
		return
	}
	for _, st := range d.streams {
		if st.last < st.target {
			return
		}
	}
	d.closeReachedLocked()
}

func (d *downstream) failLocked(err error) {
	if d.err == nil {
		d.err = err
	}
	d.closeReachedLocked()
}

func (d *downstream) closeReachedLocked() {
	select {
	case <-d.reached:
	default:
		close(d.reached)
	}
}

// digest sums the hashes of the records each consumer s finished at
// positions ≤ upTo[s] and counts them; it fails if a position was
// finished twice.
func (d *downstream) digest(upTo []int64) (n int, sum uint64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := make(map[uint64]bool, len(d.finished))
	for _, f := range d.finished {
		if int64(f.pos) > upTo[f.stream] {
			continue
		}
		if seen[f.pos] {
			return 0, 0, fmt.Errorf("subscriber %d finished position %d twice", d.idx+1, f.pos)
		}
		seen[f.pos] = true
		n++
		sum += f.hash
	}
	return n, sum, nil
}
