package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/segment"
	"github.com/augur-log/augur/internal/shard"
	"github.com/augur-log/augur/internal/stagetime"
)

// Bounds.
const (
	// subscribeBatchBytesMax bounds one subscription message.
	subscribeBatchBytesMax = 1 << 20
	// appendEntriesMax bounds the entries of one Append message.
	appendEntriesMax = 4096
)

func (s *Server) checkCluster(id string) error {
	if id != s.cfg.ClusterID {
		return auth.WrongCluster(id)
	}
	return nil
}

// appendStream sends acknowledgements back on one client's Append stream.
// The shard loops push into it without blocking; its own goroutine sends.
type appendStream struct {
	mu     sync.Mutex
	acks   []*pb.AppendAck
	wake   chan struct{}
	closed bool
	// pushedAt is when the oldest unsent acknowledgement was pushed, when
	// stages are timed.
	pushedAt time.Time
}

func (a *appendStream) push(acks []*pb.AppendAck) {
	a.mu.Lock()
	if !a.closed {
		if len(a.acks) == 0 {
			a.pushedAt = stagetime.Now()
		}
		a.acks = append(a.acks, acks...)
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// take returns the acks pushed since the last take, and when the oldest
// of them was pushed.
func (a *appendStream) take() ([]*pb.AppendAck, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.acks
	a.acks = nil
	return out, a.pushedAt
}

func (s *Server) membershipVersion() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.view.mv
}

// Append takes a client's pipelined appends.
func (s *Server) Append(stream pb.Log_AppendServer) error {
	as := &appendStream{wake: make(chan struct{}, 1)}
	ctx := stream.Context()
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-as.wake:
				if acks, pushedAt := as.take(); len(acks) > 0 {
					if err := stream.Send(&pb.AppendResponse{Acks: acks, MembershipVersion: s.membershipVersion()}); err != nil {
						sendErr <- err
						return
					}
					if !pushedAt.IsZero() {
						stagetime.Observe(stagetime.AckSend, time.Since(pushedAt))
					}
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() {
		as.mu.Lock()
		as.closed = true
		as.mu.Unlock()
	}()
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		select {
		case err := <-sendErr:
			return err
		default:
		}
		if err := s.checkCluster(req.ClusterId); err != nil {
			return err
		}
		if len(req.Entries) > appendEntriesMax {
			return status.Errorf(codes.InvalidArgument, "append carries %d entries, at most %d allowed", len(req.Entries), appendEntriesMax)
		}
		r := s.awaitReplica(ctx, req.Shard)
		if r == nil || r.role() != rolePrimary {
			code, msg := pb.Code_UNKNOWN_SHARD, fmt.Sprintf("shard %d is not served here", req.Shard)
			if r != nil {
				code, msg = pb.Code_NOT_PRIMARY, fmt.Sprintf("this server is not the primary of shard %d", req.Shard)
			}
			acks := make([]*pb.AppendAck, len(req.Entries))
			for i, e := range req.Entries {
				acks[i] = &pb.AppendAck{Seq: e.Seq, Code: code, Shard: req.Shard, Message: msg}
			}
			as.push(acks)
			continue
		}
		select {
		case r.appendCh <- appendReq{stream: as, clientID: req.ClientId, entries: req.Entries, at: stagetime.Now()}:
		case <-r.done:
			return status.Error(codes.Unavailable, "shard is shutting down")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// filter is a compiled subscription filter.
type filter struct {
	keys map[string]bool
	tags map[string]bool
}

func newFilter(f *pb.Filter) filter {
	var out filter
	if len(f.GetKeys()) > 0 {
		out.keys = map[string]bool{}
		for _, k := range f.Keys {
			out.keys[k] = true
		}
	}
	if len(f.GetTags()) > 0 {
		out.tags = map[string]bool{}
		for _, t := range f.Tags {
			out.tags[t] = true
		}
	}
	return out
}

func (f filter) match(e segment.Entry) bool {
	if f.keys != nil && !f.keys[e.Key] {
		return false
	}
	if f.tags != nil && !slices.ContainsFunc(e.Tags, func(t string) bool { return f.tags[t] }) {
		return false
	}
	return true
}

// Subscribe streams one shard's share of the global order from req.From on.
func (s *Server) Subscribe(req *pb.SubscribeRequest, stream pb.Log_SubscribeServer) error {
	if err := s.checkCluster(req.ClusterId); err != nil {
		return err
	}
	if s.cfg.Mode.Sequenced() {
		// Lazy records live in the shard's lazy log, ordered by stable-gp.
		return s.subscribeLazy(req, stream)
	}
	r := s.awaitReplica(stream.Context(), req.Shard)
	if r == nil {
		return status.Errorf(codes.NotFound, "shard %d is not stored here", req.Shard)
	}
	s.mu.Lock()
	trim := s.view.trim
	s.mu.Unlock()
	if req.From < trim {
		return status.Errorf(codes.OutOfRange, "position %d is trimmed (trim point %d)", req.From, trim)
	}
	if req.Speculative {
		if !s.cfg.Mode.Speculative() {
			return status.Errorf(codes.FailedPrecondition, "speculative subscription: this cluster runs in %s mode", s.cfg.Mode.Name())
		}
		return s.subscribeSpec(r, req, stream)
	}
	f := newFilter(req.Filter)
	next := req.From
	// nextLocal follows the runs served, to notice runs trimmed meanwhile.
	var nextLocal uint64
	served := false
	var sentMV uint64
	ctx := stream.Context()
	for {
		changed := r.changedCh()
		if r.core.Lost() {
			return r.lostStatus()
		}
		s.mu.Lock()
		viewChanged, mv := s.viewChanged, s.view.mv
		s.mu.Unlock()
		var resp pb.SubscribeResponse
		size := 0
		for _, run := range r.store.Runs(next) {
			if size >= subscribeBatchBytesMax {
				break
			}
			if served && run.LocalStart > nextLocal {
				// The runs in between were trimmed while this stream lagged.
				return status.Errorf(codes.OutOfRange, "records of shard %d from position %d on are trimmed", r.id, next)
			}
			served, nextLocal = true, run.LocalStart+run.Count
			b := &pb.CutBatch{Cut: run.Cut, CutStart: max(run.CutStart, next), CutEnd: run.CutEnd, Shard: r.id, MembershipVersion: mv}
			gs := max(run.GlobalStart, next)
			if end := run.GlobalStart + run.Count; gs < end {
				b.RunStart, b.RunCount = gs, end-gs
				local := run.LocalStart + (gs - run.GlobalStart)
				pos := gs
				trimmed := false
				err := r.store.Scan(local, func(l uint64, e segment.Entry) bool {
					if l != run.LocalStart+(pos-run.GlobalStart) {
						// Scan starts at Start: the records from local on
						// were trimmed meanwhile.
						trimmed = true
						return false
					}
					if e.Noops > 0 {
						pos += e.Noops
						return pos < end
					}
					if f.match(e) {
						b.Records = append(b.Records, &pb.LogEntry{Position: pos, Shard: r.id,
							Record: &pb.Record{Key: e.Key, Tags: e.Tags, Payload: e.Payload}})
						size += len(e.Payload) + len(e.Key) + 32
					}
					pos++
					return pos < end
				})
				if trimmed || errors.Is(err, segment.ErrTrimmed) {
					return status.Errorf(codes.OutOfRange, "position %d of shard %d is trimmed", pos, r.id)
				}
				if errors.Is(err, segment.ErrDamaged) {
					return r.damagedStatus(err)
				}
				if err != nil {
					return status.Errorf(codes.Internal, "read shard %d: %v", r.id, err)
				}
			}
			next = run.CutEnd
			if b.RunCount > 0 {
				resp.Batches = append(resp.Batches, b)
			}
		}
		if len(resp.Batches) == 0 && mv > sentMV && sentMV != 0 {
			// Tell the subscriber the shard table changed, so it can look
			// for shards it does not follow yet.
			resp.Batches = append(resp.Batches, &pb.CutBatch{Shard: r.id, MembershipVersion: mv})
		}
		sentMV = max(sentMV, mv)
		if finalLen, final := r.core.Final(); final && r.store.Ordered() >= finalLen && len(r.store.Runs(next)) == 0 {
			resp.Done = true
		}
		if len(resp.Batches) > 0 || resp.Done {
			if err := stream.Send(&resp); err != nil {
				return err
			}
			if resp.Done {
				return nil
			}
			if size >= subscribeBatchBytesMax {
				continue
			}
		}
		select {
		case <-changed:
		case <-viewChanged:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.ctx.Done():
			return status.Error(codes.Unavailable, "server stopping")
		}
	}
}

// Resolve tells a client which of its appends to a shard were ordered.
func (s *Server) Resolve(_ context.Context, req *pb.ResolveRequest) (*pb.ResolveResponse, error) {
	if err := s.checkCluster(req.ClusterId); err != nil {
		return nil, err
	}
	r := s.replica(req.Shard)
	if r == nil {
		return nil, status.Errorf(codes.NotFound, "shard %d is not stored here", req.Shard)
	}
	want := map[uint64]bool{}
	for _, q := range req.Seqs {
		want[q] = true
	}
	// Damaged records cannot be read: Holdings scans around them.
	found, err := shard.Holdings(r.store, func(id shard.AppendID) bool { return id.Client == req.ClientId && want[id.Seq] })
	if err != nil {
		return nil, status.Errorf(codes.Internal, "scan shard %d: %v", r.id, err)
	}
	resp := &pb.ResolveResponse{}
	for _, q := range req.Seqs {
		ack := &pb.AppendAck{Seq: q, Shard: r.id}
		local, ok := found[shard.AppendID{Client: req.ClientId, Seq: q}]
		// A copy that cannot read some of its records may hold the append
		// among them: the core says when that forbids a denial.
		switch res, pos := r.core.Resolve(local, ok); res {
		case shard.ResolveOrdered:
			ack.Code, ack.Position = pb.Code_OK, pos
		case shard.ResolveNotOrdered:
			ack.Code = pb.Code_NOT_ORDERED
		default:
			ack.Code = pb.Code_PENDING
		}
		resp.Results = append(resp.Results, ack)
	}
	return resp, nil
}

// Replicate takes one shard's records from its primary.
func (s *Server) Replicate(stream pb.Replica_ReplicateServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if err := s.checkCluster(first.ClusterId); err != nil {
		return err
	}
	r, err := s.backupReplica(first.Shard, first.Epoch)
	if err != nil {
		return err
	}
	ctx := stream.Context()
	// The acknowledgements and a join's answer share the stream.
	var sendMu sync.Mutex
	send := func(resp *pb.ReplicateResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(resp)
	}
	sendErr := make(chan error, 1)
	go func() {
		var sent uint64
		for {
			select {
			case <-r.durableCh:
				if d := r.core.Durable(); d > sent {
					if err := send(&pb.ReplicateResponse{Durable: d, Epoch: r.core.Epoch()}); err != nil {
						sendErr <- err
						return
					}
					sent = d
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	for req := first; ; {
		if req.Shard != r.id {
			return status.Errorf(codes.InvalidArgument, "replication stream switched from shard %d to %d", r.id, req.Shard)
		}
		if req.Join {
			resp, err := r.join(req.Epoch, req.PrimaryLength)
			if err != nil {
				return status.Errorf(codes.FailedPrecondition, "join: %v", err)
			}
			if err := send(resp); err != nil {
				return err
			}
		}
		if len(req.Records) > 0 {
			select {
			case <-r.done:
				return status.Error(codes.Unavailable, "server stopping")
			default:
			}
			if err := r.appendReplicated(req.Epoch, req.FirstLocal, req.Records); err != nil {
				return status.Errorf(codes.FailedPrecondition, "replicate: %v", err)
			}
		}
		select {
		case err := <-sendErr:
			return err
		default:
		}
		if req, err = stream.Recv(); err != nil {
			return err
		}
	}
}

// backupReplica returns the backup copy of shard id, creating it, in
// configuration epoch, on the first replication message.
func (s *Server) backupReplica(id cut.ShardID, epoch uint64) (*replica, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sh := s.view.shards[id]; sh != nil && sh.Epoch == epoch && slices.ContainsFunc(sh.Replicas, s.earlierRun) {
		// The configuration took in an earlier run of this server (see
		// memberLocked): this run is no backup of it.
		return nil, status.Errorf(codes.FailedPrecondition, "configuration %d of shard %d names an earlier run of this server", epoch, id)
	}
	if r, ok := s.replicas[id]; ok {
		// A copy out of the configuration that asked to rejoin becomes a
		// backup when its new primary joins it (shard.Replica.Join); the
		// core refuses replication to any other that is not a backup.
		if r.role() == rolePrimary {
			return nil, status.Errorf(codes.FailedPrecondition, "shard %d is held here as %v, not as a backup", id, r.role())
		}
		return r, nil
	}
	if s.ctx.Err() != nil {
		return nil, status.Error(codes.Unavailable, "server stopping")
	}
	st, err := s.openStore(id)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	if st.Len() != 0 {
		st.Close()
		return nil, status.Errorf(codes.FailedPrecondition, "shard %d already has records here", id)
	}
	r := newReplica(s, id, roleBackup, st, nil, epoch)
	if sp := s.view.spec; sp != nil {
		r.spec.Store(sp)
	}
	s.replicas[id] = r
	s.startReplicaLocked(r)
	return r, nil
}

// Ping answers who this server is.
func (s *Server) Ping(_ context.Context, req *pb.PingRequest) (*pb.PingResponse, error) {
	if err := s.checkCluster(req.ClusterId); err != nil {
		return nil, err
	}
	return &pb.PingResponse{ServerId: s.cfg.ID, Group: s.cfg.GroupName, Incarnation: s.incarnation, Health: s.health()}, nil
}

// AddShard forms one more live shard in this server's group.
func (s *Server) AddShard(ctx context.Context, req *pb.AddShardRequest) (*pb.AddShardResponse, error) {
	if err := s.checkCluster(req.ClusterId); err != nil {
		return nil, err
	}
	if !s.cfg.isPrimary() {
		return nil, status.Errorf(codes.FailedPrecondition, "%s is not its group's primary; ask %s", s.cfg.ID, s.cfg.Group[0].ID)
	}
	id, err := s.registerShard(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "add shard: %v", err)
	}
	return &pb.AddShardResponse{Shard: id}, nil
}

// backupLink replicates one shard to one backup in order. The replica's
// loop sends each batch on the stream itself: a queue and a goroutine of
// the link's own between them cost a goroutine switch on the path of every
// append. gRPC's Send returns once the message is queued for the
// connection's writer, and blocks only while the backup is a flow-control
// window (rpcopt.StreamWindowBytes) behind, which slows the primary down
// rather than losing order.
type backupLink struct {
	srv  *Server
	r    *replica
	peer Peer
	// epoch is the configuration the link replicates in; tailFrom is the
	// primary's length its join asked from (with join set).
	epoch    uint64
	join     bool
	tailFrom uint64
	// st is the open stream, nil when it could not be opened; cancel ends
	// it. broken is set, by the loop, once a send failed; lostAt says
	// replication to the backup broke (for the heartbeat).
	st     pb.Replica_ReplicateClient
	cancel context.CancelFunc
	broken bool
	lostAt atomic.Bool
}

// openBackupLink opens the replication stream to p in configuration
// epoch; with join it asks the backup to join it first (see
// shard.Replica.Join). The caller starts the link once the replica is in
// place. A link that cannot be opened is broken from the start: the
// primary tells the leader it cannot reach the backup, which takes the
// backup out of the shard's configuration.
func (s *Server) openBackupLink(r *replica, p Peer, epoch uint64, join bool) *backupLink {
	l := &backupLink{srv: s, r: r, peer: p, epoch: epoch, join: join}
	ctx, cancel := context.WithCancel(s.ctx)
	l.cancel = cancel
	c, err := s.conn(p.Addr)
	if err == nil {
		l.st, err = pb.NewReplicaClient(c).Replicate(ctx)
	}
	switch {
	case err == nil && join:
		l.tailFrom = r.store.Len()
		err = l.st.Send(&pb.ReplicateRequest{ClusterId: s.cfg.ClusterID, Shard: r.id, Epoch: epoch, Join: true, PrimaryLength: l.tailFrom})
	case err == nil && !s.cfg.Mode.Sequenced():
		// A backup takes up its copy on the first message: send one now,
		// empty, rather than with the first append, so that a new shard's
		// backups serve before anything is appended, as status shows
		// them. A backup that refuses the stream (stopping, or its store
		// fails to open) is then taken out of the shard at once rather
		// than at the first append. (A lazy shard's copies take their
		// records from the clients, in their own shell: lazy.go.)
		err = l.st.Send(&pb.ReplicateRequest{ClusterId: s.cfg.ClusterID, Shard: r.id, Epoch: epoch})
	}
	if err != nil {
		l.fail(err)
	}
	return l
}

// startLocked starts receiving the backup's acknowledgements; s.mu is held
// and the server is not stopping.
func (l *backupLink) startLocked() {
	if l.broken {
		return
	}
	l.srv.wg.Add(1)
	go l.receive()
}

func (l *backupLink) close() { l.cancel() }

// fail stops sending on a link whose stream broke; only the loop (or the
// opener, before the loop starts) calls it.
func (l *backupLink) fail(err error) {
	l.broken = true
	l.cancel()
	l.lost(err)
}

// lost records that replication to the backup broke. A broken link cannot be
// resumed: the heartbeat tells the leader, which takes the backup out of
// the shard's configuration (the primary goes on with the others).
func (l *backupLink) lost(err error) {
	if l.srv.ctx.Err() != nil {
		return
	}
	if !l.lostAt.Swap(true) {
		l.srv.log.Warn("replication to backup failed", "shard", l.r.id, "backup", l.peer.ID, "epoch", l.epoch, "err", err)
	}
	l.srv.signalHeartbeat()
}

// send sends a batch; only the replica's loop calls it.
func (l *backupLink) send(first uint64, recs []*pb.StoredRecord) {
	if l.broken {
		return
	}
	req := &pb.ReplicateRequest{ClusterId: l.srv.cfg.ClusterID, Shard: l.r.id, Epoch: l.epoch, FirstLocal: first, Records: recs}
	if err := l.st.Send(req); err != nil {
		l.fail(fmt.Errorf("send: %w", err))
	}
}

// receive passes the backup's acknowledgements to the replica until the
// stream ends; the loop's next send then finds it broken.
func (l *backupLink) receive() {
	defer l.srv.wg.Done()
	for {
		resp, err := l.st.Recv()
		if err != nil {
			// The loop finds the stream broken at its next send, but that
			// may be a while (no appends): report the shard broken now.
			l.cancel()
			l.lost(fmt.Errorf("receive: %w", err))
			return
		}
		if resp.Joined {
			j := joinMsg{backup: l.peer.ID, epoch: resp.Epoch, length: resp.Length, held: resp.Durable, tailFrom: l.tailFrom}
			for _, rec := range resp.Tail {
				j.tail = append(j.tail, entryOf(rec))
			}
			select {
			case l.r.joinCh <- j:
			case <-l.r.done:
				return
			}
			continue
		}
		l.r.backupAcked(l.peer.ID, resp.Epoch, resp.Durable)
	}
}

// relink replaces r's replication links with links to peers in
// configuration epoch, each asked to join it first; none for a copy that
// is no longer primary. It runs on r's loop.
func (s *Server) relink(r *replica, peers []Peer, epoch uint64) {
	var links []*backupLink
	for _, p := range peers {
		links = append(links, s.openBackupLink(r, p, epoch, true))
	}
	s.mu.Lock()
	old := s.links[r.id]
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		for _, l := range links {
			l.close()
		}
		return
	}
	s.links[r.id] = links
	for _, l := range links {
		l.startLocked()
	}
	s.mu.Unlock()
	for _, l := range old {
		l.close()
	}
}

// join answers a primary's join of configuration epoch on this backup:
// its length, what it holds, and its entries from primaryLength on.
func (r *replica) join(epoch, primaryLength uint64) (*pb.ReplicateResponse, error) {
	// No batch of the old configuration lands between the join and the
	// read of the tail: appendReplicated holds replMu too.
	r.replMu.Lock()
	defer r.replMu.Unlock()
	length, held, err := r.core.Join(epoch)
	if err != nil {
		return nil, err
	}
	resp := &pb.ReplicateResponse{Joined: true, Epoch: epoch, Length: length, Durable: held}
	if length > primaryLength {
		err = r.store.Scan(primaryLength, func(local uint64, e segment.Entry) bool {
			if local >= length {
				return false
			}
			resp.Tail = append(resp.Tail, storedRecord(e))
			return true
		})
	}
	return resp, err
}
