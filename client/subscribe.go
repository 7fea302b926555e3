package client

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/augur-log/augur/internal/mode"
)

// Subscription is an ordered stream of entries, identical for every
// subscriber that starts at the same position with the same filter.
type Subscription struct {
	e *engine
}

// Subscribe returns the records from position from on, in position order.
// In speculative mode it is the confirmed-only view of the speculative
// streams, which is the eager order; it also knows the no-op slots.
func (c *Client) Subscribe(ctx context.Context, from uint64, f Filter) (*Subscription, error) {
	st, err := c.refresh(ctx)
	if err != nil {
		return nil, err
	}
	e, err := c.startEngine(st, from, f, true)
	if err != nil {
		return nil, err
	}
	return &Subscription{e: e}, nil
}

// Next returns the next entry, blocking until one is ordered or ctx ends.
func (s *Subscription) Next(ctx context.Context) (Entry, error) {
	for {
		ev, err := s.e.next(ctx)
		if err != nil || ev.Kind == EventDeliver {
			return ev.Entry, err
		}
	}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.e.close()
}

// Read returns the record at pos, waiting until it is ordered (bounded by
// ctx). On a speculative cluster a position that holds a no-op answers
// ErrNoop as soon as it is final.
func (c *Client) Read(ctx context.Context, pos uint64) (Entry, error) {
	es, err := c.ReadRange(ctx, pos, 1)
	if err != nil {
		return Entry{}, err
	}
	if len(es) == 0 {
		return Entry{}, fmt.Errorf("%w: position %d", ErrNoop, pos)
	}
	return es[0], nil
}

// ReadRange returns the records at the n positions from position from on,
// waiting for those not yet ordered (bounded by ctx). On a speculative
// cluster the positions that hold no-ops are skipped, so fewer than n
// records may come back; it returns once every position of the range is
// final.
func (c *Client) ReadRange(ctx context.Context, from uint64, n int) ([]Entry, error) {
	if n <= 0 {
		return nil, fmt.Errorf("augur: read range needs a positive count, got %d", n)
	}
	// A cluster's mode never changes, so the table Dial read tells it.
	if c.lazyState() != nil {
		return c.readLazy(ctx, from, n)
	}
	if mode.FromStatus(c.cachedStatus()).Speculative() {
		return c.readSpec(ctx, from, n)
	}
	sub, err := c.Subscribe(ctx, from, Filter{})
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	out := make([]Entry, 0, n)
	for len(out) < n {
		e, err := sub.Next(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return out, fmt.Errorf("augur: read %d..%d: %d of %d records ordered before the deadline%s: %w", from, from+uint64(n), len(out), n, sub.e.lastRefusal(), err)
			}
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}

// readSpec reads the n positions from position from on of a speculative
// cluster, where a final position may hold a no-op: it returns the records
// among them once the range is final, that is once a confirmation, or a
// record, reaches the range's end. (Counting records instead would wait
// past the tail for records that may never come.)
func (c *Client) readSpec(ctx context.Context, from uint64, n int) ([]Entry, error) {
	end := from + uint64(n)
	if end < from {
		end = math.MaxUint64
	}
	sub, err := c.SubscribeSpec(ctx, from, Filter{}, true)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	var out []Entry
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return out, fmt.Errorf("augur: read %d..%d: not final before the deadline%s: %w", from, end, sub.e.lastRefusal(), err)
			}
			return out, err
		}
		// Confirmed-only delivery goes in position order, and a
		// confirmation follows the deliveries it covers.
		switch {
		case ev.Kind == EventDeliver && ev.Position < end:
			out = append(out, ev.Entry)
		case ev.Kind == EventDeliver, ev.Kind == EventConfirm && ev.Position >= end:
			return out, nil
		}
	}
}
