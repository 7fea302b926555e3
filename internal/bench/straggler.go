package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

func init() { Register(stragglerWorkload{}) }

// stragglerReportDelay is how late the straggler's reports arrive: well
// past the sequencer's straggler threshold of ten ordering intervals at the
// default interval.
const stragglerReportDelay = 30 * time.Millisecond

// stragglerWorkload is SpecLog §6.9 (Fig. 15): from a third to two thirds
// of the window, one shard's reports to the ordering layer are held back,
// as a straggling server's would be, and a time series shows e2e latency
// while the sequencer gives the straggler quota zero, then probes it, and
// lets it back once it keeps up.
type stragglerWorkload struct{}

func (stragglerWorkload) Name() string { return "straggler" }

func (stragglerWorkload) Defaults(p *Params) {
	p.Compute = []time.Duration{1500 * time.Microsecond}
}

func (stragglerWorkload) Check(p Params) error {
	return errors.Join(needSpeculative("straggler", p), needEmbedded("straggler", "delays one server's reports", p), checkLoad(p, true))
}

func (stragglerWorkload) Run(ctx context.Context, e *Env) (*Result, error) {
	dc := e.Target.Embedded
	if dc == nil {
		return nil, errors.New("straggler needs the embedded cluster")
	}
	// The first storage server listed is the first group's primary: the
	// one that reports for its shard.
	storage := dc.StorageIDs()
	if len(storage) == 0 {
		return nil, errors.New("straggler needs a storage server")
	}
	victim := storage[0]
	d := e.Params.Duration
	actions := []action{
		{At: d / 3, What: fmt.Sprintf("delay %s's reports by %v", victim, stragglerReportDelay), Do: func(context.Context) (string, error) {
			return "", dc.SetReportDelay(victim, stragglerReportDelay)
		}},
		{At: 2 * d / 3, What: fmt.Sprintf("%s reports on time again", victim), Do: func(context.Context) (string, error) {
			return "", dc.SetReportDelay(victim, 0)
		}},
	}
	return runLoad(ctx, e, loadSpec{
		Subscribers: e.Params.Subscribers,
		Compute:     e.Variant.Compute,
		Actions:     actions,
		Series:      true,
	})
}
