// Package bench holds augur's benchmark harness: a registry of workloads,
// the load generators' pacing, latency histograms, and the one JSON object a
// run reports. `augur bench WORKLOAD` is a thin shell over Run.
package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	clientsMax  = 1024
	inflightMax = 4096
	shardsMax   = 64
	replicasMax = 9
	// readyTimeout bounds how long an embedded cluster may take to start.
	readyTimeout = 30 * time.Second
	// drainTimeout bounds how long a run waits for the appends it issued.
	drainTimeout = 30 * time.Second
)

// Params are the knobs of a run; each workload reads the ones it needs.
type Params struct {
	// Shards and Replicas shape the embedded cluster (ignored with Cluster).
	Shards   int
	Replicas int
	// OrderingInterval is the embedded cluster's cut interval.
	OrderingInterval time.Duration
	// Fsync is the embedded cluster's storage fsync policy ("" = default).
	Fsync string
	// RecordBytes is the payload size of each append.
	RecordBytes int
	// Rate is the offered load in operations per second over all clients;
	// 0 means closed loop.
	Rate int
	// Clients is how many SDK clients drive the load, each with its own
	// connections and goroutine.
	Clients int
	// Inflight is, in closed loop, how many appends each client keeps in
	// flight (1: issue the next when the previous is acknowledged).
	Inflight int
	// Warmup runs the load unmeasured before the measured Duration.
	Warmup   time.Duration
	Duration time.Duration
	// Cluster, when set, is a running cluster to target instead of an
	// embedded one.
	Cluster *config.Cluster
	// Logger receives the embedded cluster's logs; nil discards them.
	Logger *slog.Logger
}

// Target is the cluster a workload runs against.
type Target struct {
	// Config is the target's cluster file.
	Config *config.Cluster
	// Embedded is the in-process cluster, nil when targeting a running one.
	Embedded *devcluster.Cluster
}

// Dial returns a new client of the target; the caller closes it.
func (t *Target) Dial(ctx context.Context) (*client.Client, error) {
	cl, err := client.Dial(ctx, client.Config{
		ClusterID:      t.Config.ClusterID,
		Ordering:       t.Config.OrderingAddrs(),
		RecordBytesMax: t.Config.RecordBytesMax,
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", t.Config.ClusterID, err)
	}
	return cl, nil
}

// Workload is one kind of benchmark.
type Workload interface {
	Name() string
	// Check rejects parameters the workload cannot run with; it runs before
	// any cluster starts.
	Check(p Params) error
	// Run drives the workload against t and measures it.
	Run(ctx context.Context, t *Target, p Params) (*Result, error)
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

// Check looks up workload name and checks p against it and the common bounds.
func Check(name string, p Params) (Workload, error) {
	w, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(p.checkCommon(), w.Check(p)); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return w, nil
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
		if p.Shards < 1 || p.Shards > shardsMax {
			errs = append(errs, fmt.Errorf("shards must be in [1, %d], got %d", shardsMax, p.Shards))
		}
		if p.Replicas < 1 || p.Replicas > replicasMax {
			errs = append(errs, fmt.Errorf("replicas must be in [1, %d], got %d", replicasMax, p.Replicas))
		}
		if p.OrderingInterval <= 0 {
			errs = append(errs, fmt.Errorf("ordering interval must be positive, got %v", p.OrderingInterval))
		}
	}
	return errors.Join(errs...)
}

// Run checks p, starts an embedded cluster unless p.Cluster names a running
// one, waits until it is ready, and runs workload name.
func Run(ctx context.Context, name string, p Params) (*Result, error) {
	w, err := Check(name, p)
	if err != nil {
		return nil, err
	}
	t := &Target{Config: p.Cluster}
	if p.Cluster == nil {
		dc, err := devcluster.Start(ctx, devcluster.Options{
			Shards:           p.Shards,
			Replicas:         p.Replicas,
			OrderingInterval: p.OrderingInterval,
			Fsync:            p.Fsync,
			Logger:           p.Logger,
		})
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
	return w.Run(ctx, t, p)
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shape reports the live shards of a target and the replicas of each.
func shape(ctx context.Context, cl *client.Client) (shards, replicas int, err error) {
	st, err := cl.Status(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("status: %w", err)
	}
	for _, sh := range st.Shards {
		if sh.State == pb.ShardState_SHARD_LIVE {
			shards++
			replicas = max(replicas, len(sh.Replicas))
		}
	}
	return shards, replicas, nil
}
