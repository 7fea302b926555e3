// Package devcluster runs a whole augur cluster — ordering replicas and
// storage groups — inside the calling process on 127.0.0.1, each server on its
// own gRPC server and an OS-chosen port. It backs `augur dev`, `augur demo`,
// the benchmarks and in-process failure tests (stop and restart any server).
//
// Lock order: Cluster.mu is a leaf; it is never held while a server starts,
// stops or a client call blocks.
package devcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/rpcopt"
	"github.com/augur-log/augur/internal/storage"
)

// Defaults and bounds of Options.
const (
	DefaultClusterID        = "dev"
	DefaultShards           = 2
	DefaultReplicas         = config.DefaultGroupServers
	DefaultOrderingReplicas = 3
	// ShardsMax and replicasMax keep a dev cluster within one machine's
	// ports and file handles (replicasMax bounds the ordering and
	// sequencing replicas; config bounds the storage groups).
	ShardsMax   = 64
	replicasMax = 9
	// readyPollInterval paces WaitReady's and AddGroup's Status polls.
	readyPollInterval = 10 * time.Millisecond
	// statusCallTimeout bounds one Status call of a poll.
	statusCallTimeout = time.Second
)

// Options configure a dev cluster; zero fields take the defaults of a
// cluster file (package config) or of this package.
type Options struct {
	// Dir holds the servers' data, one directory per server id. Empty means
	// a new temporary directory, removed by Close.
	Dir       string
	ClusterID string
	// Shards is the number of storage groups (each forms one shard).
	Shards int
	// NoStorage starts the ordering replicas only, with no storage group
	// (Shards and Replicas are ignored): whoever uses the cluster registers
	// its own shards, as the emulated shards of a benchmark do. Config then
	// returns a cluster without storage servers, which is not a valid
	// cluster file.
	NoStorage bool
	// Replicas is the number of storage servers per group.
	Replicas         int
	OrderingReplicas int
	OrderingInterval time.Duration
	FailureTimeout   time.Duration
	// Fsync is the storage fsync policy ("" is the cluster default,
	// group); NoRaftFsync is the raft_fsync: false opt-out.
	Fsync          string
	FsyncInterval  time.Duration
	NoRaftFsync    bool
	RaftTick       time.Duration
	RecordBytesMax int
	SegmentBytes   int64
	// Mode names the cluster's ordering mode (mode.Names; "" is the
	// default, eager); WindowCuts, NoLagFix, NoQuotaChange and
	// NoEagerFallback tune speculative mode.
	Mode            string
	WindowCuts      uint64
	NoLagFix        bool
	NoQuotaChange   bool
	NoEagerFallback bool
	// NoStagger puts every shard in every cut of a lease window, however
	// many shards there are (stagger_above 0); by default more than
	// config.DefaultStaggerAbove shards are split into staggered groups.
	NoStagger bool
	// TLS secures the cluster with certificates generated into Dir/tls: a
	// CA, one per server, and the admin client's (data and admin), with an
	// empty token file beside them. Without it the cluster is insecure:
	// true.
	TLS bool
	// SequencingReplicas is the number of sequencing replicas of a lazy
	// cluster (default config.DefaultSequencingReplicas); other modes
	// have none.
	SequencingReplicas int
	// LazyBatchInterval is the least time between two batches of a lazy
	// cluster's sequencing leader (0: the cluster file's default).
	LazyBatchInterval time.Duration
	// Logger receives the servers' logs; nil discards them.
	Logger *slog.Logger
}

// server is one running (or stopped) ordering replica or storage server.
type server struct {
	id   string
	addr string
	// storage is the running storage server, nil for an ordering replica.
	storage *storage.Server
	// sec is how the server serves and dials; kept across restarts so a
	// reload reaches it.
	sec *auth.Security
	// While running: the gRPC server, the role's Stop, and serveDone,
	// closed once Serve returned.
	grpc      *grpc.Server
	stop      func()
	serveDone chan struct{}
}

func (s *server) running() bool { return s.grpc != nil }

// Cluster is a running dev cluster.
type Cluster struct {
	ClusterID string

	log     *slog.Logger
	dir     string
	tempDir bool

	// serverLog is the servers' logger: log's, but only errors once Close
	// began (closing), when every server's peers vanish one by one.
	serverLog *slog.Logger
	closing   atomic.Bool

	mu sync.Mutex
	// cfg is the equivalent cluster file; AddGroup appends to its storage.
	cfg     *config.Cluster
	servers map[string]*server
	client  *client.Client
	// clientSecurity is how the cluster's own clients dial: as the admin
	// client. Set by Start.
	clientSecurity *auth.Security
	closed         bool
	serveErr       []error
}

// Start starts a cluster and returns once every server listens; use
// WaitReady to wait until it takes appends. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &Cluster{
		ClusterID: opts.ClusterID,
		log:       opts.Logger,
		servers:   map[string]*server{},
	}
	c.serverLog = slog.New(quietWhileClosing{h: opts.Logger.Handler(), closing: &c.closing})
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "augur-dev-")
		if err != nil {
			return nil, fmt.Errorf("devcluster: %w", err)
		}
		c.dir, c.tempDir = dir, true
	} else {
		dir, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("devcluster: data dir: %w", err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("devcluster: %w", err)
		}
		c.dir = dir
	}

	cfg := config.Default()
	cfg.ClusterID = opts.ClusterID
	cfg.DataDir = c.dir
	cfg.RaftFsync = !opts.NoRaftFsync
	if opts.Mode != "" {
		cfg.Mode = opts.Mode
	}
	if opts.WindowCuts != 0 {
		cfg.WindowCuts = opts.WindowCuts
	}
	cfg.NoLagFix, cfg.NoQuotaChange, cfg.NoEagerFallback = opts.NoLagFix, opts.NoQuotaChange, opts.NoEagerFallback
	if opts.NoStagger {
		cfg.StaggerAbove = 0
	}
	if opts.OrderingInterval != 0 {
		cfg.OrderingInterval = config.Duration(opts.OrderingInterval)
	}
	if opts.FailureTimeout != 0 {
		cfg.FailureTimeout = config.Duration(opts.FailureTimeout)
	}
	if opts.Fsync != "" {
		cfg.Fsync = opts.Fsync
	}
	if opts.FsyncInterval != 0 {
		cfg.FsyncInterval = config.Duration(opts.FsyncInterval)
	}
	if opts.LazyBatchInterval != 0 {
		cfg.LazyBatchInterval = config.Duration(opts.LazyBatchInterval)
	}
	cfg.SetLazyDefaults()
	if opts.RaftTick != 0 {
		cfg.RaftTick = config.Duration(opts.RaftTick)
	}
	if opts.RecordBytesMax != 0 {
		cfg.RecordBytesMax = opts.RecordBytesMax
	}
	if opts.SegmentBytes != 0 {
		cfg.SegmentBytes = opts.SegmentBytes
	}
	if opts.TLS {
		cfg.TLS = &config.TLS{Dir: filepath.Join(c.dir, tlsDirName), Client: config.AdminClient, Tokens: filepath.Join(c.dir, tlsDirName, tokensFileName)}
	} else {
		cfg.Insecure = true
	}

	// Listen first so the configs name the ports the OS chose.
	listeners := map[string]net.Listener{}
	closeListeners := func() {
		for _, l := range listeners {
			l.Close()
		}
	}
	listen := func(id string) (string, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("devcluster: listen for %s: %w", id, err)
		}
		listeners[id] = l
		return l.Addr().String(), nil
	}
	for i := range opts.OrderingReplicas {
		id := "o" + strconv.Itoa(i+1)
		addr, err := listen(id)
		if err != nil {
			closeListeners()
			c.removeTemp()
			return nil, err
		}
		cfg.Ordering = append(cfg.Ordering, config.OrderingNode{ID: id, Addr: addr})
	}
	for g := range opts.Shards {
		group := groupName(g)
		for r := range opts.Replicas {
			id := storageID(group, r)
			addr, err := listen(id)
			if err != nil {
				closeListeners()
				c.removeTemp()
				return nil, err
			}
			cfg.Storage = append(cfg.Storage, config.StorageNode{ID: id, Group: group, Addr: addr})
		}
	}
	if cfg.Mode == config.ModeLazy {
		n := opts.SequencingReplicas
		if n == 0 {
			n = config.DefaultSequencingReplicas
		}
		for i := range n {
			id := "q" + strconv.Itoa(i+1)
			addr, err := listen(id)
			if err != nil {
				closeListeners()
				c.removeTemp()
				return nil, err
			}
			cfg.Sequencing = append(cfg.Sequencing, config.SequencingNode{ID: id, Addr: addr})
		}
	}
	validate := cfg.Validate
	if opts.NoStorage {
		validate = cfg.ValidateWithoutStorage
	}
	if err := validate(); err != nil {
		closeListeners()
		c.removeTemp()
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	c.cfg = cfg
	c.clientSecurity = auth.Insecure()
	if opts.TLS {
		m, err := initTLS(cfg)
		if err != nil {
			closeListeners()
			c.removeTemp()
			return nil, fmt.Errorf("devcluster: %w", err)
		}
		c.clientSecurity = auth.New(m, nil)
	}

	// Ordering replicas first: storage servers register with them.
	for _, o := range cfg.Ordering {
		if err := c.startServer(o.ID, listeners[o.ID]); err != nil {
			delete(listeners, o.ID)
			closeListeners()
			c.Close()
			return nil, err
		}
		delete(listeners, o.ID)
	}
	for _, s := range cfg.Storage {
		if err := c.startServer(s.ID, listeners[s.ID]); err != nil {
			delete(listeners, s.ID)
			closeListeners()
			c.Close()
			return nil, err
		}
		delete(listeners, s.ID)
	}
	for _, q := range cfg.Sequencing {
		if err := c.startServer(q.ID, listeners[q.ID]); err != nil {
			delete(listeners, q.ID)
			closeListeners()
			c.Close()
			return nil, err
		}
		delete(listeners, q.ID)
	}
	return c, nil
}

func (o *Options) defaults() error {
	if o.ClusterID == "" {
		o.ClusterID = DefaultClusterID
	}
	if o.NoStorage {
		o.Shards, o.Replicas = 0, 0
	} else if o.Shards == 0 {
		o.Shards = DefaultShards
	}
	if o.Replicas == 0 && !o.NoStorage {
		o.Replicas = DefaultReplicas
	}
	if o.OrderingReplicas == 0 {
		o.OrderingReplicas = DefaultOrderingReplicas
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.Shards < 0 || o.Shards > ShardsMax:
		return fmt.Errorf("devcluster: shards must be in [1, %d], got %d", ShardsMax, o.Shards)
	case !o.NoStorage && (o.Replicas < config.GroupServersMin || o.Replicas > config.GroupServersMax):
		return fmt.Errorf("devcluster: replicas (storage servers per group) must be %d or %d, got %d", config.GroupServersMin, config.GroupServersMax, o.Replicas)
	case o.SequencingReplicas < 0 || o.SequencingReplicas > replicasMax:
		return fmt.Errorf("devcluster: sequencing replicas must be in [1, %d], got %d", replicasMax, o.SequencingReplicas)
	case o.OrderingReplicas < 0 || o.OrderingReplicas > replicasMax:
		return fmt.Errorf("devcluster: ordering replicas must be in [1, %d], got %d", replicasMax, o.OrderingReplicas)
	}
	// Every other bound is checked by config.Validate on the cluster file
	// built from these options.
	return nil
}

// groupName names the i-th group: a, b, ..., z, then g26, g27, ...
func groupName(i int) string {
	if i < 26 {
		return string(rune('a' + i))
	}
	return "g" + strconv.Itoa(i)
}

// storageID names replica r of group: a1, a2, ...; g26-1, ... for long names.
func storageID(group string, r int) string {
	if len(group) == 1 {
		return group + strconv.Itoa(r+1)
	}
	return group + "-" + strconv.Itoa(r+1)
}

// startServer starts server id on l, or on a new listener on its address
// when l is nil (a restart).
func (c *Cluster) startServer(id string, l net.Listener) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		if l != nil {
			l.Close()
		}
		return errors.New("devcluster: closed")
	}
	if s := c.servers[id]; s != nil && s.running() {
		c.mu.Unlock()
		if l != nil {
			l.Close()
		}
		return fmt.Errorf("devcluster: %s is already running", id)
	}
	cfg := c.cfg
	addr, err := cfg.Addr(id)
	c.mu.Unlock()
	if err != nil {
		if l != nil {
			l.Close()
		}
		return fmt.Errorf("devcluster: %w", err)
	}
	if l == nil {
		if l, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("devcluster: restart %s: %w", id, err)
		}
	}

	c.mu.Lock()
	var sec *auth.Security
	if old := c.servers[id]; old != nil {
		sec = old.sec
	}
	c.mu.Unlock()
	if sec == nil {
		if sec, err = cfg.ServerSecurity(id); err != nil {
			l.Close()
			return fmt.Errorf("devcluster: start %s: %w", id, err)
		}
	}
	srv, err := cfg.NewServer(id, c.serverLog, sec)
	if err != nil {
		l.Close()
		return fmt.Errorf("devcluster: start %s: %w", id, err)
	}
	g := grpc.NewServer(append(rpcopt.ServerOptions(), sec.ServerOptions()...)...)
	srv.Register(g)
	srv.Start()
	stop := srv.Stop
	s := &server{id: id, addr: addr, grpc: g, stop: stop, serveDone: make(chan struct{}), sec: sec}
	s.storage, _ = srv.(*storage.Server)
	go func() {
		defer close(s.serveDone)
		if err := g.Serve(l); err != nil {
			c.log.Error("devcluster: serve", "server", id, "err", err)
			c.mu.Lock()
			c.serveErr = append(c.serveErr, fmt.Errorf("%s: %w", id, err))
			c.mu.Unlock()
		}
	}()
	c.mu.Lock()
	c.servers[id] = s
	c.mu.Unlock()
	return nil
}

// stopServer stops server id: its connections close at once, then its
// role stops (a storage server says it goes away on its heartbeat
// stream, as on SIGTERM, unless crash). Its data stays.
func (c *Cluster) stopServer(id, role string, crash bool) error {
	c.mu.Lock()
	s := c.servers[id]
	r, err := c.cfg.Role(id)
	if err == nil && r != role {
		err = fmt.Errorf("%s is a %s server, not %s", id, r, role)
	}
	if err == nil && (s == nil || !s.running()) {
		err = fmt.Errorf("%s is not running", id)
	}
	var g *grpc.Server
	var stop func()
	var done chan struct{}
	if err == nil {
		g, stop, done = s.grpc, s.stop, s.serveDone
		if crash && s.storage != nil {
			stop = s.storage.Crash
		}
		s.grpc, s.stop, s.serveDone = nil, nil, nil
	}
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("devcluster: stop: %w", err)
	}
	g.Stop()
	stop()
	<-done
	return nil
}

// StopOrdering stops ordering replica id, keeping its data and address.
func (c *Cluster) StopOrdering(id string) error { return c.stopServer(id, config.RoleOrdering, false) }

// StartOrdering restarts a stopped ordering replica on its old data and address.
func (c *Cluster) StartOrdering(id string) error { return c.restart(id, config.RoleOrdering) }

// SetReportDelay makes storage server id a straggler: its reports to the
// ordering layer are held back by d (0 ends it).
func (c *Cluster) SetReportDelay(id string, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.servers[id]
	if s == nil || s.storage == nil || !s.running() {
		return fmt.Errorf("devcluster: %s is not a running storage server", id)
	}
	s.storage.SetReportDelay(d)
	return nil
}

// StopSequencing stops sequencing replica id (its ring is lost, as in a
// crash), keeping its address.
func (c *Cluster) StopSequencing(id string) error {
	return c.stopServer(id, config.RoleSequencing, true)
}

// StartSequencing restarts a stopped sequencing replica on its old address.
func (c *Cluster) StartSequencing(id string) error { return c.restart(id, config.RoleSequencing) }

// SequencingIDs lists the sequencing replicas' ids (lazy order), the first
// view's leader first.
func (c *Cluster) SequencingIDs() []string {
	cfg := c.Config()
	ids := make([]string, len(cfg.Sequencing))
	for i, q := range cfg.Sequencing {
		ids[i] = q.ID
	}
	return ids
}

// StopStorage stops storage server id, keeping its data and address.
func (c *Cluster) StopStorage(id string) error { return c.stopServer(id, config.RoleStorage, false) }

// KillStorage stops storage server id as kill -9 would look to the
// ordering layer: it says nothing, and the leader finds it silent after
// the failure timeout. Its data stays.
func (c *Cluster) KillStorage(id string) error { return c.stopServer(id, config.RoleStorage, true) }

// StartStorage restarts a stopped storage server on its old data and address.
func (c *Cluster) StartStorage(id string) error { return c.restart(id, config.RoleStorage) }

func (c *Cluster) restart(id, role string) error {
	c.mu.Lock()
	r, err := c.cfg.Role(id)
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("devcluster: start: %w", err)
	}
	if r != role {
		return fmt.Errorf("devcluster: start: %s is a %s server, not %s", id, r, role)
	}
	return c.startServer(id, nil)
}

// AddGroup starts a new storage group of Replicas servers named group and
// waits until the cluster lists a live shard of it.
func (c *Cluster) AddGroup(ctx context.Context, group string) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errors.New("devcluster: closed")
	}
	if slices.Contains(c.cfg.Groups(), group) {
		c.mu.Unlock()
		return fmt.Errorf("devcluster: group %q already exists", group)
	}
	replicas := 0
	if gs := c.cfg.Groups(); len(gs) > 0 {
		replicas = len(c.cfg.Group(gs[0]))
	}
	c.mu.Unlock()
	replicas = max(replicas, 1)

	next := c.Config()
	listeners := map[string]net.Listener{}
	var ids []string
	for r := range replicas {
		id := storageID(group, r)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return fmt.Errorf("devcluster: listen for %s: %w", id, err)
		}
		listeners[id] = l
		ids = append(ids, id)
		next.Storage = append(next.Storage, config.StorageNode{ID: id, Group: group, Addr: l.Addr().String()})
	}
	if err := next.Validate(); err != nil {
		for _, l := range listeners {
			l.Close()
		}
		return fmt.Errorf("devcluster: add group %q: %w", group, err)
	}
	if next.TLS != nil {
		if err := issueServerCerts(next, ids); err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return fmt.Errorf("devcluster: add group %q: %w", group, err)
		}
	}
	c.mu.Lock()
	c.cfg = next
	// The servers already running accept the new ones as peers.
	for _, s := range c.servers {
		s.sec.SetMembers(next.Members())
	}
	c.mu.Unlock()
	for _, id := range ids {
		l := listeners[id]
		delete(listeners, id)
		if err := c.startServer(id, l); err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return err
		}
	}
	return c.waitFor(ctx, func(st *pb.StatusResponse) string {
		if !hasLiveShard(st, group) {
			return fmt.Sprintf("no live shard of group %q yet", group)
		}
		return ""
	})
}

// AddStorage starts a new storage server in group, as an operator does by
// adding one to the group in the cluster file, and returns its id. The
// running servers keep their own copy of the cluster file: the new server
// finds the group's live shards and joins them itself.
func (c *Cluster) AddStorage(group string) (string, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return "", errors.New("devcluster: closed")
	}
	n := len(c.cfg.Group(group))
	c.mu.Unlock()
	if n == 0 {
		return "", fmt.Errorf("devcluster: no group %q", group)
	}
	next := c.Config()
	id := storageID(group, n)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("devcluster: listen for %s: %w", id, err)
	}
	next.Storage = append(next.Storage, config.StorageNode{ID: id, Group: group, Addr: l.Addr().String()})
	if err := next.Validate(); err != nil {
		l.Close()
		return "", fmt.Errorf("devcluster: add %s to group %q: %w", id, group, err)
	}
	if next.TLS != nil {
		if err := issueServerCerts(next, []string{id}); err != nil {
			l.Close()
			return "", fmt.Errorf("devcluster: add %s to group %q: %w", id, group, err)
		}
	}
	c.mu.Lock()
	c.cfg = next
	for _, s := range c.servers {
		s.sec.SetMembers(next.Members())
	}
	c.mu.Unlock()
	if err := c.startServer(id, l); err != nil {
		return "", err
	}
	return id, nil
}

// WaitReady waits until the ordering layer has a leader and every group has
// a live shard, polling Status through the client SDK and, since a new
// client may ask any of them first, every running ordering replica.
func (c *Cluster) WaitReady(ctx context.Context) error {
	return c.waitFor(ctx, func(st *pb.StatusResponse) string {
		if st.LeaderId == "" {
			return "no ordering leader yet"
		}
		for _, g := range c.Config().Groups() {
			if !hasLiveShard(st, g) {
				return fmt.Sprintf("no live shard of group %q yet", g)
			}
		}
		if lz := st.GetLazy(); len(c.Config().Sequencing) > 0 && (lz.GetView() == 0 || lz.GetSealed()) {
			return "no open sequencing view yet"
		}
		return ""
	})
}

func hasLiveShard(st *pb.StatusResponse, group string) bool {
	for _, sh := range st.Shards {
		if sh.Group == group && sh.State == pb.ShardState_SHARD_LIVE {
			return true
		}
	}
	return false
}

// waitFor polls Status until notYet returns "" for the client's view and
// for the view of every running ordering replica (a new client may ask any
// of them first), or until ctx ends.
func (c *Cluster) waitFor(ctx context.Context, notYet func(*pb.StatusResponse) string) error {
	cl, err := c.sharedClient(ctx)
	if err != nil {
		return err
	}
	conns := map[string]*grpc.ClientConn{}
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	tick := time.NewTicker(readyPollInterval)
	defer tick.Stop()
	for {
		why := c.notReady(ctx, cl, conns, notYet)
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devcluster: not ready (%s): %w", why, ctx.Err())
		case <-tick.C:
		}
	}
}

// notReady says why the cluster is not ready yet, or "" if it is.
func (c *Cluster) notReady(ctx context.Context, cl *client.Client, conns map[string]*grpc.ClientConn, notYet func(*pb.StatusResponse) string) string {
	callCtx, cancel := context.WithTimeout(ctx, statusCallTimeout)
	defer cancel()
	st, err := cl.Status(callCtx)
	if err != nil {
		return fmt.Sprintf("status: %v", err)
	}
	if why := notYet(st); why != "" {
		return why
	}
	for _, o := range c.runningOrdering() {
		cc := conns[o.addr]
		if cc == nil {
			if cc, err = grpc.NewClient(o.addr, c.clientSecurity.DialOption()); err != nil {
				return fmt.Sprintf("dial %s: %v", o.id, err)
			}
			conns[o.addr] = cc
		}
		st, err := pb.NewOrderingClient(cc).Status(callCtx, &pb.StatusRequest{ClusterId: c.ClusterID})
		if err != nil {
			return fmt.Sprintf("status of %s: %v", o.id, err)
		}
		if why := notYet(st); why != "" {
			return o.id + ": " + why
		}
	}
	return ""
}

// runningOrdering lists the ordering replicas that are running.
func (c *Cluster) runningOrdering() []server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []server
	for _, o := range c.cfg.Ordering {
		if s := c.servers[o.ID]; s != nil && s.running() {
			out = append(out, server{id: s.id, addr: s.addr})
		}
	}
	return out
}

// sharedClient returns the cluster's own client, dialling it on first use.
func (c *Cluster) sharedClient(ctx context.Context) (*client.Client, error) {
	c.mu.Lock()
	cl := c.client
	c.mu.Unlock()
	if cl != nil {
		return cl, nil
	}
	cl, err := c.Dial(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.client != nil {
		other := c.client
		cl.Close()
		if other == nil {
			return nil, errors.New("devcluster: closed")
		}
		return other, nil
	}
	c.client = cl
	return cl, nil
}

// Dial returns a new client of the cluster; the caller closes it.
func (c *Cluster) Dial(ctx context.Context) (*client.Client, error) {
	cl, err := client.Dial(ctx, c.ClientConfig())
	if err != nil {
		return nil, fmt.Errorf("devcluster: dial: %w", err)
	}
	return cl, nil
}

// ClientConfig is the configuration of a client of the cluster: the admin
// client's certificate, or plaintext for an insecure cluster.
func (c *Cluster) ClientConfig() client.Config {
	cfg := c.Config()
	cc := client.Config{ClusterID: cfg.ClusterID, Ordering: cfg.OrderingAddrs(), RecordBytesMax: cfg.RecordBytesMax}
	if c.clientSecurity.IsInsecure() {
		cc.Insecure = true
	} else {
		cc.TLS = auth.ClientTLS(c.clientSecurity.Material())
	}
	return cc
}

// ClientDialOption is the transport credentials of the admin client, for
// calling a server's gRPC services directly.
func (c *Cluster) ClientDialOption() grpc.DialOption { return c.clientSecurity.DialOption() }

// ReloadTLS makes every server, running or stopped, reload its
// certificates and tokens, as SIGHUP does to augur server.
func (c *Cluster) ReloadTLS() error {
	c.mu.Lock()
	var secs []*auth.Security
	for _, s := range c.servers {
		secs = append(secs, s.sec)
	}
	c.mu.Unlock()
	var errs []error
	for _, sec := range secs {
		if m := sec.Material(); m != nil {
			errs = append(errs, m.Reload())
		}
	}
	return errors.Join(errs...)
}

// Config returns the cluster file equivalent to the running cluster, so CLI
// commands and separate processes can target it.
func (c *Cluster) Config() *config.Cluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := *c.cfg
	cp.Ordering = slices.Clone(c.cfg.Ordering)
	cp.Storage = slices.Clone(c.cfg.Storage)
	cp.Sequencing = slices.Clone(c.cfg.Sequencing)
	return &cp
}

// OrderingAddrs lists the ordering replicas' addresses.
func (c *Cluster) OrderingAddrs() []string { return c.Config().OrderingAddrs() }

// Dir is the directory holding the servers' data.
func (c *Cluster) Dir() string { return c.dir }

// Close stops every server (storage first), closes the cluster's client and
// removes the data directory if Start created it. It returns the first error
// a gRPC server reported while serving.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.closing.Store(true)
	cl := c.client
	c.client = nil
	var storageIDs, orderingIDs []string
	for _, q := range c.cfg.Sequencing {
		storageIDs = append(storageIDs, q.ID)
	}
	for _, s := range c.cfg.Storage {
		storageIDs = append(storageIDs, s.ID)
	}
	for _, o := range c.cfg.Ordering {
		orderingIDs = append(orderingIDs, o.ID)
	}
	c.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
	for _, id := range storageIDs {
		c.stopIfRunning(id)
	}
	for _, id := range orderingIDs {
		c.stopIfRunning(id)
	}
	c.removeTemp()
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.serveErr...)
}

// quietWhileClosing passes a cluster's server logs on, but only errors
// once the cluster closes: stopping the servers one after the other makes
// the others warn of peers and leaders gone, which says nothing then.
type quietWhileClosing struct {
	h       slog.Handler
	closing *atomic.Bool
}

func (q quietWhileClosing) Enabled(ctx context.Context, l slog.Level) bool {
	return (l >= slog.LevelError || !q.closing.Load()) && q.h.Enabled(ctx, l)
}

func (q quietWhileClosing) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelError && q.closing.Load() {
		return nil
	}
	return q.h.Handle(ctx, r)
}

func (q quietWhileClosing) WithAttrs(as []slog.Attr) slog.Handler {
	return quietWhileClosing{h: q.h.WithAttrs(as), closing: q.closing}
}

func (q quietWhileClosing) WithGroup(name string) slog.Handler {
	return quietWhileClosing{h: q.h.WithGroup(name), closing: q.closing}
}

func (c *Cluster) stopIfRunning(id string) {
	c.mu.Lock()
	s := c.servers[id]
	running := s != nil && s.running()
	c.mu.Unlock()
	if !running {
		return
	}
	role, _ := c.Config().Role(id)
	if err := c.stopServer(id, role, false); err != nil {
		c.log.Warn("devcluster: close", "server", id, "err", err)
	}
}

func (c *Cluster) removeTemp() {
	if c.tempDir {
		if err := os.RemoveAll(c.dir); err != nil {
			c.log.Warn("devcluster: remove data dir", "dir", c.dir, "err", err)
		}
	}
}

// OrderingIDs lists the ordering replicas' ids.
func (c *Cluster) OrderingIDs() []string {
	cfg := c.Config()
	ids := make([]string, len(cfg.Ordering))
	for i, o := range cfg.Ordering {
		ids[i] = o.ID
	}
	return ids
}

// StorageIDs lists the storage servers' ids, groups in order, each group's
// primary first.
func (c *Cluster) StorageIDs() []string {
	cfg := c.Config()
	ids := make([]string, len(cfg.Storage))
	for i, s := range cfg.Storage {
		ids[i] = s.ID
	}
	return ids
}

// Leader returns the id of the current ordering leader, as a Status call
// reports it ("" while there is none).
func (c *Cluster) Leader(ctx context.Context) (string, error) {
	cl, err := c.sharedClient(ctx)
	if err != nil {
		return "", err
	}
	st, err := cl.Status(ctx)
	if err != nil {
		return "", fmt.Errorf("devcluster: status: %w", err)
	}
	return st.LeaderId, nil
}
