package sim

import (
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/order"
)

// leader is the ordering layer: the replicated control state behind a
// simulated Raft commit delay, and the leading replica's order.Leader —
// the core the ordering server runs — driven the way the server drives it.
type leader struct {
	s  *cluster
	st *control.State
	// l is the leading replica's soft state; nil between leaders.
	l    *order.Leader
	raft link
	// watch and fix are each shard's two streams from the leader: the
	// control events it watches and the lag-fixes on its heartbeat
	// stream. Each is FIFO; they may overtake each other.
	watch, fix map[cut.ShardID]*link

	// term counts leader changes; flushAt is when the entries the old
	// leader left in flight commit.
	term    int
	flushAt time.Time
	// wakeAt is when the step the policy asked for is due (zero: none).
	wakeAt time.Time
}

func newLeader(s *cluster, st *control.State) *leader {
	ld := &leader{s: s, st: st, watch: map[cut.ShardID]*link{}, fix: map[cut.ShardID]*link{}}
	ld.l = order.NewLeader(s.rules.policy(&s.sc), s.sc.failureTimeout, st, s.now)
	s.after(s.sc.failureTimeout/4, ld.detectTick)
	return ld
}

// command is a proposal on its way through Raft, with the term of the
// leader that proposed it.
func (ld *leader) propose(c control.Command) {
	s := ld.s
	at := ld.raft.arrival(s.now, s.uniform(100*time.Microsecond, 400*time.Microsecond))
	term := ld.term
	s.at(at, func() { ld.apply(c, term) })
}

// apply is the ordering server's Raft apply: the command changes the
// control state, the leader core takes the result, storage servers hear of
// the change, then the leader steps if something changed.
func (ld *leader) apply(c control.Command, term int) {
	s := ld.s
	if term < ld.term && s.now.Before(ld.flushAt) {
		// An entry of an old term commits only along with the new
		// leader's first entry.
		s.at(ld.flushAt, func() { ld.apply(c, term) })
		return
	}
	ev, changed := ld.st.Apply(c)
	news := false
	if ld.l != nil {
		news = ld.l.Applied(ld.st, c, term == ld.term, s.now)
	}
	if c.Register != nil && ld.l != nil {
		ld.l.Registered(c.Register.Replicas)
	}
	if changed {
		snap := ld.st.Clone()
		s.learn(c, ev, snap)
		for _, sh := range s.order {
			if sh.alive || s.rules.servesAfterFailure() {
				s.deliverWatch(sh, func() { sh.onState(ev, snap) })
			}
		}
	}
	if changed || news {
		ld.step()
	}
}

// failover hands leadership to another ordering replica after an election
// gap: it starts a fresh leader core from the replicated state, with
// nothing in flight; entries the old leader proposed still commit.
func (ld *leader) failover(gap time.Duration) {
	s := ld.s
	ld.term++
	ld.l = nil
	ld.wakeAt = time.Time{}
	// The old leader's entries in flight commit once the new leader
	// commits its first entry, a little after the election; the new
	// leader meanwhile works from the state it applied so far.
	ld.flushAt = s.now.Add(gap + s.uniform(100*time.Microsecond, 2*time.Millisecond))
	ld.raft.last = ld.flushAt
	s.tracef("leader: failover, next leader in %v", gap)
	s.after(gap, func() {
		ld.l = order.NewLeader(s.rules.policy(&s.sc), s.sc.failureTimeout, ld.st, s.now)
		ld.step()
	})
}

func linkOf(m map[cut.ShardID]*link, id cut.ShardID) *link {
	l, ok := m[id]
	if !ok {
		l = &link{}
		m[id] = l
	}
	return l
}

// step runs the leader core and carries out its output: proposals through
// Raft, lag-fixes to the shards, a wake-up when it asked for one.
func (ld *leader) step() {
	s := ld.s
	if ld.l == nil {
		return // between leaders
	}
	out := ld.l.Step(s.now)
	for _, c := range out.Propose {
		switch {
		case c.Window != nil:
			s.stats.windows++
			s.checkWindow(c.Window.Quotas)
			s.tracef("leader: plan window %+v", *c.Window)
		case c.Cut != nil:
			s.stats.proposals++
			s.tracef("leader: propose cut %+v (last %d)", *c.Cut, ld.st.LastCut.Index)
		case c.Finalize != nil:
			s.tracef("leader: shard %d suspected", c.Finalize.Shard)
		}
		ld.propose(c)
	}
	for _, g := range out.LagFixes {
		for _, f := range g.Lengths {
			ld.sendLagFix(f)
		}
	}
	s.stats.lagFixes += out.Stats.LagFixes
	s.stats.quotaChanges += out.Stats.QuotaChanges
	if out.Wake > 0 {
		at := s.now.Add(out.Wake)
		if ld.wakeAt.IsZero() || at.Before(ld.wakeAt) {
			ld.wakeAt = at
			term := ld.term
			s.at(at, func() {
				if ld.term == term && ld.wakeAt.Equal(at) {
					ld.wakeAt = time.Time{}
					ld.step()
				}
			})
		}
	}
}

func (ld *leader) sendLagFix(f cut.Length) {
	s := ld.s
	sh := s.shards[f.Shard]
	s.stats.lagFixMsgs++
	s.tracef("leader: lag-fix shard %d to %d", f.Shard, f.Length)
	if sh == nil || !sh.alive {
		return
	}
	if s.r.Float64() < s.sc.lagFixLoss || s.partitioned(sh) {
		s.stats.lostLagFix++
		return
	}
	target := f.Length
	s.at(linkOf(ld.fix, f.Shard).arrival(s.now, s.netDelay()), func() { sh.rules.lagFix(target) })
}

// onReport is a shard's report reaching the leader on its heartbeat
// stream: a beat for the failure detector and a report for the policy.
func (ld *leader) onReport(sh *shard, r order.Report) {
	s := ld.s
	if ld.l == nil {
		return // no leader: the report is lost
	}
	s.stats.reports++
	ld.l.Beat(sh.name, 1, s.now)
	s.tracef("leader: report from shard %d: length %d, records %d", r.Shard, r.Length, r.Records)
	// Like the ordering server, step only for news; a heartbeat that
	// repeats itself waits for the next tick.
	if ld.l.Report(r, s.now) {
		ld.step()
	}
}

// detectTick runs the failure detector every quarter of the failure
// timeout, as the ordering server's ticker does.
func (ld *leader) detectTick() {
	s := ld.s
	if ld.l != nil {
		for _, id := range ld.l.Detect(s.now) {
			s.tracef("leader: shard %d silent, finalizing it", id)
			ld.propose(control.Command{Finalize: &control.FinalizeCommand{Shard: id, Failed: true}})
		}
		ld.step()
	}
	s.after(s.sc.failureTimeout/4, ld.detectTick)
}
