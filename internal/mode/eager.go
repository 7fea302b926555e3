package mode

import (
	"fmt"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/merge"
	"github.com/augur-log/augur/internal/order"
	"github.com/augur-log/augur/internal/shard"
)

// EagerName names Scalog's eager order: the leader cuts what every shard
// reported, at its own pace, and readers see only final positions.
const EagerName = "eager"

// Eager is the eager mode. Its zero value is the mode as a reader sees
// it (Reader); the servers need Interval.
type Eager struct {
	// Interval is how often the leader cuts.
	Interval time.Duration
}

var _ Mode = Eager{}

func (Eager) Name() string      { return EagerName }
func (Eager) Speculative() bool { return false }

// NewMerger merges committed cuts; every position it delivers is final,
// so confirmedOnly changes nothing.
func (Eager) NewMerger(from uint64, _, oneShard bool) merge.Merger {
	if oneShard {
		return merge.NewEagerShard(from)
	}
	return merge.NewEager(from)
}

func newEager(p Params) (Mode, error) {
	if p.OrderingInterval <= 0 {
		return nil, fmt.Errorf("ordering interval must be positive, got %v", p.OrderingInterval)
	}
	return Eager{Interval: p.OrderingInterval}, nil
}

func (Eager) NewState(clusterID string) *control.State { return control.New(clusterID) }
func (m Eager) NewPolicy() order.Policy                { return order.NewEager(m.Interval) }

func (Eager) NewShardOrdering(cut.ShardID, uint64, time.Time) shard.Ordering {
	return shard.Eager{}
}

// Sequenced: see Mode.
func (Eager) Sequenced() bool { return false }
