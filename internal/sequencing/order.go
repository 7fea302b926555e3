package sequencing

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
)

// stableResend is how often the leader repeats stable-gp to every shard
// replica, for replicas that missed it (restarted, or just added).
const stableResend = 100 * time.Millisecond

// orderResend is how long the leader waits for answers to a batch's
// messages before it sends what is missing again.
const orderResend = 200 * time.Millisecond

// orderLoop runs the leader's background ordering: it owns the view's
// lazy.Orderer, feeds it the ring's front and the answers of shards and
// followers, and carries out what it asks. The calls go out on their own
// goroutines and come back through answers.
func (s *Server) orderLoop() {
	var (
		o       *lazy.Orderer
		ordView uint64
		table   shardTable
		answers = make(chan func(*lazy.Orderer) lazy.OrdererOutput, 64)
		sentAt  time.Time
	)
	tick := time.NewTicker(s.cfg.BatchInterval)
	defer tick.Stop()
	for {
		var answer func(*lazy.Orderer) lazy.OrdererOutput
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		case answer = <-answers:
		}
		s.mu.Lock()
		leads := s.leadsLocked()
		view, _ := s.seq.View()
		if !leads {
			s.mu.Unlock()
			o = nil
			continue
		}
		if o == nil || ordView != view {
			o, ordView = lazy.NewOrderer(lazy.OrdererConfig{BatchMax: s.cfg.BatchMax}, view, s.seq.Ordered(), nil, s.replicaIDsLocked()), view
			o.AtLeast(s.startShards)
			// The shards come with the first table read below.
			answer = nil
		}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
		shards, err := table.get(ctx, s)
		cancel()
		if err != nil {
			s.log.Debug("sequencing: shard table", "err", err)
			continue
		}
		var out lazy.OrdererOutput
		if set := o.SetShards(liveShards(shards)); set.GC != nil {
			// A shard finalized mid-batch was the last one it waited for.
			s.carry(o, set, shards, answers)
		}
		switch {
		case answer != nil:
			out = answer(o)
		case !o.Busy():
			s.mu.Lock()
			batch := s.seq.Unordered(o.BatchMax())
			s.mu.Unlock()
			if len(batch) == 0 {
				continue
			}
			if out, err = o.Order(batch); err != nil {
				s.log.Error("sequencing: order", "err", err)
				continue
			}
			if out.WaitFor != nil {
				// A record of a shard the cached table does not have yet
				// (just added): read the table again.
				table.fetched = time.Time{}
				s.log.Debug("sequencing: batch names a shard not in the table yet", "shard", *out.WaitFor)
			}
			if out.Map == nil && out.GC == nil {
				continue
			}
		case time.Since(sentAt) >= orderResend:
			out = o.Pending()
		default:
			continue
		}
		if out.Map != nil || out.GC != nil {
			sentAt = time.Now()
		}
		s.carry(o, out, shards, answers)
	}
}

// carry sends what the orderer asked: the mapping to the shard primaries
// that miss it, the GC to this replica and the followers that miss it,
// and, once stable-gp advanced, the news to every shard replica and to
// the appenders waiting for positions.
func (s *Server) carry(o *lazy.Orderer, out lazy.OrdererOutput, shards []*pb.ShardInfo, answers chan<- func(*lazy.Orderer) lazy.OrdererOutput) {
	back := func(f func(*lazy.Orderer) lazy.OrdererOutput) {
		select {
		case answers <- f:
		case <-s.ctx.Done():
		}
	}
	if m := out.Map; m != nil {
		missing := o.MissingShards()
		for _, sh := range shards {
			if !slices.Contains(missing, cut.ShardID(sh.GetId())) {
				continue
			}
			req := mappingToProto(s.cfg.ClusterID, sh.GetId(), m)
			s.wg.Go(func() {
				ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
				defer cancel()
				resp, err := s.pushToPrimary(ctx, sh, req)
				if err != nil {
					s.log.Debug("sequencing: push mapping", "shard", sh.GetId(), "err", err)
					return
				}
				ack := lazy.MappingAck{Shard: cut.ShardID(sh.GetId()), View: resp.GetView(), End: resp.GetEnd()}
				back(func(o *lazy.Orderer) lazy.OrdererOutput { return o.MapAcked(ack) })
			})
		}
	}
	if gc := out.GC; gc != nil {
		missing := o.MissingReplicas()
		s.mu.Lock()
		self := s.replicaIDLocked(s.cfg.ID)
		var followers []*pb.SequencingReplica
		for _, r := range s.config.GetReplicas() {
			if r.GetId() != s.cfg.ID && slices.Contains(missing, s.replicaIDLocked(r.GetId())) {
				followers = append(followers, r)
			}
		}
		if slices.Contains(missing, self) {
			if err := s.seq.Collect(*gc); err != nil {
				s.log.Error("sequencing: collect here", "err", err)
			} else {
				end := s.seq.Ordered()
				s.mu.Unlock()
				back(func(o *lazy.Orderer) lazy.OrdererOutput {
					return o.Collected(lazy.Collected{Replica: self, View: gc.View, End: end})
				})
				s.mu.Lock()
			}
		}
		s.mu.Unlock()
		req := &pb.CollectRequest{ClusterId: s.cfg.ClusterID, View: gc.View, LastOrderedGp: gc.End}
		for _, id := range gc.IDs {
			req.Ids = append(req.Ids, &pb.RecordMeta{ClientId: id.Client, Seq: id.Seq})
		}
		for _, id := range gc.Dropped {
			req.Dropped = append(req.Dropped, &pb.RecordMeta{ClientId: id.Client, Seq: id.Seq})
		}
		if uint64(len(gc.IDs)) != gc.End-gc.From {
			s.log.Error("sequencing: GC ids do not cover its positions", "from", gc.From, "end", gc.End, "ids", len(gc.IDs))
			return
		}
		for _, f := range followers {
			s.wg.Go(func() {
				ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
				defer cancel()
				if err := s.collectOn(ctx, f, req); err != nil {
					s.log.Debug("sequencing: collect on follower", "follower", f.GetId(), "err", err)
					return
				}
				s.mu.Lock()
				id := s.replicaIDLocked(f.GetId())
				s.mu.Unlock()
				back(func(o *lazy.Orderer) lazy.OrdererOutput {
					return o.Collected(lazy.Collected{Replica: id, View: gc.View, End: gc.End})
				})
			})
		}
		// The GC names the batch's records at their positions: the
		// appenders waiting for positions learn them once stable-gp
		// covers the batch, which the next output says.
		s.mu.Lock()
		s.lastGC = gc
		s.mu.Unlock()
	}
	if st := out.Stable; st != nil {
		s.mu.Lock()
		if st.Stable > s.stable {
			s.stable = st.Stable
			close(s.stableChanged)
			s.stableChanged = make(chan struct{})
		}
		if gc := s.lastGC; gc != nil && gc.End <= st.Stable {
			s.answerPositionsLocked(gc.From, gc.IDs, out.Unplaced)
			s.lastGC = nil
		}
		s.mu.Unlock()
	}
}

// replicaIDsLocked numbers the view's replicas as the orderer knows them.
func (s *Server) replicaIDsLocked() []lazy.ReplicaID {
	var out []lazy.ReplicaID
	for _, r := range s.config.GetReplicas() {
		out = append(out, s.replicaIDLocked(r.GetId()))
	}
	return out
}

// replicaIDLocked is a replica's number: its place in the cluster file,
// from 1.
func (s *Server) replicaIDLocked(id string) lazy.ReplicaID {
	for i, p := range s.cfg.Replicas {
		if p.ID == id {
			return lazy.ReplicaID(i + 1)
		}
	}
	return 0
}

// liveShards returns the shards of the table that may still grow: the
// orderer maps to them and waits for them. A finalized shard (its
// replicas may all be gone for good) takes no mapping; the table holds
// every shard ever registered, so next (one past its largest id) tells a
// finalized shard from one added after the table was read.
func liveShards(shards []*pb.ShardInfo) (live []cut.ShardID, next cut.ShardID) {
	for _, sh := range shards {
		next = max(next, cut.ShardID(sh.GetId())+1)
		if sh.GetState() != pb.ShardState_SHARD_FINALIZED {
			live = append(live, cut.ShardID(sh.GetId()))
		}
	}
	return live, next
}

func mappingToProto(clusterID string, shard uint32, m *lazy.Mapping) *pb.OrderRequest {
	req := &pb.OrderRequest{ClusterId: clusterID, View: m.View, First: m.From, Shard: shard, Ids: make([]*pb.RecordMeta, len(m.Records))}
	for i, r := range m.Records {
		req.Ids[i] = &pb.RecordMeta{ClientId: r.ID.Client, Seq: r.ID.Seq, Shard: uint32(r.Shard)}
	}
	return req
}

// pushToPrimary sends a mapping to the primary of shard sh and returns its
// acknowledgement: every replica of the shard holds the placement.
func (s *Server) pushToPrimary(ctx context.Context, sh *pb.ShardInfo, req *pb.OrderRequest) (*pb.OrderResponse, error) {
	if len(sh.GetReplicas()) == 0 {
		return nil, fmt.Errorf("shard %d has no replicas", sh.GetId())
	}
	addr := sh.GetReplicas()[0].GetAddr()
	cc, err := s.conn(addr)
	if err != nil {
		return nil, err
	}
	resp, err := pb.NewLazyShardClient(cc).Order(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("shard %d primary %s: %w", sh.GetId(), addr, err)
	}
	if resp.GetCode() != pb.Code_OK {
		return nil, fmt.Errorf("shard %d primary %s: %s: %s", sh.GetId(), addr, resp.GetCode(), resp.GetMessage())
	}
	return resp, nil
}

func (s *Server) collectOn(ctx context.Context, f *pb.SequencingReplica, req *pb.CollectRequest) error {
	cc, err := s.conn(f.GetAddr())
	if err != nil {
		return err
	}
	resp, err := pb.NewSequencingClient(cc).Collect(ctx, req)
	if err != nil {
		return err
	}
	if resp.GetCode() != pb.Code_OK {
		return fmt.Errorf("%s: %s", resp.GetCode(), resp.GetMessage())
	}
	return nil
}

// stableLoop tells every shard replica stable-gp whenever it advances, and
// again every stableResend.
func (s *Server) stableLoop() {
	var table shardTable
	sent := uint64(0)
	last := time.Time{}
	for {
		s.mu.Lock()
		leads := s.leadsLocked()
		stable, changed := s.stable, s.stableChanged
		view, _ := s.seq.View()
		s.mu.Unlock()
		if leads && (stable != sent || time.Since(last) >= stableResend) {
			ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
			if shards, err := table.get(ctx, s); err == nil {
				s.tellStable(ctx, shards, &pb.StableRequest{ClusterId: s.cfg.ClusterID, View: view, StableGp: stable})
				sent, last = stable, time.Now()
			}
			cancel()
		}
		t := time.NewTimer(stableResend)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// tellStable sends stable-gp to every replica of every shard, without
// waiting for stragglers beyond ctx.
func (s *Server) tellStable(ctx context.Context, shards []*pb.ShardInfo, req *pb.StableRequest) {
	var addrs []string
	for _, sh := range shards {
		for _, r := range sh.GetReplicas() {
			addrs = append(addrs, r.GetAddr())
		}
	}
	_ = s.onEach(ctx, len(addrs), func(ctx context.Context, i int) error {
		cc, err := s.conn(addrs[i])
		if err != nil {
			return err
		}
		_, err = pb.NewLazyShardClient(cc).Stable(ctx, req)
		return err
	})
}

// shardTable caches the cluster's shard table, as the ordering layer
// reports it, for one loop.
type shardTable struct {
	shards  []*pb.ShardInfo
	fetched time.Time
}

// get returns every shard of the table, finalized ones included (they
// keep their records, and their readers wait for stable-gp too).
func (t *shardTable) get(ctx context.Context, s *Server) ([]*pb.ShardInfo, error) {
	if t.shards != nil && time.Since(t.fetched) < shardTableRefresh {
		return t.shards, nil
	}
	st, err := s.orderingStatus(ctx)
	if err != nil {
		return nil, err
	}
	t.shards, t.fetched = st.GetShards(), time.Now()
	s.noteShards(t.shards)
	return t.shards, nil
}

// noteShards raises the end of the shard ids the replica knows were given.
func (s *Server) noteShards(shards []*pb.ShardInfo) {
	_, next := liveShards(shards)
	for {
		cur := s.shardsNext.Load()
		if uint32(next) <= cur || s.shardsNext.CompareAndSwap(cur, uint32(next)) {
			return
		}
	}
}

// knowsShard says whether the cluster ever had shard id, reading the table
// again when the replica has not heard of it: a record of a shard that
// never existed would hold the orderer up for good, while one of a shard
// added a moment ago must be taken. When the table cannot be read it says
// yes: the orderer waits for the table before it orders the record.
func (s *Server) knowsShard(ctx context.Context, id cut.ShardID) bool {
	if uint32(id) < s.shardsNext.Load() {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	st, err := s.orderingStatus(ctx)
	if err != nil {
		return true
	}
	s.noteShards(st.GetShards())
	return uint32(id) < s.shardsNext.Load()
}

// orderingStatus asks the ordering replicas for the cluster status.
func (s *Server) orderingStatus(ctx context.Context) (*pb.StatusResponse, error) {
	var last error
	for _, addr := range s.cfg.Ordering {
		cc, err := s.conn(addr)
		if err != nil {
			last = err
			continue
		}
		st, err := pb.NewOrderingClient(cc).Status(ctx, &pb.StatusRequest{ClusterId: s.cfg.ClusterID})
		if err == nil {
			return st, nil
		}
		last = err
	}
	return nil, fmt.Errorf("ordering status: %w", last)
}

// controlLoop runs the replica's side of the control plane: the ordering
// leader starts its views (StartView); it repeats stable-gp to the shards
// while it leads.
func (s *Server) controlLoop() {
	s.stableLoop()
}

// onEach runs fn for 0..n-1 in parallel and returns the first error.
func (s *Server) onEach(ctx context.Context, n int, fn func(context.Context, int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fn(ctx, i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
