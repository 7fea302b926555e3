package bench

import (
	"context"
	"errors"
	"time"
)

func init() {
	Register(e2eWorkload{})
	Register(windowWorkload{})
	Register(scaleWorkload{})
}

// e2eWorkload measures delivery and end-to-end latency with downstream
// compute (SpecLog §6.1, Fig. 7), and with a list of compute times the
// compute sweep with the e2e breakdown (§6.2, Fig. 8): open-loop appenders
// stamp each record with its start time, and Subscribers downstream tasks
// follow the log, computing over each batch they take for the compute time.
type e2eWorkload struct{}

func (e2eWorkload) Name() string { return "e2e" }

func (e2eWorkload) Defaults(p *Params) {
	p.Compute = []time.Duration{1500 * time.Microsecond}
}

func (e2eWorkload) Check(p Params) error { return checkLoad(p, true) }

func (e2eWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	return runLoad(ctx, e, loadSpec{Subscribers: e.Params.Subscribers, Compute: e.Variant.Compute})
}

// windowWorkload sweeps the speculation lease window (SpecLog §6.6,
// Fig. 12): the e2e workload at each --window size.
type windowWorkload struct{}

func (windowWorkload) Name() string { return "window" }

func (windowWorkload) Defaults(p *Params) {
	p.Compute = []time.Duration{1500 * time.Microsecond}
	p.Window = []int{5, 10, 50, 100}
}

func (windowWorkload) Check(p Params) error {
	if err := needSpeculative("window", p); err != nil {
		return err
	}
	if len(p.Window) == 0 {
		return errors.New("window sweeps the lease window: name at least one --window")
	}
	return checkLoad(p, true)
}

func (windowWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	return runLoad(ctx, e, loadSpec{Subscribers: e.Params.Subscribers, Compute: e.Variant.Compute})
}

// scaleWorkload measures throughput and latency against the number of real
// shards (SpecLog §6.8, Fig. 14(a–c); Scalog §6.3): the e2e workload on an
// embedded cluster of each --shards size, closed loop by default so that
// throughput shows where the machine saturates. With --emulate it sweeps
// emulated shards instead, on a real ordering layer (Fig. 14(d); Scalog
// Fig. 5): see runEmulated.
type scaleWorkload struct{}

func (scaleWorkload) Name() string { return "scale" }

func (scaleWorkload) Defaults(p *Params) {
	p.Shards = []int{1, 2, 4}
	p.Rate = 0
	p.Inflight = 16
	p.Compute = []time.Duration{1200 * time.Microsecond}
}

func (scaleWorkload) Check(p Params) error {
	if len(p.Emulate) > 0 {
		return checkEmulate(p)
	}
	return errors.Join(needEmbedded("scale", "sweeps cluster sizes (--shards)", p), checkLoad(p, true))
}

// Run runs one point on real shards, or, with Params.Emulate, on emulated
// ones (see runEmulated).
func (scaleWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	if e.Variant.Emulate > 0 {
		return runEmulated(ctx, e)
	}
	return runLoad(ctx, e, loadSpec{Subscribers: e.Params.Subscribers, Compute: e.Variant.Compute})
}
