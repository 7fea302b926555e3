package bench

import (
	"context"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/devcluster"
	"github.com/augur-log/augur/internal/mode"
)

func init() { RegisterMode(eagerMode{}) }

// eagerMode is Scalog's eager total order: a record reaches subscribers
// only once a committed cut has given it its final position.
type eagerMode struct{}

func (eagerMode) Name() string      { return mode.EagerName }
func (eagerMode) Speculative() bool { return false }
func (eagerMode) Check(Params) error {
	return nil
}

// Configure leaves the cluster as the common parameters shaped it.
func (eagerMode) Configure(*devcluster.Options, Params, Variant) {}

func (eagerMode) Subscribe(ctx context.Context, cl *client.Client, from uint64, f client.Filter) (Consumer, error) {
	sub, err := cl.Subscribe(ctx, from, f)
	if err != nil {
		return nil, err
	}
	return eagerConsumer{sub}, nil
}

// eagerConsumer turns a subscription's entries into final deliveries.
type eagerConsumer struct{ sub *client.Subscription }

func (c eagerConsumer) Next(ctx context.Context) (ConsumerEvent, error) {
	e, err := c.sub.Next(ctx)
	if err != nil {
		return ConsumerEvent{}, err
	}
	return ConsumerEvent{Kind: EventDeliver, Position: e.Position, Payload: e.Record.Payload}, nil
}

func (c eagerConsumer) Close() { c.sub.Close() }
