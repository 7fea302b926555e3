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
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/rpcopt"
	"github.com/augur-log/augur/internal/segment"
	"github.com/augur-log/augur/internal/shard"
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
// A shard is the storage servers' replica core (shard.Replica, a primary
// without backups) over an in-memory log (shard.MemLog) whose records hold
// no bytes, only their arrival indexes; the log drops what cuts ordered.
// Arrival times follow from the schedule, so a shard wakes only when
// something it would report can change (its report is due, it crosses a
// quota boundary, a fill is due), not once per record, and the load it
// puts on the ordering layer is that of a real primary whose storage is
// instant.

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
	// clusterMode is the cluster's ordering mode, which builds each
	// shard's ordering as it does a storage primary's.
	clusterMode mode.Mode

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

	// Owned by the watcher: the announced windows last handed out, and
	// the last cut applied.
	winKey  [4]uint64
	lastCut cut.Cut
}

func newEmuRun(e *Env) (*emuRun, error) {
	cfg := e.Target.Config
	lg := e.Params.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	md, err := cfg.OrderingMode()
	if err != nil {
		return nil, err
	}
	return &emuRun{
		cfg:         cfg,
		log:         lg.With("bench", "emulate"),
		spec:        e.Mode.Speculative(),
		n:           e.Variant.Emulate,
		hbTick:      cfg.HeartbeatInterval(),
		interval:    cfg.OrderingInterval.D(),
		clusterMode: md,
		begin:       make(chan struct{}),
		conns:       map[string]*grpc.ClientConn{},
		shards:      map[cut.ShardID]*emuShard{},
		lat:         NewLatency(),
		progress:    make(chan struct{}, 1),
		failed:      make(chan struct{}),
	}, nil
}

// runEmulated runs one point of scale on e.Variant.Emulate emulated shards
// against the embedded ordering layer, and measures the cuts it commits.
func runEmulated(ctx context.Context, e *Env) (*Result, error) {
	if e.Target.Embedded == nil {
		return nil, errors.New("emulated shards need the embedded ordering layer")
	}
	p := e.Params
	r, err := newEmuRun(e)
	if err != nil {
		return nil, fmt.Errorf("emulated shards: %w", err)
	}
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
		s.start(id)
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
	cpu0, err = SampleCPU()
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
	cpuTime, host := cpu1.Since(cpu0)
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
		StealPercent:        host.Steal,
		IOWaitPercent:       host.IOWait,
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
		res.PredeterminedCutsPercent = PredeterminedPercent(c0, c1)
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
			missing += s.total - s.orderedRecords.Load()
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
	if sp.Eager() {
		key[2] = 1 // no window: the indexes below stay 0
	}
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
		s.eager.Store(sp.Eager())
		s.windows.Store(&ws)
		select {
		case s.winCh <- struct{}{}:
		default:
		}
	}
}

// applyCut orders what one committed cut orders of each emulated shard.
// A cut from a snapshot (count false) follows a gap of cuts never seen.
func (r *emuRun) applyCut(pc *pb.Cut, now time.Time, count bool) error {
	inWin := r.inWindow(now)
	if count && inWin {
		r.cuts.Add(1)
	}
	cur := wire.CutFromProto(pc)
	prev := r.lastCut
	r.lastCut = cur
	for _, l := range pc.Lengths {
		s := r.shards[l.Shard]
		if s == nil {
			continue
		}
		var ordered, arrived int64
		err := s.order(prev, cur, !count, func(k uint64) {
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
// server with one shard. Its goroutine (run) owns every field but those
// under mu, windows, orderedRecords and the channels.
type emuShard struct {
	r           *emuRun
	idx         int
	id          cut.ShardID
	server      string
	incarnation uint64
	// total is how many records arrive at the shard in the run (set before
	// the run begins).
	total int64

	// mu guards the core and its log: the shard's goroutine appends,
	// fills and reports, the watcher applies cuts.
	mu   sync.Mutex
	core *shard.Replica[struct{}]
	log  *shard.MemLog
	// cutOut is the watcher's output buffer.
	cutOut shard.Output[struct{}]
	// orderedRecords counts the records among the ordered entries.
	orderedRecords atomic.Int64

	// spec is the shard's speculative ordering (nil in eager mode), which
	// the shard's goroutine alone uses outside the core.
	spec    *shard.Speculative
	windows atomic.Pointer[[]fixante.Window]
	eager   atomic.Bool
	winCh   chan struct{}
	lagCh   chan uint64
	errCh   chan streamErr

	started bool
	next    int64 // index of the next record to arrive
	out     shard.Output[struct{}]
	arrived []segment.Entry // reused buffer of arrivals
	// reported is, in eager mode, the last length reported, at most once
	// per ordering interval.
	reported   uint64
	lastReport time.Time
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

// start gives the shard the id it registered with and its core, before
// its goroutine and the watcher touch it.
func (s *emuShard) start(id cut.ShardID) {
	s.id = id
	s.log = shard.NewMemLog()
	ord := s.r.clusterMode.NewShardOrdering(id, 0, time.Now())
	// The emulator paces a speculative shard by its quota boundaries
	// (see step and nextWake).
	s.spec, _ = ord.(*shard.Speculative)
	s.core = shard.NewReplica[struct{}](shard.Config{ID: id, Role: shard.RolePrimary, Ordering: ord}, s.log)
}

// length is how many entries the shard's log holds.
func (s *emuShard) length() uint64 { return s.log.Len() }

// act runs one call of the core under mu and returns its output.
func (s *emuShard) act(call func(out *shard.Output[struct{}])) *shard.Output[struct{}] {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out.Reset()
	call(&s.out)
	return &s.out
}

// carry counts the no-ops an output added and fails the run if the log
// failed.
func (s *emuShard) carry(out *shard.Output[struct{}], now time.Time) {
	if out.Noops > 0 && s.started && s.r.inWindow(now) {
		s.r.noops.Add(int64(out.Noops))
	}
	if out.Failed != nil {
		s.r.fail(out.Failed)
	}
}

// order applies cut cur, which follows prev, to the shard's log, calling
// record with the arrival index of each record it orders. After a gap
// (cuts never seen, from a snapshot) the positions of the shard's entries
// are unknown; they go at the end of cur, where no later cut reaches.
func (s *emuShard) order(prev, cur cut.Cut, gap bool, record func(k uint64)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	from, upTo := s.log.Ordered(), cur.Len(s.id)
	if upTo <= from {
		return nil
	}
	c := shard.Cut{Index: cur.Index, Start: cur.Start, End: cur.End, Slice: cut.SliceOf(prev, cur, s.id)}
	if gap {
		n := upTo - from
		c.Start = prev.End
		c.Slice = cut.Slice{Shard: s.id, LocalStart: from, GlobalStart: cur.End - n, Count: n}
	}
	out := &s.cutOut
	out.Reset()
	s.core.ApplyCut(c, out)
	if s.core.Lost() {
		return fmt.Errorf("the cut orders %d entries, but the shard holds %d: %w", upTo, s.log.Len(), errors.Join(out.Problems...))
	}
	var records int64
	s.log.Scan(from, func(local uint64, e segment.Entry) bool {
		if local >= upTo {
			return false
		}
		if e.Noops == 0 {
			record(e.Seq)
			records++
		}
		return true
	})
	s.orderedRecords.Add(records)
	// Nobody reads ordered entries again.
	return s.core.Trim(cur.End)
}

// run is the shard's life: heartbeats, arrivals, reports, fills and
// lag-fixes, until ctx ends.
func (s *emuShard) run(ctx context.Context) {
	r := s.r
	defer s.close()
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
			now := time.Now()
			s.arrive(now)
			s.carry(s.act(func(out *shard.Output[struct{}]) { s.core.LagFix(now, target, out) }), now)
		case <-s.winCh:
			if s.spec != nil {
				s.mu.Lock()
				s.spec.SetWindows(*s.windows.Load(), s.eager.Load())
				s.mu.Unlock()
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
	es := s.arrived[:0]
	for k := s.next; k < due; k++ {
		es = append(es, segment.Entry{Seq: uint64(k)})
	}
	s.arrived = es[:0]
	if cap(es) > shard.BufferRetainMax {
		s.arrived = nil
	}
	s.next = due
	s.carry(s.act(func(out *shard.Output[struct{}]) { s.core.Ingest(es, out) }), now)
}

// step reports what is due: in eager mode the length, at most once per
// ordering interval; in speculative mode a crossed quota boundary, after
// filling a quota the shard sat short of for too long.
func (s *emuShard) step(ctx context.Context, now time.Time) {
	if s.spec == nil {
		if rep, _ := s.core.Report(); rep.Length > s.reported && now.Sub(s.lastReport) >= s.r.interval {
			s.reported, s.lastReport = rep.Length, now
			s.heartbeat(ctx, now)
		}
		return
	}
	out := s.act(func(out *shard.Output[struct{}]) { s.core.Tick(now, out) })
	s.carry(out, now)
	if out.Report {
		s.heartbeat(ctx, now)
		return
	}
	// The leader plans quotas from the records and backlog heartbeats
	// carry: a storage primary sends them whenever its durable length
	// grows; an emulated one at most once per ordering interval, as an
	// emulated eager shard paces its reports.
	if s.length() > s.sentLength && now.Sub(s.lastSent) >= s.updateGap() {
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
	length := s.length()
	if s.spec == nil {
		due := s.lastReport.Add(s.r.interval)
		if length > s.reported {
			consider(due)
		} else if t, has := arrival(s.next); has {
			consider(later(t, due))
		}
		return at, ok
	}
	if t, has := s.spec.WakeAt(); has {
		consider(t)
	} else if t, has := arrival(s.next); has {
		consider(t)
	}
	update := s.lastSent.Add(s.updateGap())
	if length > s.sentLength {
		consider(update)
	} else if t, has := arrival(s.next); has {
		consider(later(t, update))
	}
	if b, has := s.boundaryAfter(length); has {
		if t, has := arrival(s.next + int64(b-length) - 1); has {
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
	for _, w := range s.spec.Windows() {
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
	if s.spec != nil {
		// As a storage primary does: every heartbeat carries the backlog,
		// which a shard without a quota reports through nothing else.
		rep, _ := s.core.Report()
		req.Reports = []*pb.ShardLength{{Shard: s.id, Epoch: control.FirstEpoch, Length: rep.Length, Records: rep.Records, Backlog: rep.Backlog}}
	} else if s.reported > 0 {
		// An emulated shard is one server: its first configuration is
		// its only one.
		req.Reports = []*pb.ShardLength{{Shard: s.id, Epoch: control.FirstEpoch, Length: s.reported}}
	}
	if err := s.stream.Send(req); err != nil {
		s.dropStream()
		s.retryAt = now.Add(emuRetry)
		return
	}
	s.lastSent, s.sentLength = now, s.length()
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
