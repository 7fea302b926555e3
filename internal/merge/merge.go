// Package merge holds the subscriber's side of total order: one merger per
// ordering mode turns what the shards' subscription streams send into one
// sequence of events in position order, released only below the mode's
// horizon (the committed cut in eager order, the predicted window in
// speculative order). The client's subscription engine follows the
// streams and runs one merger; the mergers themselves are pure.
package merge

import pb "github.com/augur-log/augur/api/augurpb"

// EventKind tells what an Event says.
type EventKind int

// The kinds of Event.
const (
	// EventDeliver hands over the record at Pos.
	EventDeliver EventKind = iota
	// EventConfirm says every position below Pos is final: confirm_spec.
	EventConfirm
	// EventFail says every position at or after Pos delivered so far is
	// void; deliveries resume at Pos with the correct records: fail_spec.
	EventFail
)

func (k EventKind) String() string {
	switch k {
	case EventDeliver:
		return "deliver"
	case EventConfirm:
		return "confirm"
	case EventFail:
		return "fail"
	}
	return "EventKind(?)"
}

// Event is one step of a subscription, in the order the application must
// see them.
type Event struct {
	Kind EventKind
	// Pos is, for Deliver, the record's position; for Confirm, the end of
	// the final prefix (exclusive); for Fail, the first void position.
	Pos uint64
	// Shard and Rec are the delivered record and the shard that stores it
	// (Deliver only).
	Shard uint32
	Rec   *pb.Record
	// Speculative is set on a Deliver whose position is not final yet.
	Speculative bool
	// View is the view (count of whole-shard failures) the event belongs
	// to.
	View uint64
}

// Merger merges the subscription streams of the shards a subscriber
// follows into one sequence of events. Streams interleave in any order and
// repeat themselves after reconnecting; each stream's own messages come in
// the order its server sent them. A merger is pure (no I/O, clocks or
// goroutines) and not safe for concurrent use.
type Merger interface {
	// Step takes one message of shard's stream. An error says a stream
	// broke the protocol: the events already queued stay valid, and the
	// subscription ends with the error after them.
	Step(shard uint32, resp *pb.SubscribeResponse) error
	// Observe takes a cluster status the subscriber fetched: what no live
	// stream says (a dead shard's stream says nothing more).
	Observe(st *pb.StatusResponse)
	// Next pops the next event, if any.
	Next() (Event, bool)
	// Resume is the position a shard stream (re)starts from: the first
	// one not delivered yet.
	Resume() uint64
	// Waiting tells whether the merger holds positions that are not final
	// yet: what releases them may be a shard the subscriber does not
	// follow yet, or news only the cluster status carries.
	Waiting() bool
}
