package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/devcluster"
	"github.com/augur-log/augur/internal/mode"
)

func init() { RegisterMode(specMode{}) }

// specMode is SpecLog's speculative order: records reach subscribers as
// soon as they are durable, at predicted positions that fix-ante ordering
// makes right unless a whole shard fails.
type specMode struct{}

func (specMode) Name() string      { return mode.SpecName }
func (specMode) Speculative() bool { return true }
func (specMode) Check(p Params) error {
	if p.Cluster != nil {
		return errors.New("mode spec reads its counters from the embedded cluster; run it without --cluster")
	}
	return nil
}

func (specMode) Configure(o *devcluster.Options, p Params, v Variant) {
	o.Mode = mode.SpecName
	if v.Window > 0 {
		o.WindowCuts = uint64(v.Window)
	}
	o.NoLagFix, o.NoQuotaChange, o.NoStagger = p.NoLagFix, p.NoQuotaChange, p.NoStagger
}

func (specMode) Subscribe(ctx context.Context, cl *client.Client, from uint64, f client.Filter) (Consumer, error) {
	sub, err := cl.SubscribeSpec(ctx, from, f, false)
	if err != nil {
		return nil, err
	}
	return specConsumer{sub}, nil
}

// Counters sums the speculative counters of every server of the embedded
// cluster, which share this process's metrics registry.
func (specMode) Counters(_ context.Context, t *Target) (Counters, error) {
	if t.Embedded == nil {
		return Counters{}, errors.New("mode spec counters need an embedded cluster")
	}
	return SpecCounters(len(t.Config.Ordering))
}

// SpecCounters sums the speculative counters of every server of a
// cluster running in this process, with orderingReplicas ordering
// replicas, from the process's metrics registry.
func SpecCounters(orderingReplicas int) (Counters, error) {
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return Counters{}, fmt.Errorf("read metrics: %w", err)
	}
	sums := map[string]int64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			sums[f.GetName()] += int64(m.GetCounter().GetValue())
		}
	}
	return Counters{
		Noops:        sums["augur_noops_total"],
		LagFixes:     sums["augur_lag_fixes_total"],
		QuotaChanges: sums["augur_quota_changes_total"],
		// Every ordering replica applies each view change; count one.
		ViewChanges:       sums["augur_view_changes_total"] / int64(max(orderingReplicas, 1)),
		Cuts:              sums["augur_cuts_committed_total"],
		PredeterminedCuts: sums["augur_predetermined_cuts_total"],
	}, nil
}

// specConsumer passes a speculative subscription's events through.
type specConsumer struct{ sub *client.SpecSubscription }

func (c specConsumer) Next(ctx context.Context) (ConsumerEvent, error) {
	ev, err := c.sub.Next(ctx)
	if err != nil {
		return ConsumerEvent{}, err
	}
	out := ConsumerEvent{Position: ev.Position, Speculative: ev.Speculative, View: ev.View}
	switch ev.Kind {
	case client.EventDeliver:
		out.Kind, out.Payload = EventDeliver, ev.Entry.Record.Payload
	case client.EventConfirm:
		out.Kind = EventConfirm
	case client.EventFail:
		out.Kind = EventFail
	}
	return out, nil
}

func (c specConsumer) Close() { c.sub.Close() }
