package client

import (
	"context"
	"errors"
	"fmt"
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

// Read returns the record at pos, waiting until it is ordered (bounded by ctx).
func (c *Client) Read(ctx context.Context, pos uint64) (Entry, error) {
	st, err := c.refresh(ctx)
	if err != nil {
		return Entry{}, err
	}
	if st.Spec != nil {
		return c.readSpec(ctx, pos)
	}
	es, err := c.ReadRange(ctx, pos, 1)
	if err != nil {
		return Entry{}, err
	}
	return es[0], nil
}

// readSpec reads pos on a speculative cluster, where a confirmed position
// may hold a no-op.
func (c *Client) readSpec(ctx context.Context, pos uint64) (Entry, error) {
	sub, err := c.SubscribeSpec(ctx, pos, Filter{}, true)
	if err != nil {
		return Entry{}, err
	}
	defer sub.Close()
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return Entry{}, fmt.Errorf("augur: read %d: not ordered before the deadline: %w", pos, err)
			}
			return Entry{}, err
		}
		switch {
		case ev.Kind == EventDeliver && ev.Position == pos:
			return ev.Entry, nil
		case ev.Kind == EventDeliver, ev.Kind == EventConfirm && ev.Position > pos:
			return Entry{}, fmt.Errorf("%w: position %d", ErrNoop, pos)
		}
	}
}

// ReadRange returns the n records from position from on (on a speculative
// cluster: the next n records, skipping no-op positions), waiting for those
// not yet ordered (bounded by ctx).
func (c *Client) ReadRange(ctx context.Context, from uint64, n int) ([]Entry, error) {
	if n <= 0 {
		return nil, fmt.Errorf("augur: read range needs a positive count, got %d", n)
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
				return out, fmt.Errorf("augur: read %d..%d: %d of %d records ordered before the deadline: %w", from, from+uint64(n), len(out), n, err)
			}
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}
