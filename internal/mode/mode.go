// Package mode is the one seam between augur and its ordering modes. A
// cluster runs one mode, chosen once by name from its cluster file; the
// mode builds every part that differs between modes: the control state the
// ordering replicas start from, the leader's policy for each leadership
// term, the ordering of each shard's primary, and the merger of each
// subscription. Nothing outside a mode's own file asks which mode runs:
// the parts answer for themselves.
//
// A new mode is one file implementing Mode and one line in kinds.
package mode

import (
	"fmt"
	"strings"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/merge"
	"github.com/augur-log/augur/internal/order"
	"github.com/augur-log/augur/internal/shard"
)

// Reader is what a reader of the log asks of the cluster's mode. A client
// learns it from the cluster status (FromStatus), without the cluster
// file's parameters, which only the servers need.
type Reader interface {
	// Name is the mode's name in cluster files and on the command line.
	Name() string
	// Speculative says whether the mode exposes positions before they are
	// final: subscription streams carry speculative entries, and
	// subscribers may ask for speculative delivery.
	Speculative() bool
	// NewMerger returns the merger of a subscription delivering positions
	// from from on; confirmedOnly holds back positions not final yet, and
	// oneShard says the subscription follows a single shard's stream.
	NewMerger(from uint64, confirmedOnly, oneShard bool) merge.Merger
}

// Mode is an ordering mode with the cluster's parameters: the servers
// build their per-mode parts from it.
type Mode interface {
	Reader
	// NewState returns the control state a new cluster starts from.
	NewState(clusterID string) *control.State
	// NewPolicy returns a fresh leader policy, for one leadership term.
	NewPolicy() order.Policy
	// NewShardOrdering returns the ordering of the primary of shard id,
	// whose log holds length entries at now.
	NewShardOrdering(id cut.ShardID, length uint64, now time.Time) shard.Ordering
	// Sequenced says the sequencing layer orders the shards' records, in
	// each shard's lazy log, rather than committed cuts in its replica's
	// log: a storage server serves reads and subscriptions from the lazy
	// log, up to stable-gp.
	Sequenced() bool
}

// Params are the cluster file's settings that modes read; each mode takes
// what it uses and ignores the rest.
type Params struct {
	// OrderingInterval is the leader's pace: how often it cuts (eager) or
	// how long a cut of a lease window lasts (spec).
	OrderingInterval time.Duration
	// FailureTimeout is how long a server may stay silent before its
	// shards are taken for failed.
	FailureTimeout time.Duration
	// WindowCuts is how many cuts a lease window holds (spec).
	WindowCuts uint64
	// StaggerAbove is the most shards that share every cut; 0 turns
	// staggered cuts off (spec).
	StaggerAbove int
	// NoLagFix and NoQuotaChange turn those mechanisms off (spec).
	NoLagFix, NoQuotaChange bool
	// NoEagerFallback turns the leader's fallback to eager cuts off
	// (spec).
	NoEagerFallback bool
}

// kind is one registered mode.
type kind struct {
	name string
	// reader is the mode as a reader sees it.
	reader Reader
	// build returns the mode with the cluster's parameters, or what is
	// wrong with them.
	build func(Params) (Mode, error)
	// inStatus says whether a cluster status describes a cluster in this
	// mode; nil for the default mode, which a status describes when it
	// describes no other.
	inStatus func(*pb.StatusResponse) bool
}

// kinds lists the modes; the first is the default.
var kinds = []kind{
	{name: EagerName, reader: Eager{}, build: newEager},
	{name: SpecName, reader: Spec{}, build: newSpec, inStatus: specInStatus},
	{name: LazyName, reader: Lazy{}, build: newLazy, inStatus: lazyInStatus},
}

// Names lists the known modes' names, the default first.
func Names() []string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.name
	}
	return names
}

func lookup(name string) (kind, error) {
	for _, k := range kinds {
		if k.name == name {
			return k, nil
		}
	}
	return kind{}, fmt.Errorf("unknown ordering mode %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Lookup returns the reader's side of the mode named name.
func Lookup(name string) (Reader, error) {
	k, err := lookup(name)
	if err != nil {
		return nil, err
	}
	return k.reader, nil
}

// Parse returns the mode named name with the parameters p.
func Parse(name string, p Params) (Mode, error) {
	k, err := lookup(name)
	if err != nil {
		return nil, err
	}
	m, err := k.build(p)
	if err != nil {
		return nil, fmt.Errorf("mode %s: %w", name, err)
	}
	return m, nil
}

// FromStatus returns the mode of the cluster whose status st is.
func FromStatus(st *pb.StatusResponse) Reader {
	for _, k := range kinds {
		if k.inStatus != nil && k.inStatus(st) {
			return k.reader
		}
	}
	return kinds[0].reader
}
