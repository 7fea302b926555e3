package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/stagetime"
)

// extraInflightMax bounds the extra load's appends in flight.
const extraInflightMax = 4096

// loadSpec describes one measured run of the load engine: open- or
// closed-loop appenders, optionally downstream subscribers, an extra load
// on one shard, and actions on the cluster at fixed times.
type loadSpec struct {
	// Subscribers is how many downstream tasks follow the log; 0 measures
	// appends only.
	Subscribers int
	Compute     time.Duration
	// Extra, when set, adds open-loop load on one shard for part of the
	// window.
	Extra *extraLoad
	// Actions run in order, each at its time from the window's start.
	Actions []action
	// Series collects per-interval points.
	Series bool
	// Player, when set, runs the exactly-once player on the log and tags
	// each record with its targets (the player workload).
	Player *playerBench
}

// extraLoad is added load on one shard (SpecLog §6.4's burst, §6.5's rate
// change), from From to To after the start of the measured window.
type extraLoad struct {
	Rate     int
	From, To time.Duration
	// Shard is the index, in ascending id order, of the live shard at the
	// start of the run that takes the load.
	Shard int
}

// action is something done to the cluster during the run. Do returns a
// detail appended to What in the event it records.
type action struct {
	At   time.Duration
	What string
	Do   func(ctx context.Context) (string, error)
}

// loadRun is the shared state of one run; the appenders' done callbacks
// and the downstream tasks update it from their goroutines.
type loadRun struct {
	p        Params
	id       uint64
	hashSeed maphash.Seed
	filler   []byte
	stamp    bool
	// tags, when set, gives each record its tags.
	tags                func(appender uint32, seq uint64) []string
	start, warmEnd, end time.Time
	series              *series

	appendLat, delivery, confirm, e2e *Latency

	ackedInWindow atomic.Int64 // acknowledged in the window (throughput)
	appended      atomic.Int64 // acknowledged, started in the window
	errors        atomic.Int64 // failed, started in the window
	maxPos        atomic.Int64 // highest acknowledged position, -1 for none
	// shardMax holds, when tasks follow shards, each followed shard's
	// highest acknowledged position (read-only map once the load starts).
	shardMax map[uint32]*atomic.Int64
	firstErr atomic.Pointer[error]
	pending  sync.WaitGroup
}

func (r *loadRun) inWindow(t time.Time) bool { return !t.Before(r.warmEnd) && t.Before(r.end) }

// record returns the record appender sends as its seq-th append, due at.
func (r *loadRun) record(appender uint32, seq uint64, at time.Time) client.Record {
	if !r.stamp {
		return client.Record{Payload: r.filler}
	}
	b := make([]byte, len(r.filler))
	copy(b, r.filler)
	putHeader(b, r.id, at, recID{appender: appender, seq: seq})
	rec := client.Record{Payload: b}
	if r.tags != nil {
		rec.Tags = r.tags(appender, seq)
	}
	return rec
}

// done returns the completion callback of an append that started at start.
func (r *loadRun) done(start time.Time) func(client.Ack, error) {
	r.pending.Add(1)
	return func(a client.Ack, err error) {
		defer r.pending.Done()
		now := time.Now()
		if err != nil {
			if r.inWindow(start) {
				r.errors.Add(1)
			}
			r.firstErr.CompareAndSwap(nil, &err)
			return
		}
		raise(&r.maxPos, int64(a.Position))
		if m := r.shardMax[a.Shard]; m != nil {
			raise(m, int64(a.Position))
		}
		if r.inWindow(start) {
			r.appendLat.Record(now.Sub(start))
			r.appended.Add(1)
		}
		if r.inWindow(now) {
			r.ackedInWindow.Add(1)
			r.series.ack(now, now.Sub(start))
		}
	}
}

// raise makes v at least x.
func raise(v *atomic.Int64, x int64) {
	for {
		m := v.Load()
		if x <= m || v.CompareAndSwap(m, x) {
			return
		}
	}
}

// runLoad runs the load engine once against e's target under e's mode and
// measures it.
func runLoad(ctx context.Context, e *Env, ls loadSpec) (*Result, error) {
	p := e.Params
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	var clients []*client.Client
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	dial := func() (*client.Client, error) {
		cl, err := e.Target.Dial(ctx)
		if err == nil {
			clients = append(clients, cl)
		}
		return cl, err
	}
	admin, err := dial()
	if err != nil {
		return nil, err
	}
	live, replicas, err := shape(ctx, admin)
	if err != nil {
		return nil, err
	}
	if len(live) == 0 {
		return nil, errors.New("the cluster has no live shard")
	}
	appenders := make([]*client.Client, p.Clients)
	for i := range appenders {
		if appenders[i], err = dial(); err != nil {
			return nil, err
		}
	}

	r := &loadRun{
		p:         p,
		hashSeed:  maphash.MakeSeed(),
		stamp:     (ls.Subscribers > 0 || ls.Player != nil) && p.RecordBytes >= headerBytes,
		appendLat: NewLatency(),
		delivery:  NewLatency(),
		confirm:   NewLatency(),
		e2e:       NewLatency(),
	}
	r.filler, r.id = filler(p.Seed, p.RecordBytes)
	r.maxPos.Store(-1)

	// Subscribers first, from the current tail, so they see every record.
	var tasks []*downstream
	var taskWG sync.WaitGroup
	defer taskWG.Wait()
	defer cancel()
	if ls.Subscribers > 0 {
		from, err := admin.CheckTail(ctx)
		if err != nil {
			return nil, fmt.Errorf("check tail: %w", err)
		}
		filters := []client.Filter{{}}
		if p.Follow == FollowShards {
			filters = filters[:0]
			r.shardMax = map[uint32]*atomic.Int64{}
			for _, sh := range live {
				filters = append(filters, client.OnShard(sh.Id))
				r.shardMax[sh.Id] = &atomic.Int64{}
				r.shardMax[sh.Id].Store(-1)
			}
		}
		for i := range ls.Subscribers {
			cl, err := dial()
			if err != nil {
				return nil, err
			}
			var cons []Consumer
			for _, f := range filters {
				c, err := e.Mode.Subscribe(runCtx, cl, from, f)
				if err != nil {
					for _, c := range cons {
						c.Close()
					}
					return nil, fmt.Errorf("subscribe: %w", err)
				}
				cons = append(cons, c)
			}
			d := newDownstream(i, r, cons, ls.Compute, e.Mode.Speculative())
			tasks = append(tasks, d)
			taskWG.Add(len(cons) + 1)
			for s, c := range cons {
				go func() {
					defer taskWG.Done()
					defer c.Close()
					d.readLoop(runCtx, s)
				}()
			}
			go func() {
				defer taskWG.Done()
				d.computeLoop(runCtx)
			}()
		}
	}
	if ls.Player != nil {
		// The player starts at the tail with targets that applied
		// everything before it, so it plays only this run's records.
		cl, err := dial()
		if err != nil {
			return nil, err
		}
		from, err := admin.CheckTail(ctx)
		if err != nil {
			return nil, fmt.Errorf("check tail: %w", err)
		}
		if err := ls.Player.start(runCtx, r, cl, from); err != nil {
			return nil, fmt.Errorf("start the player: %w", err)
		}
		defer ls.Player.stop()
		r.tags = ls.Player.tags
	}
	var extraCl *client.Client
	var extraShard uint32
	if ls.Extra != nil {
		if ls.Extra.Shard >= len(live) {
			return nil, fmt.Errorf("extra load on shard index %d, but only %d shards are live", ls.Extra.Shard, len(live))
		}
		extraShard = live[ls.Extra.Shard].Id
		if extraCl, err = dial(); err != nil {
			return nil, err
		}
	}

	r.start = time.Now()
	r.warmEnd = r.start.Add(p.Warmup)
	r.end = r.warmEnd.Add(p.Duration)
	if ls.Series {
		r.series = newSeries(r.warmEnd, p.Duration, seriesInterval(p))
	}

	var gens sync.WaitGroup
	// The floor is measured over the warm-up, under the same load, so
	// that it costs nothing in the measured window's CPU.
	floor, err := startFloorProbe()
	if err != nil {
		return nil, err
	}
	defer floor.close()
	var floorErr error
	gens.Add(1)
	go func() {
		defer gens.Done()
		floorErr = floor.run(runCtx, r.warmEnd)
	}()
	for i, cl := range appenders {
		gens.Add(1)
		go func() {
			defer gens.Done()
			if p.Rate > 0 {
				r.openLoop(runCtx, cl, uint32(i), NewPacer(Schedule{Start: r.start, Rate: p.Rate}, i, p.Clients))
			} else {
				r.closedLoop(runCtx, cl, uint32(i), p.Inflight)
			}
		}()
	}
	if ls.Extra != nil {
		gens.Add(1)
		go func() {
			defer gens.Done()
			r.extraLoop(runCtx, extraCl, uint32(p.Clients), extraShard, ls.Extra)
		}()
	}
	actions := slices.Clone(ls.Actions)
	if x := ls.Extra; x != nil {
		mark := func(context.Context) (string, error) { return "", nil }
		actions = append(actions, action{At: x.From, What: fmt.Sprintf("extra load of %d/s on shard %d starts", x.Rate, extraShard), Do: mark})
		if x.To < p.Duration {
			actions = append(actions, action{At: x.To, What: fmt.Sprintf("extra load on shard %d ends", extraShard), Do: mark})
		}
		slices.SortStableFunc(actions, func(a, b action) int { return cmp.Compare(a.At, b.At) })
	}
	var events []Event
	var actErr error
	gens.Add(1)
	go func() {
		defer gens.Done()
		events, actErr = r.runActions(runCtx, actions)
	}()

	// Measure CPU and the mode's counters over the window only.
	cm, counting := e.Mode.(CountingMode)
	var cpu0, cpu1 CPUSample
	var c0, c1 Counters
	var measureErr error
	var cuts0, cuts1 int64
	if err := sleepUntil(ctx, r.warmEnd); err == nil {
		cuts0, measureErr = cutsCommitted(e.Target)
		if measureErr == nil {
			cpu0, measureErr = SampleCPU()
		}
		if p.Stages && e.Target.Embedded != nil {
			stagetime.Start()
		}
		if counting && measureErr == nil {
			c0, measureErr = cm.Counters(ctx, e.Target)
		}
		if measureErr == nil {
			if counting && r.series != nil {
				measureErr = r.pollCounters(ctx, cm, e.Target, c0)
			} else {
				measureErr = sleepUntil(ctx, r.end)
			}
		}
		if measureErr == nil {
			cpu1, measureErr = SampleCPU()
		}
		stagetime.Stop()
		if measureErr == nil {
			cuts1, measureErr = cutsCommitted(e.Target)
		}
		if counting && measureErr == nil {
			c1, measureErr = cm.Counters(ctx, e.Target)
		}
	}
	gens.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if measureErr != nil {
		return nil, measureErr
	}
	if actErr != nil {
		return nil, actErr
	}
	if floorErr != nil {
		return nil, floorErr
	}
	if err := waitFor(ctx, r.pending.Wait, drainTimeout); err != nil {
		return nil, fmt.Errorf("appends still unacknowledged after the run: %w", err)
	}
	if r.appended.Load() == 0 {
		if e := r.firstErr.Load(); e != nil {
			return nil, fmt.Errorf("no append succeeded in the measured window: %w", *e)
		}
		return nil, errors.New("no append was acknowledged in the measured window")
	}
	targets := []int64{r.maxPos.Load()}
	if r.shardMax != nil {
		targets = targets[:0]
		for _, sh := range live {
			targets = append(targets, r.shardMax[sh.Id].Load())
		}
	}
	if err := r.drainTasks(ctx, tasks, targets); err != nil {
		return nil, err
	}
	if ls.Player != nil {
		if err := ls.Player.drain(ctx); err != nil {
			return nil, err
		}
	}
	cancel()
	taskWG.Wait()

	secs := p.Duration.Seconds()
	cpu, host := cpu1.Since(cpu0)
	res := &Result{
		Shards:          len(live),
		Replicas:        replicas,
		RecordBytes:     p.RecordBytes,
		Rate:            Ptr(p.Rate),
		Clients:         p.Clients,
		Subscribers:     ls.Subscribers,
		DurationS:       round(secs, 3),
		ThroughputRPS:   Ptr(round(float64(r.ackedInWindow.Load())/secs, 1)),
		AppendLatencyUS: r.appendLat.Summary(),
		RecordsAppended: Ptr(r.appended.Load()),
		Errors:          r.errors.Load(),
		CPUSeconds:      Ptr(round(cpu.Seconds(), 3)),
		StealPercent:    host.Steal,
		IOWaitPercent:   host.IOWait,
		Events:          events,
		Series:          r.series.points(e.Mode.Speculative()),
	}
	if e.Target.Embedded != nil {
		res.CutsPerS = Ptr(round(float64(cuts1-cuts0)/secs, 1))
		if p.Stages {
			res.StagesUS = stagetime.Summaries()
		}
	}
	if floor.lat.Count() > 0 {
		res.GRPCFloorUS = floor.lat.Summary()
	}
	if counting {
		res.NoopRPS = Ptr(round(float64(c1.Noops-c0.Noops)/secs, 1))
		res.LagFixes = Ptr(c1.LagFixes - c0.LagFixes)
		res.QuotaChanges = Ptr(c1.QuotaChanges - c0.QuotaChanges)
		res.ViewChanges = Ptr(c1.ViewChanges - c0.ViewChanges)
		res.PredeterminedCutsPercent = PredeterminedPercent(c0, c1)
	}
	if len(tasks) > 0 {
		res.Follow = p.Follow
		r.summarizeTasks(res, tasks, e.Mode.Speculative())
	}
	if ls.Player != nil {
		ls.Player.summarize(res)
	}
	return res, nil
}

// openLoop issues appends at the pacer's times until the run ends; an
// append's latency counts from when it was due.
func (r *loadRun) openLoop(ctx context.Context, cl *client.Client, appender uint32, pc *Pacer) {
	alarm := NewAlarm()
	defer alarm.Close()
	for seq := uint64(0); ; seq++ {
		at := pc.Next()
		if !at.Before(r.end) {
			return
		}
		if err := alarm.SleepUntil(ctx, at); err != nil {
			return
		}
		stagetime.Observe(stagetime.IssueLag, time.Since(at))
		cl.AppendAsync(ctx, r.record(appender, seq, at), r.done(at))
	}
}

// closedLoop keeps inflight appends in flight until the run ends.
func (r *loadRun) closedLoop(ctx context.Context, cl *client.Client, appender uint32, inflight int) {
	slots := make(chan struct{}, inflight)
	for seq := uint64(0); ; seq++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		now := time.Now()
		if !now.Before(r.end) {
			return
		}
		done := r.done(now)
		cl.AppendAsync(ctx, r.record(appender, seq, now), func(a client.Ack, err error) {
			done(a, err)
			<-slots
		})
	}
}

// extraLoop appends to one shard, open loop, during [From, To) of the window.
func (r *loadRun) extraLoop(ctx context.Context, cl *client.Client, appender uint32, shard uint32, x *extraLoad) {
	from := r.warmEnd.Add(x.From)
	until := r.warmEnd.Add(x.To)
	if until.After(r.end) {
		until = r.end
	}
	pc := NewPacer(Schedule{Start: from, Rate: x.Rate}, 0, 1)
	slots := make(chan struct{}, extraInflightMax)
	alarm := NewAlarm()
	defer alarm.Close()
	for seq := uint64(0); ; seq++ {
		at := pc.Next()
		if !at.Before(until) {
			return
		}
		if err := alarm.SleepUntil(ctx, at); err != nil {
			return
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		rec := r.record(appender, seq, at)
		done := r.done(at)
		go func() {
			defer func() { <-slots }()
			done(cl.AppendToShard(ctx, rec, shard))
		}()
	}
}

// runActions runs the actions in order at their times and returns the
// events they make.
func (r *loadRun) runActions(ctx context.Context, actions []action) ([]Event, error) {
	var events []Event
	for _, a := range actions {
		if err := sleepUntil(ctx, r.warmEnd.Add(a.At)); err != nil {
			return events, nil
		}
		t := time.Since(r.warmEnd)
		detail, err := a.Do(ctx)
		if err != nil {
			return events, fmt.Errorf("%s: %w", a.What, err)
		}
		events = append(events, Event{TS: round(t.Seconds(), 3), What: a.What + detail})
	}
	return events, nil
}

// pollCounters reads the mode's counters at every series interval until
// the window ends, recording the no-ops of each interval.
func (r *loadRun) pollCounters(ctx context.Context, cm CountingMode, t *Target, prev Counters) error {
	for i := range r.series.buckets {
		at := r.warmEnd.Add(time.Duration(i+1) * r.series.interval)
		if at.After(r.end) {
			at = r.end
		}
		if err := sleepUntil(ctx, at); err != nil {
			return err
		}
		c, err := cm.Counters(ctx, t)
		if err != nil {
			return err
		}
		r.series.setNoops(i, c.Noops-prev.Noops)
		prev = c
	}
	return nil
}

// drainTasks waits until every subscriber finished every record up to
// the last acknowledged position of each consumer's part of the log.
func (r *loadRun) drainTasks(ctx context.Context, tasks []*downstream, targets []int64) error {
	if len(tasks) == 0 {
		return nil
	}
	for _, d := range tasks {
		d.setTargets(targets)
	}
	timer := time.NewTimer(drainTimeout)
	defer timer.Stop()
	for _, d := range tasks {
		select {
		case <-d.reached:
		case <-timer.C:
			d.mu.Lock()
			streams, open := slices.Clone(d.streams), d.open
			d.mu.Unlock()
			return fmt.Errorf("subscriber %d reached %v with %d records unfinished (last delivered, target per consumer), within %v",
				d.idx+1, streams, open, drainTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
		d.mu.Lock()
		err := d.err
		d.mu.Unlock()
		if err != nil {
			return err
		}
	}
	// Every subscriber must hold the same records at the same positions.
	n0, sum0, err := tasks[0].digest(targets)
	if err != nil {
		return err
	}
	for _, d := range tasks[1:] {
		n, sum, err := d.digest(targets)
		if err != nil {
			return err
		}
		if n != n0 || sum != sum0 {
			return fmt.Errorf("subscribers 1 and %d disagree on positions up to %v: %d vs %d records, digests %x vs %x",
				d.idx+1, targets, n0, n, sum0, sum)
		}
	}
	return nil
}

// summarizeTasks fills the consumer side of res.
func (r *loadRun) summarizeTasks(res *Result, tasks []*downstream, speculative bool) {
	var sums breakdownSums
	var misspec, rolledBack, views int64
	for _, d := range tasks {
		d.mu.Lock()
		res.RecordsDelivered = append(res.RecordsDelivered, d.finishedWindow)
		sums.n += d.sums.n
		sums.delivery += d.sums.delivery
		sums.queue += d.sums.queue
		sums.compute += d.sums.compute
		sums.wait += d.sums.wait
		misspec = max(misspec, d.misspec)
		rolledBack += d.rolledBack
		views = max(views, d.viewChanges)
		d.mu.Unlock()
	}
	if r.delivery.Count() > 0 {
		res.DeliveryLatencyUS = r.delivery.Summary()
	}
	if r.e2e.Count() > 0 {
		res.E2ELatencyUS = r.e2e.Summary()
		res.e2eCDF = r.e2e.cdf()
	}
	if sums.n > 0 {
		mean := func(d time.Duration) float64 { return micros(float64(d) / float64(sums.n)) }
		res.E2EBreakdownUS = &Breakdown{
			Delivery:       mean(sums.delivery),
			Queue:          mean(sums.queue),
			Compute:        mean(sums.compute),
			WaitForConfirm: mean(sums.wait),
		}
	}
	if speculative {
		if r.confirm.Count() > 0 {
			res.ConfirmLatencyUS = r.confirm.Summary()
		}
		res.Misspeculations = Ptr(misspec)
		res.RolledBack = Ptr(rolledBack)
		if res.ViewChanges == nil {
			res.ViewChanges = Ptr(views)
		}
	}
}

// waitFor runs wait in a goroutine and waits for it, at most timeout or
// until ctx ends.
func waitFor(ctx context.Context, wait func(), timeout time.Duration) error {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("still waiting after %v", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cutsCommitted is how many global cuts the embedded cluster's ordering
// layer applied so far (0 without an embedded cluster): its replicas share
// this process's metrics registry, and each applies every cut.
func cutsCommitted(t *Target) (int64, error) {
	if t.Embedded == nil {
		return 0, nil
	}
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return 0, fmt.Errorf("read metrics: %w", err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == "augur_cuts_committed_total" {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return int64(sum) / int64(max(len(t.Config.Ordering), 1)), nil
}
