package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

func init() { Register(failureWorkload{}) }

// failureWorkload stops servers of the embedded cluster under e2e load and
// records a time series (SpecLog §6.11, Fig. 17; Scalog §6.2, Fig. 4): at
// a fifth of the window one storage server of the first shard (a backup),
// which its shard's configuration then leaves (the shard goes on on its
// primary); at 45% the ordering leader, which pauses cuts until a new
// leader is elected; at 70% both come back (the storage server stays out
// of the configuration until it rejoins). With KillReplica, only the first
// shard's primary is killed (it says nothing), at a third of the window:
// after the failure timeout its shard fails over to a backup.
type failureWorkload struct{}

func (failureWorkload) Name() string { return "failure" }

func (failureWorkload) Defaults(p *Params) {
	p.Compute = []time.Duration{1500 * time.Microsecond}
	p.Follow = FollowLog
}

func (failureWorkload) Check(p Params) error {
	var errs []error
	errs = append(errs, needEmbedded("failure", "stops and restarts servers", p), checkLoad(p, true), needFollowLog("failure", p))
	return errors.Join(errs...)
}

func (failureWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	dc := e.Target.Embedded
	if dc == nil {
		return nil, errors.New("failure needs the embedded cluster")
	}
	// The servers are listed group by group, each group's primary first,
	// so the second is a backup of the first group.
	storage := dc.StorageIDs()
	if len(storage) < 2 {
		return nil, errors.New("failure needs a shard with two replicas")
	}
	if e.Params.KillReplica {
		// The first shard's primary: its backup becomes primary.
		victim, at := storage[0], e.Params.Duration/3
		res, err := runLoad(ctx, e, loadSpec{
			Subscribers: e.Params.Subscribers,
			Compute:     e.Variant.Compute,
			Actions: []action{{At: at, What: "kill storage server " + victim, Do: func(context.Context) (string, error) {
				return "", dc.KillStorage(victim)
			}}},
			Series: true,
		})
		if err == nil {
			res.Failover = summarizeFailover(res.Series, at, seriesInterval(e.Params))
		}
		return res, err
	}
	replica := storage[1]
	var mu sync.Mutex
	var leader string
	d := e.Params.Duration
	actions := []action{
		{At: d / 5, What: "stop storage server " + replica, Do: func(context.Context) (string, error) {
			return "", dc.StopStorage(replica)
		}},
		{At: 45 * d / 100, What: "stop the ordering leader", Do: func(ctx context.Context) (string, error) {
			id, err := dc.Leader(ctx)
			if err != nil {
				return "", err
			}
			if id == "" {
				return "", errors.New("no ordering leader to stop")
			}
			mu.Lock()
			leader = id
			mu.Unlock()
			return " " + id, dc.StopOrdering(id)
		}},
		{At: 70 * d / 100, What: "restart", Do: func(context.Context) (string, error) {
			mu.Lock()
			id := leader
			mu.Unlock()
			if err := dc.StartOrdering(id); err != nil {
				return "", err
			}
			return fmt.Sprintf(" %s and %s", id, replica), dc.StartStorage(replica)
		}},
	}
	return runLoad(ctx, e, loadSpec{
		Subscribers: e.Params.Subscribers,
		Compute:     e.Variant.Compute,
		Actions:     actions,
		Series:      true,
	})
}
