package raftnode

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc/credentials"
)

// Defaults for the zero values of Config.
const (
	defaultTickInterval    = 20 * time.Millisecond
	defaultElectionTicks   = 20
	defaultHeartbeatTicks  = 2
	defaultSnapshotEntries = 10000
	defaultMaxInflightMsgs = 256
)

// Bounds. Every queue, batch and message size of the package is named here so
// that they can be reviewed together.
const (
	// ProposalBytesMax is the largest payload Propose accepts. It keeps a
	// single entry well inside one append message and one WAL record.
	ProposalBytesMax = 1 << 20

	// MsgBytesMax is the largest gRPC message the RaftTransport service must
	// accept: a MsgSnap carries the whole FSM snapshot in one message. Servers
	// passed to RegisterGRPC should be built with ServerOptions.
	MsgBytesMax = 256 << 20

	// appendMsgBytesMax is raft's MaxSizePerMsg: the target size of one append
	// message, so that catching up a follower is batched but one message never
	// monopolises a stream.
	appendMsgBytesMax = 1 << 20
	// uncommittedBytesMax bounds the leader's uncommitted tail so that a
	// leader without a quorum rejects proposals instead of growing without
	// limit.
	uncommittedBytesMax = 64 << 20
	// committedBytesPerReadyMax bounds the entries applied in one Ready, so
	// ticks and messages are still handled while a long backlog is applied.
	committedBytesPerReadyMax = 8 << 20

	// peerQueueMsgsMax is the outbound queue per peer. The driver never waits
	// for it: a full queue drops the message and reports the peer unreachable.
	peerQueueMsgsMax = 4096
	// sendBatchMsgsMax and sendBatchBytesMax bound one RaftBatch. A batch
	// is at most one maximal append message (appendMsgBytesMax plus one
	// entry) or sendBatchBytesMax, inside gRPC's default 4 MiB receive limit.
	sendBatchMsgsMax  = 1024
	sendBatchBytesMax = 2 << 20
	// commitHoldMax is how long a sender may hold back an append that only
	// carries a new commit index, waiting for the peer's next append to
	// carry it instead (see peer.stream).
	commitHoldMax = 2 * time.Millisecond
	// snapshotQueueMax: raft has at most one snapshot in flight per
	// follower and waits for its report before sending another.
	snapshotQueueMax = 1
	// proposalQueueMax bounds proposals queued for the driver; Propose
	// blocks beyond it, which paces proposers to what raft can persist.
	proposalQueueMax = 1024
	// recvQueueMsgsMax is the inbound queue of the driver. A full queue
	// applies back-pressure to the peers' streams, not to the driver.
	recvQueueMsgsMax = 4096
	// reportQueueMax buffers unreachable and snapshot reports from peer
	// senders to the driver.
	reportQueueMax = 256
	// inputsPerReadyMax is how many queued inputs the driver folds into one
	// Ready, so one WAL write and one fsync cover many messages and proposals.
	inputsPerReadyMax = 512

	// reconnectBackoffMin and reconnectBackoffMax bound the wait between
	// attempts to (re)open a stream to a peer that is down.
	reconnectBackoffMin = 20 * time.Millisecond
	reconnectBackoffMax = time.Second
	// snapshotSendTimeout bounds one MsgSnap transfer; raft retries after a
	// failure is reported.
	snapshotSendTimeout = time.Minute

	// catchUpEntriesMax is how many applied entries stay in memory behind a
	// snapshot, so a follower that lags a little gets entries, not a snapshot.
	catchUpEntriesMax = 5000

	// walRecordBytesMax bounds one WAL record; a larger length field can only
	// be damage.
	walRecordBytesMax = 2 * ProposalBytesMax
)

// Config configures one replica. Zero values of the tuning fields select
// defaults.
type Config struct {
	ID    uint64            // 1..n
	Peers map[uint64]string // every replica's id -> gRPC address (including this one); fixed membership
	Dir   string            // WAL + snapshots live here
	// Fsync makes each Ready durable against power loss before messages are
	// sent or entries applied. Without it data reaches the page cache only,
	// which survives a process crash but not a machine crash.
	Fsync           bool
	TickInterval    time.Duration // default 20ms
	ElectionTicks   int           // default 20
	HeartbeatTicks  int           // default 2
	SnapshotEntries uint64        // snapshot the FSM and compact every this many applied entries; default 10000
	MaxInflightMsgs int           // default 256
	Logger          *slog.Logger  // may be nil
	// Creds secure the connections to the peers; nil is plaintext.
	Creds credentials.TransportCredentials
}

func (c Config) withDefaults() Config {
	if c.TickInterval == 0 {
		c.TickInterval = defaultTickInterval
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = defaultElectionTicks
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = defaultHeartbeatTicks
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = defaultSnapshotEntries
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = defaultMaxInflightMsgs
	}
	return c
}

// Validate reports every bad value at once. Zero tuning values are valid and
// mean "default".
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	if c.ID == 0 {
		bad("ID must be non-zero")
	}
	if len(c.Peers) == 0 {
		bad("Peers is empty")
	} else {
		if _, ok := c.Peers[c.ID]; c.ID != 0 && !ok {
			bad("ID %d is not in Peers", c.ID)
		}
		if len(c.Peers)%2 == 0 {
			bad("Peers has %d members; the ordering layer needs 2f+1", len(c.Peers))
		}
		seen := make(map[string]uint64, len(c.Peers))
		for _, id := range sortedIDs(c.Peers) {
			addr := c.Peers[id]
			if id == 0 {
				bad("peer id 0 is reserved by raft")
			}
			if addr == "" {
				bad("peer %d has an empty address", id)
				continue
			}
			if other, dup := seen[addr]; dup {
				bad("peers %d and %d share address %q", other, id, addr)
			}
			seen[addr] = id
		}
	}
	if c.Dir == "" {
		bad("Dir is empty")
	}
	if c.TickInterval < 0 {
		bad("TickInterval %v is negative", c.TickInterval)
	}
	if c.HeartbeatTicks < 0 {
		bad("HeartbeatTicks %d is negative", c.HeartbeatTicks)
	}
	if c.ElectionTicks <= c.HeartbeatTicks {
		bad("ElectionTicks %d must exceed HeartbeatTicks %d", c.ElectionTicks, c.HeartbeatTicks)
	}
	if c.MaxInflightMsgs < 0 {
		bad("MaxInflightMsgs %d is negative", c.MaxInflightMsgs)
	}
	if c.MaxInflightMsgs > peerQueueMsgsMax {
		// More in flight than a peer queue holds would turn flow control into
		// drops.
		bad("MaxInflightMsgs %d exceeds the peer queue of %d", c.MaxInflightMsgs, peerQueueMsgsMax)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("raftnode config: %w", err)
	}
	return nil
}

// sortedIDs gives map iteration a fixed order, so errors and ConfStates are
// reproducible.
func sortedIDs(peers map[uint64]string) []uint64 {
	return slices.Sorted(maps.Keys(peers))
}
