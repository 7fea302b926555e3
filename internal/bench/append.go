package bench

import (
	"context"
	"errors"
)

func init() { Register(appendWorkload{}) }

// appendWorkload measures append throughput and latency through the SDK,
// with no consumers (SpecLog §6.3, Fig. 9; Scalog §6.3): Clients clients
// appending RecordBytes-byte records, open loop at Rate in total or, with
// Rate 0, closed loop with Inflight appends in flight per client. Sweep
// the shard count with --shards 2,4,10.
type appendWorkload struct{}

func (appendWorkload) Name() string { return "append" }

func (appendWorkload) Defaults(p *Params) {
	p.Rate = 0
	p.Subscribers = 0
}

func (appendWorkload) Check(p Params) error {
	return errors.Join(checkLoad(p, false), checkSpecFlags(p))
}

func (appendWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	return runLoad(ctx, e, loadSpec{})
}
