// Package raftnode drives etcd raft for the ordering layer's 2f+1 replicas.
// All consensus decisions are raft's; this package only persists raft's
// output (a WAL and a snapshot file in Config.Dir), applies committed entries
// to an FSM and moves messages between replicas over gRPC.
//
// One goroutine, the driver, owns the raft.RawNode and the FSM. Per Ready it
// writes the WAL once (and fsyncs once, when raft needs durability), then
// hands messages to per-peer sender goroutines without waiting and applies
// committed entries (the leader applies first, a follower sends first).
// Lifecycle: New, RegisterGRPC, Start, ..., Stop.
package raftnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/rpcopt"
	"github.com/augur-log/augur/internal/stagetime"
)

// FSM is the replicated state machine. Apply is called for committed normal
// entries in log order from the node's goroutine (never concurrently); empty
// entries (leader no-ops) and conf changes are not passed. Apply must not
// modify data. No FSM method may call Stop.
type FSM interface {
	// Apply applies a committed entry. An error halts the node: the entry
	// is committed, so skipping it would leave this replica's state apart
	// from the others'.
	Apply(index uint64, data []byte) error
	Snapshot() ([]byte, error) // called from the node goroutine between applies
	Restore(data []byte) error // on start-up from a snapshot, and when the leader sends one
}

var (
	// ErrStopped is returned once Stop was called.
	ErrStopped = errors.New("raftnode: stopped")
	// ErrNoLeader is returned by Propose while no leader is known, e.g.
	// during an election.
	ErrNoLeader = errors.New("raftnode: no known leader")
	// ErrProposalTooLarge is returned for payloads above ProposalBytesMax.
	ErrProposalTooLarge = errors.New("raftnode: proposal too large")
	// ErrEmptyProposal is returned for empty payloads, which the FSM could not
	// tell from the leader's no-op entries.
	ErrEmptyProposal = errors.New("raftnode: empty proposal")
)

// Node is one raft replica.
type Node struct {
	cfg       Config
	log       *slog.Logger
	fsm       FSM
	storage   *diskStorage
	transport *transport

	// Owned by the driver goroutine once Start was called.
	rn            *raft.RawNode
	confState     *pb.ConfState
	applied       uint64
	snapshotIndex uint64 // newest snapshot, taken or installed
	snapshotRetry uint64 // no FSM snapshot before this index after one failed
	reports       []peerReport
	// appended times this leader's entries from its Ready to its apply,
	// when the bench asks (internal/stagetime).
	appended stagetime.Indexes

	// Published by the driver for other goroutines.
	lead         atomic.Uint64
	isLeader     atomic.Bool
	appliedIndex atomic.Uint64
	leaderc      chan uint64 // capacity 1: the latest leader wins
	fatal        atomic.Pointer[error]
	// heardAt is when a message of each peer last reached raft (Unix
	// nanoseconds), for Unreachable.
	heardAt map[uint64]*atomic.Int64

	recvc   chan *pb.Message
	propc   chan proposal // proposals not yet handed to raft
	reportc chan peerReport

	mu      sync.Mutex // guards started and stopped
	started bool
	stopped bool
	stopc   chan struct{} // closed by Stop
	done    chan struct{} // closed when the driver goroutine exits
	closed  chan struct{} // closed when Stop has released every resource
}

// New opens (or creates) the WAL and snapshot in cfg.Dir, restores the newest
// snapshot into fsm and prepares raft to replay the logged entries, which are
// applied again once the node runs. A new directory bootstraps a cluster of
// all Peers.
func New(cfg Config, fsm FSM) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if fsm == nil {
		return nil, errors.New("raftnode: nil FSM")
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("raft_id", cfg.ID)

	members := sortedIDs(cfg.Peers)
	st, snap, err := openStorage(cfg.Dir, cfg.Fsync, &pb.ConfState{Voters: members}, log)
	if err != nil {
		return nil, fmt.Errorf("raftnode %d: open %s: %w", cfg.ID, cfg.Dir, err)
	}
	n := &Node{
		cfg:       cfg,
		log:       log,
		fsm:       fsm,
		storage:   st,
		confState: &pb.ConfState{Voters: members},
		leaderc:   make(chan uint64, 1),
		recvc:     make(chan *pb.Message, recvQueueMsgsMax),
		propc:     make(chan proposal, proposalQueueMax),
		reportc:   make(chan peerReport, reportQueueMax),
		stopc:     make(chan struct{}),
		done:      make(chan struct{}),
		closed:    make(chan struct{}),
		heardAt:   map[uint64]*atomic.Int64{},
	}
	for _, id := range members {
		n.heardAt[id] = &atomic.Int64{}
	}
	if err := n.init(snap); err != nil {
		_ = st.close()
		return nil, fmt.Errorf("raftnode %d: %w", cfg.ID, err)
	}
	return n, nil
}

func (n *Node) init(snap *pb.Snapshot) error {
	if snap != nil {
		md := snap.GetMetadata()
		voters := slices.Sorted(slices.Values(md.GetConfState().GetVoters()))
		if !slices.Equal(voters, n.confState.GetVoters()) {
			return fmt.Errorf("snapshot %d has members %v, Peers has %v; membership is fixed", md.GetIndex(), voters, n.confState.GetVoters())
		}
		if err := n.fsm.Restore(snap.GetData()); err != nil {
			return fmt.Errorf("restore fsm from snapshot %d: %w", md.GetIndex(), err)
		}
		n.confState = proto.Clone(md.GetConfState()).(*pb.ConfState)
		n.applied, n.snapshotIndex = md.GetIndex(), md.GetIndex()
		n.appliedIndex.Store(n.applied)
		n.log.Info("raft restored snapshot", "index", md.GetIndex(), "term", md.GetTerm())
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        n.cfg.ID,
		ElectionTick:              n.cfg.ElectionTicks,
		HeartbeatTick:             n.cfg.HeartbeatTicks,
		Storage:                   n.storage.ms,
		Applied:                   n.applied,
		MaxSizePerMsg:             appendMsgBytesMax,
		MaxCommittedSizePerReady:  committedBytesPerReadyMax,
		MaxUncommittedEntriesSize: uncommittedBytesMax,
		MaxInflightMsgs:           n.cfg.MaxInflightMsgs,
		CheckQuorum:               true,
		PreVote:                   true,
		Logger:                    raftLogger{n.log},
	})
	if err != nil {
		return fmt.Errorf("create raft node: %w", err)
	}
	n.rn = rn
	tr, err := newTransport(n.cfg, n.reportc, n.log)
	if err != nil {
		return err
	}
	n.transport = tr
	return nil
}

// RegisterGRPC registers the RaftTransport service that receives peers'
// messages. s should accept messages of MsgBytesMax (see ServerOptions), or
// snapshots larger than gRPC's default 4 MiB cannot be delivered.
func (n *Node) RegisterGRPC(s *grpc.Server) {
	augurpb.RegisterRaftTransportServer(s, &raftService{n: n})
}

// ServerOptions are the options a gRPC server hosting RaftTransport needs:
// rpcopt's, which accept messages of MsgBytesMax.
func ServerOptions() []grpc.ServerOption {
	return rpcopt.ServerOptions()
}

// Start starts the driver goroutine and the outbound peer streams. It does
// nothing after Stop or a second time.
func (n *Node) Start() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.started || n.stopped {
		return
	}
	n.started = true
	n.transport.start()
	go n.run()
}

// Stop stops every goroutine of the node and closes its files. It is
// idempotent and returns once everything is released.
func (n *Node) Stop() {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		<-n.closed
		return
	}
	n.stopped = true
	started := n.started
	n.mu.Unlock()

	close(n.stopc)
	if started {
		<-n.done
	}
	n.transport.stop()
	if err := n.storage.close(); err != nil {
		n.log.Error("raft storage close", "err", err)
	}
	n.lead.Store(0)
	n.isLeader.Store(false)
	close(n.closed)
}

// Propose queues data for raft without waiting for it to commit; it blocks
// only while the proposal queue is full. On a follower raft forwards it to
// the leader; callers normally propose on the leader. A nil error does not
// mean the entry will commit: a leader change can still drop it, so callers
// watch what is applied and propose again if needed.
//
// The queue lets the driver fold many proposals into one Ready, so a single
// proposer gets one WAL write and fsync per batch, not per proposal.
func (n *Node) Propose(ctx context.Context, data []byte) error {
	switch {
	case len(data) == 0:
		return ErrEmptyProposal
	case len(data) > ProposalBytesMax:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrProposalTooLarge, len(data), ProposalBytesMax)
	}
	select {
	case <-n.stopc:
		return ErrStopped
	default:
	}
	if err := n.Err(); err != nil {
		return err
	}
	if n.Leader() == 0 {
		return ErrNoLeader
	}
	// raft keeps the slice in its log; the caller may reuse its buffer.
	select {
	case n.propc <- proposal{data: bytes.Clone(data), at: stagetime.Now()}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return ErrStopped
	case <-n.done:
		return n.errOrStopped()
	}
}

// Leader returns the current leader's id, or 0 if none is known.
func (n *Node) Leader() uint64 { return n.lead.Load() }

// Unreachable says that this node leads and heard nothing from peer id for
// an election timeout: the peer is down or cut off, though it is still a
// voter. A follower cannot tell, and says false.
func (n *Node) Unreachable(id uint64) bool {
	h := n.heardAt[id]
	if h == nil || id == n.cfg.ID || !n.isLeader.Load() {
		return false
	}
	timeout := time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
	return time.Since(time.Unix(0, h.Load())) > timeout
}

// IsLeader reports whether this replica is the leader.
func (n *Node) IsLeader() bool { return n.isLeader.Load() }

// LeaderChanges receives the new leader id (0: unknown) whenever it changes.
// Only the latest value is kept for a slow reader; the driver never waits.
func (n *Node) LeaderChanges() <-chan uint64 { return n.leaderc }

// AppliedIndex is the index of the last entry applied to the FSM (or
// restored from a snapshot).
func (n *Node) AppliedIndex() uint64 { return n.appliedIndex.Load() }

// Err returns the storage or FSM error that halted the node, if any. A
// halted node proposes nothing and must be stopped and restarted.
func (n *Node) Err() error {
	if p := n.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

func (n *Node) errOrStopped() error {
	if err := n.Err(); err != nil {
		return err
	}
	return ErrStopped
}

// beforeSaveHook, when a test sets it before any node starts, sees each
// Ready just before the driver persists it. Nil outside tests.
var beforeSaveHook func(n *Node, rd *raft.Ready)

// run is the driver goroutine: the only user of rn, storage and fsm.
func (n *Node) run() {
	defer close(n.done)
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	for {
		if !n.rn.HasReady() && !n.awaitInput(ticker.C) {
			return
		}
		// Fold what is already queued into the same Ready, so one WAL write
		// and one fsync cover many messages and proposals.
		for range inputsPerReadyMax {
			running, handled := n.pollInput(ticker.C)
			if !running {
				return
			}
			if !handled {
				break
			}
		}
		if !n.rn.HasReady() {
			continue
		}
		if err := n.handleReady(); err != nil {
			n.halt(err)
			return
		}
	}
}

// awaitInput blocks for one input; false means Stop was called.
func (n *Node) awaitInput(tick <-chan time.Time) bool {
	select {
	case <-n.stopc:
		return false
	case <-tick:
		n.rn.Tick()
	case m := <-n.recvc:
		n.step(m)
	case p := <-n.propc:
		n.propose(p)
	case r := <-n.reportc:
		n.report(r)
	}
	return true
}

// pollInput handles one input if one is waiting.
func (n *Node) pollInput(tick <-chan time.Time) (running, handled bool) {
	select {
	case <-n.stopc:
		return false, false
	case <-tick:
		n.rn.Tick()
	case m := <-n.recvc:
		n.step(m)
	case p := <-n.propc:
		n.propose(p)
	case r := <-n.reportc:
		n.report(r)
	default:
		return true, false
	}
	return true, true
}

func (n *Node) step(m *pb.Message) {
	if h := n.heardAt[m.GetFrom()]; h != nil {
		h.Store(time.Now().UnixNano())
	}
	if err := n.rn.Step(m); err != nil {
		n.log.Debug("raft step", "from", m.GetFrom(), "type", m.GetType().String(), "err", err)
	}
}

// propose hands one queued proposal to raft. raft drops it when no leader is
// known or leadership is moving; like a proposal lost in a leader change,
// that is for the proposer to notice.
func (n *Node) propose(p proposal) {
	if !p.at.IsZero() {
		stagetime.Observe(stagetime.RaftProposeWait, time.Since(p.at))
	}
	if err := n.rn.Propose(p.data); err != nil {
		n.log.Debug("raft dropped proposal", "bytes", len(p.data), "err", err)
	}
}

// proposal is one queued proposal; at is when it was queued, when the
// bench times stages.
type proposal struct {
	data []byte
	at   time.Time
}

func (n *Node) report(r peerReport) {
	if r.snapshot {
		n.rn.ReportSnapshot(r.peer, r.status)
		return
	}
	n.rn.ReportUnreachable(r.peer)
}

// handleReady follows raft's ordering rules: persist before sending and
// before applying, except that a leader replicates while it persists.
func (n *Node) handleReady() error {
	rd := n.rn.Ready()
	if rd.SoftState != nil {
		n.publishLeader(rd.SoftState)
	}
	// A leader sends its appends and heartbeats before writing its own
	// copy, so that its fsync and the followers' overlap (Raft thesis
	// §10.2.1). That is safe: raft counts the leader's own copy toward a
	// commit only once Advance steps its self-acknowledgement, after the
	// write below; the followers acknowledge only what they persisted. So
	// an entry still commits only once a quorum has it on disk.
	leader := n.isLeader.Load()
	if leader {
		n.send(rd.Messages, sendReplication)
		for _, e := range rd.Entries {
			n.appended.Mark(e.GetIndex())
		}
	}
	// A leader applies before it persists the Ready's new entries. What it
	// applies is committed, so it is on a quorum's disks already, its own
	// copy among them (see above); persisting the entries proposed since
	// changes nothing about it. Applying after that fsync made every cut's
	// commit wait for the fsync of the next cut under load, and the FSM's
	// watchers (storage servers waiting for the cut) with it. A snapshot
	// to install is restored first, so that case keeps the order below.
	applyFirst := leader && raft.IsEmptySnap(rd.Snapshot)
	if applyFirst {
		if err := n.apply(rd.CommittedEntries); err != nil {
			return err
		}
	}
	if beforeSaveHook != nil {
		beforeSaveHook(n, &rd)
	}
	began := time.Now()
	if err := n.storage.saveReady(&rd); err != nil {
		return fmt.Errorf("persist ready: %w", err)
	}
	if len(rd.Entries) > 0 && stagetime.On() {
		stage := stagetime.RaftSaveFollower
		if leader {
			stage = stagetime.RaftSaveLeader
		}
		stagetime.Observe(stage, time.Since(began))
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := n.restore(rd.Snapshot); err != nil {
			return err
		}
	}
	// Committed entries are durable on a quorum, so they may be applied
	// before or after this Ready's messages go out; the order only decides
	// who waits. A leader applied above: the Ready that commits an entry
	// carries the messages that merely tell the followers so, and the FSM's
	// watchers should not queue behind those sends. A follower sends first:
	// its messages acknowledge the entries the leader is waiting to commit.
	if !leader {
		n.send(rd.Messages, sendAll)
	}
	if !applyFirst {
		if err := n.apply(rd.CommittedEntries); err != nil {
			return err
		}
	}
	if leader {
		n.send(rd.Messages, sendRest)
	}
	if err := n.maybeSnapshot(); err != nil {
		return err
	}
	n.rn.Advance(rd)
	// Failed sends are reported only now: raft is stepped between Readys,
	// never in the middle of one.
	for _, r := range n.reports {
		n.report(r)
	}
	n.reports = n.reports[:0]
	return nil
}

func (n *Node) publishLeader(ss *raft.SoftState) {
	n.isLeader.Store(ss.RaftState == raft.StateLeader)
	lead := ss.Lead
	old := n.lead.Swap(lead)
	if old == lead {
		return
	}
	n.log.Info("raft leader changed", "leader", lead, "previous", old, "state", ss.RaftState.String())
	select {
	case <-n.leaderc:
	default:
	}
	// Cannot block: the driver is the only sender and the buffer is empty.
	n.leaderc <- lead
}

// sendWhich picks the messages of a Ready that send queues.
type sendWhich int

const (
	sendAll sendWhich = iota
	// sendReplication: a leader's appends and heartbeats only, which it
	// may send before persisting its Ready.
	sendReplication
	// sendRest: all but those.
	sendRest
)

// replication says m only carries a leader's log or commit index to a
// follower: nothing in it depends on the leader's own copy being on disk.
func replication(m *pb.Message) bool {
	switch m.GetType() {
	case pb.MsgApp, pb.MsgHeartbeat:
		return true
	}
	return false
}

// send queues each message for its peer. A full queue drops the message; raft
// retransmits once told the peer is unreachable.
func (n *Node) send(msgs []*pb.Message, which sendWhich) {
	for _, m := range msgs {
		if which != sendAll && (which == sendReplication) != replication(m) {
			continue
		}
		to := m.GetTo()
		isSnap := m.GetType() == pb.MsgSnap
		isApp := m.GetType() == pb.MsgApp
		p := n.transport.peers[to]
		if p == nil {
			n.log.Error("raft message for unknown peer dropped", "to", to, "type", m.GetType().String())
			continue
		}
		data, err := proto.Marshal(m)
		switch {
		case err != nil:
			n.log.Error("raft message encode", "to", to, "err", err)
		case len(data) > MsgBytesMax:
			n.log.Error("raft message exceeds MsgBytesMax, dropped", "to", to, "type", m.GetType().String(), "bytes", len(data))
		case p.enqueue(outMsg{data: data, snapshot: isSnap, app: isApp, commitOnly: isApp && len(m.Entries) == 0}):
			continue
		}
		n.reports = append(n.reports, peerReport{peer: to})
		if isSnap {
			n.reports = append(n.reports, peerReport{peer: to, snapshot: true, status: raft.SnapshotFailure})
		}
	}
}

// restore installs a snapshot from the leader; storage already holds it.
func (n *Node) restore(snap *pb.Snapshot) error {
	md := snap.GetMetadata()
	if md.GetIndex() <= n.applied {
		return fmt.Errorf("snapshot %d does not advance applied index %d", md.GetIndex(), n.applied)
	}
	if err := n.fsm.Restore(snap.GetData()); err != nil {
		return fmt.Errorf("restore fsm from snapshot %d: %w", md.GetIndex(), err)
	}
	n.confState = proto.Clone(md.GetConfState()).(*pb.ConfState)
	n.applied, n.snapshotIndex = md.GetIndex(), md.GetIndex()
	n.appliedIndex.Store(n.applied)
	n.log.Info("raft installed snapshot from leader", "index", md.GetIndex(), "term", md.GetTerm())
	return nil
}

func (n *Node) apply(ents []*pb.Entry) error {
	for _, e := range ents {
		i := e.GetIndex()
		if i <= n.applied {
			continue
		}
		if i != n.applied+1 {
			return fmt.Errorf("committed entry %d does not follow applied index %d", i, n.applied)
		}
		switch e.GetType() {
		case pb.EntryNormal:
			if len(e.GetData()) > 0 {
				if err := n.fsm.Apply(i, e.GetData()); err != nil {
					return fmt.Errorf("apply committed entry %d: %w", i, err)
				}
			}
		case pb.EntryConfChange:
			cc := new(pb.ConfChange)
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return fmt.Errorf("decode conf change at %d: %w", i, err)
			}
			n.confState = n.rn.ApplyConfChange(cc)
		case pb.EntryConfChangeV2:
			cc := new(pb.ConfChangeV2)
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return fmt.Errorf("decode conf change at %d: %w", i, err)
			}
			n.confState = n.rn.ApplyConfChange(cc)
		}
		n.applied = i
		n.appended.Reached(stagetime.RaftCommit, i)
	}
	n.appliedIndex.Store(n.applied)
	return nil
}

// maybeSnapshot snapshots the FSM every SnapshotEntries applied entries, so
// the WAL and the in-memory log stay bounded. An FSM that fails to snapshot
// is asked again SnapshotEntries later; the log grows meanwhile.
func (n *Node) maybeSnapshot() error {
	if n.applied < n.snapshotIndex+n.cfg.SnapshotEntries || n.applied < n.snapshotRetry {
		return nil
	}
	data, err := n.fsm.Snapshot()
	if err != nil {
		n.snapshotRetry = n.applied + n.cfg.SnapshotEntries
		n.log.Error("raft fsm snapshot failed; retrying later", "applied", n.applied, "err", err)
		return nil
	}
	catchUp := min(uint64(catchUpEntriesMax), n.cfg.SnapshotEntries)
	if err := n.storage.snapshot(n.applied, n.confState, data, catchUp); err != nil {
		return fmt.Errorf("snapshot at %d: %w", n.applied, err)
	}
	n.log.Debug("raft snapshot taken", "index", n.applied, "bytes", len(data))
	n.snapshotIndex = n.applied
	return nil
}

// halt stops the driver after an error that makes continuing unsafe: raft's
// durability or the FSM's consistency can no longer be vouched for.
func (n *Node) halt(err error) {
	n.fatal.Store(&err)
	n.log.Error("raft node halted", "err", err)
	n.isLeader.Store(false)
	if n.lead.Swap(0) != 0 {
		select {
		case <-n.leaderc:
		default:
		}
		n.leaderc <- 0
	}
}
