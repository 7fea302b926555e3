package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
)

func init() { Register(elasticWorkload{}) }

// elasticGraceCuts is how many more cuts a shard being removed may still
// order records in; Scalog §6.1 notifies clients 10 cuts ahead.
const elasticGraceCuts = 10

// elasticWorkload adds two shards a third into the window and finalizes
// them two thirds in, under e2e load (SpecLog §6.7, Fig. 13; Scalog §6.1,
// Fig. 3): throughput and e2e latency over time should show no downtime.
// The new shards are opened through the SDK (AddShard) on the groups of
// the live shards, in turn.
type elasticWorkload struct{}

func (elasticWorkload) Name() string { return "elastic" }

func (elasticWorkload) Defaults(p *Params) {
	p.Compute = []time.Duration{1500 * time.Microsecond}
	p.Follow = FollowLog
}

func (elasticWorkload) Check(p Params) error {
	return errors.Join(checkLoad(p, true), needFollowLog("elastic", p))
}

func (elasticWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	admin, err := e.Target.Dial(ctx)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	var mu sync.Mutex
	var added []uint32
	d := e.Params.Duration
	actions := []action{
		{At: d / 3, What: "add 2 shards", Do: func(ctx context.Context) (string, error) {
			st, err := admin.Status(ctx)
			if err != nil {
				return "", fmt.Errorf("status: %w", err)
			}
			var groups []string
			for _, sh := range st.Shards {
				if sh.State == pb.ShardState_SHARD_LIVE && !slices.Contains(groups, sh.Group) {
					groups = append(groups, sh.Group)
				}
			}
			if len(groups) == 0 {
				return "", fmt.Errorf("no live shard to take a group from")
			}
			slices.Sort(groups)
			var ids []string
			for i := range 2 {
				g := groups[i%len(groups)]
				id, err := admin.AddShard(ctx, g)
				if err != nil {
					return "", fmt.Errorf("add a shard to group %s: %w", g, err)
				}
				mu.Lock()
				added = append(added, id)
				mu.Unlock()
				ids = append(ids, fmt.Sprintf("%d (group %s)", id, g))
			}
			return ": " + strings.Join(ids, ", "), nil
		}},
		{At: 2 * d / 3, What: "finalize the added shards", Do: func(ctx context.Context) (string, error) {
			mu.Lock()
			ids := slices.Clone(added)
			mu.Unlock()
			var names []string
			for _, id := range ids {
				if err := admin.FinalizeShard(ctx, id, elasticGraceCuts); err != nil {
					return "", fmt.Errorf("finalize shard %d: %w", id, err)
				}
				names = append(names, fmt.Sprint(id))
			}
			return fmt.Sprintf(" %s after %d cuts", strings.Join(names, ", "), elasticGraceCuts), nil
		}},
	}
	return runLoad(ctx, e, loadSpec{
		Subscribers: e.Params.Subscribers,
		Compute:     e.Variant.Compute,
		Actions:     actions,
		Series:      true,
	})
}
