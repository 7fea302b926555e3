package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/rpcopt"
)

const (
	// peerConnectTimeout bounds one TCP + HTTP/2 handshake with a peer.
	peerConnectTimeout = 5 * time.Second
	// sendStallTimeout ends a stream whose Send has not returned for this
	// long: a peer whose machine died leaves the TCP window full and Send
	// blocked, and raft should see it as unreachable instead.
	sendStallTimeout = 5 * time.Second
)

// outMsg is a marshalled raft message on its way to one peer.
type outMsg struct {
	data     []byte
	snapshot bool // MsgSnap: raft waits for ReportSnapshot
	app      bool // MsgApp
	// commitOnly marks an MsgApp without entries: raft sends one to every
	// follower each time the commit index moves, and it only tells the
	// follower the new commit index (or probes where its log ends).
	commitOnly bool
}

// peerReport tells the driver what became of messages it handed off.
type peerReport struct {
	peer     uint64
	snapshot bool                // false: the peer is unreachable
	status   raft.SnapshotStatus // when snapshot
}

// transport owns one sender goroutine and one client connection per peer.
type transport struct {
	peers  map[uint64]*peer
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newTransport(cfg Config, reportc chan<- peerReport, log *slog.Logger) (*transport, error) {
	ctx, cancel := context.WithCancel(context.Background())
	t := &transport{peers: make(map[uint64]*peer), ctx: ctx, cancel: cancel}
	creds := cfg.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	for _, id := range sortedIDs(cfg.Peers) {
		if id == cfg.ID {
			continue
		}
		addr := cfg.Peers[id]
		// gRPC's own reconnect backoff grows to two minutes by default; a
		// restarted replica must rejoin within an election or two.
		// rpcopt's options: fixed flow-control windows (no BDP ping for
		// every raft message) and the pooled codec.
		conn, err := grpc.NewClient(addr, append(rpcopt.DialOptions(),
			grpc.WithTransportCredentials(creds),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{
					BaseDelay:  reconnectBackoffMin,
					Multiplier: 1.6,
					Jitter:     0.2,
					MaxDelay:   reconnectBackoffMax,
				},
				MinConnectTimeout: peerConnectTimeout,
			}),
		)...)
		if err != nil {
			t.closeConns()
			cancel()
			return nil, fmt.Errorf("client for peer %d at %q: %w", id, addr, err)
		}
		t.peers[id] = &peer{
			id:      id,
			conn:    conn,
			client:  augurpb.NewRaftTransportClient(conn),
			q:       make(chan outMsg, peerQueueMsgsMax),
			snapq:   make(chan outMsg, snapshotQueueMax),
			reportc: reportc,
			log:     log.With("peer", id, "addr", addr),
		}
	}
	return t, nil
}

func (t *transport) start() {
	for _, p := range t.peers {
		t.wg.Add(2)
		go func() {
			defer t.wg.Done()
			p.run(t.ctx)
		}()
		go func() {
			defer t.wg.Done()
			p.runSnapshots(t.ctx)
		}()
	}
}

// stop ends the sender goroutines and closes the connections; safe without
// start.
func (t *transport) stop() {
	t.cancel()
	t.wg.Wait()
	t.closeConns()
}

func (t *transport) closeConns() {
	for _, p := range t.peers {
		_ = p.conn.Close()
	}
}

type peer struct {
	id      uint64
	conn    *grpc.ClientConn
	client  augurpb.RaftTransportClient
	q       chan outMsg // everything but snapshots
	snapq   chan outMsg // MsgSnap, sent by their own goroutine
	reportc chan<- peerReport
	log     *slog.Logger
}

// enqueue never blocks; false means the queue is full and m was dropped.
func (p *peer) enqueue(m outMsg) bool {
	q := p.q
	if m.snapshot {
		q = p.snapq
	}
	select {
	case q <- m:
		return true
	default:
		return false
	}
}

// run keeps one long-lived stream to the peer, reopening it with backoff
// after a failure. Messages queued while the peer is down are dropped: raft
// resends what still matters once it hears back.
func (p *peer) run(ctx context.Context) {
	wait := reconnectBackoffMin
	down := false
	for {
		var first outMsg
		select {
		case <-ctx.Done():
			return
		case first = <-p.q:
		}
		delivered, err := p.stream(ctx, first)
		if ctx.Err() != nil {
			return
		}
		if delivered {
			wait = reconnectBackoffMin
			down = false
		}
		if !down {
			p.log.Warn("raft peer stream failed; reconnecting", "err", err)
			down = true
		} else {
			p.log.Debug("raft peer still unreachable", "err", err)
		}
		p.report(ctx, peerReport{peer: p.id})
		if !p.pause(ctx, wait) {
			return
		}
		wait = min(2*wait, reconnectBackoffMax)
	}
}

// stream opens a stream and pumps the queue into it, starting with first,
// until a send fails. delivered tells whether any batch went out.
//
// An append that only carries a new commit index is held back for up to
// commitHoldMax. Under load the next cut's append to the same peer comes
// within an ordering interval, carries a commit index at least as new, and
// replaces it: that saves the message and the follower's reply to it, four
// of the eight raft messages a cut cost with two followers. Dropping a raft
// message is always safe. The hold delays by at most commitHoldMax what
// such an append does: tell a follower of a commit (nothing on the append
// path waits for that; storage servers follow the leader), and probe a
// follower whose inflight window is full or that is being probed.
func (p *peer) stream(ctx context.Context, first outMsg) (delivered bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := p.client.Send(sctx)
	if err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	stall := time.AfterFunc(sendStallTimeout, cancel)
	stall.Stop()
	defer stall.Stop()
	holdTimer := time.NewTimer(time.Hour)
	holdTimer.Stop()
	defer holdTimer.Stop()

	var (
		batch = make([]outMsg, 0, sendBatchMsgsMax)
		data  = make([][]byte, 0, sendBatchMsgsMax)
		// held is a commit-only append taken out of the last batch, to go
		// with the next one or alone at holdTill.
		held     outMsg
		holding  bool
		holdTill time.Time
	)
	// next is a message taken from the queue and not yet batched.
	next, have := first, true
	for {
		if !have {
			var holdC <-chan time.Time
			if holding {
				holdC = holdTimer.C
			}
			select {
			case <-ctx.Done():
				return delivered, ctx.Err()
			case next = <-p.q:
				have = true
			case <-holdC:
				// The held commit's time is up: it goes now.
			}
		}
		batch = batch[:0]
		size := 0
		wasHolding := holding
		if holding {
			batch = append(batch, held)
			size += len(held.data)
			holding = false
		}
		if have {
			batch = append(batch, next)
			size += len(next.data)
			have = false
		}
	fill:
		for len(batch) < sendBatchMsgsMax {
			select {
			case m := <-p.q:
				if size+len(m.data) > sendBatchBytesMax {
					next, have = m, true
					break fill
				}
				batch = append(batch, m)
				size += len(m.data)
			default:
				break fill
			}
		}
		batch, held, holding = coalesceCommits(batch)
		switch {
		case holding && !wasHolding:
			holdTill = time.Now().Add(commitHoldMax)
			holdTimer.Reset(commitHoldMax)
		case holding && time.Now().Before(holdTill):
			// A newer commit replaced the held one and keeps its
			// deadline, so a follower learns of a commit at most
			// commitHoldMax late.
			holdTimer.Reset(time.Until(holdTill))
		case holding:
			batch = append(batch, held)
			holding = false
			holdTimer.Stop()
		default:
			holdTimer.Stop()
		}
		if len(batch) == 0 {
			continue
		}
		data = data[:0]
		for _, m := range batch {
			data = append(data, m.data)
		}
		stall.Reset(sendStallTimeout)
		err := s.Send(&augurpb.RaftBatch{Messages: data})
		stall.Stop()
		if err != nil {
			if errors.Is(err, io.EOF) {
				// The server ended the stream; its status says why.
				if _, serr := s.CloseAndRecv(); serr != nil {
					err = serr
				}
			}
			return delivered, fmt.Errorf("send: %w", err)
		}
		delivered = true
	}
}

// coalesceCommits drops the commit-only appends of batch that a later
// append in it replaces (raft sends appends to one peer with ascending
// commit indexes), and takes out a commit-only append that ends the batch,
// to be held back: hold tells whether it did.
func coalesceCommits(batch []outMsg) (out []outMsg, held outMsg, hold bool) {
	lastApp := -1
	for i, m := range batch {
		if m.app {
			lastApp = i
		}
	}
	out = batch[:0]
	for i, m := range batch {
		if m.commitOnly && i < lastApp {
			continue
		}
		out = append(out, m)
	}
	if n := len(out); n > 0 && out[n-1].commitOnly {
		return out[:n-1], out[n-1], true
	}
	return out, outMsg{}, false
}

// runSnapshots sends snapshots apart from the main stream, so a large
// transfer does not hold up heartbeats to the same peer.
func (p *peer) runSnapshots(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-p.snapq:
			p.sendSnapshot(ctx, m)
		}
	}
}

// sendSnapshot sends a MsgSnap on a stream of its own and waits for the
// peer's ack, so raft learns whether the snapshot arrived.
func (p *peer) sendSnapshot(ctx context.Context, m outMsg) {
	sctx, cancel := context.WithTimeout(ctx, snapshotSendTimeout)
	defer cancel()
	err := func() error {
		s, err := p.client.Send(sctx, grpc.MaxCallSendMsgSize(MsgBytesMax))
		if err != nil {
			return fmt.Errorf("open stream: %w", err)
		}
		if err := s.Send(&augurpb.RaftBatch{Messages: [][]byte{m.data}}); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("send: %w", err)
		}
		if _, err := s.CloseAndRecv(); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		return nil
	}()
	st := raft.SnapshotFinish
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		st = raft.SnapshotFailure
		p.log.Warn("raft snapshot send failed", "bytes", len(m.data), "err", err)
	} else {
		p.log.Info("raft snapshot sent", "bytes", len(m.data))
	}
	p.report(ctx, peerReport{peer: p.id, snapshot: true, status: st})
}

// pause waits before the next connection attempt, dropping what is queued
// meanwhile. It returns false once the transport stops.
func (p *peer) pause(ctx context.Context, d time.Duration) bool {
	// Jitter keeps the replicas from reconnecting in lockstep.
	t := time.NewTimer(d/2 + rand.N(d/2+1))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-p.q:
		}
	}
}

func (p *peer) report(ctx context.Context, r peerReport) {
	select {
	case p.reportc <- r:
	case <-ctx.Done():
	}
}

// raftService receives peers' message batches and queues them for the
// driver. A full queue holds up the sending peer's stream, never the driver.
type raftService struct {
	augurpb.UnimplementedRaftTransportServer
	n *Node
}

func (s *raftService) Send(stream augurpb.RaftTransport_SendServer) error {
	ctx := stream.Context()
	for {
		batch, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&augurpb.RaftAck{})
		}
		if err != nil {
			return err
		}
		for _, b := range batch.GetMessages() {
			m := new(pb.Message)
			if err := proto.Unmarshal(b, m); err != nil {
				return status.Errorf(codes.InvalidArgument, "decode raft message: %v", err)
			}
			if err := s.n.checkIncoming(m); err != nil {
				s.n.log.Warn("raft message rejected", "from", m.GetFrom(), "err", err)
				return status.Error(codes.InvalidArgument, err.Error())
			}
			select {
			case s.n.recvc <- m:
			case <-s.n.stopc:
				return status.Error(codes.Unavailable, "raft node stopped")
			case <-s.n.done:
				return status.Error(codes.Unavailable, s.n.errOrStopped().Error())
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
		}
	}
}

// checkIncoming rejects messages a misconfigured cluster would deliver: raft
// itself assumes every message is for it and from a member.
func (n *Node) checkIncoming(m *pb.Message) error {
	if to := m.GetTo(); to != n.cfg.ID {
		return fmt.Errorf("message for replica %d delivered to %d", to, n.cfg.ID)
	}
	if from := m.GetFrom(); from == n.cfg.ID || n.cfg.Peers[from] == "" {
		return fmt.Errorf("message from unknown replica %d", from)
	}
	return nil
}
