package playerd

import (
	"context"

	"github.com/augur-log/augur/client"
)

// Log is what the player reads: augur's ordered log. *client.Client serves
// it through ClientLog; tests use an in-memory log.
type Log interface {
	// Subscribe returns the confirmed entries from position from on, in
	// position order; positions it skips hold no record.
	Subscribe(ctx context.Context, from uint64) (Subscription, error)
	// ReadRange returns the records among the n positions from from on,
	// once all of them are final.
	ReadRange(ctx context.Context, from uint64, n int) ([]client.Entry, error)
}

// Subscription is an ordered stream of entries.
type Subscription interface {
	Next(ctx context.Context) (client.Entry, error)
	Close()
}

// ClientLog reads the log through the Go SDK.
type ClientLog struct{ C *client.Client }

// Subscribe is a confirmed-only subscription to the whole log.
func (l ClientLog) Subscribe(ctx context.Context, from uint64) (Subscription, error) {
	return l.C.Subscribe(ctx, from, client.Filter{})
}

// ReadRange reads a bounded range.
func (l ClientLog) ReadRange(ctx context.Context, from uint64, n int) ([]client.Entry, error) {
	return l.C.ReadRange(ctx, from, n)
}
