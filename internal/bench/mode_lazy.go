package bench

import (
	"context"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/devcluster"
	"github.com/augur-log/augur/internal/mode"
)

func init() { RegisterMode(lazyMode{}) }

// lazyMode is LazyLog's lazy order: an append returns once its data is on
// every replica of its shard and its metadata on every sequencing replica,
// before it is ordered; subscribers get it once stable-gp covers it.
type lazyMode struct{}

func (lazyMode) Name() string       { return mode.LazyName }
func (lazyMode) Speculative() bool  { return false }
func (lazyMode) Check(Params) error { return nil }

func (lazyMode) Configure(o *devcluster.Options, _ Params, _ Variant) { o.Mode = mode.LazyName }

func (lazyMode) Subscribe(ctx context.Context, cl *client.Client, from uint64, f client.Filter) (Consumer, error) {
	sub, err := cl.Subscribe(ctx, from, f)
	if err != nil {
		return nil, err
	}
	return eagerConsumer{sub}, nil
}
