package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/devcluster"
)

// Mode is an ordering discipline a workload runs under ("eager" is
// Scalog's total order; "spec" will be SpecLog's speculative order). A mode
// says how to configure an embedded cluster and how a downstream consumer
// receives records; the harness does the rest (load, batching, simulated
// compute, measurement), the same for every mode. Adding a mode is one file
// with a type implementing Mode and an init calling RegisterMode.
type Mode interface {
	// Name is the mode's name in --modes and in results.
	Name() string
	// Speculative reports whether the mode's consumers may deliver records
	// before their positions are final. The harness then holds each
	// delivered record until an EventConfirm covers it, and reports
	// confirm latency and misspeculations.
	Speculative() bool
	// Check rejects parameters the mode cannot run with, before anything
	// starts (for example an out-of-range Params.Window).
	Check(p Params) error
	// Configure adjusts the options of the embedded cluster started for
	// one run at point v of the sweep. It is not called when the run
	// targets a running cluster (Params.Cluster).
	Configure(o *devcluster.Options, p Params, v Variant)
	// Subscribe starts a consumer of cl's log from position from with
	// filter f. The consumer belongs to the caller, who closes it.
	Subscribe(ctx context.Context, cl *client.Client, from uint64, f client.Filter) (Consumer, error)
}

// Consumer is one downstream subscriber's stream of events, in the order
// the mode produces them. The harness calls Next from one goroutine and
// stamps each event with the time Next returned it: that is when the
// downstream task sees it.
type Consumer interface {
	// Next blocks until the next event, or until ctx ends or the
	// subscription fails (then it returns an error).
	Next(ctx context.Context) (ConsumerEvent, error)
	// Close ends the subscription; Next must not be called after it.
	Close()
}

// EventKind says what a ConsumerEvent is.
type EventKind uint8

// The kinds of ConsumerEvent, after SpecLog's deliver / confirm_spec /
// fail_spec callbacks. Confirm and Fail name the end of a prefix, so that
// failing from position 0 needs no special case.
const (
	// EventDeliver delivers Payload at Position. Positions of successive
	// deliveries strictly increase, except that after EventFail(k) they
	// resume at k.
	EventDeliver EventKind = iota + 1
	// EventConfirm says that every position below Position is final.
	EventConfirm
	// EventFail says that every delivered position at or above Position
	// that was not confirmed is void: what was computed from it is rolled
	// back, and its records will be delivered again.
	EventFail
)

func (k EventKind) String() string {
	switch k {
	case EventDeliver:
		return "deliver"
	case EventConfirm:
		return "confirm"
	case EventFail:
		return "fail"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// ConsumerEvent is one event of a Consumer.
type ConsumerEvent struct {
	Kind     EventKind
	Position uint64
	// Payload is the delivered record's payload (EventDeliver only). The
	// harness reads it before the next call to Next and keeps no reference.
	Payload []byte
	// Speculative marks a delivery at a predicted position that a later
	// EventConfirm or EventFail settles. A delivery that is not
	// speculative is final at once.
	Speculative bool
	// View counts the view changes (whole-shard failures) the consumer has
	// seen; the harness reports how often it grew. Eager consumers leave
	// it 0.
	View uint64
}

// Counters are cumulative counts a mode's cluster keeps about its own
// work. The harness reads them at the start and end of the measured window
// (and at every series interval) and reports the differences.
type Counters struct {
	// Noops counts no-op entries the cluster put in the log.
	Noops        int64
	LagFixes     int64
	QuotaChanges int64
	ViewChanges  int64
	// Cuts counts the committed cuts; PredeterminedCuts those of them
	// that lease windows predetermined, the rest being eager cuts. Both
	// are summed over the ordering replicas, each of which applies every
	// cut in its own time: only their ratio is used (a count divided by
	// the replicas would round, and a short run's share could pass 100%).
	Cuts              int64
	PredeterminedCuts int64
}

// PredeterminedPercent is the share of the cuts committed from c0 to c1
// that lease windows predetermined, in percent; nil without a cut.
func PredeterminedPercent(c0, c1 Counters) *float64 {
	cuts := c1.Cuts - c0.Cuts
	if cuts <= 0 {
		return nil
	}
	// The two counters are read one after the other while cuts apply: a
	// cut may count among the predetermined ones and not yet among all.
	share := min(float64(c1.PredeterminedCuts-c0.PredeterminedCuts)/float64(cuts), 1)
	return Ptr(round(100*share, 1))
}

// CountingMode is implemented by modes whose cluster reports Counters;
// results of other modes omit noop_rps, lag_fixes, quota_changes and
// view_changes.
type CountingMode interface {
	Mode
	Counters(ctx context.Context, t *Target) (Counters, error)
}

var (
	modes = map[string]Mode{}
	// plannedModes are modes that are being built; naming one gives a clear
	// "not available yet" rather than "unknown". Registering a mode of the
	// same name makes it available.
	plannedModes = map[string]string{
		"spec": "speculative order, SpecLog/Belfast",
	}
)

// RegisterMode adds m to the modes --modes can name; registering a name
// twice panics. Call it from an init function.
func RegisterMode(m Mode) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := modes[m.Name()]; dup {
		panic(fmt.Sprintf("bench: mode %q registered twice", m.Name()))
	}
	modes[m.Name()] = m
}

// ModeNames lists the registered modes, sorted.
func ModeNames() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	names := make([]string, 0, len(modes))
	for n := range modes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LookupMode returns the mode called name, or an error saying that it is
// unknown or not available yet.
func LookupMode(name string) (Mode, error) {
	registryMu.Lock()
	m, ok := modes[name]
	registryMu.Unlock()
	if ok {
		return m, nil
	}
	if what, planned := plannedModes[name]; planned {
		return nil, fmt.Errorf("mode %s is not available yet (%s is being built); available: %s",
			name, what, strings.Join(ModeNames(), ", "))
	}
	return nil, fmt.Errorf("unknown mode %q (available: %s)", name, strings.Join(ModeNames(), ", "))
}

// speculativeAvailable reports whether any registered mode is speculative.
func speculativeAvailable() bool {
	registryMu.Lock()
	defer registryMu.Unlock()
	for _, m := range modes {
		if m.Speculative() {
			return true
		}
	}
	return false
}

// needSpeculative rejects p unless one of its modes is speculative; what
// names the workload or flag that needs one.
func needSpeculative(what string, p Params) error {
	for _, name := range p.Modes {
		if m, err := LookupMode(name); err == nil && m.Speculative() {
			return nil
		}
	}
	if !speculativeAvailable() {
		return fmt.Errorf("%s needs mode spec, not available yet", what)
	}
	return fmt.Errorf("%s needs a speculative mode in --modes (for example --modes eager,spec)", what)
}
