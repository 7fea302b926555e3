package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/player"
	"github.com/augur-log/augur/internal/playerd"
	"github.com/augur-log/augur/target"
)

func init() { Register(playerWorkload{}) }

// Bounds of the player workload's sweep.
const (
	playerTargetsMax = 64
	// playerEmptyEvery keeps the player's empty entries, which advance idle
	// targets, in the measured traffic as in a real deployment.
	playerEmptyEvery = 1024
)

// playerWorkload measures the exactly-once player (LogPlayer): open-loop
// appenders stamp each record with its start time and tag it with
// Variant.PerEntry of Variant.Targets targets; an in-process player delivers
// the log to that many targets, each a target SDK server on loopback gRPC
// over an in-memory store. It reports the apply delay (append start until a
// target applied the entry) and the player delay (the player's fetch of the
// entry until a target applied it), beside the delivery latency of a
// confirmed subscriber of the same run.
type playerWorkload struct{}

func (playerWorkload) Name() string { return "player" }

func (playerWorkload) Defaults(p *Params) {
	p.Compute = []time.Duration{0}
	p.Follow = FollowLog
	p.PlayerTargets = []int{10}
	p.TargetsPerEntry = []int{1}
}

func (playerWorkload) Check(p Params) error {
	errs := []error{checkLoad(p, true)}
	if p.Rate == 0 {
		errs = append(errs, errors.New("the player workload runs open loop: give --rate"))
	}
	if len(p.PlayerTargets) == 0 || len(p.TargetsPerEntry) == 0 {
		errs = append(errs, errors.New("name at least one target count and one targets-per-entry count"))
	}
	for _, n := range p.PlayerTargets {
		if n < 1 || n > playerTargetsMax {
			errs = append(errs, fmt.Errorf("targets must be in [1, %d], got %d", playerTargetsMax, n))
		}
	}
	for _, k := range p.TargetsPerEntry {
		if k < 1 || k > playerTargetsMax {
			errs = append(errs, fmt.Errorf("targets per entry must be in [1, %d], got %d", playerTargetsMax, k))
		}
	}
	if len(p.PlayerTargets) > 0 && len(p.TargetsPerEntry) > 0 && slices.Min(p.TargetsPerEntry) > slices.Max(p.PlayerTargets) {
		errs = append(errs, errors.New("every targets-per-entry count exceeds every target count"))
	}
	return errors.Join(errs...)
}

func (playerWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	v := e.Variant
	if v.PerEntry > v.Targets {
		return nil, fmt.Errorf("%d targets per entry, but only %d targets", v.PerEntry, v.Targets)
	}
	pb := &playerBench{targets: v.Targets, perEntry: v.PerEntry, apply: NewLatency(), play: NewLatency()}
	ls := loadSpec{Subscribers: e.Params.Subscribers, Compute: v.Compute, Player: pb}
	if e.Params.PlayerFaults {
		d := e.Params.Duration
		ls.Actions = []action{
			// Early enough that records keep coming while the target and
			// the player catch up: a target is caught up once it applied an
			// entry past where the log stood when it came back.
			{At: d / 10, What: "target t0 stops", Do: pb.stopTarget},
			{At: d / 4, What: "target t0 restarts", Do: pb.restartTarget},
			{At: d / 2, What: "the player restarts", Do: pb.restartPlayer},
		}
	}
	return runLoad(ctx, e, ls)
}

// playerBench is one run's player, its targets and its measurements.
type playerBench struct {
	targets, perEntry int
	r                 *loadRun
	ctx               context.Context
	cfg               playerd.Config
	log               playerd.Log
	names             []string
	stores            []*benchStore
	grpcs             []*grpc.Server
	cancel            context.CancelFunc
	done              chan error
	fetch             fetchTimes
	// apply and play are the apply and player delays of entries started in
	// the measured window; applied counts those applications.
	apply, play *Latency
	applied     atomic.Int64
}

// tags sends the seq-th record of an appender to perEntry consecutive
// targets from one that turns with the record.
func (pb *playerBench) tags(appender uint32, seq uint64) []string {
	first := int((seq*31 + uint64(appender)*7) % uint64(pb.targets))
	out := make([]string, pb.perEntry)
	for i := range out {
		out[i] = player.TargetTagPrefix + pb.names[(first+i)%pb.targets]
	}
	return out
}

// start serves the targets, each already at the log's tail, and starts the
// player on them, before any measured record is appended.
func (pb *playerBench) start(ctx context.Context, r *loadRun, cl *client.Client, tail uint64) error {
	pb.r, pb.ctx = r, ctx
	pb.cfg = playerd.Config{
		Core: player.Config{Route: player.RouteTags, EmptyEvery: playerEmptyEvery},
		// Reconnect quickly, so that the catch-up time measures the
		// recovery rather than the backoff.
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond,
	}
	for i := range pb.targets {
		st := &benchStore{pb: pb}
		st.last.Store(tail)
		pb.stores = append(pb.stores, st)
		pb.grpcs = append(pb.grpcs, nil)
		name := fmt.Sprint("t", i)
		pb.names = append(pb.names, name)
		addr, err := pb.serveTarget(i, "127.0.0.1:0")
		if err != nil {
			pb.stop()
			return err
		}
		pb.cfg.Targets = append(pb.cfg.Targets, playerd.TargetSpec{Name: name, Addr: addr})
	}
	pb.log = &timedLog{Log: playerd.ClientLog{C: cl}, fetch: &pb.fetch}
	if err := pb.startPlayer(); err != nil {
		pb.stop()
		return err
	}
	return nil
}

// serveTarget serves target i's store on addr.
func (pb *playerBench) serveTarget(i int, addr string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	g := grpc.NewServer()
	target.Register(g, pb.stores[i])
	go g.Serve(l)
	pb.grpcs[i] = g
	return l.Addr().String(), nil
}

func (pb *playerBench) startPlayer() error {
	srv, err := playerd.New(pb.cfg, pb.log)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithCancel(pb.ctx)
	pb.cancel, pb.done = cancel, make(chan error, 1)
	go func() { pb.done <- srv.Run(pctx) }()
	return nil
}

// catchUpTimeout bounds the wait for a target to catch up after a fault.
const catchUpTimeout = 20 * time.Second

// caughtUp waits until each of the stores applied an index at or past
// the log's last acknowledged position when it was called, and says how
// long that took: the catch-up time.
func (pb *playerBench) caughtUp(ctx context.Context, stores []*benchStore) (string, error) {
	start := time.Now()
	want := uint64(pb.r.maxPos.Load() + 1)
	for _, s := range stores {
		for s.last.Load() < want {
			if time.Since(start) > catchUpTimeout {
				return "", fmt.Errorf("a target did not catch up within %v", catchUpTimeout)
			}
			if err := sleepUntil(ctx, time.Now().Add(pollEvery)); err != nil {
				return "", err
			}
		}
	}
	return fmt.Sprintf("; caught up in %.1f ms", float64(time.Since(start).Microseconds())/1e3), nil
}

func (pb *playerBench) stopTarget(context.Context) (string, error) {
	pb.grpcs[0].Stop()
	return "", nil
}

func (pb *playerBench) restartTarget(ctx context.Context) (string, error) {
	if _, err := pb.serveTarget(0, pb.cfg.Targets[0].Addr); err != nil {
		return "", err
	}
	return pb.caughtUp(ctx, pb.stores[:1])
}

func (pb *playerBench) restartPlayer(ctx context.Context) (string, error) {
	pb.cancel()
	<-pb.done
	if err := pb.startPlayer(); err != nil {
		return "", err
	}
	return pb.caughtUp(ctx, pb.stores)
}

// drain waits until every record acknowledged in the window was applied by
// each of its targets.
func (pb *playerBench) drain(ctx context.Context) error {
	want := pb.r.appended.Load() * int64(pb.perEntry)
	deadline := time.Now().Add(drainTimeout)
	for pb.applied.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("the player's targets applied %d of %d entries within %v", pb.applied.Load(), want, drainTimeout)
		}
		if err := sleepUntil(ctx, time.Now().Add(pollEvery)); err != nil {
			return err
		}
	}
	return nil
}

// pollEvery paces drain's checks.
const pollEvery = 10 * time.Millisecond

func (pb *playerBench) stop() {
	if pb.cancel != nil {
		pb.cancel()
		<-pb.done
	}
	for _, g := range pb.grpcs {
		if g != nil {
			g.Stop()
		}
	}
}

func (pb *playerBench) summarize(res *Result) {
	res.Targets, res.TargetsPerEntry = pb.targets, pb.perEntry
	res.ApplyLatencyUS = pb.apply.Summary()
	res.PlayerLatencyUS = pb.play.Summary()
}

// benchStore is an in-memory target that measures each entry it applies.
// A restarted target's new server shares it with the old one's last apply.
type benchStore struct {
	pb   *playerBench
	mu   sync.Mutex
	last atomic.Uint64
}

func (s *benchStore) Apply(_ context.Context, b target.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last.Load() >= b.Last {
		// A batch of the stopped server's stream that the new server's
		// stream already applied: a real target's transaction would have
		// been refused by the SDK, which this shared store bypasses.
		return errors.New("batch already applied")
	}
	now := time.Now()
	for _, e := range b.Entries {
		start, _, ok := readHeader(e.Payload, s.pb.r.id)
		if !ok || !s.pb.r.inWindow(start) {
			continue
		}
		s.pb.apply.Record(now.Sub(start))
		if t, ok := s.pb.fetch.at(e.Index - 1); ok {
			s.pb.play.Record(now.Sub(t))
		}
		s.pb.applied.Add(1)
	}
	s.last.Store(b.Last)
	return nil
}

func (s *benchStore) LastApplied(context.Context) (uint64, error) { return s.last.Load(), nil }

// fetchTimes records when the player's main fetcher took each position.
type fetchTimes struct {
	mu    sync.RWMutex
	from  uint64
	set   bool
	times []time.Time
}

func (f *fetchTimes) record(pos uint64, t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.set {
		f.from, f.set = pos, true
	}
	if pos < f.from {
		return
	}
	for uint64(len(f.times)) <= pos-f.from {
		f.times = append(f.times, time.Time{})
	}
	f.times[pos-f.from] = t
}

func (f *fetchTimes) at(pos uint64) (time.Time, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if !f.set || pos < f.from || pos-f.from >= uint64(len(f.times)) || f.times[pos-f.from].IsZero() {
		return time.Time{}, false
	}
	return f.times[pos-f.from], true
}

// timedLog is the player's log, noting when the main stream hands over
// each entry.
type timedLog struct {
	playerd.Log
	fetch *fetchTimes
}

func (l *timedLog) Subscribe(ctx context.Context, from uint64) (playerd.Subscription, error) {
	s, err := l.Log.Subscribe(ctx, from)
	if err != nil {
		return nil, err
	}
	return &timedSub{Subscription: s, fetch: l.fetch}, nil
}

type timedSub struct {
	playerd.Subscription
	fetch *fetchTimes
}

func (s *timedSub) Next(ctx context.Context) (client.Entry, error) {
	e, err := s.Subscription.Next(ctx)
	if err == nil {
		s.fetch.record(e.Position, time.Now())
	}
	return e, err
}
