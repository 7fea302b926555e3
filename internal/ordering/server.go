// Package ordering runs one ordering replica: the Raft-replicated control
// state of package control, the Ordering gRPC service, and, while the
// replica leads, the shell around the leader core of package order. The
// shell feeds it heartbeats, reports and applied commands, runs its timers,
// proposes what it decides and sends its lag-fixes.
//
// Lock order: Server.mu is a leaf; never call into raftnode while holding it.
package ordering

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/lazy"
	"github.com/augur-log/augur/internal/metrics"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/order"
	"github.com/augur-log/augur/internal/ptimer"
	"github.com/augur-log/augur/internal/raftnode"
	"github.com/augur-log/augur/internal/stagetime"
	"github.com/augur-log/augur/internal/wire"
)

// Bounds.
const (
	// eventHistoryMax is how many applied events a replica keeps for Watch
	// catch-up; a watcher further behind gets a snapshot instead.
	eventHistoryMax = 1 << 16
	// watchBatchMax is how many events one Watch message carries.
	watchBatchMax = 256
	// backupWatchIntervals is how many ordering intervals of new events a
	// storage server that is no shard's primary gets in one Watch message.
	// It acknowledges no appends, and with one message per cut the streams
	// to the backups were a third of the messages a cut cost (4 shards).
	backupWatchIntervals = 10
)

// Member is one ordering replica.
type Member struct {
	ID   string
	Addr string
}

// Config configures one ordering replica.
type Config struct {
	ClusterID string
	ID        string
	// Members lists every ordering replica in a fixed order; the Raft id of
	// Members[i] is i+1.
	Members          []Member
	Dir              string
	RaftFsync        bool
	RaftTick         time.Duration
	OrderingInterval time.Duration
	// FailureTimeout is how long a storage server may stay silent before its
	// shards are finalized.
	FailureTimeout time.Duration
	// KeepaliveInterval is how often the leader speaks at least on each
	// Heartbeat and Watch stream, even with nothing to say: the storage
	// servers' heartbeat interval. A storage server that hears nothing
	// for a few of them takes this replica for stopped (its kernel still
	// accepts what is sent to it) and looks for the leader elsewhere.
	KeepaliveInterval time.Duration
	// Mode is the cluster's ordering mode: it supplies the initial control
	// state and the leader's policy.
	Mode mode.Mode
	// Sequencing lists the sequencing replicas of a cluster in lazy
	// order, the first leading the first view; empty in other modes.
	Sequencing []Member
	Logger     *slog.Logger
	// Creds secure the Raft transport to the other replicas; nil is
	// plaintext.
	Creds credentials.TransportCredentials
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.ClusterID == "":
		return errors.New("ordering: cluster id is empty")
	case len(c.Members) == 0:
		return errors.New("ordering: no members")
	case c.OrderingInterval <= 0:
		return fmt.Errorf("ordering: ordering interval must be positive, got %v", c.OrderingInterval)
	case c.FailureTimeout <= 0:
		return fmt.Errorf("ordering: failure timeout must be positive, got %v", c.FailureTimeout)
	case c.KeepaliveInterval <= 0:
		return fmt.Errorf("ordering: keepalive interval must be positive, got %v", c.KeepaliveInterval)
	case c.Dir == "":
		return errors.New("ordering: data directory is empty")
	case c.Mode == nil:
		return errors.New("ordering: no ordering mode")
	}
	if c.raftID() == 0 {
		return fmt.Errorf("ordering: id %q is not a member", c.ID)
	}
	return nil
}

func (c *Config) raftID() uint64 {
	for i, m := range c.Members {
		if m.ID == c.ID {
			return uint64(i + 1)
		}
	}
	return 0
}

// Server is one ordering replica.
type Server struct {
	pb.UnimplementedOrderingServer
	cfg  Config
	log  *slog.Logger
	node *raftnode.Node

	// lazyCancel stops the lazy control plane (lazy.go) this replica runs
	// while it leads a lazy cluster; lazyConns are its connections.
	lazyCancel  context.CancelFunc
	lazyConnsMu sync.Mutex
	lazyConns   map[string]*grpc.ClientConn

	mu    sync.Mutex
	state *control.State
	// events holds the last applied events; events[0] has sequence firstSeq.
	events   []*pb.Event
	firstSeq uint64
	// changed is closed and replaced whenever an event is applied.
	changed chan struct{}
	waiters map[string]chan control.Event
	// finalizeMu makes FinalizeShard's check that another shard stays live
	// and its proposal one step: two finalizations at once must not each
	// count on the other's shard.
	finalizeMu sync.Mutex

	// leader is the leader's soft state while this replica leads, nil
	// otherwise; only leaderLoop replaces it.
	leader *order.Leader
	// lagOut holds the lag-fixes waiting for each
	// storage server's heartbeat stream.
	lagOut map[string]chan []*pb.ShardLength

	wake    chan struct{}
	nextID  atomic.Uint64
	stop    chan struct{}
	stopped sync.WaitGroup
}

// New opens (or creates) the replica's Raft state in cfg.Dir.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	s := &Server{
		cfg:      cfg,
		log:      lg.With("ordering", cfg.ID),
		state:    cfg.Mode.NewState(cfg.ClusterID),
		lagOut:   map[string]chan []*pb.ShardLength{},
		changed:  make(chan struct{}),
		waiters:  map[string]chan control.Event{},
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		firstSeq: 1,
	}
	peers := map[uint64]string{}
	for i, m := range cfg.Members {
		peers[uint64(i+1)] = m.Addr
	}
	node, err := raftnode.New(raftnode.Config{
		ID:           cfg.raftID(),
		Peers:        peers,
		Dir:          cfg.Dir,
		Fsync:        cfg.RaftFsync,
		TickInterval: cfg.RaftTick,
		Logger:       lg,
		Creds:        cfg.Creds,
	}, (*fsm)(s))
	if err != nil {
		return nil, fmt.Errorf("ordering %s: %w", cfg.ID, err)
	}
	s.node = node
	return s, nil
}

// Register adds the Ordering and Raft transport services to g.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterOrderingServer(g, s)
	s.node.RegisterGRPC(g)
}

// Start starts Raft and the leader loop.
func (s *Server) Start() {
	s.node.Start()
	s.stopped.Add(1)
	go s.leaderLoop()
}

// Stop stops the replica.
func (s *Server) Stop() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	s.mu.Lock()
	if s.lazyCancel != nil {
		s.lazyCancel()
	}
	s.mu.Unlock()
	s.node.Stop()
	s.stopped.Wait()
	s.closeLazyConns()
}

// fsm adapts Server to raftnode.FSM.
type fsm Server

func (f *fsm) Apply(_ uint64, data []byte) error {
	s := (*Server)(f)
	cmd, err := control.DecodeCommand(data)
	if err != nil {
		// A replica of another version may have applied it: stop rather
		// than diverge. An upgraded binary applies it after a restart.
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ev, ok := s.state.Apply(cmd)
	news := false
	if s.leader != nil {
		news = s.leader.Applied(s.state, cmd, s.ownsLocked(cmd.ID), time.Now())
	}
	if ok {
		s.appendEventLocked(ev)
		if ev.Cut != nil && s.leader != nil {
			stagetime.Cuts.Mark(ev.Cut.Index)
		}
		if ev.Cut != nil {
			n := float64(max(len(ev.Cuts), 1))
			metrics.CutsCommitted.WithLabelValues(s.cfg.ID).Add(n)
			if cmd.Cut != nil && cmd.Cut.ReleaseThrough > 0 {
				metrics.PredeterminedCuts.WithLabelValues(s.cfg.ID).Add(n)
			}
		}
		if ev.View != nil {
			metrics.ViewChanges.WithLabelValues(s.cfg.ID).Inc()
		}
	}
	if w, found := s.waiters[cmd.ID]; found && cmd.ID != "" {
		delete(s.waiters, cmd.ID)
		w <- ev
	}
	if ok || news {
		s.signal()
	}
	return nil
}

func (f *fsm) Snapshot() ([]byte, error) {
	s := (*Server)(f)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Snapshot(), nil
}

func (f *fsm) Restore(data []byte) error {
	s := (*Server)(f)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.state.Restore(data); err != nil {
		return err
	}
	if s.leader != nil {
		s.leader.Observe(s.state, time.Now())
	}
	s.events = nil
	s.firstSeq = s.state.EventSeq + 1
	s.wakeWatchersLocked()
	return nil
}

func (s *Server) ownsLocked(id string) bool {
	return len(id) > len(s.cfg.ID) && id[:len(s.cfg.ID)] == s.cfg.ID && id[len(s.cfg.ID)] == '/'
}

func (s *Server) appendEventLocked(ev control.Event) {
	pe := &pb.Event{Seq: ev.Seq, MembershipVersion: s.state.MembershipVersion, Trim: ev.Trim}
	var view uint64
	if s.state.Spec != nil {
		view = s.state.Spec.View
	}
	if ev.Cut != nil {
		pe.Cut = wire.CutToProto(*ev.Cut, s.state.MembershipVersion)
		pe.Cut.View = view
	}
	if ev.MembershipChanged {
		pe.Shards = wire.ShardsToProto(s.state.Shards)
	}
	for _, c := range ev.Cuts[:max(len(ev.Cuts), 1)-1] {
		pc := wire.CutToProto(c, s.state.MembershipVersion)
		pc.View = view
		pe.EarlierCuts = append(pe.EarlierCuts, pc)
	}
	if s.state.Spec != nil && (ev.Window != nil || ev.View != nil || ev.Cut != nil || ev.MembershipChanged || ev.Fallback) {
		pe.Spec = wire.SpecToProto(s.state.Spec)
	}
	if ev.LazyChanged {
		pe.Lazy = s.lazyStateLocked()
	}
	if len(s.events) == eventHistoryMax {
		s.events[0] = nil
		s.events = s.events[1:]
		s.firstSeq++
	}
	s.events = append(s.events, pe)
	s.wakeWatchersLocked()
}

// wakeWatchersLocked wakes every Watch to look at the events and the
// leader again.
func (s *Server) wakeWatchersLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Server) newID() string {
	return s.cfg.ID + "/" + strconv.FormatUint(s.nextID.Add(1), 10)
}

// propose submits cmd, under a new id unless it has one (the leader
// core's), and, with wait, blocks until it is applied here.
func (s *Server) propose(ctx context.Context, cmd control.Command, wait bool) (control.Event, error) {
	if cmd.ID == "" {
		cmd.ID = s.newID()
	}
	var w chan control.Event
	if wait {
		w = make(chan control.Event, 1)
		s.mu.Lock()
		s.waiters[cmd.ID] = w
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.waiters, cmd.ID)
			s.mu.Unlock()
		}()
	}
	if err := s.node.Propose(ctx, cmd.Encode()); err != nil {
		return control.Event{}, fmt.Errorf("propose: %w", err)
	}
	if !wait {
		return control.Event{}, nil
	}
	select {
	case ev := <-w:
		return ev, nil
	case <-ctx.Done():
		return control.Event{}, ctx.Err()
	case <-s.stop:
		return control.Event{}, errors.New("ordering replica stopped")
	}
}

func (s *Server) leaderAddr() (id, addr string) {
	l := s.node.Leader()
	if l == 0 || int(l) > len(s.cfg.Members) {
		return "", ""
	}
	m := s.cfg.Members[l-1]
	return m.ID, m.Addr
}

// leaderLoop proposes cuts and detects failures while this replica leads.
func (s *Server) leaderLoop() {
	defer s.stopped.Done()
	detect := time.NewTicker(order.DetectInterval(s.cfg.FailureTimeout))
	defer detect.Stop()
	// The wait for the rest of an ordering interval is usually well under a
	// millisecond, which a Go timer of an otherwise idle process rounds up
	// to a whole one: cuts came every 1.6 ms instead of every 1 ms.
	cutTimer := ptimer.New()
	defer cutTimer.Close()
	timerArmed := false
	wasLeader := false
	for {
		select {
		case <-s.stop:
			return
		case <-s.node.LeaderChanges():
			// Watches wait for new events; one on a replica that no
			// longer leads must learn now where the leader went.
			s.mu.Lock()
			s.wakeWatchersLocked()
			s.mu.Unlock()
		case <-s.wake:
		case <-cutTimer.C:
			timerArmed = false
		case <-detect.C:
			if wasLeader {
				s.detectFailures()
			}
		}
		leader := s.node.IsLeader()
		if leader != wasLeader {
			s.resetLeaderState(leader)
			wasLeader = leader
			lg := 0.0
			if leader {
				lg = 1
			}
			metrics.Leader.WithLabelValues(s.cfg.ID).Set(lg)
		}
		if !leader {
			continue
		}
		if wait := s.step(); wait > 0 && !timerArmed {
			cutTimer.Reset(wait)
			timerArmed = true
		}
	}
}

// resetLeaderState drops the leader's soft state and, when this replica
// leads, starts a fresh one.
func (s *Server) resetLeaderState(leader bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leader = nil
	if s.lazyCancel != nil {
		s.lazyCancel()
		s.lazyCancel = nil
	}
	if !leader {
		return
	}
	if len(s.cfg.Sequencing) > 0 {
		// The control plane's work lasts as long as this leadership:
		// the next reset or Stop cancels it.
		ctx, cancel := context.WithCancel(context.Background())
		s.lazyCancel = cancel
		s.stopped.Add(1)
		go func() {
			defer s.stopped.Done()
			s.lazyControl(ctx)
		}()
	}
	// A fresh id of this replica as the prefix: the leader's commands are
	// its own (ownsLocked), and no other command bears their ids.
	s.leader = order.NewLeader(s.cfg.Mode.NewPolicy(), s.cfg.FailureTimeout, s.state, time.Now(), s.newID()+"/")
}

// step runs the leader's policy: it proposes what the policy decided and
// hands lag-fixes to the heartbeat streams. It returns when to step again
// if nothing else happens, or 0.
func (s *Server) step() time.Duration {
	now := time.Now()
	s.mu.Lock()
	l := s.leader
	out := l.Step(now)
	for _, g := range out.LagFixes {
		fixes := make([]*pb.ShardLength, len(g.Lengths))
		for i, f := range g.Lengths {
			fixes[i] = &pb.ShardLength{Shard: f.Shard, Length: f.Length}
		}
		select {
		case s.lagOut[g.Server] <- fixes:
		default:
			// The server is not listening; it will be asked again.
		}
	}
	s.mu.Unlock()
	if out.Stats.LagFixes > 0 {
		metrics.LagFixes.WithLabelValues(s.cfg.ID).Add(float64(out.Stats.LagFixes))
	}
	if out.Stats.QuotaChanges > 0 {
		metrics.QuotaChanges.WithLabelValues(s.cfg.ID).Add(float64(out.Stats.QuotaChanges))
	}
	for _, id := range out.Suspects {
		s.log.Info("shard ignored a lag-fix; taking its primary out", "shard", id)
	}
	for _, c := range out.Propose {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.FailureTimeout)
		if c.Cut != nil {
			metrics.CutProposals.WithLabelValues(s.cfg.ID).Inc()
		}
		if _, err := s.propose(ctx, c, false); err != nil {
			s.log.Debug("proposal failed", "err", err)
			s.mu.Lock()
			l.Failed(c)
			s.mu.Unlock()
		}
		cancel()
	}
	return out.Wake
}

// detectFailures takes out of their shards' configurations the replicas
// that went silent, restarted, stop, or reported their copy broken (a
// shard left without replicas is finalized).
func (s *Server) detectFailures() {
	now := time.Now()
	var cmds []control.Command
	s.mu.Lock()
	if s.leader != nil {
		cmds = s.leader.Detect(now)
	}
	s.mu.Unlock()
	for _, c := range cmds {
		rc := c.Reconfig
		s.log.Info("taking failed replicas out of their shard", "shard", rc.Shard, "epoch", rc.Epoch, "replicas", rc.Remove)
		metrics.ShardFailures.WithLabelValues(s.cfg.ID).Inc()
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.FailureTimeout)
		_, err := s.propose(ctx, c, false)
		cancel()
		if err != nil {
			s.log.Warn("propose reconfiguration", "shard", rc.Shard, "err", err)
		}
	}
}

func (s *Server) checkCluster(id string) error {
	if id != s.cfg.ClusterID {
		return auth.WrongCluster(id)
	}
	return nil
}

// Heartbeat receives liveness and reports from one storage server. In
// speculative mode it also carries lag-fixes back to the server.
//
// The leader answers a request when it sent nothing on the stream for half
// a keepalive interval: as a storage server sends one at least every
// heartbeat interval, it hears the leader as often, and a busy stream
// costs no more than two answers per interval.
func (s *Server) Heartbeat(stream pb.Ordering_HeartbeatServer) error {
	var sendMu sync.Mutex
	var lastSent time.Time // guarded by sendMu
	send := func(r *pb.HeartbeatResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		lastSent = time.Now()
		return stream.Send(r)
	}
	keepalive := func(now time.Time) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		if now.Sub(lastSent) < s.cfg.KeepaliveInterval/2 {
			return nil
		}
		lastSent = now
		return stream.Send(&pb.HeartbeatResponse{})
	}
	var server string
	var out chan []*pb.ShardLength
	done := make(chan struct{})
	defer func() {
		close(done)
		if out != nil {
			s.mu.Lock()
			if s.lagOut[server] == out {
				delete(s.lagOut, server)
			}
			s.mu.Unlock()
		}
	}()
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		if err := s.checkCluster(req.ClusterId); err != nil {
			return err
		}
		if srv, ok := auth.CallingServer(stream.Context()); ok && srv.ID != req.ServerId {
			return status.Errorf(codes.PermissionDenied, "heartbeat: server %s may beat only for itself, not for %s", srv.ID, req.ServerId)
		}
		if !s.node.IsLeader() {
			_, addr := s.leaderAddr()
			return send(&pb.HeartbeatResponse{NotLeader: true, LeaderAddr: addr})
		}
		now := time.Now()
		s.mu.Lock()
		moved := false
		if l := s.leader; l != nil {
			l.Beat(req.ServerId, req.Incarnation, now)
			for _, r := range req.Reports {
				if l.Report(order.Report{Shard: r.Shard, Epoch: r.Epoch, Length: r.Length, Records: r.Records, Backlog: r.Backlog}, now) {
					moved = true
				}
			}
			for _, b := range req.Broken {
				l.Broken(b, req.ServerId, 0)
			}
			for _, u := range req.Unreachable {
				l.Broken(u.Shard, u.Server, u.Epoch)
			}
			if req.GoingAway {
				l.GoingAway(req.ServerId, req.Incarnation)
			}
		}
		// Every stream can carry lag-fixes; a policy that never asks
		// for one (eager) leaves its sender idle.
		if out == nil {
			server = req.ServerId
			out = make(chan []*pb.ShardLength, 16)
			s.lagOut[server] = out
			go func() {
				for {
					select {
					case fixes := <-out:
						if send(&pb.HeartbeatResponse{LagFixes: fixes}) != nil {
							return
						}
					case <-done:
						return
					}
				}
			}()
		}
		s.mu.Unlock()
		failures := len(req.Broken) > 0 || len(req.Unreachable) > 0 || req.GoingAway
		if moved || failures {
			s.signal()
		}
		if failures {
			s.detectFailures()
		}
		if err := keepalive(now); err != nil {
			return err
		}
	}
}

// Watch streams applied events from req.From on. While this replica leads
// it sends an empty message when it sent nothing for a keepalive interval,
// so the watcher tells an idle leader from a stopped one.
func (s *Server) Watch(req *pb.WatchRequest, stream pb.Ordering_WatchServer) error {
	if err := s.checkCluster(req.ClusterId); err != nil {
		return err
	}
	next := max(req.From, 1)
	gather := time.NewTimer(time.Hour)
	gather.Stop()
	defer gather.Stop()
	// Every half interval, a keepalive goes out unless something (a
	// keepalive too) did since the last tick: the longest quiet stretch is
	// one interval, and a busy stream pays only for setting sent.
	keepalive := time.NewTicker(s.cfg.KeepaliveInterval / 2)
	defer keepalive.Stop()
	sent := false
	for {
		if !s.node.IsLeader() {
			if _, addr := s.leaderAddr(); addr != "" {
				return stream.Send(&pb.WatchResponse{LeaderAddr: addr})
			}
		}
		s.mu.Lock()
		var resp pb.WatchResponse
		if next < s.firstSeq {
			resp.Snapshot = s.statusLocked()
			next = s.firstSeq
		}
		if next <= s.state.EventSeq {
			i := int(next - s.firstSeq)
			end := min(len(s.events), i+watchBatchMax)
			resp.Events = append(resp.Events, s.events[i:end]...)
			next += uint64(end - i)
		}
		changed := s.changed
		// What the watcher knows once this message is out: whether it
		// is a primary, and the shard table's version.
		seenPrimary := req.ServerId == "" || s.state.Primary(req.ServerId)
		seenMV := s.state.MembershipVersion
		s.mu.Unlock()
		if resp.Snapshot != nil || len(resp.Events) > 0 {
			if err := stream.Send(&resp); err != nil {
				return err
			}
			sent = true
			continue
		}
		if err := s.awaitChange(stream, changed, keepalive.C, &sent); err != nil {
			return err
		}
		// Let the new events gather only for a server that was no
		// primary and still is none, and only while the shard table
		// stands: the cut that finalizes a primary's shard orders appends
		// it must acknowledge, and a survivor of a failed primary must
		// learn at once that its shard is final. A catch-up never waits
		// here, as only new events lead to this point.
		s.mu.Lock()
		batched := mayGather(req.ServerId, seenPrimary, seenMV, s.state)
		s.mu.Unlock()
		if batched {
			gather.Reset(backupWatchIntervals * s.cfg.OrderingInterval)
			select {
			case <-gather.C:
			case <-stream.Context().Done():
				return stream.Context().Err()
			case <-s.stop:
				return status.Error(codes.Unavailable, "ordering replica stopping")
			}
		}
	}
}

// awaitChange waits until changed is closed. At each tick it sends a
// keepalive on stream if this replica leads and nothing was sent since the
// previous tick; sent says whether something was.
func (s *Server) awaitChange(stream pb.Ordering_WatchServer, changed <-chan struct{}, tick <-chan time.Time, sent *bool) error {
	for {
		select {
		case <-changed:
			return nil
		case <-tick:
			if *sent || !s.node.IsLeader() {
				*sent = false
				continue
			}
			if err := stream.Send(&pb.WatchResponse{}); err != nil {
				return err
			}
			*sent = true
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-s.stop:
			return status.Error(codes.Unavailable, "ordering replica stopping")
		}
	}
}

// mayGather reports whether the events that brought the watch of server
// from the state it last saw (seenPrimary: server was a primary there;
// seenMV: its shard table's version) to st may wait for more.
func mayGather(server string, seenPrimary bool, seenMV uint64, st *control.State) bool {
	return server != "" && !seenPrimary && !st.Primary(server) && st.MembershipVersion == seenMV
}

func (s *Server) notLeader() (string, bool) {
	if s.node.IsLeader() {
		return "", false
	}
	_, addr := s.leaderAddr()
	return addr, true
}

// RegisterShard adds a shard served by the given replicas.
func (s *Server) RegisterShard(ctx context.Context, req *pb.RegisterShardRequest) (*pb.RegisterShardResponse, error) {
	if err := s.checkCluster(req.ClusterId); err != nil {
		return nil, err
	}
	if len(req.Replicas) == 0 || req.Group == "" {
		return nil, status.Error(codes.InvalidArgument, "register shard: a group and at least one replica are required")
	}
	if srv, ok := auth.CallingServer(ctx); ok {
		if srv.Group != req.Group || !slices.ContainsFunc(req.Replicas, func(r *pb.ReplicaAddr) bool { return r.GetId() == srv.ID }) {
			return nil, status.Errorf(codes.PermissionDenied, "register shard: storage server %s of group %q may register only a shard of its own group that it serves, not one of group %q", srv.ID, srv.Group, req.Group)
		}
	}
	if addr, no := s.notLeader(); no {
		return &pb.RegisterShardResponse{NotLeader: true, LeaderAddr: addr}, nil
	}
	reps := make([]control.Replica, len(req.Replicas))
	for i, r := range req.Replicas {
		if r.Id == "" || r.Addr == "" {
			return nil, status.Error(codes.InvalidArgument, "register shard: replica id and address are required")
		}
		reps[i] = control.Replica{ID: r.Id, Addr: r.Addr, Incarnation: r.Incarnation}
	}
	ev, err := s.propose(ctx, control.Command{Register: &control.RegisterCommand{Group: req.Group, Replicas: reps, Quota: req.Quota}}, true)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "register shard: %v", err)
	}
	// The new replicas' incarnations are the ones to check from now on.
	s.mu.Lock()
	if s.leader != nil {
		s.leader.Registered(reps)
	}
	s.mu.Unlock()
	return &pb.RegisterShardResponse{Shard: ev.Registered}, nil
}

// confirmRejoin takes a pending lazy replica's word that it caught up
// under its primary, as the leader core decides (order.Leader.ConfirmRejoin).
func (s *Server) confirmRejoin(ctx context.Context, req *pb.RejoinShardRequest) (*pb.RejoinShardResponse, error) {
	s.mu.Lock()
	l := s.leader
	var (
		cmd  control.Command
		done bool
		err  error
	)
	if l != nil {
		cmd, done, err = l.ConfirmRejoin(req.Shard, req.Replica.Id, req.Epoch)
	}
	s.mu.Unlock()
	switch {
	case l == nil:
		_, addr := s.leaderAddr()
		return &pb.RejoinShardResponse{NotLeader: true, LeaderAddr: addr}, nil
	case err != nil:
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case done:
		return &pb.RejoinShardResponse{Epoch: req.Epoch}, nil
	}
	ev, err := s.propose(ctx, cmd, true)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "confirm rejoin of shard %d: %v", req.Shard, err)
	}
	if !ev.MembershipChanged {
		return nil, status.Errorf(codes.FailedPrecondition, "confirm rejoin of shard %d: refused when applied: the configuration moved past %d", req.Shard, req.Epoch)
	}
	return &pb.RejoinShardResponse{Epoch: req.Epoch}, nil
}

// RejoinShard adds a storage server's caught-up copy of a shard back to
// the shard's configuration, as the leader core decides (order.Leader.Rejoin).
// A follower answers with the leader's address; a refusal is
// FailedPrecondition with the reason, and changes nothing.
func (s *Server) RejoinShard(ctx context.Context, req *pb.RejoinShardRequest) (*pb.RejoinShardResponse, error) {
	if err := s.checkCluster(req.ClusterId); err != nil {
		return nil, err
	}
	if req.Replica == nil || req.Replica.Id == "" || req.Replica.Addr == "" {
		return nil, status.Error(codes.InvalidArgument, "rejoin shard: the replica's id and address are required")
	}
	if req.CaughtUp && !s.cfg.Mode.Sequenced() {
		return nil, status.Error(codes.InvalidArgument, "rejoin shard: caught_up is lazy order's; other modes' primaries vouch for their replicas")
	}
	srv, authenticated := auth.CallingServer(ctx)
	if authenticated && srv.ID != req.Replica.Id {
		return nil, status.Errorf(codes.PermissionDenied, "rejoin shard: storage server %s may rejoin only its own copies, not %s's", srv.ID, req.Replica.Id)
	}
	if addr, no := s.notLeader(); no {
		return &pb.RejoinShardResponse{NotLeader: true, LeaderAddr: addr}, nil
	}
	if req.CaughtUp {
		return s.confirmRejoin(ctx, req)
	}
	rq := order.RejoinRequest{Shard: req.Shard, Epoch: req.Epoch, Held: req.Held,
		Replica: control.Replica{ID: req.Replica.Id, Addr: req.Replica.Addr, Incarnation: req.Replica.Incarnation}}
	s.mu.Lock()
	if sh := s.state.Shard(req.Shard); authenticated && sh != nil && sh.Group != srv.Group {
		s.mu.Unlock()
		return nil, status.Errorf(codes.PermissionDenied, "rejoin shard %d: the shard belongs to group %q; storage server %s is of group %q", req.Shard, sh.Group, srv.ID, srv.Group)
	}
	l := s.leader
	var (
		cmd    control.Command
		member bool
		err    error
	)
	if l != nil {
		cmd, member, err = l.Rejoin(rq, time.Now())
	}
	epoch := uint64(0)
	if sh := s.state.Shard(req.Shard); sh != nil {
		epoch = sh.Epoch
	}
	s.mu.Unlock()
	switch {
	case l == nil:
		_, addr := s.leaderAddr()
		return &pb.RejoinShardResponse{NotLeader: true, LeaderAddr: addr}, nil
	case err != nil:
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case member:
		return &pb.RejoinShardResponse{Epoch: epoch}, nil
	}
	ev, err := s.propose(ctx, cmd, true)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "rejoin shard %d: %v", req.Shard, err)
	}
	if !ev.MembershipChanged {
		return nil, status.Errorf(codes.FailedPrecondition, "rejoin shard %d: refused when applied: the configuration moved past %d, or a cut ordered more than the %d entries the copy holds",
			req.Shard, req.Epoch, req.Held)
	}
	return &pb.RejoinShardResponse{Epoch: req.Epoch + 1}, nil
}

// FinalizeShard stops a shard after a grace of cuts. It refuses to stop the
// last live shard: appends would then have nowhere to go until a group
// formed a new one. (A failure still finalizes any shard.)
func (s *Server) FinalizeShard(ctx context.Context, req *pb.FinalizeShardRequest) (*pb.FinalizeShardResponse, error) {
	if err := s.checkCluster(req.ClusterId); err != nil {
		return nil, err
	}
	if s.cfg.Mode.Sequenced() {
		// A lazy append is acknowledged before it is ordered, and the
		// orderer gives no position to a record of a finalized shard: an
		// append that raced the finalization would be acknowledged and
		// never ordered. A lazy shard ends only when its last replica fails.
		return nil, status.Error(codes.FailedPrecondition, "finalize shard: not available in lazy order (an acknowledged append racing it would never be ordered)")
	}
	s.finalizeMu.Lock()
	defer s.finalizeMu.Unlock()
	s.mu.Lock()
	sh := s.state.Shard(req.Shard)
	var st control.ShardState
	if sh != nil {
		st = sh.State
	}
	othersLive := 0
	for _, o := range s.state.Shards {
		if o.ID != req.Shard && o.State == control.Live {
			othersLive++
		}
	}
	s.mu.Unlock()
	if sh == nil {
		return nil, status.Errorf(codes.NotFound, "finalize: unknown shard %d", req.Shard)
	}
	if st != control.Live {
		return nil, status.Errorf(codes.FailedPrecondition, "finalize: shard %d is already %s", req.Shard, st)
	}
	if othersLive == 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "finalize: shard %d is the last live shard; add a shard first (augur shard add)", req.Shard)
	}
	if addr, no := s.notLeader(); no {
		return &pb.FinalizeShardResponse{NotLeader: true, LeaderAddr: addr}, nil
	}
	if _, err := s.propose(ctx, control.Command{Finalize: &control.FinalizeCommand{Shard: req.Shard, GraceCuts: req.GraceCuts}}, true); err != nil {
		return nil, status.Errorf(codes.Unavailable, "finalize shard %d: %v", req.Shard, err)
	}
	return &pb.FinalizeShardResponse{}, nil
}

// Trim moves the trim point.
func (s *Server) Trim(ctx context.Context, req *pb.TrimRequest) (*pb.TrimResponse, error) {
	if err := s.checkCluster(req.ClusterId); err != nil {
		return nil, err
	}
	s.mu.Lock()
	tail, trim := s.state.Tail(), s.state.Trim
	var seq *lazy.SeqConfig
	if s.state.Lazy != nil {
		c := *s.state.Lazy
		seq = &c
	}
	s.mu.Unlock()
	var stable uint64
	if seq != nil && req.Position > trim {
		// Lazy order commits no cuts: its final end is stable-gp, which
		// the sequencing leader knows.
		stable = s.lazyStable(ctx, *seq)
		tail = max(tail, stable)
	}
	if req.Position > tail {
		return nil, status.Errorf(codes.OutOfRange, "trim: position %d is beyond the tail %d", req.Position, tail)
	}
	if req.Position <= trim {
		return &pb.TrimResponse{Trim: trim}, nil
	}
	if addr, no := s.notLeader(); no {
		return &pb.TrimResponse{NotLeader: true, LeaderAddr: addr}, nil
	}
	if _, err := s.propose(ctx, control.Command{Trim: &control.TrimCommand{Position: req.Position, Stable: stable}}, true); err != nil {
		return nil, status.Errorf(codes.Unavailable, "trim: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &pb.TrimResponse{Trim: s.state.Trim}, nil
}

// Status describes the cluster as this replica knows it.
func (s *Server) Status(_ context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	if err := s.checkCluster(req.ClusterId); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statusLocked(), nil
}

func (s *Server) statusLocked() *pb.StatusResponse {
	lid, laddr := s.leaderAddr()
	resp := &pb.StatusResponse{
		ClusterId:         s.cfg.ClusterID,
		LeaderId:          lid,
		LeaderAddr:        laddr,
		Shards:            wire.ShardsToProto(s.state.Shards),
		LastCut:           wire.CutToProto(s.state.LastCut, s.state.MembershipVersion),
		Tail:              s.state.Tail(),
		Trim:              s.state.Trim,
		MembershipVersion: s.state.MembershipVersion,
		EventSeq:          s.state.EventSeq,
		Spec:              wire.SpecToProto(s.state.Spec),
	}
	for i, m := range s.cfg.Members {
		resp.Members = append(resp.Members, &pb.OrderingMember{Id: m.ID, Addr: m.Addr, Leader: m.ID == lid,
			Unreachable: s.node.Unreachable(uint64(i + 1))})
	}
	resp.Lazy = s.lazyStateLocked()
	return resp
}
