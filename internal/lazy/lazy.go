// Package lazy holds the pure cores of lazy order (LazyLog's Erwin-st):
// appends are durable after one round trip that writes the record's data
// to every replica of its shard and its metadata to every sequencing
// replica; a background orderer binds records to positions later, and
// readers see a position only once it is at or below stable-gp.
//
// Every core is a state machine: messages and ticks in, effects out; no
// I/O, clocks or goroutines. The shells (the sequencing server, the
// storage server, the control plane in the ordering replicas) move the
// messages named here and persist what the cores say.
//
//   - Sequencer: one sequencing replica's bounded ring of record metadata,
//     with the dedup that survives garbage collection, restarts and views.
//   - Orderer: the sequencing leader's background ordering: batches of
//     positions, garbage collection on every sequencing replica, then
//     stable-gp.
//   - Shard: one replica of one shard: records stored unordered on
//     arrival, ordered by the orderer's mapping, reads gated by stable-gp,
//     no-ops for metadata without data, orphan scrub.
//   - Reconfig: the control plane's view change: seal, flush the recovery
//     replica's unordered entries, record the new configuration, advance
//     stable-gp, start the new view.
//
// Positions count from 0. Where the paper says last-ordered-gp and
// stable-gp (the last position ordered, the last position stable), this
// package keeps ends: Ordered is the first position not ordered yet
// (last-ordered-gp + 1), Stable the first position not stable yet; every
// position below Stable is final and may be read.
package lazy

import (
	"errors"
	"fmt"

	"github.com/augur-log/augur/internal/cut"
)

// RecordID names one append: the client that made it and that client's
// sequence number for it. Retries repeat it. Client and Seq are never 0.
type RecordID struct {
	Client, Seq uint64
}

func (id RecordID) String() string { return fmt.Sprintf("%d/%d", id.Client, id.Seq) }

// Valid reports whether id can name a record.
func (id RecordID) Valid() bool { return id.Client != 0 && id.Seq != 0 }

// Meta is a record's metadata as a client sends it to every sequencing
// replica, and as the orderer hands it to the shards.
type Meta struct {
	ID    RecordID
	Shard cut.ShardID
	// View is the sequencing view the client appends in; a replica in
	// another view, or sealed, refuses it.
	View uint64
	// Floor is the client's promise that it will never send (or retry) a
	// sequence number below it again: every lower one was acknowledged or
	// given up. Replicas use it to forget per-client state.
	Floor uint64
}

// Errors the cores return; the shells map them to wire codes. Each comes
// wrapped with context; test with errors.Is.
var (
	// ErrRingFull: the sequencing ring holds RingMax entries; the client
	// retries later (RESOURCE_EXHAUSTED).
	ErrRingFull = errors.New("lazy: sequencing ring full")
	// ErrWrongView: the message belongs to another view than the
	// replica's (FAILED_PRECONDITION; the client learns the view and
	// retries).
	ErrWrongView = errors.New("lazy: wrong view")
	// ErrSealed: the replica's view is sealed; a new view is coming
	// (UNAVAILABLE; the client retries in the new view).
	ErrSealed = errors.New("lazy: view sealed")
	// ErrLate: the record's position became a no-op before its data
	// arrived; the append is not stored (ABORTED: the client never got
	// every acknowledgement, and may append it again under a new
	// sequence number).
	ErrLate = errors.New("lazy: data arrived after its position became a no-op")
	// ErrBadInput: a malformed message (INVALID_ARGUMENT).
	ErrBadInput = errors.New("lazy: bad input")
	// ErrTooFarAhead: a client's sequence number runs further than
	// ClientAheadMax past its floor (RESOURCE_EXHAUSTED).
	ErrTooFarAhead = errors.New("lazy: sequence number too far ahead of the client's floor")
	// ErrUnknownShard: a record names a shard the cluster does not have.
	ErrUnknownShard = errors.New("lazy: unknown shard")
	// ErrNotInConfig: the shard replica was taken out of its shard's
	// configuration (NOT_PRIMARY: the sender asks the shard table again).
	ErrNotInConfig = errors.New("lazy: replica taken out of its shard's configuration")
	// ErrStaleTerm: a placement of a primary that another replaced
	// (NOT_PRIMARY).
	ErrStaleTerm = errors.New("lazy: placement of a replaced primary")
)

// Bounds. Every queue of the cores has one; Config.Validate checks them
// together.
const (
	// RingMaxDefault is the default number of metadata entries a
	// sequencing replica holds unordered.
	RingMaxDefault = 1 << 16
	// BatchMaxDefault is the default number of positions one background
	// batch orders.
	BatchMaxDefault = 4096
	// ClientAheadMax bounds how far past its floor a client may run: the
	// per-client dedup state holds at most this many sequence numbers.
	ClientAheadMax = 1 << 14
	// HeldReadsMaxDefault bounds the reads a shard replica holds above
	// stable-gp.
	HeldReadsMaxDefault = 1 << 14
)
