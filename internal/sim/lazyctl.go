package sim

// Lazy order's control plane in the simulator: three ordering replicas
// (etcd raft RawNodes, the raftGroup the other modes run) replicate the
// control state, and every replica that raft says leads runs lazy.Control,
// the core the ordering server runs, over the simulated network: probes of
// the sequencing replicas, claims and records through Raft, seal, flush,
// stable-gp and starts. Ordering replicas crash (the leader included),
// and a leader is cut off from the others while it still reaches the
// sequencing replicas and the shards: deposed without knowing it, it goes
// on until it hears of the new term.

import (
	"fmt"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
)

// lazyControlEvery is how often a leading ordering replica probes the
// sequencing replicas and steps its control plane.
const lazyControlEvery = time.Millisecond

// ordNode is one ordering replica as the lazy run's network sees it: its
// raft replica and, while raft says it leads, its control plane.
type ordNode struct {
	node
	w   *lazyRun
	r   *replica
	ctl *lazy.Control
	// gen counts control planes: answers to an earlier one are dropped.
	gen int
}

func (w *lazyRun) startOrdering() {
	w.truth = w.newControlState()
	optOut := false
	w.raft = newRaftGroup(&w.world, w.newControlState,
		func() time.Duration { return w.uniform(w.sc.delayLo, w.sc.delayHi) }, &optOut)
	for _, r := range w.raft.replicas {
		w.ords = append(w.ords, &ordNode{node: node{name: fmt.Sprintf("o%d", r.id), up: true}, w: w, r: r})
	}
	w.raft.onLeadership = w.leadership
	w.raft.onApply = w.applyRaft
	w.raft.hasLeader = func() bool { return w.lead != nil }
	w.after(0, func() { w.raft.campaign(0) })
}

// leadership starts a control plane on an ordering replica that raft
// made leader, and ends it when raft says it no longer leads.
func (w *lazyRun) leadership(n *replica, leads bool) {
	o := w.ords[n.id-1]
	n.leader = leads
	switch {
	case leads && o.ctl == nil:
		w.terms++
		ids := make([]lazy.ReplicaID, len(w.seqs))
		for i := range ids {
			ids[i] = lazy.ReplicaID(i + 1)
		}
		o.gen++
		w.lead = o
		o.ctl = lazy.NewControl(lazy.ControlConfig{Replicas: ids, FailureTimeout: lazyDetectAfter, ResendAfter: lazyResendEvery},
			fmt.Sprintf("%s.t%d", o.name, w.terms), w.now)
		w.tracef("%s: leads, control plane %d", o.name, w.terms)
		gen := o.gen
		w.after(0, func() {
			if o.gen == gen {
				o.carry(o.ctl.Applied(w.controlState(o.r.st), w.now))
				o.tick(gen)
			}
		})
	case !leads && o.ctl != nil:
		w.tracef("%s: no longer leads", o.name)
		o.ctl = nil
		o.gen++
		if w.lead == o {
			w.lead = nil
		}
	}
}

// applyRaft is the ordering replica's apply: the command changes its
// control state, its control plane (if it leads) reads the state, and the
// first replica to apply an entry tells the world.
func (w *lazyRun) applyRaft(n *replica, index uint64, c control.Command) {
	n.st.Apply(c)
	if index > w.truthIndex {
		w.truthIndex = index
		ev, ok := w.truth.Apply(c)
		if ok && ev.LazyChanged {
			cfg := w.truth.Lazy
			w.tracef("control: recorded view %d %v led by %d, stable %d", cfg.View, cfg.Replicas, cfg.Leader, cfg.Stable)
			if cfg.View > 1 {
				w.stats.views++
			}
		}
		if ok && ev.MembershipChanged {
			w.syncShards()
		}
	}
	if o := w.ords[n.id-1]; o.ctl != nil && (c.SeqClaim != nil || c.SeqFlush != nil || c.SeqConfig != nil || c.Reconfig != nil || c.Register != nil) {
		o.carry(o.ctl.Applied(w.controlState(n.st), w.now))
	}
}

// shardReplicas are the replicas shard id registers with.
func (w *lazyRun) shardReplicas(id cut.ShardID) []control.Replica {
	var reps []control.Replica
	for j := range w.replicas {
		reps = append(reps, control.Replica{ID: shardNodeName(id, j)})
	}
	return reps
}

// newControlState is the control state every ordering replica starts
// from: the run's first shards registered, as a cluster's servers
// register theirs (a shard added mid-run registers through Raft).
func (w *lazyRun) newControlState() *control.State {
	st := control.New("sim")
	for id := range w.sc.shards {
		st.Apply(control.Command{Register: &control.RegisterCommand{Group: "sim", Replicas: w.shardReplicas(cut.ShardID(id))}})
	}
	return st
}

func (w *lazyRun) controlState(st *control.State) lazy.ControlState {
	return st.LazyControl()
}

// tick probes every sequencing replica and steps the control plane.
func (o *ordNode) tick(gen int) {
	w := o.w
	if o.gen != gen || o.ctl == nil {
		return
	}
	w.after(lazyControlEvery, func() { o.tick(gen) })
	for _, q := range w.seqs {
		w.send(o.name, &q.node, func() {
			v, sealed := q.core.View()
			st := lazy.ReplicaStatus{View: v, Sealed: sealed, Amnesiac: q.core.Amnesiac()}
			w.send(q.name, &o.node, func() {
				if o.gen == gen {
					o.ctl.Status(q.id, st, w.now)
				}
			})
		})
	}
	o.carry(o.ctl.Tick(w.now))
}

// carry carries out what the control plane asked, as the ordering
// server's shell does.
func (o *ordNode) carry(out lazy.ControlOutput) {
	w := o.w
	if out.Empty() || o.ctl == nil {
		return
	}
	gen := o.gen
	w.tracef("%s: control:%s", o.name, describeControl(out))
	if out.Claim != nil {
		o.propose(control.Command{SeqClaim: out.Claim})
	}
	if out.Flush != nil {
		o.propose(control.Command{SeqFlush: out.Flush})
	}
	if out.Record != nil {
		o.propose(control.Command{SeqConfig: out.Record})
		if w.plant == bugLazyStableBeforeRecord {
			// stable-gp advances with the proposal, before the flush's
			// configuration is recorded.
			w.broadcastStable(&o.node, lazy.StableGP{View: out.Record.View, Stable: out.Record.Stable})
			w.planted = w.planted || w.now.Before(o.r.isolatedUntil)
		}
	}
	if w.plant == bugLazyTrustProposal && (out.Claim != nil || out.Flush != nil || out.Record != nil) {
		// The shell takes its proposal for committed: a deposed leader
		// seals, flushes, advances stable-gp and starts a view its claim
		// or record never made it to the control state.
		st := w.controlState(o.r.st)
		if out.Claim != nil {
			st.Claim = out.Claim
		}
		if out.Flush != nil {
			st.Flush = out.Flush
		}
		if out.Record != nil {
			st.Config = out.Record
			// It strikes when the proposal cannot commit.
			w.planted = w.planted || w.now.Before(o.r.isolatedUntil)
		}
		o.carry(o.ctl.Applied(st, w.now))
	}
	if out.Seal != nil {
		view := out.Seal.View
		for _, id := range out.SealTo {
			q := w.seq(id)
			w.send(o.name, &q.node, func() {
				rep, err := q.core.Seal(view)
				if err != nil {
					// A late seal of a view the replica left: its
					// orderer runs the newer view and stays.
					return
				}
				q.orderer = nil
				w.send(q.name, &o.node, func() {
					if o.gen == gen {
						o.carry(o.ctl.Sealed(q.id, rep))
					}
				})
			})
		}
	}
	if m := out.Map; m != nil {
		for _, id := range out.MapTo {
			if w.primary(id) == nil {
				continue
			}
			w.primary(id).sendMap(&o.node, *m, func(a lazy.MappingAck) {
				if o.gen == gen {
					o.carry(o.ctl.MapAcked(a))
				}
			})
		}
	}
	if st := out.Stable; st != nil {
		w.broadcastStable(&o.node, *st)
	}
	if sv := out.Start; sv != nil {
		for _, id := range out.StartTo {
			q := w.seq(id)
			w.send(o.name, &q.node, func() { q.start(*sv) })
		}
	}
}

// propose hands a command to the replica's raft node; a deposed leader's
// proposal never commits.
func (o *ordNode) propose(c control.Command) {
	w := o.w
	w.proposals++
	c.ID = fmt.Sprintf("%s-%d", o.name, w.proposals)
	if err := o.r.rn.Propose(c.Encode()); err != nil {
		w.tracef("%s: propose: %v", o.name, err)
		return
	}
	w.raft.ready(o.r)
}

// crashOrdering crashes an ordering replica (the leader, or another) for
// down, unless another is down or cut off: a minority at a time. Raft
// keeps what it persisted; the control plane is lost with the process.
func (w *lazyRun) crashOrdering(leader bool, down time.Duration) bool {
	var victim *ordNode
	for _, o := range w.ords {
		if o.r.down || w.now.Before(o.r.isolatedUntil) {
			return false
		}
		if (o == w.lead) == leader && victim == nil {
			victim = o
		}
	}
	if victim == nil {
		return false
	}
	n := victim.r
	w.stats.ordCrashes++
	w.tracef("%s: crashes for %v", victim.name, down)
	n.down, n.leader = true, false
	n.inc++
	victim.up, victim.inc = false, victim.inc+1
	if victim.ctl != nil {
		victim.ctl, victim.gen = nil, victim.gen+1
	}
	if w.lead == victim {
		w.lead = nil
		w.after(w.uniform(time.Millisecond, 5*time.Millisecond), func() { w.raft.campaign(n.id) })
	}
	w.after(down, func() {
		n.rn = startNode(n.id, n.store)
		n.st = w.newControlState()
		n.down = false
		victim.up = true
		w.tracef("%s: restarts", victim.name)
		w.raft.ready(n)
	})
	return true
}

// cutOffLeader cuts the leading ordering replica off from the other
// ordering replicas for dur; it still reaches everyone else, and goes on
// as leader until it hears of the new term. Another replica campaigns
// after an election gap.
func (w *lazyRun) cutOffLeader(dur time.Duration) bool {
	for _, o := range w.ords {
		if o.r.down || w.now.Before(o.r.isolatedUntil) {
			return false
		}
	}
	old := w.lead
	if old == nil {
		return false
	}
	w.stats.ordPartitions++
	old.r.isolatedUntil = w.now.Add(dur)
	// Deposed, though it does not know it: raft elects another.
	w.lead = nil
	w.tracef("%s: cut off from the other ordering replicas for %v", old.name, dur)
	w.after(w.uniform(time.Millisecond, 3*time.Millisecond), func() { w.raft.campaign(old.r.id) })
	return true
}

// changing says a view change is under way: claimed and not recorded, or
// some control plane is in one.
func (w *lazyRun) changing() bool {
	st := w.truth
	if st.Lazy == nil || (st.LazyClaim != nil && st.LazyClaim.View > st.Lazy.View) {
		return true
	}
	for _, o := range w.ords {
		if o.ctl != nil && o.ctl.Changing() {
			return true
		}
	}
	return false
}

func describeControl(out lazy.ControlOutput) string {
	s := ""
	if out.Claim != nil {
		s += fmt.Sprintf(" claim view %d;", out.Claim.View)
	}
	if out.Record != nil {
		s += fmt.Sprintf(" record view %d %v led by %d, stable %d;", out.Record.View, out.Record.Replicas, out.Record.Leader, out.Record.Stable)
	}
	if out.Seal != nil {
		s += fmt.Sprintf(" seal view %d;", out.Seal.View)
	}
	if out.Flush != nil {
		s += fmt.Sprintf(" record flush [%d, %d) of view %d;", out.Flush.From, out.Flush.End(), out.Flush.View)
	}
	if out.Map != nil {
		s += fmt.Sprintf(" flush [%d, %d) in view %d;", out.Map.From, out.Map.End(), out.Map.View)
	}
	if out.Stable != nil {
		s += fmt.Sprintf(" stable %d;", out.Stable.Stable)
	}
	if out.Start != nil {
		s += fmt.Sprintf(" start view %d at %d on %v;", out.Start.View, out.Start.Ordered, out.StartTo)
	}
	return s
}
