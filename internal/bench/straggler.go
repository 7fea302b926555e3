package bench

import (
	"context"
	"errors"
	"time"
)

func init() { Register(stragglerWorkload{}) }

// stragglerWorkload is SpecLog §6.9 (Fig. 15): delay one shard's reports
// mid-run and watch e2e latency while the sequencer zeroes the straggler's
// quota. It needs a speculative mode and a way to delay one shard's
// reports to the ordering layer, which the cluster does not have yet, so
// it is registered (its flags and errors are stable) but cannot run.
type stragglerWorkload struct{}

func (stragglerWorkload) Name() string { return "straggler" }

func (stragglerWorkload) Defaults(p *Params) {
	p.Compute = []time.Duration{1500 * time.Microsecond}
}

func (stragglerWorkload) Check(p Params) error {
	if err := needSpeculative("straggler", p); err != nil {
		return err
	}
	return errors.New("straggler needs report delays injected into one shard, which the cluster cannot do yet")
}

func (stragglerWorkload) Run(context.Context, *Env) (*Result, error) {
	return nil, errors.New("straggler is not available yet")
}
