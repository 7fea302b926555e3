package storage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/metrics"
	"github.com/augur-log/augur/internal/segment"
	"github.com/augur-log/augur/internal/shard"
)

// # Rejoin
//
// A copy out of its live shard's configuration (this server restarted,
// or the shard fenced it) goes back in as the core decides (see
// shard/rejoin.go): the loop prepares it (PrepareRejoin), this file
// fetches the tail and the positions from the replicas of the
// configuration over the Fetch RPC (paced as any catch-up), syncs the
// store, and once the core says it is ready asks the ordering leader
// (RejoinShard), which decides (order.Leader.Rejoin). The configuration
// that takes the copy in makes it a backup; its primary's join resends
// what it still lacks. Ping's health shows the copy as catching-up, with
// its progress, until then.

// rejoinAskAgainAfter is how long a copy the leader said it took back
// waits for that configuration before it asks again.
const rejoinAskAgainAfter = 2 * time.Second

// rejoinLoop runs r's rejoin whenever the core says the copy should
// (after a configuration that leaves it out), until the server stops.
func (r *replica) rejoinLoop(ctx context.Context) {
	for {
		select {
		case <-r.rejoinWake:
		case <-ctx.Done():
			return
		case <-r.done:
			return
		}
		r.rejoin(ctx)
	}
}

// wakeRejoin starts r's rejoin if the core says the copy should rejoin;
// it runs on the loop.
func (r *replica) wakeRejoin() {
	if r.core.Rejoining() {
		select {
		case r.rejoinWake <- struct{}{}:
		default:
		}
	}
}

// rejoin runs rounds of catch-up until the copy asked the leader with
// success, or the core says it no longer rejoins.
func (r *replica) rejoin(ctx context.Context) {
	defer r.rejoining.Store(false)
	for r.repairing.Load() {
		if !r.srv.sleep(retryInterval) {
			return
		}
	}
	for ctx.Err() == nil {
		var plan shard.RejoinPlan
		var perr error
		if !r.onLoop(ctx, func() { plan, perr = r.core.PrepareRejoin() }) {
			return
		}
		if perr != nil {
			// It joined meanwhile, or the shard is final.
			r.log.Debug("rejoin: not now", "err", perr)
			return
		}
		r.rejoining.Store(true)
		srcs := r.srv.rejoinSources(r.id, plan.Epoch)
		if len(srcs) == 0 {
			// The view moved on; the loop wakes this again once the core
			// heard of the new configuration.
			return
		}
		if err := r.catchUpTail(ctx, plan, srcs); err != nil {
			if ctx.Err() != nil || errors.Is(err, errStoreFailed) {
				return
			}
			r.log.Info("rejoin: catch-up did not finish; trying again", "err", err)
			if !r.srv.sleep(retryInterval) {
				return
			}
			continue
		}
		if err := r.store.Sync(); err != nil {
			r.log.Error("rejoin: sync", "err", err)
			return
		}
		var epoch, held uint64
		var ready bool
		if !r.onLoop(ctx, func() {
			epoch, held, ready = r.core.RejoinReady()
			if ready {
				// It serves what it holds again.
				metrics.ReplicaLost.WithLabelValues(r.srv.cfg.ID, strconv.FormatUint(uint64(r.id), 10)).Set(0)
			}
		}) {
			return
		}
		if !ready {
			// Cuts ordered more meanwhile, or damage waits for repair.
			if !r.srv.sleep(retryInterval) {
				return
			}
			continue
		}
		r.showAsked()
		err := r.srv.askRejoin(ctx, r.id, epoch, held, false)
		if err == nil {
			r.log.Info("rejoin: the ordering leader added this copy back", "epoch", epoch+1, "held", held)
			// The configuration that takes it in makes it a backup; if
			// none came (the proposal was lost with a leader), ask again.
			if !r.srv.sleep(rejoinAskAgainAfter) {
				return
			}
			continue
		}
		if status.Code(err) == codes.Unimplemented {
			// The cluster's mode (or an older ordering layer) does not
			// rejoin replicas: the copy stays out, serving reads.
			r.log.Warn("rejoin: not supported; the copy stays out of the shard's configuration", "err", err)
			return
		}
		// The leader refused, or no replica took the ask in time (a stopped
		// leader, a proposal dropped while leadership moved): catch up
		// again and ask again.
		r.log.Info("rejoin: not taken; catching up again", "epoch", epoch, "held", held, "err", err)
		if !r.srv.sleep(retryInterval) {
			return
		}
	}
}

// catchUpTail runs one round of plan's fetches from srcs.
func (r *replica) catchUpTail(ctx context.Context, plan shard.RejoinPlan, srcs []Peer) error {
	cu, err := shard.NewCatchUp(shard.CatchUpConfig{Gaps: plan.Gaps, Sources: len(srcs),
		BytesPerSecond: r.srv.cfg.catchUpBytesPerSecond(), BurstBytes: catchUpBurstBytes})
	if err != nil {
		return err
	}
	remaining := metrics.CatchUpRemaining.WithLabelValues(r.srv.cfg.ID, strconv.FormatUint(uint64(r.id), 10))
	show := func() {
		p := cu.Progress()
		out := &pb.CatchUpProgress{Fetched: p.Fetched, Total: p.Total, Stalled: p.Stalled, Done: cu.Done(), Rejoin: true}
		if p.Source >= 0 {
			out.Source = srcs[p.Source].ID
		}
		r.rejoinShow.set(out)
		remaining.Set(float64(p.Total - p.Fetched))
	}
	runsFrom := plan.RunsFrom
	for !cu.Done() {
		f, ok := cu.Next()
		show()
		if !ok {
			return fmt.Errorf("no replica of configuration %d served the catch-up", plan.Epoch)
		}
		if err := r.fetch(ctx, cu, srcs[f.Source], f, &runsFrom, show); err != nil {
			if ctx.Err() != nil || errors.Is(err, errStoreFailed) {
				return err
			}
			r.log.Warn("rejoin: fetch failed", "source", srcs[f.Source].ID, "first", f.First, "err", err)
		}
	}
	show()
	return nil
}

// showAsked marks r's catch-up progress as asked of the leader.
func (r *replica) showAsked() {
	r.rejoinShow.mu.Lock()
	if p := r.rejoinShow.progress; p != nil {
		p.Asked = true
	}
	r.rejoinShow.mu.Unlock()
}

// assignFetched gives r's entries the positions a source sent, on the
// loop.
func (r *replica) assignFetched(ctx context.Context, runs []*pb.LocalRun) error {
	rs := make([]segment.Run, len(runs))
	for i, run := range runs {
		rs[i] = segment.Run{Cut: run.Cut, CutStart: run.CutStart, CutEnd: run.CutEnd,
			LocalStart: run.LocalStart, GlobalStart: run.GlobalStart, Count: run.Count}
	}
	var err error
	if !r.onLoop(ctx, func() {
		out := r.resetOut()
		err = r.core.AssignFetched(rs, out)
		r.carry(out)
	}) {
		return context.Canceled
	}
	return err
}

// rejoinSources are the replicas of shard id's configuration epoch, as
// the view holds it, in the order the core asks them; none if the view
// holds another configuration.
func (s *Server) rejoinSources(id uint32, epoch uint64) []Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.view.shards[id]
	if sh == nil || sh.Epoch != epoch || sh.State == pb.ShardState_SHARD_FINALIZED {
		return nil
	}
	addrs := map[string]string{}
	ids := make([]string, len(sh.Replicas))
	for i, rep := range sh.Replicas {
		ids[i] = rep.Id
		addrs[rep.Id] = rep.Addr
	}
	var out []Peer
	for _, id := range shard.RejoinSources(ids, s.cfg.ID) {
		out = append(out, Peer{ID: id, Addr: addrs[id]})
	}
	return out
}

// askRejoin asks the ordering leader to add this server's copy of shard
// id, caught up from configuration epoch and holding held entries, back
// to the shard's configuration; with caughtUp (lazy order), to count the
// copy, pending in configuration epoch, as caught up.
func (s *Server) askRejoin(ctx context.Context, id uint32, epoch, held uint64, caughtUp bool) error {
	var addr string
	for _, p := range s.cfg.Group {
		if p.ID == s.cfg.ID {
			addr = p.Addr
		}
	}
	req := &pb.RejoinShardRequest{ClusterId: s.cfg.ClusterID, Shard: id, Epoch: epoch, Held: held, CaughtUp: caughtUp,
		Replica: &pb.ReplicaAddr{Id: s.cfg.ID, Addr: addr, Incarnation: s.incarnation}}
	err := s.callLeader(ctx, func(ctx context.Context, c pb.OrderingClient) (string, bool, error) {
		resp, err := c.RejoinShard(ctx, req)
		return resp.GetLeaderAddr(), resp.GetNotLeader(), err
	})
	if err != nil {
		return fmt.Errorf("rejoin shard %d: %w", id, err)
	}
	return nil
}
