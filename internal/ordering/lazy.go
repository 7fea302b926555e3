package ordering

// The control plane of lazy order, run by the ordering leader: the
// decisions (the first view, failure detection, the claim of a view
// change, seal, flush, record through Raft, stable-gp, the new view's
// start) are the core's, lazy.Control, which the simulator runs too; this
// file moves its messages.

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
// keepalive interval it steps the control plane's core (lazy.Control)
// with the sequencing replicas' latest answers to its probes, carrying
// out what it asks.
func (s *Server) lazyControl(ctx context.Context) {
	ids := make([]lazy.ReplicaID, len(s.cfg.Sequencing))
	for i := range ids {
		ids[i] = lazy.ReplicaID(i + 1)
	}
	// The owner names this term of leadership; the clock keeps a
	// restarted replica's terms apart from its earlier ones.
	owner := fmt.Sprintf("%s@%d", s.newID(), time.Now().UnixNano())
	ctl := lazy.NewControl(lazy.ControlConfig{Replicas: ids, FailureTimeout: s.cfg.FailureTimeout, ResendAfter: s.cfg.KeepaliveInterval}, owner, time.Now())
	ctx, cancel := context.WithCancel(ctx)
	var probers sync.WaitGroup
	defer probers.Wait()
	defer cancel()
	answers := &probeAnswers{}
	for i, m := range s.cfg.Sequencing {
		probers.Go(func() { s.probeSequencer(ctx, ids[i], m.Addr, answers) })
	}
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
		s.lazyCarry(ctx, ctl, ctl.Applied(s.lazyControlState(), time.Now()))
		for _, a := range answers.take() {
			ctl.Status(a.id, a.status, a.at)
		}
		s.lazyCarry(ctx, ctl, ctl.Tick(time.Now()))
	}
}

// probeAnswer is a sequencing replica's answer to a probe and when it
// came.
type probeAnswer struct {
	id     lazy.ReplicaID
	status lazy.ReplicaStatus
	at     time.Time
}

// probeAnswers holds each replica's latest answer that the control loop
// has not taken yet. The probes never wait for the loop, which may spend
// long carrying out a step: what it takes next is as fresh as the probes
// are.
type probeAnswers struct {
	mu     sync.Mutex
	latest []probeAnswer
}

func (p *probeAnswers) put(a probeAnswer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latest = slices.DeleteFunc(p.latest, func(b probeAnswer) bool { return b.id == a.id })
	p.latest = append(p.latest, a)
}

func (p *probeAnswers) take() []probeAnswer {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.latest
	p.latest = nil
	return out
}

// probeSequencer asks one sequencing replica how it stands, once per
// keepalive interval and one probe at a time, and keeps every answer that
// comes within the failure timeout, with the time it came, for the control
// loop: the control plane's detector takes silence for failure, and a
// replica that answers late (a loaded machine, a long pause for garbage
// collection) is slow, not silent. Answers cut off at one keepalive
// interval took such a replica for failed and sealed its view, whose
// change then loaded the cluster further.
func (s *Server) probeSequencer(ctx context.Context, id lazy.ReplicaID, addr string, answers *probeAnswers) {
	t := time.NewTicker(s.cfg.KeepaliveInterval)
	defer t.Stop()
	for {
		if cc, err := s.lazyConn(addr); err == nil {
			cctx, cancel := context.WithTimeout(ctx, s.cfg.FailureTimeout)
			a, err := pb.NewSequencingClient(cc).SequencingStatus(cctx, &pb.SequencingStatusRequest{ClusterId: s.cfg.ClusterID})
			cancel()
			if err == nil {
				answers.put(probeAnswer{id: id, status: lazy.ReplicaStatus{View: a.GetView(), Sealed: a.GetSealed(), Amnesiac: a.GetAmnesiac()}, at: time.Now()})
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// lazyControlState is what the control plane reads from the applied
// control state.
func (s *Server) lazyControlState() lazy.ControlState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.LazyControl()
}

// lazyCarry carries out one output of the control plane and feeds the
// answers back, to the end of the chain. A step that fails is sent again
// on a later tick (every step is idempotent).
func (s *Server) lazyCarry(ctx context.Context, ctl *lazy.Control, out lazy.ControlOutput) {
	if out.Empty() || ctx.Err() != nil {
		return
	}
	for _, cmd := range []control.Command{{SeqClaim: out.Claim}, {SeqFlush: out.Flush}, {SeqConfig: out.Record}} {
		if cmd.SeqClaim == nil && cmd.SeqFlush == nil && cmd.SeqConfig == nil {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, lazyCallTimeout)
		_, err := s.propose(pctx, cmd, true)
		cancel()
		if err != nil {
			s.log.Warn("lazy control: propose", "claim", cmd.SeqClaim, "config", cmd.SeqConfig, "err", err)
			continue
		}
		s.lazyCarry(ctx, ctl, ctl.Applied(s.lazyControlState(), time.Now()))
	}
	if out.Seal != nil {
		s.log.Info("lazy control: sealing", "view", out.Seal.View)
		for _, a := range s.sealAll(ctx, out.SealTo, out.Seal.View) {
			s.lazyCarry(ctx, ctl, ctl.Sealed(a.from, a.reply))
		}
	}
	if out.Map != nil {
		acks, err := s.flushToShards(ctx, out.Map, out.MapTo)
		if err != nil {
			s.log.Warn("lazy control: flush", "view", out.Map.View, "err", err)
		}
		for _, a := range acks {
			s.lazyCarry(ctx, ctl, ctl.MapAcked(a))
		}
	}
	if out.Stable != nil {
		s.tellStable(ctx, *out.Stable)
	}
	if out.Start != nil {
		if err := s.startView(ctx, *out.Start, out.StartTo); err != nil {
			s.log.Warn("lazy control: start view", "view", out.Start.View, "err", err)
		}
	}
}

type sealAnswer struct {
	from  lazy.ReplicaID
	reply lazy.SealReply
}

func (s *Server) sealAll(ctx context.Context, to []lazy.ReplicaID, view uint64) []sealAnswer {
	var mu sync.Mutex
	var out []sealAnswer
	var wg sync.WaitGroup
	for _, id := range to {
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
			resp, err := pb.NewSequencingClient(cc).Seal(cctx, &pb.SealRequest{ClusterId: s.cfg.ClusterID, View: view})
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

// lazyShards returns the shards as the wire carries them.
func (s *Server) lazyShards() []*pb.ShardInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return wire.ShardsToProto(s.state.Shards)
}

// flushToShards sends the flush mapping to the primary of every shard of
// to and returns their acknowledgements.
func (s *Server) flushToShards(ctx context.Context, m *lazy.Mapping, to []cut.ShardID) ([]lazy.MappingAck, error) {
	shards := slices.DeleteFunc(s.lazyShards(), func(sh *pb.ShardInfo) bool { return !slices.Contains(to, cut.ShardID(sh.GetId())) })
	acks := make([]lazy.MappingAck, 0, len(shards))
	var mu sync.Mutex
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
				mu.Lock()
				acks = append(acks, lazy.MappingAck{Shard: cut.ShardID(sh.GetId()), View: resp.GetView(), End: resp.GetEnd()})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acks, errors.Join(errs...)
}

// tellStable sends stable-gp to every replica of every shard.
func (s *Server) tellStable(ctx context.Context, st lazy.StableGP) {
	var wg sync.WaitGroup
	for _, sh := range s.lazyShards() {
		for _, r := range sh.GetReplicas() {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, lazyCallTimeout)
				defer cancel()
				if cc, err := s.lazyConn(r.GetAddr()); err == nil {
					pb.NewLazyShardClient(cc).Stable(cctx, &pb.StableRequest{ClusterId: s.cfg.ClusterID, View: st.View, StableGp: st.Stable}) //nolint:errcheck // the new view's orderer repeats stable-gp
				}
			})
		}
	}
	wg.Wait()
}

// startView sends sv to the replicas to. A replica that cannot start is
// started again on a later tick.
func (s *Server) startView(ctx context.Context, sv lazy.StartView, to []lazy.ReplicaID) error {
	c := lazy.SeqConfig{View: sv.View, Replicas: sv.Replicas, Leader: sv.Leader, Stable: sv.Ordered}
	req := &pb.StartViewRequest{ClusterId: s.cfg.ClusterID, State: s.lazyProto(c), Ordered: sv.Ordered, From: sv.From, ShardsNext: uint32(sv.Shards)}
	for _, id := range sv.Flushed {
		req.Flushed = append(req.Flushed, &pb.RecordMeta{ClientId: id.Client, Seq: id.Seq})
	}
	var errs []error
	for _, id := range to {
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
			errs = append(errs, fmt.Errorf("start view %d on %s: %w", sv.View, m.ID, err))
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
