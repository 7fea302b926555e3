package client

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/rpcopt"
)

// Defaults.
const (
	defaultInflightMax    = 4096
	defaultRecordBytesMax = 1 << 20
	defaultRetryInterval  = 50 * time.Millisecond
	// appendBatchMax and appendBatchBytesMax bound one Append message.
	appendBatchMax      = 1024
	appendBatchBytesMax = 1 << 20
	// rpcTimeout bounds control-plane calls.
	rpcTimeout = 5 * time.Second
	// resolveGiveUpAfter is how long appends to a finalized shard wait for
	// any of its replicas to say whether they were ordered.
	resolveGiveUpAfter = 5 * time.Second
)

// Client is safe for concurrent use.
type Client struct {
	cfg      Config
	clientID uint64
	seq      atomic.Uint64
	inflight chan struct{}
	rr       atomic.Uint64

	mu     sync.Mutex
	status *pb.StatusResponse
	conns  map[string]*grpc.ClientConn
	shards map[uint32]*shardConn
	leader string
	// fetching is the Status call in flight, next the one every caller
	// that came meanwhile waits for (see refresh).
	fetching, next *statusFetch
	closed         bool
	closedCh       chan struct{}
	wg             sync.WaitGroup
	// lazyConns are the pipelined lazy-append streams, by server and kind.
	lazyConns map[lazyKey]*lazyConn
	// lazyMap caches the position table of a lazy cluster, sorted.
	lazyMap       []positionRun
	lazyReadStats lazyReads
	// floorMu guards unfinished and finishedSeqs: the lazy appends not
	// finished yet, whose lowest sequence number is the client's floor.
	floorMu      sync.Mutex
	unfinished   seqHeap
	finishedSeqs map[uint64]bool
	// ctx bounds the work the client does on its own behalf, which outlives
	// any one call: append streams shared by every caller and background
	// refreshes. Close cancels it (stop).
	ctx  context.Context
	stop context.CancelFunc
}

// Dial connects to a cluster through its ordering replicas.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.ClusterID == "" {
		return nil, errors.New("augur: cluster id is empty")
	}
	if len(cfg.Ordering) == 0 {
		return nil, errors.New("augur: no ordering replica addresses")
	}
	switch {
	case cfg.TLS == nil && !cfg.Insecure:
		return nil, errors.New("augur: no TLS configuration (Config.TLS, see LoadTLS); set Config.Insecure only for a cluster run with insecure: true")
	case cfg.TLS != nil && cfg.Insecure:
		return nil, errors.New("augur: both Config.TLS and Config.Insecure are set")
	case cfg.Token != "" && cfg.Insecure:
		return nil, errors.New("augur: a token is never sent over plaintext; Config.Token needs Config.TLS")
	}
	if cfg.InflightMax <= 0 {
		cfg.InflightMax = defaultInflightMax
	}
	if cfg.RecordBytesMax <= 0 {
		cfg.RecordBytesMax = defaultRecordBytesMax
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = defaultRetryInterval
	}
	c := &Client{
		cfg:      cfg,
		clientID: cfg.ClientID,
		inflight: make(chan struct{}, cfg.InflightMax),
		conns:    map[string]*grpc.ClientConn{},
		shards:   map[uint32]*shardConn{},
		closedCh: make(chan struct{}),
	}
	// The client's own lifetime is the root of the work it does for no
	// single caller; it is not any caller's ctx, which may end sooner.
	c.ctx, c.stop = context.WithCancel(context.Background())
	for c.clientID == 0 {
		c.clientID = rand.Uint64()
	}
	if _, err := c.refresh(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// ID is the client id that makes this client's retries idempotent.
func (c *Client) ID() uint64 { return c.clientID }

// Close releases the client's connections; appends in flight fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closedCh)
	c.stop()
	if f := c.next; f != nil {
		// It never starts: its waiters learn why.
		f.err, c.next = ErrClosed, nil
		close(f.done)
	}
	shards := c.shards
	c.shards = map[uint32]*shardConn{}
	c.mu.Unlock()
	for _, sc := range shards {
		sc.shutdown()
	}
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cc := range c.conns {
		cc.Close()
	}
	return nil
}

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	creds := insecure.NewCredentials()
	if c.cfg.TLS != nil {
		creds = credentials.NewTLS(c.cfg.TLS)
	}
	opts := append(rpcopt.DialOptions(), grpc.WithTransportCredentials(creds),
		// gRPC's default reconnection backoff grows to two minutes; a
		// restarted server should be found within a second.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: c.cfg.RetryInterval, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}))
	if c.cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.TokenCredentials(c.cfg.Token)))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("augur: dial %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// orderingAddrs lists the ordering replicas, the known leader first.
func (c *Client) orderingAddrs() []string {
	c.mu.Lock()
	leader := c.leader
	c.mu.Unlock()
	out := []string{}
	if leader != "" {
		out = append(out, leader)
	}
	for _, a := range c.cfg.Ordering {
		if a != leader {
			out = append(out, a)
		}
	}
	return out
}

// onOrdering calls fn on ordering replicas, the leader first, until one
// answers without a transport error.
func (c *Client) onOrdering(ctx context.Context, fn func(context.Context, pb.OrderingClient) error) error {
	var last error
	for _, addr := range c.orderingAddrs() {
		cc, err := c.conn(addr)
		if err != nil {
			last = err
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		err = fn(cctx, pb.NewOrderingClient(cc))
		cancel()
		if err == nil {
			return nil
		}
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unavailable && st.Code() != codes.DeadlineExceeded && st.Code() != codes.Canceled {
			return translate(err)
		}
		last = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return fmt.Errorf("augur: no ordering replica answered: %w", last)
}

// statusFetch is one Status call, shared by every caller of refresh
// waiting for it.
type statusFetch struct {
	done chan struct{}
	st   *pb.StatusResponse
	err  error
}

// refresh fetches the shard table, preferring the leader's view. The
// caller gets a fetch that began after its call, never one already in
// flight, which may miss what the caller just learned (CheckTail must
// cover every append acknowledged before it). Callers that come while a
// fetch runs share the next one, so a client has at most one Status call
// in flight however many of its appends retry at once: when each asked on
// its own, a view change that refused thousands of appends sent the
// ordering replicas thousands of calls every retry interval, which kept
// them from committing the view change the appends waited for.
func (c *Client) refresh(ctx context.Context) (*pb.StatusResponse, error) {
	f, err := c.nextFetch()
	if err != nil {
		return nil, err
	}
	select {
	case <-f.done:
		return f.st, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// nextFetch returns the fetch that starts next: now, if none runs.
func (c *Client) nextFetch() (*statusFetch, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	f := c.next
	if f == nil {
		f = &statusFetch{done: make(chan struct{})}
		c.next = f
		if c.fetching == nil {
			c.startFetchLocked()
		}
	}
	return f, nil
}

// startFetchLocked starts the waiting fetch. It runs for the client, not
// for any one caller (each waits only as long as its own ctx allows).
func (c *Client) startFetchLocked() {
	f := c.next
	c.fetching, c.next = f, nil
	c.wg.Go(func() {
		err := c.onOrdering(c.ctx, func(ctx context.Context, oc pb.OrderingClient) error {
			var err error
			f.st, err = oc.Status(ctx, &pb.StatusRequest{ClusterId: c.cfg.ClusterID})
			return err
		})
		c.mu.Lock()
		if err == nil {
			if f.st.LeaderAddr != "" {
				c.leader = f.st.LeaderAddr
			}
			if c.status == nil || f.st.EventSeq >= c.status.EventSeq {
				c.status = f.st
			}
			f.st = c.status
		} else {
			f.st, f.err = nil, err
		}
		c.fetching = nil
		if c.next != nil && !c.closed {
			c.startFetchLocked()
		}
		c.mu.Unlock()
		close(f.done)
	})
}

// noteMembership refreshes the shard table in the background when a server
// has applied a newer one, so appends spread onto shards added meanwhile.
func (c *Client) noteMembership(version uint64) {
	c.mu.Lock()
	stale := c.status != nil && version > c.status.MembershipVersion
	c.mu.Unlock()
	if stale {
		c.nextFetch()
	}
}

func (c *Client) cachedStatus() *pb.StatusResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

func (c *Client) shardInfo(id uint32) *pb.ShardInfo {
	for _, sh := range c.cachedStatus().GetShards() {
		if sh.Id == id {
			return sh
		}
	}
	return nil
}

// Status describes the cluster.
func (c *Client) Status(ctx context.Context) (*pb.StatusResponse, error) {
	return c.refresh(ctx)
}

// Ping asks the storage server at addr who it is and, for each shard it
// holds, what of its copy it cannot serve (damaged or lost records).
func (c *Client) Ping(ctx context.Context, addr string) (*pb.PingResponse, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	return pb.NewReplicaClient(cc).Ping(ctx, &pb.PingRequest{ClusterId: c.cfg.ClusterID})
}

// CheckTail returns the next position to be assigned. On a lazy cluster
// it is the durable tail, from the sequencing leader: every append
// acknowledged before the call lies below it.
func (c *Client) CheckTail(ctx context.Context) (uint64, error) {
	st, err := c.refresh(ctx)
	if err != nil {
		return 0, err
	}
	if lz := st.GetLazy(); lz != nil {
		return c.checkTailLazy(ctx, lz)
	}
	return st.Tail, nil
}

// Trim discards the records below pos on every server.
func (c *Client) Trim(ctx context.Context, pos uint64) error {
	return c.leaderCall(ctx, func(ctx context.Context, oc pb.OrderingClient) (string, error) {
		resp, err := oc.Trim(ctx, &pb.TrimRequest{ClusterId: c.cfg.ClusterID, Position: pos})
		if err != nil {
			return "", err
		}
		if resp.NotLeader {
			return resp.LeaderAddr, nil
		}
		return "", nil
	})
}

// FinalizeShard stops shard after graceCuts more cuts; it stays readable.
func (c *Client) FinalizeShard(ctx context.Context, shard uint32, graceCuts uint64) error {
	err := c.leaderCall(ctx, func(ctx context.Context, oc pb.OrderingClient) (string, error) {
		resp, err := oc.FinalizeShard(ctx, &pb.FinalizeShardRequest{ClusterId: c.cfg.ClusterID, Shard: shard, GraceCuts: graceCuts})
		if err != nil {
			return "", err
		}
		if resp.NotLeader {
			return resp.LeaderAddr, nil
		}
		return "", nil
	})
	if err == nil {
		c.refresh(ctx)
	}
	return err
}

// leaderCall retries fn until a replica that is the leader handles it; fn
// returns the leader's address when it reached a follower.
func (c *Client) leaderCall(ctx context.Context, fn func(context.Context, pb.OrderingClient) (string, error)) error {
	for {
		var redirect string
		err := c.onOrdering(ctx, func(ctx context.Context, oc pb.OrderingClient) error {
			var err error
			redirect, err = fn(ctx, oc)
			return err
		})
		if err != nil {
			return err
		}
		if redirect == "" {
			return nil
		}
		c.mu.Lock()
		c.leader = redirect
		c.mu.Unlock()
		if err := c.pause(ctx); err != nil {
			return err
		}
	}
}

func (c *Client) pause(ctx context.Context) error {
	t := time.NewTimer(c.cfg.RetryInterval)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closedCh:
		return ErrClosed
	}
}

// AddShard asks group's primary to open another live shard.
func (c *Client) AddShard(ctx context.Context, group string) (uint32, error) {
	st, err := c.refresh(ctx)
	if err != nil {
		return 0, err
	}
	var primary string
	for _, sh := range st.Shards {
		if sh.Group == group && len(sh.Replicas) > 0 {
			primary = sh.Replicas[0].Addr
		}
	}
	if primary == "" {
		return 0, fmt.Errorf("augur: no shard of group %q is known, so its primary is unknown", group)
	}
	cc, err := c.conn(primary)
	if err != nil {
		return 0, err
	}
	resp, err := pb.NewReplicaClient(cc).AddShard(ctx, &pb.AddShardRequest{ClusterId: c.cfg.ClusterID})
	if err != nil {
		return 0, translate(err)
	}
	c.refresh(ctx)
	return resp.Shard, nil
}

// refused says whether err is the cluster refusing the caller's
// credentials, which no retry changes.
func refused(err error) bool {
	c := status.Code(err)
	return c == codes.Unauthenticated || (c == codes.PermissionDenied && !auth.IsWrongCluster(status.Convert(err)))
}

// translate turns gRPC status errors into the package's errors.
func translate(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.PermissionDenied:
		if auth.IsWrongCluster(st) {
			return fmt.Errorf("%w: %s", ErrWrongCluster, st.Message())
		}
		return fmt.Errorf("%w: %s", ErrPermissionDenied, st.Message())
	case codes.Unauthenticated:
		return fmt.Errorf("%w: %s", ErrUnauthenticated, st.Message())
	case codes.OutOfRange:
		return fmt.Errorf("%w: %s", ErrTrimmed, st.Message())
	case codes.FailedPrecondition:
		return &ServerError{Code: "failed precondition", Message: st.Message()}
	case codes.InvalidArgument:
		return &ServerError{Code: "invalid argument", Message: st.Message()}
	case codes.NotFound:
		return fmt.Errorf("%w: %s", ErrUnknownShard, st.Message())
	}
	return err
}

// pickShard chooses a live shard for rec.
func (c *Client) pickShard(rec *pb.Record, skip uint32, haveSkip bool) (uint32, error) {
	st := c.cachedStatus()
	var live []uint32
	for _, sh := range st.GetShards() {
		if sh.State == pb.ShardState_SHARD_LIVE && !(haveSkip && sh.Id == skip) {
			live = append(live, sh.Id)
		}
	}
	if len(live) == 0 {
		return 0, ErrNoLiveShard
	}
	if c.cfg.Placement == ByKey && rec.Key != "" {
		h := fnv.New32a()
		h.Write([]byte(rec.Key))
		return live[int(h.Sum32()%uint32(len(live)))], nil
	}
	return live[int(c.rr.Add(1)%uint64(len(live)))], nil
}
