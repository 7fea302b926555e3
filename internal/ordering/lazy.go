package ordering

// The control plane of lazy order, run by the ordering leader: it records
// the sequencing layer's first view, watches the replicas of the current
// view, and on a failure runs lazy.Reconfig (seal the view, flush the
// recovery replica's unordered entries to the shards, record the new
// configuration through Raft, advance stable-gp, start the new view). The
// protocol's steps are the core's; this file moves their messages.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
	"github.com/augur-log/augur/internal/rpcopt"
	"github.com/augur-log/augur/internal/wire"
)

// lazyCallTimeout bounds one call of the control plane to a sequencing
// replica or a shard.
const lazyCallTimeout = 2 * time.Second

// lazyConn returns a connection to a sequencing replica or storage server.
func (s *Server) lazyConn(addr string) (*grpc.ClientConn, error) {
	s.lazyConnsMu.Lock()
	defer s.lazyConnsMu.Unlock()
	if cc, ok := s.lazyConns[addr]; ok {
		return cc, nil
	}
	creds := s.cfg.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	cc, err := grpc.NewClient(addr, append(rpcopt.DialOptions(), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		return nil, err
	}
	if s.lazyConns == nil {
		s.lazyConns = map[string]*grpc.ClientConn{}
	}
	s.lazyConns[addr] = cc
	return cc, nil
}

// closeLazyConns closes the control plane's connections.
func (s *Server) closeLazyConns() {
	s.lazyConnsMu.Lock()
	defer s.lazyConnsMu.Unlock()
	for _, cc := range s.lazyConns {
		cc.Close()
	}
	s.lazyConns = nil
}

// seqID is a sequencing replica's number in the control state: its place
// in the cluster file, from 1.
func (s *Server) seqID(id string) lazy.ReplicaID {
	for i, m := range s.cfg.Sequencing {
		if m.ID == id {
			return lazy.ReplicaID(i + 1)
		}
	}
	return 0
}

// seqMember returns the sequencing replica numbered id.
func (s *Server) seqMember(id lazy.ReplicaID) (Member, bool) {
	if id == 0 || int(id) > len(s.cfg.Sequencing) {
		return Member{}, false
	}
	return s.cfg.Sequencing[id-1], true
}

// lazyStateLocked is the recorded sequencing configuration on the wire,
// its leader first; before the first view is recorded, view 0, sealed (so
// clients know the cluster is lazy and wait for a view); nil in other
// modes.
func (s *Server) lazyStateLocked() *pb.LazyState {
	c := s.state.Lazy
	switch {
	case len(s.cfg.Sequencing) == 0:
		return nil
	case c == nil:
		return &pb.LazyState{Sealed: true}
	}
	return s.lazyProto(*c)
}

func (s *Server) lazyProto(c lazy.SeqConfig) *pb.LazyState {
	st := &pb.LazyState{View: c.View, StableGp: c.Stable}
	order := append([]lazy.ReplicaID{c.Leader}, slices.DeleteFunc(slices.Clone(c.Replicas), func(r lazy.ReplicaID) bool { return r == c.Leader })...)
	for _, r := range order {
		if m, ok := s.seqMember(r); ok {
			st.Replicas = append(st.Replicas, &pb.SequencingReplica{Id: m.ID, Addr: m.Addr})
		}
	}
	return st
}

// lazyControl runs while this replica leads a lazy cluster: once per
// keepalive interval it checks the sequencing layer and, when a replica of
// the view failed or restarted (and lost its ring), changes the view.
func (s *Server) lazyControl(ctx context.Context) {
	lastOK := map[lazy.ReplicaID]time.Time{}
	t := time.NewTicker(s.cfg.KeepaliveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		var cur *lazy.SeqConfig
		if s.state.Lazy != nil {
			c := *s.state.Lazy
			cur = &c
		}
		s.mu.Unlock()
		if cur == nil {
			if err := s.startFirstView(ctx); err != nil {
				s.log.Warn("lazy control: first view", "err", err)
			}
			continue
		}
		failed, added := s.probeSequencing(ctx, *cur, lastOK)
		if len(failed) == 0 && len(added) == 0 {
			continue
		}
		s.log.Info("lazy control: view change", "view", cur.View, "failed", failed, "added", added)
		if err := s.changeView(ctx, *cur, failed, added); err != nil {
			s.log.Warn("lazy control: view change", "view", cur.View, "err", err)
		}
		// A view change takes a while; silence is counted from its end,
		// not from the probe before it.
		for id := range lastOK {
			lastOK[id] = time.Now()
		}
	}
}

// startFirstView records view 1 with every sequencing replica of the file,
// the first leading, and starts it on them.
func (s *Server) startFirstView(ctx context.Context) error {
	c := lazy.SeqConfig{View: 1, Leader: 1}
	for i := range s.cfg.Sequencing {
		c.Replicas = append(c.Replicas, lazy.ReplicaID(i+1))
	}
	pctx, cancel := context.WithTimeout(ctx, lazyCallTimeout)
	defer cancel()
	if _, err := s.propose(pctx, control.Command{SeqConfig: &c}, true); err != nil {
		return err
	}
	return s.startView(ctx, c, lazy.StartView{View: 1, Leader: 1, Replicas: c.Replicas}, nil)
}

// probeSequencing asks every sequencing replica of the file how it stands.
// A replica of the view fails when it has not answered for a failure
// timeout, or answers from another view or sealed (it restarted and lost
// its ring, or missed the view's start); a replica outside the view that
// answers is added back.
func (s *Server) probeSequencing(ctx context.Context, cur lazy.SeqConfig, lastOK map[lazy.ReplicaID]time.Time) (failed, added []lazy.ReplicaID) {
	type answer struct {
		st  *pb.SequencingStatusResponse
		err error
	}
	answers := make([]answer, len(s.cfg.Sequencing))
	var wg sync.WaitGroup
	for i, m := range s.cfg.Sequencing {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, s.cfg.KeepaliveInterval)
			defer cancel()
			cc, err := s.lazyConn(m.Addr)
			if err == nil {
				answers[i].st, err = pb.NewSequencingClient(cc).SequencingStatus(cctx, &pb.SequencingStatusRequest{ClusterId: s.cfg.ClusterID})
			}
			answers[i].err = err
		})
	}
	wg.Wait()
	now := time.Now()
	for i, a := range answers {
		id := lazy.ReplicaID(i + 1)
		member := slices.Contains(cur.Replicas, id)
		if _, seen := lastOK[id]; !seen {
			lastOK[id] = now
		}
		switch {
		case a.err != nil:
			if member && now.Sub(lastOK[id]) >= s.cfg.FailureTimeout {
				s.log.Info("lazy control: sequencing replica silent", "replica", s.cfg.Sequencing[i].ID, "for", now.Sub(lastOK[id]), "err", a.err)
				failed = append(failed, id)
			}
		case member && (a.st.GetView() != cur.View || a.st.GetSealed()):
			s.log.Info("lazy control: sequencing replica out of the view", "replica", s.cfg.Sequencing[i].ID, "view", cur.View, "its_view", a.st.GetView(), "sealed", a.st.GetSealed())
			lastOK[id] = now
			failed = append(failed, id)
		default:
			lastOK[id] = now
			if !member {
				added = append(added, id)
			}
		}
	}
	return failed, added
}

// changeView runs one view change of cur to its end, or until ctx ends or
// a step cannot be completed in time (the next probe tries again: every
// step is idempotent).
func (s *Server) changeView(ctx context.Context, cur lazy.SeqConfig, failed, added []lazy.ReplicaID) error {
	// Seal first (the core's first step, idempotent): every reachable
	// replica of the old view; the first useful answer names the recovery
	// replica.
	replies := s.sealAll(ctx, cur)
	s.mu.Lock()
	var shards []*pb.ShardInfo
	for _, sh := range s.state.Shards {
		// Every shard keeps the whole position table: the flush goes to
		// each, finalized ones too.
		shards = append(shards, wire.ShardsToProto([]control.Shard{sh})[0])
	}
	s.mu.Unlock()
	ids := make([]cut.ShardID, len(shards))
	for i, sh := range shards {
		ids[i] = cut.ShardID(sh.GetId())
	}
	rc, out, err := lazy.NewReconfig(cur, failed, added, ids)
	if err != nil {
		return err
	}
	for _, r := range replies {
		if out = rc.Sealed(r.from, r.reply); out.Map != nil || out.Record != nil {
			break
		}
	}
	if out.Map == nil && out.Record == nil {
		return errors.New("no replica of the sealed view can recover it")
	}
	if m := out.Map; m != nil {
		acks, err := s.flushToShards(ctx, shards, m)
		if err != nil {
			return err
		}
		for _, a := range acks {
			if o := rc.MapAcked(a); o.Record != nil {
				out = o
			}
		}
		if out.Record == nil {
			return errors.New("the shards did not all hold the flush")
		}
	}
	pctx, cancel := context.WithTimeout(ctx, lazyCallTimeout)
	_, err = s.propose(pctx, control.Command{SeqConfig: out.Record}, true)
	cancel()
	if err != nil {
		return fmt.Errorf("record view %d: %w", out.Record.View, err)
	}
	out = rc.Recorded()
	if out.Stable != nil {
		s.tellStable(ctx, shards, *out.Stable)
	}
	if out.Start == nil {
		return errors.New("no start after recording")
	}
	return s.startView(ctx, rc.Config(), *out.Start, rc)
}

type sealAnswer struct {
	from  lazy.ReplicaID
	reply lazy.SealReply
}

func (s *Server) sealAll(ctx context.Context, cur lazy.SeqConfig) []sealAnswer {
	var mu sync.Mutex
	var out []sealAnswer
	var wg sync.WaitGroup
	for _, id := range cur.Replicas {
		m, ok := s.seqMember(id)
		if !ok {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, lazyCallTimeout)
			defer cancel()
			cc, err := s.lazyConn(m.Addr)
			if err != nil {
				return
			}
			resp, err := pb.NewSequencingClient(cc).Seal(cctx, &pb.SealRequest{ClusterId: s.cfg.ClusterID, View: cur.View})
			if err != nil || resp.GetCode() != pb.Code_OK {
				return
			}
			rep := lazy.SealReply{View: resp.GetView(), Ordered: resp.GetLastOrderedGp(), Amnesiac: resp.GetAmnesiac()}
			for _, e := range resp.GetEntries() {
				rep.Entries = append(rep.Entries, lazy.Meta{ID: lazy.RecordID{Client: e.GetClientId(), Seq: e.GetSeq()}, Shard: cut.ShardID(e.GetShard()), View: resp.GetView()})
			}
			mu.Lock()
			out = append(out, sealAnswer{from: id, reply: rep})
			mu.Unlock()
		})
	}
	wg.Wait()
	// The first replica of the view's order that answered recovers it.
	slices.SortFunc(out, func(a, b sealAnswer) int { return int(a.from) - int(b.from) })
	return out
}

// flushToShards sends the flush mapping to every shard's primary and
// returns their acknowledgements.
func (s *Server) flushToShards(ctx context.Context, shards []*pb.ShardInfo, m *lazy.Mapping) ([]lazy.MappingAck, error) {
	acks := make([]lazy.MappingAck, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, sh := range shards {
		wg.Go(func() {
			req := &pb.OrderRequest{ClusterId: s.cfg.ClusterID, View: m.View, First: m.From, Shard: sh.GetId()}
			for _, r := range m.Records {
				req.Ids = append(req.Ids, &pb.RecordMeta{ClientId: r.ID.Client, Seq: r.ID.Seq, Shard: uint32(r.Shard)})
			}
			if len(sh.GetReplicas()) == 0 {
				errs[i] = fmt.Errorf("shard %d has no replicas", sh.GetId())
				return
			}
			cctx, cancel := context.WithTimeout(ctx, lazyCallTimeout)
			defer cancel()
			cc, err := s.lazyConn(sh.GetReplicas()[0].GetAddr())
			if err != nil {
				errs[i] = err
				return
			}
			resp, err := pb.NewLazyShardClient(cc).Order(cctx, req)
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("flush to shard %d: %w", sh.GetId(), err)
			case resp.GetCode() != pb.Code_OK:
				errs[i] = fmt.Errorf("flush to shard %d: %s: %s", sh.GetId(), resp.GetCode(), resp.GetMessage())
			default:
				acks[i] = lazy.MappingAck{Shard: cut.ShardID(sh.GetId()), View: resp.GetView(), End: resp.GetEnd()}
			}
		})
	}
	wg.Wait()
	return acks, errors.Join(errs...)
}

// tellStable sends stable-gp to every replica of every shard.
func (s *Server) tellStable(ctx context.Context, shards []*pb.ShardInfo, st lazy.StableGP) {
	var wg sync.WaitGroup
	for _, sh := range shards {
		for _, r := range sh.GetReplicas() {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, lazyCallTimeout)
				defer cancel()
				if cc, err := s.lazyConn(r.GetAddr()); err == nil {
					pb.NewLazyShardClient(cc).Stable(cctx, &pb.StableRequest{ClusterId: s.cfg.ClusterID, View: st.View, StableGp: st.Stable}) //nolint:errcheck // the leader repeats stable-gp
				}
			})
		}
	}
	wg.Wait()
}

// startView sends sv to every replica of c; rc, when set, learns who
// started. A replica that cannot start is left to the next probe.
func (s *Server) startView(ctx context.Context, c lazy.SeqConfig, sv lazy.StartView, rc *lazy.Reconfig) error {
	req := &pb.StartViewRequest{ClusterId: s.cfg.ClusterID, State: s.lazyProto(c), Ordered: sv.Ordered, From: sv.From}
	for _, id := range sv.Flushed {
		req.Flushed = append(req.Flushed, &pb.RecordMeta{ClientId: id.Client, Seq: id.Seq})
	}
	var errs []error
	for _, id := range c.Replicas {
		m, ok := s.seqMember(id)
		if !ok {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, lazyCallTimeout)
		cc, err := s.lazyConn(m.Addr)
		var resp *pb.StartViewResponse
		if err == nil {
			resp, err = pb.NewSequencingClient(cc).StartView(cctx, req)
		}
		cancel()
		if err == nil && resp.GetCode() != pb.Code_OK {
			err = fmt.Errorf("%s: %s", resp.GetCode(), resp.GetMessage())
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("start view %d on %s: %w", c.View, m.ID, err))
			continue
		}
		if rc != nil {
			rc.Started(id)
		}
	}
	return errors.Join(errs...)
}

// lazyStable returns stable-gp as the leader of the sequencing view c
// knows it, or the view's recorded one if it does not answer in time.
func (s *Server) lazyStable(ctx context.Context, c lazy.SeqConfig) uint64 {
	m, ok := s.seqMember(c.Leader)
	if !ok {
		return c.Stable
	}
	cctx, cancel := context.WithTimeout(ctx, lazyCallTimeout)
	defer cancel()
	cc, err := s.lazyConn(m.Addr)
	if err != nil {
		return c.Stable
	}
	st, err := pb.NewSequencingClient(cc).SequencingStatus(cctx, &pb.SequencingStatusRequest{ClusterId: s.cfg.ClusterID})
	if err != nil || st.GetView() != c.View || !st.GetLeader() {
		return c.Stable
	}
	return max(c.Stable, st.GetStableGp())
}
