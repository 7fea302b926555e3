package client

import (
	"context"
	"errors"

	"github.com/augur-log/augur/internal/merge"
)

// EventKind tells what a speculative subscription Event says.
type EventKind = merge.EventKind

// The kinds of Event.
const (
	// EventDeliver hands over Entry, at a position that is final unless
	// Speculative is set.
	EventDeliver = merge.EventDeliver
	// EventConfirm (confirm_spec) says every position below Position is
	// final.
	EventConfirm = merge.EventConfirm
	// EventFail (fail_spec) says every position at or after Position
	// delivered so far is void: undo what was computed from them. The
	// following deliveries give the correct records from Position on.
	EventFail = merge.EventFail
)

// Event is one step of a speculative subscription.
type Event struct {
	Kind EventKind
	// Entry is the delivered record (EventDeliver).
	Entry Entry
	// Speculative is set on a delivery whose position is not final yet.
	Speculative bool
	// Position is the delivered record's position, the end of the final
	// prefix (EventConfirm), or the first void position (EventFail).
	Position uint64
	// View counts whole-shard failures; a Fail starts a new view.
	View uint64
}

// SpecSubscription is a subscription to a cluster in speculative mode: it
// delivers records as soon as they are durable, at their predicted
// positions, then confirms or fails them.
type SpecSubscription struct {
	e *engine
}

// SubscribeSpec subscribes from position from on with speculative
// delivery. With confirmedOnly it delivers only final positions, exactly
// like an eager subscription. It fails on a cluster in eager mode.
func (c *Client) SubscribeSpec(ctx context.Context, from uint64, f Filter, confirmedOnly bool) (*SpecSubscription, error) {
	st, err := c.refresh(ctx)
	if err != nil {
		return nil, err
	}
	if st.Spec == nil {
		return nil, errors.New("augur: speculative subscription: the cluster runs in eager mode")
	}
	e, err := c.startEngine(st, from, f, confirmedOnly)
	if err != nil {
		return nil, err
	}
	return &SpecSubscription{e: e}, nil
}

// Next returns the next event, blocking until there is one or ctx ends.
func (s *SpecSubscription) Next(ctx context.Context) (Event, error) {
	return s.e.next(ctx)
}

// Close ends the subscription.
func (s *SpecSubscription) Close() {
	s.e.close()
}
