package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

func init() {
	Register(shardLoadWorkload{name: "burst"})
	Register(shardLoadWorkload{name: "ratechange", sustained: true})
}

// shardLoadWorkload adds load on one shard in the middle of an e2e run and
// records a time series. burst (SpecLog §6.4, Fig. 10) adds it for the
// middle third of the window; ratechange (§6.5, Fig. 11) from a third of
// the window to its end. Eager order is burst's baseline; ratechange is
// about quota changes, so it needs a speculative mode.
type shardLoadWorkload struct {
	name      string
	sustained bool
}

func (w shardLoadWorkload) Name() string { return w.name }

func (shardLoadWorkload) Defaults(p *Params) {
	p.Compute = []time.Duration{800 * time.Microsecond}
}

func (w shardLoadWorkload) Check(p Params) error {
	if w.sustained {
		if err := needSpeculative(w.name, p); err != nil {
			return err
		}
	}
	var errs []error
	errs = append(errs, checkLoad(p, true))
	from, to := w.span(p.Duration)
	switch rate := w.rate(p); {
	case rate <= 0:
		errs = append(errs, fmt.Errorf("%s needs a positive --extra-rate (or an open-loop --rate to take half of)", w.name))
	default:
		if err := CheckRate(rate, 1, to-from); err != nil {
			errs = append(errs, fmt.Errorf("extra rate: %w", err))
		}
	}
	return errors.Join(errs...)
}

// rate is the added load in appends per second: ExtraRate, or half of
// Rate, enough to unbalance the shards without saturating a small machine.
func (shardLoadWorkload) rate(p Params) int {
	if p.ExtraRate > 0 {
		return p.ExtraRate
	}
	return p.Rate / 2
}

// span is when, from the start of the window, the added load runs.
func (w shardLoadWorkload) span(d time.Duration) (from, to time.Duration) {
	if w.sustained {
		return d / 3, d
	}
	return d / 3, 2 * d / 3
}

func (w shardLoadWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	p := e.Params
	from, to := w.span(p.Duration)
	return runLoad(ctx, e, loadSpec{
		Subscribers: p.Subscribers,
		Compute:     e.Variant.Compute,
		Extra:       &extraLoad{Rate: w.rate(p), From: from, To: to, Shard: 0},
		Series:      true,
	})
}
