package mode

import (
	"errors"
	"fmt"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/merge"
	"github.com/augur-log/augur/internal/order"
	"github.com/augur-log/augur/internal/shard"
	"github.com/augur-log/augur/internal/spec"
)

// SpecName names SpecLog's speculative (fix-ante) order: the leader
// announces lease windows of per-shard quotas, so that shards and readers
// predict positions before the cuts that make them final.
const SpecName = "spec"

// Spec is the speculative mode. Its zero value is the mode as a reader
// sees it (Reader); the servers need the rest.
type Spec struct {
	// Config is the leader's policy.
	Config spec.Config
	// WindowCuts is how many cuts a lease window holds.
	WindowCuts uint64
	// FillAfter and IdleAfter tune a primary's no-op fills (see
	// spec.NewShard).
	FillAfter, IdleAfter time.Duration
}

var _ Mode = Spec{}

func (Spec) Name() string      { return SpecName }
func (Spec) Speculative() bool { return true }

func (Spec) NewMerger(from uint64, confirmedOnly, oneShard bool) merge.Merger {
	return spec.NewStreamMerger(from, confirmedOnly, oneShard)
}

// specInStatus: only a speculative cluster's status carries the
// speculative state.
func specInStatus(st *pb.StatusResponse) bool { return st.Spec != nil }

func newSpec(p Params) (Mode, error) {
	switch {
	case p.OrderingInterval <= 0:
		return nil, fmt.Errorf("ordering interval must be positive, got %v", p.OrderingInterval)
	case p.WindowCuts == 0:
		return nil, errors.New("a lease window needs at least one cut")
	}
	cfg := spec.DefaultConfig(p.OrderingInterval)
	cfg.LagFix, cfg.QuotaChange = !p.NoLagFix, !p.NoQuotaChange
	if p.NoEagerFallback {
		cfg.EagerAbove = 0
	}
	cfg.StaggerAbove = p.StaggerAbove
	if p.FailureTimeout > 0 {
		cfg.SuspectAfter = p.FailureTimeout
	}
	m := Spec{
		Config:     cfg,
		WindowCuts: p.WindowCuts,
		// Shards fill no-ops 1.5 ordering intervals after their last
		// report when short of their quota (SpecLog §4.9), and at once
		// when nothing more is on the way.
		FillAfter: p.OrderingInterval * 3 / 2,
	}
	if !cfg.LagFix {
		// Without lag-fixes, a shard that had records lately keeps
		// filling its empty slots for a window's worth of cuts, then goes
		// quiet. With them the leader asks an idle shard to fill the slots
		// a cut waits for as soon as another shard reaches it; filling
		// ahead by timer only made cuts of no-ops that records then
		// queued behind.
		m.IdleAfter = p.OrderingInterval * time.Duration(p.WindowCuts)
	}
	return m, nil
}

func (m Spec) NewState(clusterID string) *control.State {
	return control.NewSpec(clusterID, m.WindowCuts)
}

func (m Spec) NewPolicy() order.Policy { return order.NewSpec(m.Config) }

func (m Spec) NewShardOrdering(id cut.ShardID, length uint64, now time.Time) shard.Ordering {
	return shard.NewSpeculative(id, length, m.FillAfter, m.IdleAfter, now)
}

// Sequenced: see Mode.
func (Spec) Sequenced() bool { return false }
