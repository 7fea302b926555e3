package sequencing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
	"github.com/augur-log/augur/internal/stagetime"
)

// stableResend is how often the leader repeats stable-gp to every shard
// replica, for replicas that missed it (restarted, or just added).
const stableResend = 100 * time.Millisecond

// orderResend is how long the leader waits for answers to a batch's
// messages before it sends what is missing again.
const orderResend = 200 * time.Millisecond

// orderCheck is how often the order loop looks for answers overdue
// (orderResend) and for a change of view or leadership.
const orderCheck = 20 * time.Millisecond

// orderLoop runs the leader's background ordering: it owns the view's
// lazy.Orderer, feeds it the ring's front and the answers of shards and
// followers, and carries out what it asks. The calls go out on their own
// goroutines and come back through answers.
//
// Batches go out as a group commit: the records that waited while a
// batch was in flight go out as the next batch as soon as that one is
// stable, and an idle leader is woken by the first record that arrives
// (take); BatchInterval is the least time between two batches' starts.
func (s *Server) orderLoop() {
	var (
		o       *lazy.Orderer
		ordView uint64
		table   shardTable
		answers = make(chan func(*lazy.Orderer) lazy.OrdererOutput, 64)
		sentAt  time.Time
		// When stages are timed: the batch in flight was taken at
		// pickedAt, its mapping or GC round began at roundAt.
		pickedAt, roundAt time.Time
		// lastBatch is when the last batch went out; spacing wakes the
		// loop when BatchInterval has passed since.
		lastBatch time.Time
		spacing   = time.NewTimer(time.Hour)
	)
	spacing.Stop()
	check := time.NewTicker(orderCheck)
	defer check.Stop()
	for {
		var answer func(*lazy.Orderer) lazy.OrdererOutput
		select {
		case <-s.ctx.Done():
			return
		case <-check.C:
		case <-s.orderKick:
		case <-spacing.C:
		case answer = <-answers:
		}
		s.mu.Lock()
		leads := s.leadsLocked()
		view, _ := s.seq.View()
		if !leads {
			// A record taken once this replica leads wakes the loop.
			s.orderIdle = true
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
		if answer != nil {
			out = answer(o)
			if out.Map != nil || out.GC != nil {
				sentAt = time.Now()
			}
			if out.GC != nil {
				stagetime.Since(stagetime.LazyMapRound, roundAt)
				roundAt = stagetime.Now()
			}
			if out.Stable != nil {
				stagetime.Since(stagetime.LazyGCRound, roundAt)
				s.mu.Lock()
				s.stableAt, s.stableBatchAt = stagetime.Now(), pickedAt
				s.mu.Unlock()
			}
			s.carry(o, out, shards, answers)
			out = lazy.OrdererOutput{}
		}
		switch {
		case !o.Busy():
			if wait := s.cfg.BatchInterval - time.Since(lastBatch); wait > 0 {
				spacing.Reset(wait)
				continue
			}
			s.mu.Lock()
			batch := s.seq.Unordered(o.BatchMax())
			waited := s.waitingSince
			// With nothing to order, the next record taken wakes the
			// loop.
			s.orderIdle = len(batch) == 0
			if len(batch) > 0 {
				s.waitingSince = time.Time{}
			}
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
			lastBatch = time.Now()
			stagetime.Since(stagetime.LazyRingWait, waited)
			pickedAt, roundAt = stagetime.Now(), stagetime.Now()
		case answer == nil && time.Since(sentAt) >= orderResend:
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
				// carry runs on the order loop, the only reader of
				// answers: a send from here would wait for itself once
				// answers is full.
				s.wg.Go(func() {
					back(func(o *lazy.Orderer) lazy.OrdererOutput {
						return o.Collected(lazy.Collected{Replica: self, View: gc.View, End: end})
					})
				})
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
// again every stableResend: one sender per replica, so a slow or dead
// replica delays nobody else's news. It follows the shard table, starting
// senders for replicas that join and stopping those of replicas that
// left.
func (s *Server) stableLoop() {
	var table shardTable
	senders := map[string]context.CancelFunc{}
	defer func() {
		for _, stop := range senders {
			stop()
		}
	}()
	for {
		ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
		shards, err := table.get(ctx, s)
		cancel()
		if err == nil {
			live := map[string]bool{}
			for _, sh := range shards {
				for _, r := range sh.GetReplicas() {
					live[r.GetAddr()] = true
				}
			}
			for addr := range live {
				if senders[addr] == nil {
					ctx, stop := context.WithCancel(s.ctx)
					senders[addr] = stop
					s.wg.Go(func() { s.stableSender(ctx, addr) })
				}
			}
			for addr, stop := range senders {
				if !live[addr] {
					stop()
					delete(senders, addr)
				}
			}
		}
		if !s.sleep(stableResend) {
			return
		}
	}
}

// stableSender tells the shard server at addr stable-gp while this
// replica leads: as soon as it advances (after the call in flight, if
// any; it never waits for another server's answer), and again every
// stableResend, until ctx ends.
func (s *Server) stableSender(ctx context.Context, addr string) {
	var sent, sentView uint64
	var last time.Time
	for {
		s.mu.Lock()
		leads := s.leadsLocked()
		stable, changed := s.stable, s.stableChanged
		advancedAt, batchAt := s.stableAt, s.stableBatchAt
		view, _ := s.seq.View()
		s.mu.Unlock()
		if leads && (stable != sent || view != sentView || time.Since(last) >= stableResend) {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			err := s.tellStable(cctx, addr, &pb.StableRequest{ClusterId: s.cfg.ClusterID, View: view, StableGp: stable})
			cancel()
			if err != nil {
				s.log.Debug("sequencing: tell stable-gp", "server", addr, "err", err)
			} else if stable != sent {
				stagetime.Since(stagetime.LazyStableSend, advancedAt)
				stagetime.Since(stagetime.LazyOrderToStable, batchAt)
			}
			// A failed call is repeated with the next news or resend.
			sent, sentView, last = stable, view, time.Now()
		}
		t := time.NewTimer(stableResend)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// tellStable sends stable-gp to the shard server at addr, which applies it
// to every lazy shard it holds.
func (s *Server) tellStable(ctx context.Context, addr string, req *pb.StableRequest) error {
	cc, err := s.conn(addr)
	if err != nil {
		return err
	}
	_, err = pb.NewLazyShardClient(cc).Stable(ctx, req)
	return err
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

// checkShard refuses a record of shard id unless the cluster ever had
// that shard, reading the table again when the replica has not heard of
// it: a record of a shard that never existed would hold the orderer up for
// good, while one of a shard added a moment ago must be taken. When the
// table cannot be read the record is refused as unavailable (the client
// asks again), not taken on trust.
func (s *Server) checkShard(ctx context.Context, id cut.ShardID) error {
	if uint32(id) < s.shardsNext.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	st, err := s.orderingStatus(ctx)
	if err != nil {
		return fmt.Errorf("shard %d is not in the shard table this replica read, and the table cannot be read now (%v): %w", id, err, errTableUnread)
	}
	s.noteShards(st.GetShards())
	if uint32(id) >= s.shardsNext.Load() {
		return fmt.Errorf("shard %d: %w", id, lazy.ErrUnknownShard)
	}
	return nil
}

// errTableUnread: the shard table could not be read to check a record's
// shard (UNAVAILABLE: retry).
var errTableUnread = errors.New("shard table unavailable")

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
