package sim

// The ordering replicas: etcd raft RawNodes over in-memory storage, driven
// on the simulated clock through the simulated network, deterministically.
// raft draws its randomized election timeouts from crypto/rand, so no
// election here ever waits for one: followers never time out, and the
// simulator starts every election itself (Campaign) on a node it picks
// from the seed.

import (
	"bytes"
	"io"
	"log"
	"math"
	"time"

	"go.etcd.io/raft/v3"
	raftpb "go.etcd.io/raft/v3/raftpb"

	"github.com/augur-log/augur/internal/control"
)

// Bounds of the ordering replicas.
const (
	// replicasN is how many ordering replicas there are: 2f+1 with f = 1.
	replicasN = 3
	// raftTickEvery is the replicas' tick; a leader heartbeats every tick.
	raftTickEvery = 5 * time.Millisecond
	// electionTicksNever keeps followers from ever campaigning on their
	// own (see the file comment).
	electionTicksNever = 1 << 30
	// campaignRetryEvery is how soon the simulator tries another candidate
	// when an election brought no leader.
	campaignRetryEvery = 5 * time.Millisecond
	// raftMsgBytesMax and raftInflightMsgsMax bound raft's appends.
	raftMsgBytesMax     = 1 << 20
	raftInflightMsgsMax = 256
)

// replica is one ordering replica: its raft node and the control state it
// applied.
type replica struct {
	id    uint64
	rn    *raft.RawNode
	store *raft.MemoryStorage
	st    *control.State
	// leader says raft last reported this node as leader.
	leader bool
	// isolatedUntil cuts the node off from the others until then;
	// deafUntil and muteUntil cut one way only: the node hears nothing,
	// or nobody hears it.
	isolatedUntil, deafUntil, muteUntil time.Time
	// down says the node's server crashed; inc counts its incarnations
	// (what was sent to an earlier one is lost with it).
	down bool
	inc  int
	// inReady says the node's Ready is being handled: what is proposed
	// meanwhile waits for the next round of the same loop.
	inReady bool
	// synced is the last log index that survives a power loss: every
	// entry raft had it persist, under the durable default (raft_fsync:
	// true, the WAL is fsynced before raft goes on); under the opt-out,
	// only what the last periodic writeback covered.
	synced uint64
}

var raftLogger = &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}

// startNode starts (or restarts) node id over its storage: a restarted
// node's log and hard state are what it persisted, and it applies its
// committed entries again from the start into a fresh control state.
func startNode(id uint64, ms *raft.MemoryStorage) *raft.RawNode {
	rn, err := raft.NewRawNode(&raft.Config{
		ID: id, ElectionTick: electionTicksNever, HeartbeatTick: 1, Storage: ms,
		MaxSizePerMsg: raftMsgBytesMax, MaxInflightMsgs: raftInflightMsgsMax, Logger: raftLogger,
	})
	if err != nil {
		panic("sim: start raft node: " + err.Error())
	}
	return rn
}

// raftGroup is the ordering replicas' Raft: their nodes, the links
// between them and the committed entries, driven on a run's clock. What
// the replicas do with leadership and committed commands is the hooks':
// the eager and speculative runs start order.Leader on the leader, the
// lazy run lazy.Control.
type raftGroup struct {
	w *world
	// delay is one raft message's delay on the run's network.
	delay func() time.Duration
	// syncOptOut says the run is under the raft_fsync opt-out.
	syncOptOut *bool
	replicas   []*replica
	raftLinks  map[[2]uint64]*link
	// committed holds each committed entry's command by index, decoded
	// once for every replica.
	committed map[uint64]control.Command
	// committedData holds each committed entry's bytes by index: a
	// replica that applies other bytes at an index committed before has
	// lost a committed entry (see raftPowerLoss).
	committedData map[uint64][]byte
	// onLeadership hears raft's word on whether a node leads; onApply
	// applies a committed command on a node; hasLeader says campaigns
	// may stop.
	onLeadership func(n *replica, leads bool)
	onApply      func(n *replica, index uint64, c control.Command)
	hasLeader    func() bool
}

// newRaftGroup starts the ordering replicas from an empty log, each with
// a fresh control state from newState, ticking on w's clock.
func newRaftGroup(w *world, newState func() *control.State, delay func() time.Duration, syncOptOut *bool) *raftGroup {
	g := &raftGroup{w: w, delay: delay, syncOptOut: syncOptOut, raftLinks: map[[2]uint64]*link{},
		committed: map[uint64]control.Command{}, committedData: map[uint64][]byte{}}
	voters := make([]uint64, replicasN)
	for i := range voters {
		voters[i] = uint64(i + 1)
	}
	for _, id := range voters {
		ms := raft.NewMemoryStorage()
		// Membership is fixed: the log starts after a snapshot that holds
		// only the voters.
		if err := ms.ApplySnapshot(&raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)), ConfState: &raftpb.ConfState{Voters: voters}}}); err != nil {
			panic("sim: bootstrap raft storage: " + err.Error())
		}
		g.replicas = append(g.replicas, &replica{id: id, rn: startNode(id, ms), store: ms, st: newState()})
	}
	w.after(raftTickEvery, g.tick)
	return g
}

// tick ticks every replica, and schedules the next tick.
func (g *raftGroup) tick() {
	for _, n := range g.replicas {
		if n.down {
			continue
		}
		n.rn.Tick()
		g.ready(n)
	}
	g.w.after(raftTickEvery, g.tick)
}

// ready handles everything raft has for node n, by raft's rules: persist
// the entries and hard state, then send and apply.
func (g *raftGroup) ready(n *replica) {
	s := g.w
	if n.inReady || n.down {
		return
	}
	n.inReady = true
	defer func() { n.inReady = false }()
	for n.rn.HasReady() {
		rd := n.rn.Ready()
		if rd.SoftState != nil {
			g.onLeadership(n, rd.SoftState.RaftState == raft.StateLeader)
		}
		if !raft.IsEmptyHardState(rd.HardState) {
			if err := n.store.SetHardState(rd.HardState); err != nil {
				s.errorf("raft %d: save hard state: %v", n.id, err)
			}
		}
		if err := n.store.Append(rd.Entries); err != nil {
			s.errorf("raft %d: append: %v", n.id, err)
		}
		if !*g.syncOptOut {
			n.synced, _ = n.store.LastIndex()
		}
		for _, m := range rd.Messages {
			g.sendRaft(n, m)
		}
		for _, e := range rd.CommittedEntries {
			if prev, ok := g.committedData[e.GetIndex()]; ok && !bytes.Equal(prev, e.GetData()) {
				// The cut or command committed there before is gone: the
				// positions it gave out are given again.
				s.errorf("invariant 2: raft %d commits another entry at index %d, where a committed entry was lost", n.id, e.GetIndex())
				continue
			}
			g.committedData[e.GetIndex()] = e.GetData()
			if e.GetType() != raftpb.EntryNormal || len(e.GetData()) == 0 {
				continue
			}
			// A committed entry is the same on every replica: decode it
			// once.
			c, ok := g.committed[e.GetIndex()]
			if !ok {
				var err error
				if c, err = control.DecodeCommand(e.GetData()); err != nil {
					s.errorf("raft %d: entry %d: %v", n.id, e.GetIndex(), err)
					continue
				}
				g.committed[e.GetIndex()] = c
			}
			g.onApply(n, e.GetIndex(), c)
		}
		n.rn.Advance(rd)
	}
}

// sendRaft carries a raft message to its node over a FIFO link, unless
// either end is isolated.
func (g *raftGroup) sendRaft(from *replica, m *raftpb.Message) {
	s := g.w
	to := g.replicas[m.GetTo()-1]
	if s.now.Before(from.isolatedUntil) || s.now.Before(to.isolatedUntil) || to.down ||
		s.now.Before(from.muteUntil) || s.now.Before(to.deafUntil) {
		return
	}
	inc := to.inc
	k := [2]uint64{from.id, to.id}
	l, ok := g.raftLinks[k]
	if !ok {
		l = &link{}
		g.raftLinks[k] = l
	}
	s.at(l.arrival(s.now, g.delay()), func() {
		if s.now.Before(to.isolatedUntil) || to.down || to.inc != inc {
			return
		}
		if err := to.rn.Step(m); err != nil {
			s.tracef("raft %d: step %v from %d: %v", to.id, m.GetType(), from.id, err)
		}
		g.ready(to)
	})
}

// campaign has a node other than the isolated old leader stand for
// election, and tries the next one while no leader emerges.
func (g *raftGroup) campaign(skip uint64) {
	s := g.w
	if g.hasLeader() {
		return
	}
	cands := make([]*replica, 0, replicasN)
	for _, n := range g.replicas {
		if n.id != skip && !s.now.Before(n.isolatedUntil) && !n.down {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		s.after(campaignRetryEvery, func() { g.campaign(skip) })
		return
	}
	n := cands[s.r.IntN(len(cands))]
	s.tracef("raft %d: campaigns", n.id)
	if err := n.rn.Campaign(); err != nil {
		s.tracef("raft %d: campaign: %v", n.id, err)
	}
	g.ready(n)
	s.after(campaignRetryEvery, func() { g.campaign(skip) })
}

// crash crashes ordering replica i (of replicasN) for down, unless another
// is down already: a minority at a time. Its storage keeps what raft had
// it persist, which is everything it acknowledged (raft persists before
// it sends); its raft node and control state are lost, and a leader's
// term ends with it: another replica campaigns after an election gap.
func (ld *leader) crash(i int, down time.Duration) {
	s := ld.s
	n := ld.replicas[i%replicasN]
	for _, o := range ld.replicas {
		if o.down || s.now.Before(o.isolatedUntil) {
			return
		}
	}
	n.down, n.leader = true, false
	n.inc++
	s.stats.raftCrashes++
	s.tracef("raft %d crashes for %v", n.id, down)
	if ld.node == n {
		ld.node, ld.l, ld.wakeAt = nil, nil, time.Time{}
		s.after(s.uniform(time.Millisecond, 5*time.Millisecond), func() { ld.campaign(n.id) })
	}
	s.after(down, func() {
		n.rn = startNode(n.id, n.store)
		n.st = ld.s.md.NewState("sim")
		n.down = false
		s.tracef("raft %d restarts", n.id)
		ld.ready(n)
	})
}

// oneWay cuts ordering replica i's links one way for dur (until the heal
// at the latest): dir fromShardOnly makes the others deaf to it (it is
// mute), toShardOnly makes it deaf to them. Raft stays safe either way; a
// deaf or mute leader stalls the ordering until the link heals.
func (ld *leader) oneWay(i int, dur time.Duration, dir linkDir) {
	s := ld.s
	n := ld.replicas[i%replicasN]
	until := s.now.Add(dur)
	if heal := s.start.Add(s.sc.healAt); until.After(heal) {
		until = heal
	}
	if dir == toShardOnly {
		n.deafUntil = until
		s.tracef("raft %d hears nobody until %v", n.id, until.Sub(s.start))
		return
	}
	n.muteUntil = until
	s.tracef("raft %d is heard by nobody until %v", n.id, until.Sub(s.start))
}

// raftWritebackEvery is how often, under the raft_fsync opt-out, the
// kernel writes the ordering replicas' WAL back to disk on its own.
const raftWritebackEvery = 10 * time.Millisecond

// writeback makes what each ordering replica's WAL holds survive a power
// loss, as the kernel's writeback does under the raft_fsync opt-out, and
// schedules the next one.
func (ld *leader) writeback() {
	for _, n := range ld.replicas {
		if !n.down {
			n.synced, _ = n.store.LastIndex()
		}
	}
	ld.s.after(raftWritebackEvery, ld.writeback)
}

// powerLoss fails the power of every ordering replica at once: each
// keeps the entries that survive it (synced) and a hard state that commits
// no more than those, and all restart after down.
func (ld *leader) powerLoss(down time.Duration) {
	s := ld.s
	s.tracef("every ordering replica loses power")
	for _, n := range ld.replicas {
		if n.down {
			continue
		}
		hs, _, err := n.store.InitialState()
		if err != nil {
			s.errorf("raft %d: %v", n.id, err)
			return
		}
		first, _ := n.store.FirstIndex()
		last, _ := n.store.LastIndex()
		keep := min(last, n.synced)
		var ents []*raftpb.Entry
		if keep >= first {
			if ents, err = n.store.Entries(first, keep+1, math.MaxUint64); err != nil {
				s.errorf("raft %d: %v", n.id, err)
				return
			}
		}
		snap, _ := n.store.Snapshot()
		ms := raft.NewMemoryStorage()
		if err := ms.ApplySnapshot(snap); err != nil {
			s.errorf("raft %d: %v", n.id, err)
			return
		}
		if err := ms.Append(ents); err != nil {
			s.errorf("raft %d: %v", n.id, err)
			return
		}
		hs.Commit = new(min(hs.GetCommit(), max(keep, snap.GetMetadata().GetIndex())))
		if err := ms.SetHardState(hs); err != nil {
			s.errorf("raft %d: %v", n.id, err)
			return
		}
		s.tracef("raft %d keeps %d of %d entries", n.id, keep, last)
		n.store = ms
		n.down, n.leader = true, false
		n.inc++
		s.stats.raftCrashes++
	}
	ld.node, ld.l, ld.wakeAt = nil, nil, time.Time{}
	s.after(down, func() {
		for _, n := range ld.replicas {
			n.rn = startNode(n.id, n.store)
			n.st = ld.s.md.NewState("sim")
			n.down = false
		}
		s.tracef("every ordering replica restarts")
		for _, n := range ld.replicas {
			ld.ready(n)
		}
		ld.campaign(0)
	})
}
