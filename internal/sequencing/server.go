// Package sequencing runs one sequencing replica of a cluster in lazy
// order: the shell around lazy.Sequencer (the ring of record metadata) and,
// on the view's leader, around the background orderer. It takes clients'
// metadata, acknowledges what the ring holds, and, while it leads, orders
// batches in the background: it pushes each batch's mapping to every shard
// primary, garbage-collects the batch on every sequencing replica, and only
// then advances stable-gp and tells every shard replica.
//
// Lock order: Server.mu is a leaf; no I/O happens under it.
package sequencing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
	"github.com/augur-log/augur/internal/rpcopt"
)

// Bounds.
const (
	// retryInterval paces retries of pushes, collections and refreshes.
	retryInterval = 20 * time.Millisecond
	// callTimeout bounds one RPC of the background work.
	callTimeout = 2 * time.Second
	// shardTableRefresh is how often the leader re-reads the shard table.
	shardTableRefresh = 200 * time.Millisecond
	// ackQueueMax bounds the acknowledgements queued for one client stream.
	ackQueueMax = 1024
)

// Peer is one sequencing replica.
type Peer struct {
	ID, Addr string
}

// Config configures a sequencing replica.
type Config struct {
	ClusterID string
	ID        string
	// Replicas lists every sequencing replica of the cluster file; the
	// first leads the first view.
	Replicas []Peer
	// Ordering lists the ordering replicas' addresses (the control plane
	// and the shard table).
	Ordering []string
	// BatchInterval is the least time between the starts of two of the
	// leader's batches (a batch goes out as soon as records wait and the
	// one before is stable, but not sooner).
	BatchInterval time.Duration
	// RingMax bounds the ring (lazy.SequencerConfig.RingMax).
	RingMax int
	// BatchMax bounds one ordered batch.
	BatchMax int
	Logger   *slog.Logger
	// Creds secure the connections to the other replicas, the shards and
	// the ordering layer; nil is plaintext.
	Creds credentials.TransportCredentials
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.ClusterID == "":
		return errors.New("sequencing: cluster id is empty")
	case c.BatchInterval <= 0:
		return fmt.Errorf("sequencing: batch interval must be positive, got %v", c.BatchInterval)
	case len(c.Ordering) == 0:
		return errors.New("sequencing: no ordering replicas")
	case c.RingMax < 0 || c.BatchMax < 0:
		return fmt.Errorf("sequencing: ring max %d and batch max %d must not be negative", c.RingMax, c.BatchMax)
	}
	for _, p := range c.Replicas {
		if p.ID == c.ID {
			return nil
		}
	}
	return fmt.Errorf("sequencing: %q is not among the replicas %v", c.ID, c.Replicas)
}

// Server is one sequencing replica.
type Server struct {
	pb.UnimplementedSequencingServer
	cfg Config
	log *slog.Logger

	mu  sync.Mutex
	seq *lazy.Sequencer
	// config is the view's configuration: replicas[0] leads.
	config *pb.LazyState
	// stable is the end of the final prefix: every position below it is
	// ordered, collected everywhere and told to the shards.
	stable uint64
	// waiters are the streams that asked for the position of a record
	// this replica holds; the leader answers them once stable-gp covers it.
	waiters map[lazy.RecordID]*ackStream
	// stableChanged is closed and replaced when stable advances.
	stableChanged chan struct{}
	// lastGC is the batch collected last, whose appenders learn their
	// positions once stable-gp covers it.
	lastGC *lazy.GC
	// shardsNext is one past the largest shard id of the newest shard
	// table read: the cluster gave every id below it to a shard.
	shardsNext atomic.Uint32
	// startShards is the view's StartView.Shards: its orderer waits for a
	// table at least as new.
	startShards cut.ShardID
	// When the bench times stages: waitingSince is when the first record
	// the leader has not taken into a batch yet arrived; stableAt when
	// stable last advanced, and stableBatchAt when the batch it covers
	// was taken.
	waitingSince, stableAt, stableBatchAt time.Time
	// orderIdle says the order loop found nothing to order and waits for
	// orderKick, which take sends it when records arrive.
	orderIdle bool
	orderKick chan struct{}

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a sequencing replica. Its ring is in memory only, as the
// paper's: a restarted replica starts empty and sealed, and takes appends
// again once a view is started for it.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BatchMax == 0 {
		cfg.BatchMax = lazy.BatchMaxDefault
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:           cfg,
		log:           lg.With("sequencing", cfg.ID),
		seq:           lazy.NewSequencer(lazy.SequencerConfig{RingMax: cfg.RingMax}, lazy.SequencerState{}),
		waiters:       map[lazy.RecordID]*ackStream{},
		stableChanged: make(chan struct{}),
		orderKick:     make(chan struct{}, 1),
		conns:         map[string]*grpc.ClientConn{},
		ctx:           ctx,
		cancel:        cancel,
	}
	return s, nil
}

// Register adds the Sequencing service.
func (s *Server) Register(g *grpc.Server) { pb.RegisterSequencingServer(g, s) }

// Start runs the background loops.
func (s *Server) Start() {
	s.wg.Go(s.controlLoop)
	s.wg.Go(s.orderLoop)
}

// Stop ends the loops and closes the connections.
func (s *Server) Stop() {
	s.cancel()
	s.wg.Wait()
	s.connMu.Lock()
	defer s.connMu.Unlock()
	for _, cc := range s.conns {
		cc.Close()
	}
	s.conns = map[string]*grpc.ClientConn{}
}

func (s *Server) conn(addr string) (*grpc.ClientConn, error) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if cc, ok := s.conns[addr]; ok {
		return cc, nil
	}
	creds := s.cfg.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := append(rpcopt.DialOptions(), grpc.WithTransportCredentials(creds))
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("sequencing: dial %s: %w", addr, err)
	}
	s.conns[addr] = cc
	return cc, nil
}

// leads says whether this replica leads its open view.
func (s *Server) leadsLocked() bool {
	_, sealed := s.seq.View()
	return s.config != nil && !sealed && len(s.config.Replicas) > 0 && s.config.Replicas[0].Id == s.cfg.ID
}

// sleep waits d or until the server stops; false when it stopped.
func (s *Server) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// codeOf maps a core error to its wire code.
func codeOf(err error) pb.Code {
	switch {
	case err == nil:
		return pb.Code_OK
	case errors.Is(err, lazy.ErrSealed):
		return pb.Code_SEALED
	case errors.Is(err, lazy.ErrWrongView):
		return pb.Code_WRONG_VIEW
	case errors.Is(err, lazy.ErrRingFull), errors.Is(err, lazy.ErrTooFarAhead):
		return pb.Code_FULL
	case errors.Is(err, lazy.ErrUnknownShard):
		return pb.Code_UNKNOWN_SHARD
	case errors.Is(err, lazy.ErrLate):
		return pb.Code_LATE
	case errors.Is(err, errTableUnread):
		return pb.Code_UNAVAILABLE
	}
	return pb.Code_INVALID
}
