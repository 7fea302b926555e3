package mode

import (
	"fmt"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/merge"
	"github.com/augur-log/augur/internal/order"
	"github.com/augur-log/augur/internal/shard"
)

// LazyName names LazyLog's lazy order: appends are durable after one
// round trip to the shard's replicas and the sequencing replicas, the
// sequencing leader orders them in the background, and readers see a
// position once stable-gp covers it.
const LazyName = "lazy"

// Lazy is the lazy mode. The ordering layer commits no cuts in it (the
// sequencing layer orders); it is the control plane.
type Lazy struct {
	Interval time.Duration
}

var _ Mode = Lazy{}

func (Lazy) Name() string      { return LazyName }
func (Lazy) Speculative() bool { return false }

// NewMerger merges the shards' lazy streams; every position they carry is
// final, so confirmedOnly changes nothing.
func (Lazy) NewMerger(from uint64, _, oneShard bool) merge.Merger {
	if oneShard {
		return merge.NewLazyShard(from)
	}
	return merge.NewLazy(from)
}

func lazyInStatus(st *pb.StatusResponse) bool { return st.GetLazy() != nil }

func newLazy(p Params) (Mode, error) {
	if p.OrderingInterval <= 0 {
		return nil, fmt.Errorf("ordering interval must be positive, got %v", p.OrderingInterval)
	}
	return Lazy{Interval: p.OrderingInterval}, nil
}

func (Lazy) NewState(clusterID string) *control.State { return control.New(clusterID) }

// NewPolicy is the eager leader: lazy shards report nothing, so it cuts
// nothing, and it keeps the failure detector of the other modes.
func (m Lazy) NewPolicy() order.Policy { return order.NewEager(m.Interval) }

// NewShardOrdering reports nothing: a lazy shard's records are ordered by
// the sequencing layer, in the shard's lazy log.
func (Lazy) NewShardOrdering(cut.ShardID, uint64, time.Time) shard.Ordering { return shard.Eager{} }

// Sequenced: see Mode.
func (Lazy) Sequenced() bool { return true }
