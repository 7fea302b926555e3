package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
	"github.com/augur-log/augur/internal/rpcopt"
	"github.com/augur-log/augur/internal/spec"
	"github.com/augur-log/augur/internal/wire"
)

// Emulated shards (`augur bench scale --emulate N`, SpecLog §6.8 and
// Scalog §6.3): the embedded cluster is its ordering layer alone, and this
// process plays N shards. Each registers with RegisterShard as a group of
// one fake storage server, keeps its own connection and Heartbeat stream
// to the ordering leader with a fixed incarnation, takes its share of an
// open-loop arrival schedule, counts every record durable at once, and
// reports like a storage primary: in eager mode its length at most once
// per ordering interval, in speculative mode through a spec.Shard (quota
// boundaries, no-op fills, lag-fixes). One Watch stream of the leader
// feeds every shard its lease windows and measures the committed cuts.
//
// A shard holds no bytes: its log is a list of runs of records (their
// arrival indexes) and of no-ops. Arrival times follow from the schedule,
// so a shard wakes only when something it would report can change (its
// report is due, it crosses a quota boundary, a fill is due), not once
// per record, and the load it puts on the ordering layer is that of a
// real primary whose storage is instant.

// Bounds and timings of emulated shards.
const (
	// emulateMax bounds --emulate: each emulated shard holds a gRPC
	// connection and a heartbeat stream to the ordering leader.
	emulateMax = 1000
	// emuRetry paces retries of calls to the ordering layer.
	emuRetry = 10 * time.Millisecond
	// emuCallTimeout bounds one Status or RegisterShard call.
	emuCallTimeout = 5 * time.Second
	// emuLagQueue is how many lag-fixes may wait for a shard; the leader
	// repeats unanswered ones.
	emuLagQueue = 16
	// emuCompactAfter is how many ordered runs a shard's log keeps before
	// it drops them.
	emuCompactAfter = 64
)

// emulatingWorkload is a workload that can run on emulated shards.
type emulatingWorkload interface{ emulates() }

func (scaleWorkload) emulates() {}

// emulatedModes are the modes whose report protocols the emulated shards
// speak.
var emulatedModes = map[string]bool{"eager": true, "spec": true}

// checkEmulate checks the parameters of a run on emulated shards.
func checkEmulate(p Params) error {
	var errs []error
	if p.Cluster != nil {
		errs = append(errs, errors.New("--emulate runs its own ordering layer with emulated shards, so it needs the embedded cluster; drop --cluster"))
	}
	for _, n := range p.Emulate {
		if n < 1 || n > emulateMax {
			errs = append(errs, fmt.Errorf("emulate must be in [1, %d] shards, got %d", emulateMax, n))
		}
	}
	if dup := firstDuplicate(p.Emulate); dup != nil {
		errs = append(errs, fmt.Errorf("emulated shard count %d is named twice", *dup))
	}
	for _, m := range p.Modes {
		if _, err := LookupMode(m); err == nil && !emulatedModes[m] {
			errs = append(errs, fmt.Errorf("mode %s has no emulated shards (they speak eager and spec)", m))
		}
	}
	if p.Rate <= 0 {
		errs = append(errs, errors.New("--emulate needs an open-loop --rate: records/s over all emulated shards, split evenly (for example --rate 40000)"))
	} else {
		for _, n := range p.Emulate {
			if n < 1 || n > emulateMax {
				continue
			}
			if err := CheckRate(p.Rate, n, p.Duration); err != nil {
				errs = append(errs, fmt.Errorf("with %d emulated shards: %w", n, err))
			}
		}
	}
	if len(p.Compute) > 1 {
		errs = append(errs, errors.New("--compute applies to the subscribers of real shards; emulated shards have none"))
	}
	errs = append(errs, checkSpecFlags(p))
	return errors.Join(errs...)
}

// emuRun is the shared state of one run on emulated shards.
type emuRun struct {
	cfg    *config.Cluster
	log    *slog.Logger
	spec   bool
	n      int
	hbTick time.Duration
	// interval is the ordering interval: an eager shard reports at most
	// once per interval.
	interval time.Duration
	// fillAfter and idleAfter tune the speculative shards as the cluster
	// file tunes storage primaries.
	fillAfter, idleAfter time.Duration

	// Set before begin is closed, read-only afterwards: the arrival
	// schedule of all shards (shard c takes operations c, c+n, c+2n, ...),
	// the run's phases, and how many operations are due before its end.
	sched               Schedule
	start, warmEnd, end time.Time
	endOps              int64
	begin               chan struct{}

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn
	leader string

	// Set while shards register, read-only once the watcher starts.
	shards map[cut.ShardID]*emuShard
	list   []*emuShard

	lat *Latency
	// orderedInWindow counts records ordered by cuts committed in the
	// measured window; arrivedOrdered those that arrived in it and were
	// ordered (by the end of the drain).
	orderedInWindow atomic.Int64
	arrivedOrdered  atomic.Int64
	noops           atomic.Int64 // no-ops added in the measured window
	cuts            atomic.Int64 // cuts committed in the measured window
	groups          atomic.Int64 // groups of the last window announced in time, 0 for none
	// progress is signalled after each Watch message the watcher applied.
	progress chan struct{}

	failOnce sync.Once
	failErr  error
	failed   chan struct{}

	// Owned by the watcher.
	winKey [4]uint64
}

func newEmuRun(e *Env) *emuRun {
	cfg := e.Target.Config
	lg := e.Params.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &emuRun{
		cfg:       cfg,
		log:       lg.With("bench", "emulate"),
		spec:      e.Mode.Speculative(),
		n:         e.Variant.Emulate,
		hbTick:    cfg.HeartbeatInterval(),
		interval:  cfg.OrderingInterval.D(),
		fillAfter: cfg.OrderingInterval.D() * 3 / 2,
		idleAfter: cfg.OrderingInterval.D() * time.Duration(max(cfg.WindowCuts, 1)),
		begin:     make(chan struct{}),
		conns:     map[string]*grpc.ClientConn{},
		shards:    map[cut.ShardID]*emuShard{},
		lat:       NewLatency(),
		progress:  make(chan struct{}, 1),
		failed:    make(chan struct{}),
	}
}

// runEmulated runs one point of scale on e.Variant.Emulate emulated shards
// against the embedded ordering layer, and measures the cuts it commits.
func runEmulated(ctx context.Context, e *Env) (*Result, error) {
	if e.Target.Embedded == nil {
		return nil, errors.New("emulated shards need the embedded ordering layer")
	}
	p := e.Params
	r := newEmuRun(e)
	defer r.closeConns()
	var wg sync.WaitGroup
	defer wg.Wait()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Each shard starts heartbeating as soon as it is registered: the
	// leader gives a new shard one failure timeout to be heard from.
	regCtx, regCancel := context.WithTimeout(ctx, readyTimeout)
	incarnation := uint64(time.Now().UnixNano())
	for i := range r.n {
		s := newEmuShard(r, i, incarnation+uint64(i))
		id, err := r.register(regCtx, s)
		if err != nil {
			regCancel()
			return nil, fmt.Errorf("register emulated shard %d of %d: %w", i+1, r.n, err)
		}
		s.id = id
		r.shards[id] = s
		r.list = append(r.list, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(runCtx)
		}()
	}
	regCancel()

	r.start = time.Now()
	r.warmEnd = r.start.Add(p.Warmup)
	r.end = r.warmEnd.Add(p.Duration)
	r.sched = Schedule{Start: r.start, Rate: p.Rate}
	r.endOps = r.sched.Due(r.end.Add(-1))
	for _, s := range r.list {
		s.total = r.shardOps(s.idx, r.endOps)
	}
	close(r.begin)
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.watch(runCtx)
	}()

	// Measure CPU and the mode's counters over the window only.
	cm, counting := e.Mode.(CountingMode)
	var cpu0, cpu1 CPUSample
	var c0, c1 Counters
	if err := r.waitUntil(ctx, r.warmEnd); err != nil {
		return nil, err
	}
	cpu0, err := SampleCPU()
	if err == nil && counting {
		c0, err = cm.Counters(ctx, e.Target)
	}
	if err == nil {
		err = r.waitUntil(ctx, r.end)
	}
	if err == nil {
		cpu1, err = SampleCPU()
	}
	if err == nil && counting {
		c1, err = cm.Counters(ctx, e.Target)
	}
	if err == nil {
		err = r.drain(ctx)
	}
	cancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if r.lat.Count() == 0 {
		return nil, errors.New("no record that arrived in the measured window was ordered")
	}

	secs := p.Duration.Seconds()
	arrived := r.endOps - r.sched.Due(r.warmEnd.Add(-1))
	cpuTime, steal := cpu1.Since(cpu0)
	cpu := cpuTime.Seconds()
	res := &Result{
		Rate:                Ptr(p.Rate),
		DurationS:           round(secs, 3),
		ThroughputRPS:       Ptr(round(float64(r.orderedInWindow.Load())/secs, 1)),
		CutsPerS:            Ptr(round(float64(r.cuts.Load())/secs, 1)),
		OrderLatencyUS:      r.lat.Summary(),
		RecordsArrived:      Ptr(arrived),
		RecordsOrdered:      Ptr(r.arrivedOrdered.Load()),
		CPUSeconds:          Ptr(round(cpu, 3)),
		StealPercent:        steal,
		CPUPercentOfOneCore: Ptr(round(100*cpu/secs, 2)),
	}
	if r.spec {
		res.NoopRPS = Ptr(round(float64(r.noops.Load())/secs, 1))
		if g := r.groups.Load(); g > 0 {
			res.StaggerGroups = Ptr(int(g))
		}
	}
	if counting {
		res.LagFixes = Ptr(c1.LagFixes - c0.LagFixes)
		res.QuotaChanges = Ptr(c1.QuotaChanges - c0.QuotaChanges)
		res.ViewChanges = Ptr(c1.ViewChanges - c0.ViewChanges)
	}
	return res, nil
}

// fail ends the run with err; the first failure wins.
func (r *emuRun) fail(err error) {
	r.failOnce.Do(func() {
		r.failErr = err
		close(r.failed)
	})
}

// waitUntil waits until t, or fails when the run fails or ctx ends.
func (r *emuRun) waitUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-r.failed:
		return r.failErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drain waits until every record that arrived is ordered.
func (r *emuRun) drain(ctx context.Context) error {
	timer := time.NewTimer(drainTimeout)
	defer timer.Stop()
	for {
		var missing int64
		for _, s := range r.list {
			missing += s.total - int64(s.log.recordsOrdered())
		}
		if missing == 0 {
			return nil
		}
		select {
		case <-r.progress:
		case <-r.failed:
			return r.failErr
		case <-timer.C:
			return fmt.Errorf("%d records that arrived at emulated shards were still not ordered %v after the run", missing, drainTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *emuRun) inWindow(t time.Time) bool { return !t.Before(r.warmEnd) && t.Before(r.end) }

// shardOps is how many of the first ops operations of the schedule are
// shard c's.
func (r *emuRun) shardOps(c int, ops int64) int64 {
	if ops <= int64(c) {
		return 0
	}
	n := int64(r.n)
	return (ops - int64(c) + n - 1) / n
}

// arrival is when shard c's k-th record (from 0) arrives.
func (r *emuRun) arrival(c int, k int64) time.Time { return r.sched.At(k*int64(r.n) + int64(c)) }

// conn returns a connection to the ordering replica at addr, shared by the
// run's own calls (registration, Status, Watch).
func (r *emuRun) conn(addr string) (*grpc.ClientConn, error) {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if c := r.conns[addr]; c != nil {
		return c, nil
	}
	c, err := dialOrdering(addr)
	if err != nil {
		return nil, err
	}
	r.conns[addr] = c
	return c, nil
}

func dialOrdering(addr string) (*grpc.ClientConn, error) {
	c, err := grpc.NewClient(addr, append(rpcopt.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return c, nil
}

func (r *emuRun) closeConns() {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// setLeader records addr as the ordering leader; "" forgets it.
func (r *emuRun) setLeader(addr string) {
	r.connMu.Lock()
	r.leader = addr
	r.connMu.Unlock()
}

// leaderAddr returns the ordering leader's address, asking the replicas
// when it is not known.
func (r *emuRun) leaderAddr(ctx context.Context) (string, error) {
	r.connMu.Lock()
	addr := r.leader
	r.connMu.Unlock()
	if addr != "" {
		return addr, nil
	}
	var errs []error
	for _, a := range r.cfg.OrderingAddrs() {
		c, err := r.conn(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		callCtx, cancel := context.WithTimeout(ctx, emuCallTimeout)
		st, err := pb.NewOrderingClient(c).Status(callCtx, &pb.StatusRequest{ClusterId: r.cfg.ClusterID})
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.LeaderAddr != "" {
			r.setLeader(st.LeaderAddr)
			return st.LeaderAddr, nil
		}
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no ordering replica knows a leader"))
	}
	return "", errors.Join(errs...)
}

// pause waits emuRetry, or less if ctx ends; it reports whether to go on.
func pause(ctx context.Context) bool {
	return sleepUntil(ctx, time.Now().Add(emuRetry)) == nil
}

// register registers s's shard with the ordering leader and returns its id.
func (r *emuRun) register(ctx context.Context, s *emuShard) (cut.ShardID, error) {
	req := &pb.RegisterShardRequest{
		ClusterId: r.cfg.ClusterID,
		Group:     s.server,
		// Nobody dials an emulated shard: its address is reserved never to
		// resolve (RFC 2606).
		Replicas: []*pb.ReplicaAddr{{Id: s.server, Addr: s.server + ".invalid:1", Incarnation: s.incarnation}},
	}
	var lastErr error
	for {
		addr, err := r.leaderAddr(ctx)
		if err == nil {
			var c *grpc.ClientConn
			if c, err = r.conn(addr); err == nil {
				callCtx, cancel := context.WithTimeout(ctx, emuCallTimeout)
				var resp *pb.RegisterShardResponse
				resp, err = pb.NewOrderingClient(c).RegisterShard(callCtx, req)
				cancel()
				switch {
				case err != nil:
					r.setLeader("")
				case resp.NotLeader:
					r.setLeader(resp.LeaderAddr)
					err = fmt.Errorf("%s is not the leader", addr)
				default:
					return resp.Shard, nil
				}
			}
		}
		lastErr = err
		if !pause(ctx) {
			return 0, fmt.Errorf("%w (last: %v)", ctx.Err(), lastErr)
		}
	}
}

// watch follows the leader's committed events for the whole run: lease
// windows go to the shards, cuts order their records and are measured.
func (r *emuRun) watch(ctx context.Context) {
	next := uint64(1)
	for {
		err := r.watchFrom(ctx, &next)
		if ctx.Err() != nil {
			return
		}
		select {
		case <-r.failed:
			return
		default:
		}
		r.log.Debug("watch broke; watching the leader again", "err", err)
		r.setLeader("")
		if !pause(ctx) {
			return
		}
	}
}

func (r *emuRun) watchFrom(ctx context.Context, next *uint64) error {
	addr, err := r.leaderAddr(ctx)
	if err != nil {
		return err
	}
	c, err := r.conn(addr)
	if err != nil {
		return err
	}
	stream, err := pb.NewOrderingClient(c).Watch(ctx, &pb.WatchRequest{ClusterId: r.cfg.ClusterID, From: *next})
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		// Every event of one message was committed by the time it was
		// sent; they share the time it arrived.
		now := time.Now()
		if st := resp.Snapshot; st != nil {
			if err := r.applySnapshot(st, now); err != nil {
				r.fail(err)
				return err
			}
			*next = st.EventSeq + 1
		}
		for _, ev := range resp.Events {
			if err := r.applyEvent(ev, now); err != nil {
				r.fail(err)
				return err
			}
			*next = ev.Seq + 1
		}
		select {
		case r.progress <- struct{}{}:
		default:
		}
	}
}

func (r *emuRun) applyEvent(ev *pb.Event, now time.Time) error {
	if err := r.checkShards(ev.Shards); err != nil {
		return err
	}
	if ev.Spec != nil {
		r.setWindows(wire.SpecFromProto(ev.Spec), now)
	}
	for _, pc := range ev.EarlierCuts {
		if err := r.applyCut(pc, now, true); err != nil {
			return err
		}
	}
	if ev.Cut != nil {
		return r.applyCut(ev.Cut, now, true)
	}
	return nil
}

// applySnapshot catches up from a snapshot, sent when the watcher fell
// behind the leader's history: the cuts in between are not counted, and
// their records count as ordered now.
func (r *emuRun) applySnapshot(st *pb.StatusResponse, now time.Time) error {
	if err := r.checkShards(st.Shards); err != nil {
		return err
	}
	if st.Spec != nil {
		r.setWindows(wire.SpecFromProto(st.Spec), now)
	}
	if st.LastCut != nil {
		return r.applyCut(st.LastCut, now, false)
	}
	return nil
}

// checkShards fails the run when the ordering layer finalized one of the
// emulated shards: it missed heartbeats, or ignored a lag-fix.
func (r *emuRun) checkShards(shards []*pb.ShardInfo) error {
	for _, sh := range shards {
		if s := r.shards[sh.Id]; s != nil && sh.State != pb.ShardState_SHARD_LIVE {
			return fmt.Errorf("the ordering layer finalized emulated shard %d (%s, failed %v): its heartbeats or reports came too late; the machine may be overloaded",
				sh.Id, s.server, sh.Failed)
		}
	}
	return nil
}

// setWindows hands the announced lease windows to every shard when they
// changed. Announced windows never change, so the first and last window
// and the view identify the list.
func (r *emuRun) setWindows(sp *control.Spec, now time.Time) {
	ws := sp.Windows
	key := [4]uint64{uint64(len(ws)), sp.View}
	if len(ws) > 0 {
		key[2], key[3] = ws[0].Index, ws[len(ws)-1].Index
		if now.Before(r.end) {
			r.groups.Store(int64(ws[len(ws)-1].Groups))
		}
	}
	if key == r.winKey {
		return
	}
	r.winKey = key
	for _, s := range r.list {
		s.windows.Store(&ws)
		select {
		case s.winCh <- struct{}{}:
		default:
		}
	}
}

// applyCut orders what one committed cut orders of each emulated shard.
func (r *emuRun) applyCut(pc *pb.Cut, now time.Time, count bool) error {
	inWin := r.inWindow(now)
	if count && inWin {
		r.cuts.Add(1)
	}
	for _, l := range pc.Lengths {
		s := r.shards[l.Shard]
		if s == nil {
			continue
		}
		var ordered, arrived int64
		err := s.log.order(l.Length, func(k uint64) {
			if inWin {
				ordered++
			}
			if at := r.arrival(s.idx, int64(k)); r.inWindow(at) {
				r.lat.Record(now.Sub(at))
				arrived++
			}
		})
		if err != nil {
			return fmt.Errorf("cut %d: emulated shard %d: %w", pc.Index, l.Shard, err)
		}
		r.orderedInWindow.Add(ordered)
		r.arrivedOrdered.Add(arrived)
	}
	return nil
}

// emuRun is a run; emuShard is one of its emulated shards: a fake storage
// server with one shard. Its goroutine (run) owns every field but log,
// windows and the channels.
type emuShard struct {
	r           *emuRun
	idx         int
	id          cut.ShardID
	server      string
	incarnation uint64
	// total is how many records arrive at the shard in the run (set before
	// the run begins).
	total int64

	log     emuLog
	windows atomic.Pointer[[]fixante.Window]
	winCh   chan struct{}
	lagCh   chan uint64
	errCh   chan streamErr

	started         bool
	next            int64  // index of the next record to arrive
	length, records uint64 // entries and records in the log
	reported        uint64 // the last length reported
	lastReport      time.Time
	adh             *spec.Shard
	// lastSent is when the last heartbeat went, and sentLength the log's
	// length then.
	lastSent   time.Time
	sentLength uint64

	conns   map[string]*grpc.ClientConn
	stream  pb.Ordering_HeartbeatClient
	cancel  context.CancelFunc
	gen     uint64 // counts the streams opened
	retryAt time.Time
}

// streamErr is the end of heartbeat stream gen.
type streamErr struct {
	gen uint64
	err error
}

func newEmuShard(r *emuRun, idx int, incarnation uint64) *emuShard {
	s := &emuShard{
		r:           r,
		idx:         idx,
		server:      fmt.Sprintf("emu%d", idx+1),
		incarnation: incarnation,
		winCh:       make(chan struct{}, 1),
		lagCh:       make(chan uint64, emuLagQueue),
		errCh:       make(chan streamErr, 1),
		conns:       map[string]*grpc.ClientConn{},
	}
	return s
}

// run is the shard's life: heartbeats, arrivals, reports, fills and
// lag-fixes, until ctx ends.
func (s *emuShard) run(ctx context.Context) {
	r := s.r
	defer s.close()
	if r.spec {
		s.adh = spec.NewShard(s.id, 0, r.fillAfter, r.idleAfter, time.Now())
	}
	hb := time.NewTicker(r.hbTick)
	defer hb.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	begin := r.begin
	s.heartbeat(ctx, time.Now())
	for {
		now := time.Now()
		s.arrive(now)
		s.step(ctx, now)
		if at, ok := s.nextWake(); ok {
			wake.Reset(time.Until(at))
		} else {
			wake.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-begin:
			begin = nil
			s.started = true
		case <-wake.C:
			if s.stream == nil && !time.Now().Before(s.retryAt) {
				s.heartbeat(ctx, time.Now())
			}
		case <-hb.C:
			s.heartbeat(ctx, time.Now())
		case e := <-s.errCh:
			if e.gen == s.gen && s.stream != nil {
				r.log.Debug("heartbeat stream broke", "shard", s.id, "err", e.err)
				s.dropStream()
				s.heartbeat(ctx, time.Now())
			}
		case target := <-s.lagCh:
			if s.adh != nil {
				now := time.Now()
				s.arrive(now)
				s.sync(now)
				s.appendNoops(s.adh.LagFix(target), now)
			}
		case <-s.winCh:
			if s.adh != nil {
				s.adh.SetWindows(*s.windows.Load())
			}
		}
	}
}

// arrive adds the records due by now to the log.
func (s *emuShard) arrive(now time.Time) {
	if !s.started {
		return
	}
	due := s.r.shardOps(s.idx, min(s.r.sched.Due(now), s.r.endOps))
	if due <= s.next {
		return
	}
	n := uint64(due - s.next)
	s.log.appendRecords(uint64(s.next), n)
	s.next = due
	s.length += n
	s.records += n
}

// appendNoops adds n no-ops (a fill or a lag-fix) to the log.
func (s *emuShard) appendNoops(n uint64, now time.Time) {
	if n == 0 {
		return
	}
	s.log.appendNoops(n)
	s.length += n
	if s.started && s.r.inWindow(now) {
		s.r.noops.Add(int64(n))
	}
	s.sync(now)
}

// sync tells the adherence state what the log holds: all of it durable.
func (s *emuShard) sync(now time.Time) {
	if s.adh != nil {
		s.adh.Stored(s.length, s.records, now)
		s.adh.Durable(s.length)
	}
}

// step reports what is due: in eager mode the length, at most once per
// ordering interval; in speculative mode a crossed quota boundary, after
// filling a quota the shard sat short of for too long.
func (s *emuShard) step(ctx context.Context, now time.Time) {
	if s.adh == nil {
		if s.length > s.reported && now.Sub(s.lastReport) >= s.r.interval {
			s.reported, s.lastReport = s.length, now
			s.heartbeat(ctx, now)
		}
		return
	}
	s.sync(now)
	if n := s.adh.Fill(now); n > 0 {
		s.appendNoops(n, now)
	}
	if l, ok := s.adh.Report(now); ok {
		s.reported = l
		s.heartbeat(ctx, now)
		return
	}
	// The leader plans quotas from the records and backlog heartbeats
	// carry: a storage primary sends them whenever its durable length
	// grows; an emulated one at most once per ordering interval, as an
	// emulated eager shard paces its reports.
	if s.length > s.sentLength && now.Sub(s.lastSent) >= s.updateGap() {
		s.heartbeat(ctx, now)
	}
}

// updateGap is the shortest gap between two speculative heartbeats that
// only bring news of the records and backlog.
func (s *emuShard) updateGap() time.Duration { return s.r.interval }

// nextWake is when step may next have something to do, if ever without
// other news: a retry of a broken stream; in eager mode the next report
// due; in speculative mode the next fill, the arrival that makes the shard
// owe a fill, the arrival that crosses the next quota boundary, or the
// next update of its records and backlog.
func (s *emuShard) nextWake() (time.Time, bool) {
	var at time.Time
	ok := false
	consider := func(t time.Time) {
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	if s.stream == nil {
		consider(s.retryAt)
	}
	if !s.started {
		return at, ok
	}
	arrival := func(k int64) (time.Time, bool) {
		if k >= s.total {
			return time.Time{}, false
		}
		return s.r.arrival(s.idx, k), true
	}
	if s.adh == nil {
		due := s.lastReport.Add(s.r.interval)
		if s.length > s.reported {
			consider(due)
		} else if t, has := arrival(s.next); has {
			consider(later(t, due))
		}
		return at, ok
	}
	if t, has := s.adh.FillAt(); has {
		consider(t)
	} else if t, has := arrival(s.next); has {
		consider(t)
	}
	update := s.lastSent.Add(s.updateGap())
	if s.length > s.sentLength {
		consider(update)
	} else if t, has := arrival(s.next); has {
		consider(later(t, update))
	}
	if b, has := s.boundaryAfter(s.length); has {
		if t, has := arrival(s.next + int64(b-s.length) - 1); has {
			consider(t)
		}
	}
	return at, ok
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// boundaryAfter is the first quota boundary after length n in the
// announced windows.
func (s *emuShard) boundaryAfter(n uint64) (uint64, bool) {
	for _, w := range s.adh.Windows() {
		if b, ok := w.Boundary(s.id, n); ok {
			return b, true
		}
	}
	return 0, false
}

// heartbeat sends a heartbeat carrying the shard's report, opening a
// stream to the leader first if there is none.
func (s *emuShard) heartbeat(ctx context.Context, now time.Time) {
	if s.stream == nil {
		if err := s.connect(ctx); err != nil {
			if ctx.Err() == nil {
				s.r.log.Debug("heartbeat stream", "shard", s.id, "err", err)
			}
			s.retryAt = now.Add(emuRetry)
			return
		}
	}
	req := &pb.HeartbeatRequest{ClusterId: s.r.cfg.ClusterID, ServerId: s.server, Incarnation: s.incarnation}
	if s.adh != nil {
		// As a storage primary does: every heartbeat carries the backlog,
		// which a shard without a quota reports through nothing else.
		req.Reports = []*pb.ShardLength{{Shard: s.id, Length: s.reported, Records: s.records,
			Backlog: s.length - min(s.reported, s.length)}}
	} else if s.reported > 0 {
		req.Reports = []*pb.ShardLength{{Shard: s.id, Length: s.reported}}
	}
	if err := s.stream.Send(req); err != nil {
		s.dropStream()
		s.retryAt = now.Add(emuRetry)
		return
	}
	s.lastSent, s.sentLength = now, s.length
}

// connect opens a heartbeat stream to the leader, on this fake server's
// own connection, and a goroutine that reads its answers.
func (s *emuShard) connect(ctx context.Context) error {
	addr, err := s.r.leaderAddr(ctx)
	if err != nil {
		return err
	}
	c := s.conns[addr]
	if c == nil {
		if c, err = dialOrdering(addr); err != nil {
			return err
		}
		s.conns[addr] = c
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := pb.NewOrderingClient(c).Heartbeat(sctx)
	if err != nil {
		cancel()
		s.r.setLeader("")
		return err
	}
	s.gen++
	s.stream, s.cancel = stream, cancel
	go s.receive(stream, s.gen)
	return nil
}

// receive passes a stream's lag-fixes to the shard and reports its end.
func (s *emuShard) receive(stream pb.Ordering_HeartbeatClient, gen uint64) {
	for {
		resp, err := stream.Recv()
		if err == nil && resp.NotLeader {
			s.r.setLeader(resp.LeaderAddr)
			err = errors.New("not the leader")
		}
		if err != nil {
			select {
			case s.errCh <- streamErr{gen: gen, err: err}:
			default:
			}
			return
		}
		for _, f := range resp.LagFixes {
			if f.Shard != s.id {
				continue
			}
			select {
			case s.lagCh <- f.Length:
			default:
				// The queue holds lag-fixes already; the leader repeats
				// unanswered ones.
			}
		}
	}
}

func (s *emuShard) dropStream() {
	if s.cancel != nil {
		s.cancel()
	}
	s.stream, s.cancel = nil, nil
}

func (s *emuShard) close() {
	s.dropStream()
	for _, c := range s.conns {
		c.Close()
	}
}

// emuEntry is a run of n entries of an emulated shard's log: records (the
// shard's arrivals first, first+1, ...) or no-ops.
type emuEntry struct {
	first uint64
	n     uint64
	noop  bool
}

// emuLog is an emulated shard's log, as far as it is not ordered yet: the
// shard's goroutine appends, the watcher orders.
type emuLog struct {
	mu      sync.Mutex
	entries []emuEntry
	head    int    // first entry not wholly ordered
	used    uint64 // entries of entries[head] ordered
	length  uint64
	ordered uint64
	// orderedRecords counts the records among the ordered entries.
	orderedRecords uint64
}

// last is the last entry, if it is not wholly ordered yet: more entries of
// its kind may join it.
func (l *emuLog) last() *emuEntry {
	if len(l.entries) > l.head {
		return &l.entries[len(l.entries)-1]
	}
	return nil
}

func (l *emuLog) appendRecords(first, n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.length += n
	if e := l.last(); e != nil && !e.noop && e.first+e.n == first {
		e.n += n
		return
	}
	l.entries = append(l.entries, emuEntry{first: first, n: n})
}

func (l *emuLog) appendNoops(n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.length += n
	if e := l.last(); e != nil && e.noop {
		e.n += n
		return
	}
	l.entries = append(l.entries, emuEntry{n: n, noop: true})
}

// order marks the entries below upTo ordered, calling record with the
// arrival index of each record among them.
func (l *emuLog) order(upTo uint64, record func(k uint64)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if upTo > l.length {
		return fmt.Errorf("the cut orders %d entries, but the shard holds %d", upTo, l.length)
	}
	for l.ordered < upTo {
		e := &l.entries[l.head]
		take := min(e.n-l.used, upTo-l.ordered)
		if !e.noop {
			for i := range take {
				record(e.first + l.used + i)
			}
			l.orderedRecords += take
		}
		l.used += take
		l.ordered += take
		if l.used == e.n {
			l.head++
			l.used = 0
		}
	}
	if l.head > emuCompactAfter && 2*l.head > len(l.entries) {
		n := copy(l.entries, l.entries[l.head:])
		l.entries = l.entries[:n]
		l.head = 0
	}
	return nil
}

func (l *emuLog) recordsOrdered() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.orderedRecords
}
