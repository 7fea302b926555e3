package bench

import (
	"context"
)

func init() { Register(lazyAppendWorkload{}) }

// lazyAppendWorkload sets lazy order's appends beside eager order's (the
// LazyLog paper's Fig. 6–8): open-loop appends at Rate with no consumers,
// under each durability setting, on 1 and 3 shards. Every result carries
// the gRPC floor measured in the same run; the comparison lines give
// eager ÷ lazy append latency. --record-bytes 100 runs the small records.
type lazyAppendWorkload struct{}

func (lazyAppendWorkload) Name() string { return "lazy-append" }

func (lazyAppendWorkload) Defaults(p *Params) {
	p.Modes = []string{"eager", "lazy"}
	p.Shards = []int{1, 3}
	p.Durability = []string{DurabilityDefault, DurabilityOptOut}
	p.Subscribers = 0
}

func (lazyAppendWorkload) Check(p Params) error { return checkLoad(p, false) }

func (lazyAppendWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	return runLoad(ctx, e, loadSpec{})
}
