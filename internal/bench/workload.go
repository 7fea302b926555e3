// Package bench holds augur's benchmark harness: a registry of workloads
// (the experiments of the SpecLog and Scalog papers' evaluations) and of
// ordering modes, the load generators' pacing, the downstream consumers
// with simulated compute, latency histograms, the JSON a run reports, and
// the figures it draws. `augur bench WORKLOAD` is a thin shell over Run.
//
// A run is a sweep: for each point (a shard count, a compute time, a lease
// window) and each mode of Params.Modes, a fresh embedded cluster (unless
// Params.Cluster names a running one) runs the workload once and yields one
// Result; with two or more modes each point also yields a Comparison of
// every mode with the first.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/devcluster"
)

// Bounds of Params checked by Check, before anything starts.
const (
	clientsMax     = 1024
	inflightMax    = 4096
	subscribersMax = 64
	windowMax      = 1 << 20
	computeMax     = time.Minute
	// seriesPointsMax bounds the points of a time series.
	seriesPointsMax = 10000
	// readyTimeout bounds how long an embedded cluster may take to start.
	readyTimeout = 30 * time.Second
	// drainTimeout bounds how long a run waits for the appends it issued,
	// and then for its subscribers to finish them.
	drainTimeout = 30 * time.Second
)

// Params are the knobs of a run; each workload reads the ones it needs.
type Params struct {
	// Modes are the ordering modes to run, the first being the baseline of
	// the comparisons.
	Modes []string
	// Shards are the embedded cluster's sizes to sweep (storage groups, one
	// shard each); ignored with Cluster.
	Shards []int
	// Replicas is the number of storage servers per group.
	Replicas int
	// Emulate, when set, are the numbers of emulated shards to sweep
	// instead of Shards (workload scale only): the embedded cluster is its
	// ordering layer alone, and the benchmark process plays that many
	// shards that register, heartbeat and report to it, taking Rate
	// records/s between them (SpecLog §6.8, Scalog §6.3).
	Emulate []int
	// OrderingInterval is the embedded cluster's cut interval.
	OrderingInterval time.Duration
	// LazyBatchInterval is a lazy embedded cluster's least time between
	// two batches of the sequencing leader (0: the cluster file's
	// default).
	LazyBatchInterval time.Duration
	// FailureTimeout is the embedded cluster's failure detection timeout
	// (0: the cluster file's default).
	FailureTimeout time.Duration
	// Fsync is the embedded cluster's storage fsync policy ("" = default).
	Fsync string
	// Durability, when set, runs every mode under each of these sync
	// settings (DurabilityDefault, DurabilityOptOut) at every point of the
	// sweep, mode by mode, so that the comparisons set them side by side;
	// it excludes Fsync.
	Durability []string
	// Security, when set, runs every mode under each of these settings
	// (SecurityInsecure, SecurityTLS) like Durability, side by side.
	Security []string
	// Stages times the stages of the append path inside an embedded
	// cluster over the window (Result.StagesUS). Off by default: the
	// timing itself costs the servers a little.
	Stages bool
	// RecordBytes is the payload size of each append.
	RecordBytes int
	// Rate is the offered load in appends per second over all clients;
	// 0 means closed loop.
	Rate int
	// Clients is how many SDK clients drive the load, each with its own
	// connections and goroutine.
	Clients int
	// Inflight is, in closed loop, how many appends each client keeps in
	// flight (1: issue the next when the previous is acknowledged).
	Inflight int
	// Subscribers is how many downstream consumers follow the log.
	Subscribers int
	// Follow is how each downstream task follows the log: FollowShards or
	// FollowLog.
	Follow string
	// Compute are the simulated downstream compute times per batch to
	// sweep; nil for workloads without consumers.
	Compute []time.Duration
	// Window are the speculation lease windows (in cuts) to sweep, for
	// speculative modes; nil leaves the mode's default.
	Window []int
	// Interval is a time series' bucket; 0 picks one from Duration.
	Interval time.Duration
	// ExtraRate is the added load on one shard of burst and ratechange, in
	// appends per second; 0 means half of Rate.
	ExtraRate int
	// NoLagFix and NoQuotaChange turn off those mechanisms of speculative
	// modes (the no-lf and no-qc variants of SpecLog §6.4 and §6.5).
	NoLagFix      bool
	NoQuotaChange bool
	// NoStagger puts every shard in every cut of a speculative lease
	// window (stagger_above 0) instead of splitting more than
	// config.DefaultStaggerAbove shards into staggered groups.
	NoStagger bool
	// PlayerTargets are the player workload's target counts to sweep, and
	// TargetsPerEntry how many of them each record goes to.
	PlayerTargets   []int
	TargetsPerEntry []int
	// PlayerFaults stops a target and restarts it, then restarts the
	// player, during the player workload's window, and reports each
	// catch-up time.
	PlayerFaults bool
	// KillReplica makes the failure workload stop only the first shard's
	// primary, mid-window (SpecLog's Fig. 17(a) with 3 replicas): the
	// shard fails over to a backup, and the result summarizes the
	// failover (Result.Failover).
	KillReplica bool
	// Seed makes the run's payload bytes and record stamps reproducible.
	Seed uint64
	// Warmup runs the load unmeasured before the measured Duration.
	Warmup   time.Duration
	Duration time.Duration
	// Cluster, when set, is a running cluster to target instead of an
	// embedded one.
	Cluster *config.Cluster
	// Logger receives the embedded cluster's logs; nil discards them.
	Logger *slog.Logger
	// Progress, when set, gets one line per run as it starts.
	Progress io.Writer
}

// Variant is one point of a sweep.
type Variant struct {
	// Shards is the embedded cluster's shard count, 0 with a running
	// cluster.
	Shards  int
	Compute time.Duration
	// Window is the lease window, 0 for the mode's default.
	Window int
	// Emulate is the number of emulated shards, 0 for real ones.
	Emulate int
	// Targets and PerEntry are the player workload's target count and
	// targets per record, 0 for other workloads.
	Targets, PerEntry int
}

func (v Variant) String() string {
	var parts []string
	if v.Shards > 0 {
		parts = append(parts, plural(v.Shards, "shard"))
	}
	if v.Emulate > 0 {
		parts = append(parts, plural(v.Emulate, "emulated shard"))
	}
	if v.Compute > 0 {
		parts = append(parts, fmt.Sprintf("compute %v", v.Compute))
	}
	if v.Window > 0 {
		parts = append(parts, fmt.Sprintf("window %d", v.Window))
	}
	if v.Targets > 0 {
		parts = append(parts, fmt.Sprintf("%s, %d per entry", plural(v.Targets, "target"), v.PerEntry))
	}
	return strings.Join(parts, ", ")
}

// variants lists the points of p's sweep: shards (or emulated shards),
// then windows, then compute times, each in the order given. Emulated
// shards have no consumers, so they take no compute times.
func variants(p Params) []Variant {
	shards := p.Shards
	if p.Cluster != nil || len(shards) == 0 {
		shards = []int{0}
	}
	computes := p.Compute
	if len(computes) == 0 {
		computes = []time.Duration{0}
	}
	if len(p.Emulate) > 0 {
		var out []Variant
		for _, n := range p.Emulate {
			for _, w := range orZero(p.Window) {
				out = append(out, Variant{Emulate: n, Window: w})
			}
		}
		return out
	}
	windows := p.Window
	if len(windows) == 0 {
		windows = []int{0}
	}
	var out []Variant
	for _, s := range shards {
		for _, w := range windows {
			for _, c := range computes {
				out = append(out, Variant{Shards: s, Compute: c, Window: w})
			}
		}
	}
	if len(p.PlayerTargets) == 0 {
		return out
	}
	var withTargets []Variant
	for _, v := range out {
		for _, n := range p.PlayerTargets {
			for _, k := range p.TargetsPerEntry {
				if k <= n {
					v.Targets, v.PerEntry = n, k
					withTargets = append(withTargets, v)
				}
			}
		}
	}
	return withTargets
}

// Target is the cluster a run targets.
type Target struct {
	// Config is the target's cluster file.
	Config *config.Cluster
	// Embedded is the in-process cluster, nil when targeting a running one.
	Embedded *devcluster.Cluster
}

// Dial returns a new client of the target; the caller closes it.
func (t *Target) Dial(ctx context.Context) (*client.Client, error) {
	cfg := client.Config{
		ClusterID:      t.Config.ClusterID,
		Ordering:       t.Config.OrderingAddrs(),
		RecordBytesMax: t.Config.RecordBytesMax,
	}
	if t.Embedded != nil {
		cfg = t.Embedded.ClientConfig()
	} else {
		tlsCfg, err := t.Config.ClientTLS()
		if err != nil {
			return nil, err
		}
		cfg.TLS, cfg.Insecure = tlsCfg, tlsCfg == nil
	}
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", t.Config.ClusterID, err)
	}
	return cl, nil
}

// Env is what one run of a workload gets.
type Env struct {
	Target  *Target
	Mode    Mode
	Params  Params
	Variant Variant
}

// Workload is one kind of benchmark.
type Workload interface {
	Name() string
	// Defaults sets the workload's own defaults on p, which holds the
	// common ones (DefaultParams).
	Defaults(p *Params)
	// Check rejects parameters the workload cannot run with; it runs before
	// any cluster starts, after the common checks passed.
	Check(p Params) error
	// Run runs the workload once, at e.Variant under e.Mode, and measures
	// it. The harness fills in the result's workload, mode and sweep point.
	Run(ctx context.Context, e *Env) (*Result, error)
}

var (
	registryMu sync.Mutex
	registry   = map[string]Workload{}
)

// Register adds w to the registry; registering a name twice panics.
func Register(w Workload) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[w.Name()]; dup {
		panic(fmt.Sprintf("bench: workload %q registered twice", w.Name()))
	}
	registry[w.Name()] = w
}

// Names lists the registered workloads, sorted.
func Names() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the workload called name.
func Lookup(name string) (Workload, error) {
	registryMu.Lock()
	w, ok := registry[name]
	registryMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown workload %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return w, nil
}

// DefaultParams returns the defaults of workload name: the common ones,
// then the workload's own.
func DefaultParams(name string) (Params, error) {
	w, err := Lookup(name)
	if err != nil {
		return Params{}, err
	}
	p := Params{
		Modes:            []string{"eager"},
		Shards:           []int{2},
		Replicas:         2,
		OrderingInterval: config.DefaultOrderingInterval,
		RecordBytes:      4096,
		Rate:             2000,
		Clients:          4,
		Inflight:         1,
		Subscribers:      1,
		Follow:           FollowShards,
		Seed:             1,
		Warmup:           2 * time.Second,
		Duration:         10 * time.Second,
	}
	w.Defaults(&p)
	return p, nil
}

// Check looks up workload name and checks p against the common bounds, the
// modes and the workload.
func Check(name string, p Params) (Workload, error) {
	w, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	ms, modeErr := p.modes()
	errs := []error{p.checkCommon(), modeErr, p.checkDurability(), p.checkSecurity()}
	if _, emulates := w.(emulatingWorkload); len(p.Emulate) > 0 && !emulates {
		errs = append(errs, errors.New("--emulate applies to the scale workload only"))
	}
	for _, m := range ms {
		if err := m.Check(p); err != nil {
			errs = append(errs, fmt.Errorf("mode %s: %w", m.Name(), err))
		}
	}
	errs = append(errs, w.Check(p))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return w, nil
}

// modes resolves p.Modes.
func (p Params) modes() ([]Mode, error) {
	if len(p.Modes) == 0 {
		return nil, fmt.Errorf("name at least one mode (available: %s)", strings.Join(ModeNames(), ", "))
	}
	var out []Mode
	var errs []error
	seen := map[string]bool{}
	for _, name := range p.Modes {
		if seen[name] {
			errs = append(errs, fmt.Errorf("mode %s is named twice", name))
			continue
		}
		seen[name] = true
		m, err := LookupMode(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, m)
	}
	return out, errors.Join(errs...)
}

func (p Params) checkCommon() error {
	var errs []error
	if p.Duration <= 0 {
		errs = append(errs, fmt.Errorf("duration must be positive, got %v", p.Duration))
	}
	if p.Warmup < 0 {
		errs = append(errs, fmt.Errorf("warmup must not be negative, got %v", p.Warmup))
	}
	if p.Cluster == nil {
		if len(p.Shards) == 0 {
			errs = append(errs, errors.New("name at least one shard count"))
		}
		for _, s := range p.Shards {
			if s < 1 || s > devcluster.ShardsMax {
				errs = append(errs, fmt.Errorf("shards must be in [1, %d], got %d", devcluster.ShardsMax, s))
			}
		}
		if dup := firstDuplicate(p.Shards); dup != nil {
			errs = append(errs, fmt.Errorf("shard count %d is named twice", *dup))
		}
		if p.Replicas < config.GroupServersMin || p.Replicas > config.GroupServersMax {
			errs = append(errs, fmt.Errorf("replicas (storage servers per group) must be %d or %d, got %d", config.GroupServersMin, config.GroupServersMax, p.Replicas))
		}
		if p.OrderingInterval <= 0 {
			errs = append(errs, fmt.Errorf("ordering interval must be positive, got %v", p.OrderingInterval))
		}
		if p.LazyBatchInterval < 0 || p.LazyBatchInterval > time.Second {
			errs = append(errs, fmt.Errorf("lazy batch interval must be in [0, 1s] (0: the default), got %v", p.LazyBatchInterval))
		}
		if p.FailureTimeout < 0 {
			errs = append(errs, fmt.Errorf("failure timeout must not be negative, got %v", p.FailureTimeout))
		}
	}
	for _, c := range p.Compute {
		if c < 0 || c > computeMax {
			errs = append(errs, fmt.Errorf("compute must be in [0, %v], got %v", computeMax, c))
		}
	}
	if dup := firstDuplicate(p.Compute); dup != nil {
		errs = append(errs, fmt.Errorf("compute %v is named twice", *dup))
	}
	for _, w := range p.Window {
		if w < 1 || w > windowMax {
			errs = append(errs, fmt.Errorf("window must be in [1, %d] cuts, got %d", windowMax, w))
		}
	}
	if dup := firstDuplicate(p.Window); dup != nil {
		errs = append(errs, fmt.Errorf("window %d is named twice", *dup))
	}
	if p.Interval < 0 {
		errs = append(errs, fmt.Errorf("interval must not be negative, got %v", p.Interval))
	} else if p.Interval > 0 && p.Duration > 0 && p.Duration/p.Interval > seriesPointsMax {
		errs = append(errs, fmt.Errorf("interval %v cuts the %v window into more than %d points", p.Interval, p.Duration, seriesPointsMax))
	}
	return errors.Join(errs...)
}

// orZero is xs, or one zero value when xs is empty.
func orZero[T any](xs []T) []T {
	if len(xs) == 0 {
		return make([]T, 1)
	}
	return xs
}

func firstDuplicate[T comparable](xs []T) *T {
	seen := map[T]bool{}
	for _, x := range xs {
		if seen[x] {
			return &x
		}
		seen[x] = true
	}
	return nil
}

// Run checks p, then runs workload name at every point of the sweep under
// every mode, each run on a fresh embedded cluster unless p.Cluster names
// a running one. It stops at the first failed run and returns the points
// completed before it with the error.
func Run(ctx context.Context, name string, p Params) (*Report, error) {
	w, err := Check(name, p)
	if err != nil {
		return nil, err
	}
	ms, _ := p.modes()
	rep := &Report{Workload: name}
	for _, v := range variants(p) {
		results := make([]*Result, 0, len(ms))
		for _, m := range ms {
			for _, d := range orZero(p.Durability) {
				for _, sec := range orZero(p.Security) {
					what := m.Name() + prefixed(", durability ", d) + prefixed(", security ", sec) + prefixed(", ", v.String())
					if p.Progress != nil {
						fmt.Fprintf(p.Progress, "bench %s: mode %s: %v of load after %v of warm-up\n",
							name, what, p.Duration, p.Warmup)
					}
					r, err := runOne(ctx, w, m, p, v, d, sec)
					if err != nil {
						return rep, fmt.Errorf("%s, mode %s: %w", name, what, err)
					}
					results = append(results, r)
				}
			}
		}
		rep.add(results)
	}
	return rep, nil
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// runOne runs w once under m at v, with durability d and security sec
// ("" for none).
func runOne(ctx context.Context, w Workload, m Mode, p Params, v Variant, d, sec string) (*Result, error) {
	t := &Target{Config: p.Cluster}
	if p.Cluster == nil {
		opts := devcluster.Options{
			Shards:            v.Shards,
			Replicas:          p.Replicas,
			NoStorage:         v.Emulate > 0,
			OrderingInterval:  p.OrderingInterval,
			FailureTimeout:    p.FailureTimeout,
			LazyBatchInterval: p.LazyBatchInterval,
			Fsync:             p.Fsync,
			Logger:            p.Logger,
		}
		applyDurability(&opts, d)
		opts.TLS = sec == SecurityTLS
		m.Configure(&opts, p, v)
		dc, err := devcluster.Start(ctx, opts)
		if err != nil {
			return nil, err
		}
		defer dc.Close()
		readyCtx, cancel := context.WithTimeout(ctx, readyTimeout)
		err = dc.WaitReady(readyCtx)
		cancel()
		if err != nil {
			return nil, err
		}
		t.Config, t.Embedded = dc.Config(), dc
	}
	r, err := w.Run(ctx, &Env{Target: t, Mode: m, Params: p, Variant: v})
	if err != nil {
		return nil, err
	}
	r.Workload, r.Mode, r.Durability, r.Security = w.Name(), m.Name(), d, sec
	if v.Shards > 0 {
		r.Shards = v.Shards
	}
	if v.Emulate > 0 {
		r.Shards, r.Emulated = v.Emulate, true
	} else if p.Compute != nil {
		r.ComputeUS = Ptr(micros(float64(v.Compute)))
	}
	r.Window = v.Window
	if m.Speculative() && p.Cluster == nil {
		stagger := config.DefaultStaggerAbove
		if p.NoStagger {
			stagger = 0
		}
		r.StaggerAbove = Ptr(stagger)
	}
	return r, nil
}

// sleepUntil waits until t or until ctx ends, for a goroutine that waits
// too seldom to keep an Alarm of its own.
func sleepUntil(ctx context.Context, t time.Time) error {
	a := NewAlarm()
	defer a.Close()
	return a.SleepUntil(ctx, t)
}

// shape reports the live shards of a target, in ascending id order, and
// the most replicas any of them has.
func shape(ctx context.Context, cl *client.Client) (live []*pb.ShardInfo, replicas int, err error) {
	st, err := cl.Status(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("status: %w", err)
	}
	for _, sh := range st.Shards {
		if sh.State == pb.ShardState_SHARD_LIVE {
			live = append(live, sh)
			replicas = max(replicas, len(sh.Replicas))
		}
	}
	slices.SortFunc(live, func(a, b *pb.ShardInfo) int { return cmp.Compare(a.Id, b.Id) })
	return live, replicas, nil
}
