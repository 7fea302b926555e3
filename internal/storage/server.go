// Package storage runs one storage server: a replica of the shards its
// group forms. A group's first server is the primary of its shards; it takes
// appends, replicates them in order to the other servers, reports the
// length every replica holds to the ordering layer, and acknowledges appends
// once a committed cut gives them positions. Every server turns cuts into
// positions and serves subscriptions.
//
// Lock order: Server.mu, then replica.mu. Neither is held across I/O.
package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/metrics"
	"github.com/augur-log/augur/internal/rpcopt"
	"github.com/augur-log/augur/internal/segment"
	"github.com/augur-log/augur/internal/shard"
	"github.com/augur-log/augur/internal/wire"
)

// retryInterval paces reconnection to the ordering layer and peers.
const retryInterval = 50 * time.Millisecond

// Bounds on a silent ordering replica. The leader speaks on every stream at
// least once per heartbeat interval (ordering.Config.KeepaliveInterval).
const (
	// quietHeartbeats is how many heartbeat intervals a stream to an
	// ordering replica may stay silent before this server asks the replica
	// directly whether it still leads.
	quietHeartbeats = 2
	// probeHeartbeats bounds that question, in heartbeat intervals. Only a
	// replica that answers in time that it leads keeps the stream: a
	// stalled stream of a live leader is kept, a stopped leader is left.
	// The two add up to three intervals (three fifths of the failure
	// timeout with the cluster file's settings), which lets this server
	// reach a new leader before that leader, counting silence from its own
	// start, gives up on it.
	probeHeartbeats = 1
)

// reconnectParams caps gRPC's reconnection backoff (its default grows to two
// minutes), so a restarted peer is seen within a second.
var reconnectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: retryInterval, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: time.Second,
}

// view is this server's copy of the committed control state.
type view struct {
	seq     uint64
	lastCut cut.Cut
	shards  map[cut.ShardID]*pb.ShardInfo
	mv      uint64
	trim    uint64
	// spec is the speculative state; nil in eager mode.
	spec *control.Spec
}

// Server is one storage server.
type Server struct {
	pb.UnimplementedLogServer
	pb.UnimplementedReplicaServer
	cfg         Config
	log         *slog.Logger
	incarnation uint64

	mu       sync.Mutex
	replicas map[cut.ShardID]*replica
	links    map[cut.ShardID][]*backupLink
	// lazy holds the shards' lazy-order replicas (lazy mode only),
	// opened on first use.
	lazy map[cut.ShardID]*lazyShard
	// lazyRejoins are the rejoins of lazy copies under way (lazyrejoin.go).
	lazyRejoins map[cut.ShardID]*lazyRejoinState
	view        view
	// viewChanged is closed and replaced whenever the view changes.
	viewChanged chan struct{}
	// caughtUp is closed once the view has reached the ordering state seen
	// at start-up, so registration decisions see every existing shard.
	caughtUp    chan struct{}
	caughtUpSeq uint64
	leaderAddr  string
	// registering is closed when the shard registration in progress (if
	// any) has its replica in place: until then a client that already saw
	// the new shard in the table waits instead of being refused.
	registering  chan struct{}
	lastFailed   bool
	registeredAt time.Time

	conns  map[string]*grpc.ClientConn
	connMu sync.Mutex

	stored  prometheus.Counter
	ordered prometheus.Counter
	tail    prometheus.Gauge

	hbWake chan struct{}
	// reportDelay holds back each report by this long (a straggler,
	// injected by tests and benchmarks); 0 in normal operation.
	reportDelay atomic.Int64
	// goingAway is set when the server stops: the next heartbeat says so,
	// and goneAway is closed once one did.
	goingAway atomic.Bool
	goneAway  chan struct{}
	// heartbeating says a heartbeat stream to a leader is open; crashing
	// that the server stops without saying so (Crash).
	heartbeating atomic.Bool
	crashing     atomic.Bool
	// dirty wakes syncLoop when a store has unsynced writes.
	dirty    chan struct{}
	stopOnce sync.Once
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New opens the server's stores in cfg.Dir, recovering them.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:         cfg,
		log:         lg.With("storage", cfg.ID),
		incarnation: uint64(time.Now().UnixNano()),
		replicas:    map[cut.ShardID]*replica{},
		lazy:        map[cut.ShardID]*lazyShard{},
		links:       map[cut.ShardID][]*backupLink{},
		view:        view{shards: map[cut.ShardID]*pb.ShardInfo{}},
		viewChanged: make(chan struct{}),
		caughtUp:    make(chan struct{}),
		conns:       map[string]*grpc.ClientConn{},
		hbWake:      make(chan struct{}, 1),
		goneAway:    make(chan struct{}),
		dirty:       make(chan struct{}, 1),
		stored:      metrics.RecordsStored.WithLabelValues(cfg.ID),
		ordered:     metrics.RecordsOrdered.WithLabelValues(cfg.ID),
		tail:        metrics.Tail.WithLabelValues(cfg.ID),
		ctx:         ctx,
		cancel:      cancel,
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		cancel()
		return nil, fmt.Errorf("storage %s: %w", cfg.ID, err)
	}
	dirs, err := os.ReadDir(cfg.Dir)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("storage %s: %w", cfg.ID, err)
	}
	for _, d := range dirs {
		id, ok := shardDirID(d.Name())
		if !ok || !d.IsDir() {
			continue
		}
		st, err := s.openStore(id)
		if err != nil {
			s.closeStores()
			cancel()
			return nil, err
		}
		s.replicas[id] = newReplica(s, id, roleRecovered, st, nil, 0)
	}
	return s, nil
}

func shardDirID(name string) (cut.ShardID, bool) {
	rest, ok := strings.CutPrefix(name, "shard-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 32)
	return cut.ShardID(n), err == nil
}

func (s *Server) openStore(id cut.ShardID) (*segment.Store, error) {
	st, err := segment.Open(segment.Options{
		Dir:             filepath.Join(s.cfg.Dir, fmt.Sprintf("shard-%d", id)),
		SegmentBytesMax: s.cfg.SegmentBytes,
		Sync:            s.cfg.Sync,
		Logger:          s.log.With("shard", id),
	})
	if err != nil {
		return nil, fmt.Errorf("storage %s: open shard %d: %w", s.cfg.ID, id, err)
	}
	s.reportDamage(id, st)
	return st, nil
}

func (s *Server) closeStores() {
	for _, r := range s.replicas {
		r.store.Close()
	}
}

// Register adds the Log and Replica services to g.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterLogServer(g, s)
	pb.RegisterReplicaServer(g, s)
	pb.RegisterLazyShardServer(g, &lazyServer{s: s})
}

// Start connects to the ordering layer and, on a primary, forms a shard.
func (s *Server) Start() {
	s.reportDelay.Store(int64(s.cfg.ReportDelay))
	s.mu.Lock()
	for _, r := range s.replicas {
		s.startReplicaLocked(r)
		if len(r.core.Gaps()) > 0 {
			r.repairing.Store(true)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer r.repairing.Store(false)
				r.repair(s.ctx)
			}()
		}
	}
	s.mu.Unlock()
	s.wg.Add(2)
	go s.onOrdering("watch", s.watchFrom)
	go s.onOrdering("heartbeat", s.heartbeatTo)
	if s.cfg.Sync == segment.SyncInterval || s.cfg.Sync == segment.SyncGroup {
		// Under SyncGroup the replicas' own loops sync records; this one
		// syncs the positions files.
		s.wg.Add(1)
		go s.syncLoop()
	}
	if s.cfg.isPrimary() {
		s.wg.Add(1)
		go s.registerLoop()
	}
}

func (s *Server) startReplicaLocked(r *replica) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		r.run()
	}()
	// A lazy shard's copy rejoins through its own shell (lazyrejoin.go):
	// this one does not copy unordered records and placements.
	if !s.cfg.Mode.Sequenced() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			r.rejoinLoop(s.ctx)
		}()
	}
	if r.syncWake != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			r.syncLoop()
		}()
	}
}

// Stop stops the server and closes its stores. It first tells the
// ordering leader it goes away (a clean stop, as on SIGTERM).
func (s *Server) Stop() {
	s.stopOnce.Do(s.stop)
}

// Crash stops the server as a crash would look to the ordering layer:
// without saying it goes away, so the leader finds it silent (tests and
// benchmarks of kill -9 in one process).
func (s *Server) Crash() {
	s.crashing.Store(true)
	s.Stop()
}

func (s *Server) stop() {
	s.sayGoingAway()
	s.cancel()
	s.mu.Lock()
	for _, r := range s.replicas {
		close(r.stop)
	}
	for _, ls := range s.links {
		for _, l := range ls {
			l.close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	for _, r := range s.replicas {
		if err := r.store.Close(); err != nil {
			s.log.Warn("close store", "shard", r.id, "err", err)
		}
	}
	lazyShards := s.lazy
	s.lazy = map[cut.ShardID]*lazyShard{}
	s.mu.Unlock()
	for _, ls := range lazyShards {
		ls.close()
	}
	s.connMu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.connMu.Unlock()
}

func (s *Server) conn(addr string) (*grpc.ClientConn, error) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if c, ok := s.conns[addr]; ok {
		return c, nil
	}
	creds := s.cfg.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := append(rpcopt.DialOptions(), grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(reconnectParams))
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	s.conns[addr] = c
	return c, nil
}

func (s *Server) replica(id cut.ShardID) *replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replicas[id]
}

// awaitReplica is replica, but waits out a registration in progress, which
// may be about to open shard id.
func (s *Server) awaitReplica(ctx context.Context, id cut.ShardID) *replica {
	s.mu.Lock()
	r, wait := s.replicas[id], s.registering
	s.mu.Unlock()
	if r != nil || wait == nil {
		return r
	}
	select {
	case <-wait:
	case <-ctx.Done():
	}
	return s.replica(id)
}

func (s *Server) signalHeartbeat() {
	select {
	case s.hbWake <- struct{}{}:
	default:
	}
}

// sleep waits d or until the server stops; it reports whether to go on.
func (s *Server) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// orderingAddrs lists the ordering replicas, the believed leader first.
func (s *Server) orderingAddrs() []string {
	s.mu.Lock()
	leader := s.leaderAddr
	s.mu.Unlock()
	out := make([]string, 0, len(s.cfg.Ordering)+1)
	if leader != "" {
		out = append(out, leader)
	}
	for _, a := range s.cfg.Ordering {
		if a != leader {
			out = append(out, a)
		}
	}
	return out
}

// orderingCallTimeout bounds one call to an ordering replica that waits
// for a command to commit: Raft drops a proposal without a word when no
// leader holds it, and a stopped replica accepts calls it never answers.
const orderingCallTimeout = 5 * time.Second

// callLeader calls the ordering replicas in turn, the believed leader
// first, until one answers as the leader. call returns the leader a
// replica names and whether it said it does not lead. Each call has its
// own deadline, so the next replica is asked after a silent one; the
// leader's refusal (FailedPrecondition) ends the search, as no other
// replica would decide otherwise.
func (s *Server) callLeader(ctx context.Context, call func(context.Context, pb.OrderingClient) (leaderAddr string, notLeader bool, err error)) error {
	lastErr := errors.New("no ordering replica answered")
	for _, a := range s.orderingAddrs() {
		c, err := s.conn(a)
		if err != nil {
			lastErr = err
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, orderingCallTimeout)
		leader, notLeader, err := call(cctx, pb.NewOrderingClient(c))
		cancel()
		switch {
		case status.Code(err) == codes.FailedPrecondition:
			return err
		case err != nil:
			lastErr = err
		case notLeader:
			s.setLeader(leader)
			lastErr = fmt.Errorf("%s is not the leader", a)
		default:
			return nil
		}
	}
	return lastErr
}

func (s *Server) setLeader(addr string) {
	if addr == "" {
		return
	}
	s.mu.Lock()
	s.leaderAddr = addr
	s.mu.Unlock()
}

func (s *Server) markDirty() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// syncLoop fsyncs the stores at most SyncInterval after they were written,
// off the replicas' loops so appends and cuts never wait for the disk; an
// idle server does not wake up at all.
func (s *Server) syncLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.dirty:
		case <-s.ctx.Done():
			return
		}
		if !s.sleep(s.cfg.SyncInterval) {
			return
		}
		s.mu.Lock()
		stores := make([]*segment.Store, 0, len(s.replicas))
		for _, r := range s.replicas {
			stores = append(stores, r.store)
		}
		s.mu.Unlock()
		for _, st := range stores {
			if err := st.Sync(); err != nil && s.ctx.Err() == nil && !errors.Is(err, segment.ErrClosed) {
				s.log.Error("fsync", "err", err)
			}
		}
	}
}

// errRedirected ends a stream to an ordering replica that named another
// one as the leader.
var errRedirected = errors.New("redirected to the ordering leader")

// errSilent ends a stream to an ordering replica that said nothing for
// quietHeartbeats heartbeat intervals and did not answer when asked whether
// it leads: it is stopped (SIGSTOP, a long GC stall, a frozen VM) or cut
// off, though its kernel may still accept what is sent to it.
var errSilent = errors.New("ordering replica went silent")

// errStalled ends a stream that stayed silent though its ordering replica
// answered that it leads: a new stream to it takes over.
var errStalled = errors.New("stream from the ordering leader stalled")

// errNoLeader ends a stream to an ordering replica that went quiet and,
// asked, knows no leader: an election is under way, or it is cut off from
// the others.
var errNoLeader = errors.New("ordering replica knows no leader")

// silenceMax is how long a stream to a stopped ordering replica lasts.
func (s *Server) silenceMax() time.Duration {
	return (quietHeartbeats + probeHeartbeats) * s.cfg.HeartbeatInterval
}

// askLeader asks the ordering replica at addr which replica leads, waiting
// for the answer no longer than probeHeartbeats heartbeat intervals; ok is
// false if it did not answer.
func (s *Server) askLeader(ctx context.Context, addr string) (leader string, ok bool) {
	c, err := s.conn(addr)
	if err != nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, probeHeartbeats*s.cfg.HeartbeatInterval)
	defer cancel()
	st, err := pb.NewOrderingClient(c).Status(ctx, &pb.StatusRequest{ClusterId: s.cfg.ClusterID})
	if err != nil {
		return "", false
	}
	return st.LeaderAddr, true
}

// hearing is when a stream from an ordering replica last delivered
// something, in Unix nanoseconds.
type hearing struct{ last atomic.Int64 }

func (h *hearing) heard(now time.Time) { h.last.Store(now.UnixNano()) }

// dropped is the cause with which listen ends a call's context.
type dropped struct{ error }

// listen returns a context for one call to the ordering replica at addr,
// and the hearing of its stream, heard now. Once nothing was heard for
// quietHeartbeats intervals, it asks the replica which one leads: if it
// does not answer at once, the context ends with errSilent; if it names
// another, with errRedirected; if none, with errNoLeader; if itself, the
// stream may stay quiet that long once more before it ends with
// errStalled. Every reply, including opening the stream, counts from
// here. The caller cancels the context when done, and passes the error it
// ends with through droppedCause.
func (s *Server) listen(addr string) (context.Context, context.CancelCauseFunc, *hearing) {
	ctx, cancel := context.WithCancelCause(s.ctx)
	h := &hearing{}
	h.heard(time.Now())
	// Counted in s.wg, so Stop closes the connections only after it.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		quietMax := quietHeartbeats * s.cfg.HeartbeatInterval
		t := time.NewTimer(quietMax)
		defer t.Stop()
		// vouched is the last hearing after which the replica answered
		// that it leads.
		vouched := int64(0)
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				last := h.last.Load()
				if quiet := now.Sub(time.Unix(0, last)); quiet < quietMax {
					t.Reset(quietMax - quiet)
					continue
				}
				if last == vouched {
					cancel(dropped{fmt.Errorf("%s: %w", addr, errStalled)})
					return
				}
				leader, ok := s.askLeader(ctx, addr)
				switch {
				case ctx.Err() != nil:
					return
				case !ok:
					cancel(dropped{fmt.Errorf("%s: %w", addr, errSilent)})
					return
				case leader == "":
					cancel(dropped{fmt.Errorf("%s: %w", addr, errNoLeader)})
					return
				case leader != addr:
					s.setLeader(leader)
					cancel(dropped{fmt.Errorf("%w %s", errRedirected, leader)})
					return
				}
				vouched = last
				t.Reset(quietMax)
			}
		}
	}()
	return ctx, cancel, h
}

// droppedCause returns the reason listen ended ctx, if it did, and err
// otherwise.
func droppedCause(ctx context.Context, err error) error {
	var d dropped
	if errors.As(context.Cause(ctx), &d) {
		return d.error
	}
	return err
}

// replicaPicker chooses the ordering replica to call next. A replica whose
// stream went silent is tried last for one silence bound, even while the
// others still name it the leader (they learn of a new leader only after an
// election timeout); after that bound it is tried again in its turn, as it
// may have run again and still lead.
type replicaPicker struct {
	bound    time.Duration
	silentAt map[string]time.Time
}

func newReplicaPicker(bound time.Duration) *replicaPicker {
	return &replicaPicker{bound: bound, silentAt: map[string]time.Time{}}
}

// silent records that addr's stream went silent at now.
func (p *replicaPicker) silent(addr string, now time.Time) { p.silentAt[addr] = now }

// quiet reports whether addr went silent within the bound before now.
func (p *replicaPicker) quiet(addr string, now time.Time) bool {
	at, ok := p.silentAt[addr]
	if ok && now.Sub(at) >= p.bound {
		delete(p.silentAt, addr)
		ok = false
	}
	return ok
}

// order returns addrs (the believed leader first) with the quiet replicas
// moved to the end, in their order.
func (p *replicaPicker) order(addrs []string, now time.Time) []string {
	out := make([]string, 0, len(addrs))
	var quiet []string
	for _, a := range addrs {
		if p.quiet(a, now) {
			quiet = append(quiet, a)
		} else {
			out = append(out, a)
		}
	}
	return append(out, quiet...)
}

// onOrdering keeps calling fn with an ordering replica's address, the
// believed leader first, pausing between attempts, until the server stops.
// A call that was redirected to the leader is followed at once by one to
// the leader: after a leader change, reports and cuts must not wait out a
// pause, and cuts from a follower come later than from the leader. A
// replica that went silent is tried last for a while (replicaPicker).
func (s *Server) onOrdering(what string, fn func(addr string) error) {
	defer s.wg.Done()
	hurried := false
	picker := newReplicaPicker(s.silenceMax())
	for attempt := 0; ; attempt++ {
		addrs := picker.order(s.orderingAddrs(), time.Now())
		addr := addrs[attempt%len(addrs)]
		start := time.Now()
		err := fn(addr)
		if err != nil && s.ctx.Err() == nil {
			s.log.Debug(what, "addr", addr, "err", err)
		}
		if time.Since(start) > retryInterval {
			hurried = false
		}
		if errors.Is(err, errSilent) {
			s.log.Info(what+": ordering replica went silent; looking for the leader elsewhere", "addr", addr, "silent_for", s.silenceMax())
			picker.silent(addr, time.Now())
			// The first replica that is not quiet, at once: the leader
			// may have changed while this one was silent.
			attempt = -1
			continue
		}
		if errors.Is(err, errStalled) {
			// The same leader again, at once, on a new stream. (A
			// stream stalls only after two quiet spells, so this
			// cannot spin.)
			attempt = -1
			continue
		}
		if errors.Is(err, errRedirected) {
			// Next to the replica named, and at once, but only once
			// in a row: two replicas naming each other (an election
			// under way) must not make this loop spin. A quiet
			// replica named is not hurried to: the one that named it
			// has likely not yet learned of the election.
			attempt = -1
			if !hurried && !picker.quiet(s.orderingAddrs()[0], time.Now()) {
				hurried = true
				continue
			}
		}
		if !s.sleep(retryInterval) {
			return
		}
	}
}

// watchFrom follows the ordering layer's committed events and applies them.
// It gives up on a replica that went silent (see listen): the leader sends
// keepalives on an idle stream.
func (s *Server) watchFrom(addr string) (err error) {
	c, err := s.conn(addr)
	if err != nil {
		return err
	}
	oc := pb.NewOrderingClient(c)
	ctx, cancel, h := s.listen(addr)
	defer cancel(nil)
	defer func() { err = droppedCause(ctx, err) }()
	st, err := oc.Status(ctx, &pb.StatusRequest{ClusterId: s.cfg.ClusterID})
	if err != nil {
		return err
	}
	h.heard(time.Now())
	s.setLeader(st.LeaderAddr)
	if st.LeaderAddr != "" && st.LeaderAddr != addr {
		// Followers learn of commits later than the leader.
		return fmt.Errorf("%w %s", errRedirected, st.LeaderAddr)
	}
	s.mu.Lock()
	if s.caughtUpSeq == 0 {
		s.caughtUpSeq = st.EventSeq
	}
	from := s.view.seq + 1
	s.mu.Unlock()
	s.checkCaughtUp()
	stream, err := oc.Watch(ctx, &pb.WatchRequest{ClusterId: s.cfg.ClusterID, From: from, ServerId: s.cfg.ID})
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		h.heard(time.Now())
		if resp.LeaderAddr != "" {
			s.setLeader(resp.LeaderAddr)
			return fmt.Errorf("%w %s", errRedirected, resp.LeaderAddr)
		}
		if resp.Snapshot != nil {
			s.applySnapshot(resp.Snapshot)
		}
		for _, ev := range resp.Events {
			s.applyEvent(ev)
		}
		s.checkCaughtUp()
	}
}

func (s *Server) checkCaughtUp() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.caughtUpSeq == 0 && s.view.seq == 0 {
		// A fresh cluster has no events to catch up with.
	} else if s.view.seq < s.caughtUpSeq {
		return
	}
	select {
	case <-s.caughtUp:
	default:
		close(s.caughtUp)
	}
}

func (s *Server) applySnapshot(st *pb.StatusResponse) {
	s.mu.Lock()
	if st.EventSeq <= s.view.seq {
		s.mu.Unlock()
		return
	}
	s.log.Warn("cut history before this point is gone; copies here may miss positions", "from", s.view.seq+1, "to", st.EventSeq)
	s.view.seq = st.EventSeq
	s.view.lastCut = wire.CutFromProto(st.LastCut)
	s.view.mv = st.MembershipVersion
	s.view.trim = st.Trim
	s.view.spec = wire.SpecFromProto(st.Spec)
	s.setShardsLocked(st.Shards)
	// The cuts in between are gone: a copy here that has not assigned
	// everything the snapshot's cut orders can never serve those records,
	// but it must still learn finality and the trim point.
	var msgs []cutMsg
	var targets []*replica
	for id, r := range s.replicas {
		m := cutMsg{slice: cut.Slice{Shard: id}, trim: st.Trim, orderedAtLeast: s.orderedLenLocked(s.view.lastCut, id), spec: s.view.spec}
		if sh := s.view.shards[id]; sh != nil && sh.State == pb.ShardState_SHARD_FINALIZED {
			m.final, m.finalLen = true, sh.FinalLength
		}
		m.member, m.peers = s.memberLocked(id)
		msgs, targets = append(msgs, m), append(targets, r)
	}
	newMsgs, newTargets := s.copyNewShardsLocked()
	msgs, targets = append(msgs, newMsgs...), append(targets, newTargets...)
	s.bumpViewLocked()
	s.mu.Unlock()
	for i, r := range targets {
		select {
		case r.cutCh <- msgs[i]:
		case <-r.done:
		}
	}
	s.followLazyConfigs()
	s.trimLazy(st.Trim)
}

func (s *Server) setShardsLocked(shards []*pb.ShardInfo) {
	s.view.shards = map[cut.ShardID]*pb.ShardInfo{}
	for _, sh := range shards {
		s.view.shards[sh.Id] = sh
	}
}

func (s *Server) bumpViewLocked() {
	close(s.viewChanged)
	s.viewChanged = make(chan struct{})
}

// applyEvent applies one committed event: positions from a cut, then shard
// table changes, then the trim point.
func (s *Server) applyEvent(ev *pb.Event) {
	s.mu.Lock()
	if ev.Seq != s.view.seq+1 {
		s.mu.Unlock()
		s.log.Warn("skipping out-of-order event", "seq", ev.Seq, "have", s.view.seq)
		return
	}
	s.view.seq = ev.Seq
	if ev.Shards != nil {
		s.setShardsLocked(ev.Shards)
	}
	var sp *control.Spec
	if ev.Spec != nil {
		sp = wire.SpecFromProto(ev.Spec)
		s.view.spec = sp
	}
	var msgs []cutMsg
	if ev.Cut != nil {
		for _, pc := range append(ev.EarlierCuts, ev.Cut) {
			cur := wire.CutFromProto(pc)
			prev := s.view.lastCut
			for id := range s.replicas {
				sl := cut.SliceOf(prev, cur, id)
				// A failed shard's slots past its final length are no-ops
				// no copy holds (speculative mode).
				if end := s.orderedLenLocked(cur, id); sl.LocalStart+sl.Count > end {
					sl.Count = end - min(end, sl.LocalStart)
				}
				msgs = append(msgs, cutMsg{cutIndex: cur.Index, cutStart: cur.Start, cutEnd: cur.End, slice: sl})
			}
			s.view.lastCut = cur
		}
		s.tail.Set(float64(s.view.lastCut.End))
		if sp != nil {
			// The state after the event goes with its last cut.
			for i := len(msgs) - len(s.replicas); i < len(msgs); i++ {
				msgs[i].spec = sp
			}
		}
	}
	s.view.mv = ev.MembershipVersion
	trimmed := ev.Trim > s.view.trim
	s.view.trim = ev.Trim
	// Finality and trim ride on a message of their own when no cut came.
	if ev.Cut == nil {
		for id := range s.replicas {
			msgs = append(msgs, cutMsg{slice: cut.Slice{Shard: id}, spec: sp})
		}
	}
	// A shard is final only after the event's last cut: a release of
	// several cuts can finalize a shard, and a primary told of finality
	// before it applied the earlier cuts would drop, unanswered, the
	// appends that the later cuts order.
	last := len(msgs) - len(s.replicas)
	targets := make([]*replica, len(msgs))
	for i := range msgs {
		id := msgs[i].slice.Shard
		if sh := s.view.shards[id]; i >= last && sh != nil && sh.State == pb.ShardState_SHARD_FINALIZED {
			msgs[i].final, msgs[i].finalLen = true, sh.FinalLength
		}
		if i >= last && ev.Shards != nil {
			msgs[i].member, msgs[i].peers = s.memberLocked(id)
		}
		if trimmed {
			msgs[i].trim = ev.Trim
		}
		targets[i] = s.replicas[id]
	}
	if ev.Shards != nil {
		newMsgs, newTargets := s.copyNewShardsLocked()
		msgs, targets = append(msgs, newMsgs...), append(targets, newTargets...)
	}
	s.bumpViewLocked()
	s.mu.Unlock()
	for i, r := range targets {
		select {
		case r.cutCh <- msgs[i]:
		case <-r.done:
		}
	}
	if ev.Shards != nil {
		s.followLazyConfigs()
	}
	if trimmed {
		s.trimLazy(ev.Trim)
	}
}

// copyNewShardsLocked makes an empty copy of each live shard of this
// server's group that has none here and whose configuration neither lists
// nor took out this server: a server added to the group (or one that lost
// its data dir). Each copy hears that the configuration leaves it out
// (the messages returned, for the caller to send after s.mu), and so
// catches up and rejoins as a restarted copy does (rejoin.go). A copy
// asks for the shard from its first entry; once the cluster trimmed, its
// source serves from where its own log starts, and the copy starts there
// too (see shard/rejoin.go).
func (s *Server) copyNewShardsLocked() ([]cutMsg, []*replica) {
	if s.cfg.Mode.Sequenced() || s.ctx.Err() != nil {
		// Lazy shards have their own shell; a stopping server starts
		// nothing Stop would not stop.
		return nil, nil
	}
	var msgs []cutMsg
	var targets []*replica
	for id, sh := range s.view.shards {
		if sh.Group != s.cfg.GroupName || sh.State == pb.ShardState_SHARD_FINALIZED || s.replicas[id] != nil {
			continue
		}
		// A server the configuration lists waits to be taken out (it
		// restarted: a new incarnation). One that is out but holds no
		// copy lost its data (a replaced disk): it copies like a new one.
		if slices.ContainsFunc(sh.Replicas, func(r *pb.ReplicaAddr) bool { return r.Id == s.cfg.ID }) {
			continue
		}
		st, err := s.openStore(id)
		if err != nil {
			s.log.Error("not copying shard", "shard", id, "err", err)
			continue
		}
		if st.Len() > 0 {
			// A directory this server did not open at start-up.
			st.Close()
			s.log.Error("not copying shard: its directory is not empty", "shard", id)
			continue
		}
		r := newReplicaOrdered(s, id, roleRecovered, st, nil, 0, s.orderedLenLocked(s.view.lastCut, id))
		if sp := s.view.spec; sp != nil {
			r.spec.Store(sp)
		}
		s.replicas[id] = r
		s.startReplicaLocked(r)
		s.log.Info("copying shard of this group to join its configuration", "shard", id, "epoch", sh.Epoch)
		m := cutMsg{slice: cut.Slice{Shard: id}}
		m.member, m.peers = s.memberLocked(id)
		msgs, targets = append(msgs, m), append(targets, r)
	}
	return msgs, targets
}

// memberLocked is this server's place in the configuration of shard id
// as the view holds it (nil for a finalized or unknown shard), with a
// primary's backups.
func (s *Server) memberLocked(id cut.ShardID) (*shard.Membership, []Peer) {
	sh := s.view.shards[id]
	if sh == nil || sh.State == pb.ShardState_SHARD_FINALIZED {
		return nil, nil
	}
	m := &shard.Membership{Epoch: sh.Epoch, Role: roleFenced}
	var peers []Peer
	for i, rep := range sh.Replicas {
		if s.earlierRun(rep) {
			// The failure detector takes the entry out; this run then
			// rejoins.
			m.EarlierRun = true
		}
		switch {
		case rep.Id == s.cfg.ID && i == 0:
			m.Role = rolePrimary
		case rep.Id == s.cfg.ID:
			m.Role = roleBackup
		case i > 0:
			m.Backups = append(m.Backups, rep.Id)
			peers = append(peers, Peer{ID: rep.Id, Addr: rep.Addr})
		}
	}
	if m.Role != rolePrimary {
		m.Backups, peers = nil, nil
	}
	return m, peers
}

// earlierRun says rep names this server as it ran before its restart (a
// configuration without incarnations names every run).
func (s *Server) earlierRun(rep *pb.ReplicaAddr) bool {
	return rep.GetId() == s.cfg.ID && rep.GetIncarnation() != 0 && rep.GetIncarnation() != s.incarnation
}

// orderedLenLocked is how many of shard id's own entries cut c orders: its
// length in c, but no more than the final length of a failed shard, whose
// later slots are no-ops.
func (s *Server) orderedLenLocked(c cut.Cut, id cut.ShardID) uint64 {
	n := c.Len(id)
	if sh := s.view.shards[id]; sh != nil && sh.Failed && sh.State == pb.ShardState_SHARD_FINALIZED {
		n = min(n, sh.FinalLength)
	}
	return n
}

// heartbeatTo keeps a stream to the ordering leader carrying liveness and
// the primary's reports. It gives up on a replica that went silent (see
// listen): the leader answers at least once per heartbeat interval.
func (s *Server) heartbeatTo(addr string) (err error) {
	c, err := s.conn(addr)
	if err != nil {
		return err
	}
	ctx, cancel, h := s.listen(addr)
	defer cancel(nil)
	defer func() { err = droppedCause(ctx, err) }()
	stream, err := pb.NewOrderingClient(c).Heartbeat(ctx)
	if err != nil {
		return err
	}
	s.heartbeating.Store(true)
	defer s.heartbeating.Store(false)
	redirected := make(chan error, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			if err == nil {
				h.heard(time.Now())
			}
			if err == nil && resp.NotLeader {
				s.setLeader(resp.LeaderAddr)
				err = fmt.Errorf("%s is not the leader", addr)
				if resp.LeaderAddr != "" {
					err = fmt.Errorf("%w %s", errRedirected, resp.LeaderAddr)
				}
			}
			if err != nil {
				redirected <- err
				cancel(nil)
				return
			}
			for _, f := range resp.LagFixes {
				if r := s.replica(f.Shard); r != nil && r.lagCh != nil {
					select {
					case r.lagCh <- f.Length:
					default:
						// A full queue already holds lag-fixes; the
						// leader repeats unanswered ones.
					}
				}
			}
		}
	}()
	tick := time.NewTicker(s.cfg.HeartbeatInterval)
	defer tick.Stop()
	// Held-back reports, oldest first, while a report delay is set.
	type heldReports struct {
		due     time.Time
		reports []*pb.ShardLength
	}
	var held []heldReports
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	// Reports go out as soon as durability moves; wake-ups that arrive
	// while one is being sent collapse into the next, so the rate is bounded
	// by how often backups acknowledge. (A minimum gap of half an ordering
	// interval between reports delayed a record's report by 0.5 ms at the
	// 90th percentile and saved no measurable CPU.) Fix-ante reports come
	// only at quota boundaries and go at once too.
	for {
		goingAway := s.goingAway.Load()
		req := &pb.HeartbeatRequest{ClusterId: s.cfg.ClusterID, ServerId: s.cfg.ID, Incarnation: s.incarnation, GoingAway: goingAway}
		s.mu.Lock()
		for id, r := range s.replicas {
			if r.role() != rolePrimary || r.finalized() {
				continue
			}
			if r.failed.Load() {
				req.Broken = append(req.Broken, id)
			}
			for _, l := range s.links[id] {
				if l.lostAt.Load() {
					req.Unreachable = append(req.Unreachable, &pb.ReplicaRef{Shard: id, Server: l.peer.ID, Epoch: l.epoch})
				}
			}
			// The core's ordering mode says what to report: the durable
			// length (eager), or the last quota boundary with the records
			// and backlog (speculative), never more than every replica
			// holds.
			// Only the primary of the configuration this server last heard
			// of reports, in its epoch: the leader drops a report of an
			// older configuration.
			sh := s.view.shards[id]
			if sh == nil || len(sh.Replicas) == 0 || sh.Replicas[0].Id != s.cfg.ID {
				continue
			}
			if rep, ok := r.core.Report(); ok {
				req.Reports = append(req.Reports, &pb.ShardLength{Shard: id, Epoch: sh.Epoch, Length: rep.Length, Records: rep.Records, Backlog: rep.Backlog})
			}
		}
		s.mu.Unlock()
		if delay := time.Duration(s.reportDelay.Load()); delay > 0 {
			now := time.Now()
			held = append(held, heldReports{due: now.Add(delay), reports: req.Reports})
			req.Reports = nil
			// Reports are cumulative: the latest one due says it all.
			for len(held) > 0 && !held[0].due.After(now) {
				req.Reports, held = held[0].reports, held[1:]
			}
			if len(held) > 0 {
				due.Reset(time.Until(held[0].due))
			}
		} else {
			held = nil
		}
		if err := stream.Send(req); err != nil {
			return err
		}
		if goingAway {
			select {
			case <-s.goneAway:
			default:
				close(s.goneAway)
			}
		}
		select {
		case err := <-redirected:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case <-due.C:
		case <-s.hbWake:
		}
	}
}

// goingAwayWaitMax bounds how long a stopping server waits for its
// heartbeat to tell the ordering leader it goes away.
const goingAwayWaitMax = time.Second

// sayGoingAway tells the ordering leader, on the heartbeat stream, that
// this server stops, so that it takes the server out of its shards at
// once rather than after a failure timeout of silence. It waits for the
// heartbeat to go out, up to goingAwayWaitMax (a server that cannot reach
// the leader stops anyway and is found silent).
func (s *Server) sayGoingAway() {
	if s.ctx.Err() != nil || !s.heartbeating.Load() || s.crashing.Load() {
		return
	}
	s.goingAway.Store(true)
	s.signalHeartbeat()
	t := time.NewTimer(goingAwayWaitMax)
	defer t.Stop()
	select {
	case <-s.goneAway:
	case <-t.C:
	}
}

// SetReportDelay holds back this server's reports to the ordering layer by
// d, as a straggling server's would be; 0 sends them at once again. It is
// for tests and benchmarks of straggler handling.
func (s *Server) SetReportDelay(d time.Duration) {
	s.reportDelay.Store(int64(d))
	s.signalHeartbeat()
}

// registerLoop keeps the group's primary serving a live shard: it forms one
// at start-up and again after a failure finalized the last one.
func (s *Server) registerLoop() {
	defer s.wg.Done()
	select {
	case <-s.caughtUp:
	case <-s.ctx.Done():
		return
	}
	for {
		s.mu.Lock()
		need := !s.hasLiveShardLocked() && (s.registeredAt.IsZero() || s.lastFailed)
		changed := s.viewChanged
		s.mu.Unlock()
		if need {
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
			_, err := s.registerShard(ctx)
			cancel()
			if err != nil && s.ctx.Err() == nil {
				s.log.Debug("form shard", "err", err)
				if !s.sleep(10 * retryInterval) {
					return
				}
				continue
			}
		}
		select {
		case <-changed:
		case <-s.ctx.Done():
			return
		}
	}
}

// hasLiveShardLocked says whether the group has a shard that is not
// finalized: then a restarted primary of the group does not form another
// one (its shard lives on at its other replicas, and it rejoins it).
func (s *Server) hasLiveShardLocked() bool {
	live := false
	for _, r := range s.replicas {
		if r.role() == rolePrimary && !r.finalized() {
			live = true
		}
		if r.role() == rolePrimary && r.finalized() {
			sh := s.view.shards[r.id]
			if sh != nil && sh.Failed {
				s.lastFailed = true
			}
		}
	}
	for _, sh := range s.view.shards {
		if sh.Group == s.cfg.GroupName && sh.State != pb.ShardState_SHARD_FINALIZED {
			live = true
		}
	}
	if live {
		s.lastFailed = false
	}
	return live
}

// registerShard forms a new shard with every server of the group: it checks
// they are up, registers the shard, opens its store and replication links.
func (s *Server) registerShard(ctx context.Context) (cut.ShardID, error) {
	if !s.cfg.isPrimary() {
		return 0, errors.New("only the group's primary forms shards")
	}
	reps := []*pb.ReplicaAddr{{Id: s.cfg.ID, Addr: s.cfg.Group[0].Addr, Incarnation: s.incarnation}}
	for _, p := range s.cfg.Group[1:] {
		c, err := s.conn(p.Addr)
		if err != nil {
			return 0, err
		}
		pr, err := pb.NewReplicaClient(c).Ping(ctx, &pb.PingRequest{ClusterId: s.cfg.ClusterID})
		if err != nil {
			return 0, fmt.Errorf("backup %s is not up: %w", p.ID, err)
		}
		if pr.ServerId != p.ID || pr.Group != s.cfg.GroupName {
			return 0, fmt.Errorf("server at %s is %s of group %s, want %s of %s", p.Addr, pr.ServerId, pr.Group, p.ID, s.cfg.GroupName)
		}
		reps = append(reps, &pb.ReplicaAddr{Id: p.ID, Addr: p.Addr, Incarnation: pr.Incarnation})
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.registering = done
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.registering = nil
		s.mu.Unlock()
		close(done)
	}()
	var id cut.ShardID
	err := s.callLeader(ctx, func(ctx context.Context, c pb.OrderingClient) (string, bool, error) {
		resp, err := c.RegisterShard(ctx, &pb.RegisterShardRequest{ClusterId: s.cfg.ClusterID, Group: s.cfg.GroupName, Replicas: reps})
		id = resp.GetShard()
		return resp.GetLeaderAddr(), resp.GetNotLeader(), err
	})
	if err != nil {
		return 0, fmt.Errorf("register shard: %w", err)
	}
	st, err := s.openStore(id)
	if err != nil {
		return 0, err
	}
	r := newReplica(s, id, rolePrimary, st, s.cfg.Group[1:], control.FirstEpoch)
	// The replication streams open before s.mu is taken: opening one may
	// wait for the connection.
	var links []*backupLink
	for _, p := range s.cfg.Group[1:] {
		links = append(links, s.openBackupLink(r, p, control.FirstEpoch, false))
	}
	s.mu.Lock()
	if err := s.ctx.Err(); err != nil {
		// Stop already closed the replicas it knew of; one started now
		// would never be stopped.
		s.mu.Unlock()
		for _, l := range links {
			l.close()
		}
		st.Close()
		return 0, fmt.Errorf("register shard %d: server stopping: %w", id, err)
	}
	// Events before this point went to the replicas that existed then.
	if sp := s.view.spec; sp != nil && r.windows != nil {
		r.spec.Store(sp)
		r.windows.SetWindows(sp.Windows, sp.Eager())
	}
	s.replicas[id] = r
	s.registeredAt = time.Now()
	s.lastFailed = false
	for _, l := range links {
		l.startLocked()
	}
	s.links[id] = links
	s.startReplicaLocked(r)
	s.mu.Unlock()
	s.log.Info("formed shard", "shard", id)
	return id, nil
}

func (s *Server) backupLinks(r *replica) []*backupLink {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.links[r.id]
}
