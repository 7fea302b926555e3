package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/order"
)

// leader is the ordering layer: the ordering replicas (etcd raft RawNodes,
// each applying the commands to its own control state) and the leading
// replica's order.Leader — the core the ordering server runs — driven the
// way the server drives it.
type leader struct {
	s *cluster
	// st is the committed control state as the world learns it: each
	// entry applied once, when the first replica applies it.
	st         *control.State
	truthIndex uint64
	*raftGroup
	// node is the replica whose order.Leader runs and which takes
	// proposals; nil between leaders.
	node *replica
	l    *order.Leader
	// terms counts leaderships; tag marks the current one's proposals,
	// seq numbers them.
	terms int
	tag   string
	seq   uint64
	// queued holds operator commands that wait for a leader.
	queued []control.Command
	// watch and fix are each shard's two streams from the leader: the
	// control events it watches and the lag-fixes on its heartbeat
	// stream. Each is FIFO; they may overtake each other.
	watch, fix map[cut.ShardID]*link
	// wakeAt is when the step the policy asked for is due (zero: none).
	wakeAt time.Time
	// cutsInflight holds the ids of the current leader core's cuts that
	// went to Raft and that its replica has not applied yet. It holds at
	// least what the core counts in flight (the core also gives up on
	// cuts that never commit), so when it is empty the core's is too.
	cutsInflight map[string]bool
	// lastCut is when the current leader core last proposed a cut (zero:
	// never).
	lastCut time.Time
}

func newLeader(s *cluster) *leader {
	ld := &leader{s: s, st: s.md.NewState("sim"), watch: map[cut.ShardID]*link{}, fix: map[cut.ShardID]*link{}}
	s.after(0, func() { ld.campaign(0) })
	ld.raftGroup = newRaftGroup(&s.world, func() *control.State { return s.md.NewState("sim") }, s.netDelay, &s.raftSyncOptOut)
	ld.onLeadership, ld.onApply = ld.leadership, ld.apply
	ld.hasLeader = func() bool { return ld.node != nil }
	s.after(s.sc.failureTimeout/4, ld.detectTick)
	return ld
}

// operator proposes a command on behalf of an operator or a client: it
// waits for a leader if there is none.
func (ld *leader) operator(c control.Command) {
	if ld.node == nil {
		ld.queued = append(ld.queued, c)
		return
	}
	if err := ld.propose(c); err != nil {
		ld.queued = append(ld.queued, c)
	}
}

// propose hands a command to the leading replica's raft node.
func (ld *leader) propose(c control.Command) error {
	n := ld.node
	if n == nil {
		return fmt.Errorf("no leader")
	}
	if c.ID == "" { // the leader core's commands carry theirs
		ld.seq++
		c.ID = fmt.Sprintf("%s-%d", ld.tag, ld.seq)
	}
	if err := n.rn.Propose(c.Encode()); err != nil {
		ld.s.tracef("raft %d: propose: %v", n.id, err)
		return err
	}
	ld.ready(n)
	return nil
}

// leadership takes raft's word on whether node n leads: a new leader
// starts a fresh leader core on its own state, as the ordering server
// does, and proposes what waited for it.
func (ld *leader) leadership(n *replica, leads bool) {
	s := ld.s
	n.leader = leads
	switch {
	case leads && ld.node != n && s.now.Before(n.isolatedUntil):
		// An isolated old leader's view: nobody hears it.
	case leads && ld.node != n:
		ld.node = n
		ld.terms++
		ld.tag = fmt.Sprintf("n%dl%d", n.id, ld.terms)
		ld.l = order.NewLeader(s.md.NewPolicy(), s.sc.failureTimeout, n.st, s.now, ld.tag+"-c")
		ld.wakeAt = time.Time{}
		ld.cutsInflight = map[string]bool{}
		ld.lastCut = time.Time{}
		s.tracef("leader: raft %d leads", n.id)
		q := ld.queued
		ld.queued = nil
		for _, c := range q {
			ld.operator(c)
		}
		s.after(0, ld.step)
	case !leads && ld.node == n:
		ld.node, ld.l, ld.wakeAt = nil, nil, time.Time{}
	}
}

// apply is the ordering server's Raft apply on replica n: the command
// changes its control state and, on the leader, the leader core takes the
// result. The first replica to apply an entry tells the world: the truth
// learns it and the storage servers hear of it.
func (ld *leader) apply(n *replica, index uint64, c control.Command) {
	s := ld.s
	_, changed := n.st.Apply(c)
	news := false
	lead := n == ld.node && ld.l != nil
	if lead {
		if c.Cut != nil {
			delete(ld.cutsInflight, c.ID)
		}
		news = ld.l.Applied(n.st, c, strings.HasPrefix(c.ID, ld.tag+"-"), s.now)
		if c.Register != nil {
			ld.l.Registered(c.Register.Replicas)
		}
	}
	if index > ld.truthIndex {
		ld.truthIndex = index
		if ev, ok := ld.st.Apply(c); ok {
			snap := ld.st.Clone()
			s.learn(c, ev, snap)
			for _, sh := range s.order {
				s.deliverWatch(sh, func() { sh.onState(ev, snap) })
			}
		}
	}
	if lead && (changed || news) {
		s.after(0, ld.step)
	}
}

// failover cuts the leading replica off from the others for a while; after
// an election gap another replica campaigns. Entries the old leader
// proposed may still commit, or be overwritten.
func (ld *leader) failover(gap time.Duration) {
	s := ld.s
	old := ld.node
	if old == nil {
		return
	}
	old.isolatedUntil = s.now.Add(gap + s.uniform(time.Millisecond, 20*time.Millisecond))
	ld.node, ld.l, ld.wakeAt = nil, nil, time.Time{}
	s.tracef("leader: raft %d cut off until %v, election in %v", old.id, old.isolatedUntil.Sub(s.start), gap)
	s.after(gap, func() { ld.campaign(old.id) })
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
	l := ld.l
	out := l.Step(s.now)
	for _, c := range out.Propose {
		switch {
		case c.Window != nil:
			s.stats.windows++
			s.checkWindow(c.Window.Quotas)
			s.tracef("leader: plan window %+v", *c.Window)
		case c.Cut != nil:
			s.stats.proposals++
			ld.lastCut = s.now
			s.tracef("leader: propose cut %+v (last %d)", *c.Cut, ld.st.LastCut.Index)
		case c.Finalize != nil:
			s.tracef("leader: shard %d suspected", c.Finalize.Shard)
		}
		err := ld.propose(c)
		switch {
		case err != nil && ld.l == l:
			l.Failed(c)
		case err == nil && c.Cut != nil:
			ld.cutsInflight[c.ID] = true
		}
	}
	for _, g := range out.LagFixes {
		for _, f := range g.Lengths {
			ld.sendLagFix(f)
		}
	}
	s.stats.lagFixes += out.Stats.LagFixes
	s.stats.quotaChanges += out.Stats.QuotaChanges
	if out.Wake > 0 && ld.l == l {
		at := s.now.Add(out.Wake)
		if ld.wakeAt.IsZero() || at.Before(ld.wakeAt) {
			ld.wakeAt = at
			s.at(at, func() {
				if ld.l == l && ld.wakeAt.Equal(at) {
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
	if s.r.Float64() < s.sc.lagFixLoss || s.now.Before(sh.muteUntil) {
		s.stats.lostLagFix++
		return
	}
	target := f.Length
	s.at(linkOf(ld.fix, f.Shard).arrival(s.now, s.netDelay()), func() { sh.lagFix(target) })
}

// onReport is a shard's report reaching the leader on its heartbeat
// stream: a beat for the failure detector and a report for the policy.
func (ld *leader) onReport(sh *shard, server string, incarnation uint64, r order.Report) {
	s := ld.s
	if ld.l == nil {
		return // no leader: the report is lost
	}
	s.stats.reports++
	ld.l.Beat(server, incarnation, s.now)
	s.tracef("leader: report from shard %d: length %d, records %d", r.Shard, r.Length, r.Records)
	// Like the ordering server, step only for news; a heartbeat that
	// repeats itself waits for the next tick.
	// Eager cuts are group commits: reports that find no cut in flight
	// and add at most order.SparseRecordsPerShardMax records per live
	// shard are cut at once, or, within order.AtOnceCutSpacing of the
	// last cut, when that time is up; never held for an interval tick.
	// Only reports the leader takes count (not one of an older
	// configuration, nor one of a configuration a Join in flight replaces).
	news := ld.l.Report(r, s.now)
	waiting, live, sparse := ld.sparse()
	if !news {
		return
	}
	proposed, l := s.stats.proposals, ld.l
	ld.step()
	if !sparse || s.stats.proposals != proposed {
		return
	}
	due := ld.lastCut.Add(order.AtOnceCutSpacing(s.sc.interval))
	if !s.now.Before(due) || ld.lastCut.IsZero() {
		s.errorf("eager: %d records reported beyond the last cut over %d live shards, no cut in flight, but the leader proposed none at once (report of shard %d at %d)",
			waiting, live, r.Shard, r.Length)
		return
	}
	// Checked after every event of the due time that was scheduled
	// before it: the leader's wake-up among them.
	s.at(due, func() {
		s.after(0, func() {
			if ld.l != l || s.stats.proposals != proposed {
				return
			}
			if waiting, live, sparse := ld.sparse(); sparse {
				s.errorf("eager: %d records reported beyond the last cut over %d live shards, no cut in flight, but the leader proposed none when the at-once spacing was up (report of shard %d at %d)",
					waiting, live, r.Shard, r.Length)
			}
		})
	})
}

// sparse says whether the reports to the leader add records beyond the
// last cut, at most order.SparseRecordsPerShardMax per live shard, with no
// cut in flight: eager order must cut those at once.
func (ld *leader) sparse() (waiting, live uint64, sparse bool) {
	st := ld.node.st
	for i := range st.Shards {
		if sh := &st.Shards[i]; sh.State != control.Finalized {
			live++
			waiting += ld.l.Reported(sh.ID) - min(ld.l.Reported(sh.ID), st.LastCut.Len(sh.ID))
		}
	}
	return waiting, live, ld.s.sc.mode == Eager && len(ld.cutsInflight) == 0 && waiting > 0 && waiting <= order.SparseRecordsPerShardMax*live
}

// onBeat is a server's heartbeat reaching the leader.
func (ld *leader) onBeat(server string, incarnation uint64) {
	if ld.l != nil {
		ld.l.Beat(server, incarnation, ld.s.now)
	}
}

// onUnreachable is the heartbeat of shard's primary of configuration
// epoch saying it cannot replicate to server, a backup: the leader takes
// it out at once.
func (ld *leader) onUnreachable(shard cut.ShardID, server string, epoch uint64) {
	if ld.l == nil {
		return
	}
	ld.l.Broken(shard, server, epoch)
	ld.detect()
}

// detect proposes what the failure detector finds.
func (ld *leader) detect() {
	for _, c := range ld.l.Detect(ld.s.now) {
		ld.s.tracef("leader: shard %d: %v failed, reconfiguring it", c.Reconfig.Shard, c.Reconfig.Remove)
		_ = ld.propose(c)
	}
}

// detectTick runs the failure detector every quarter of the failure
// timeout, as the ordering server's ticker does.
func (ld *leader) detectTick() {
	s := ld.s
	if ld.l != nil {
		ld.detect()
		ld.step()
	}
	s.after(s.sc.failureTimeout/4, ld.detectTick)
}
