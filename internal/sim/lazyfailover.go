package sim

import (
	"maps"
	"slices"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
)

// A lazy shard's configuration in the simulator, as the control plane
// records it in the shard table through the ordering replicas' Raft: a
// crashed replica is taken out after lazyDetectAfter (its session broke,
// as a restarted server comes back with another incarnation); if it was
// the primary, the control state promotes the first replica left that is
// not pending. A replica taken out copies the primary's log and rejoins,
// pending until it caught up (lazyrejoin.go); its join and confirm are
// Raft commands too. A shard whose every replica died for good is taken
// out replica by replica, and the last removal finalizes it. A shard
// added mid-run registers through Raft. The world follows the applied
// shard table (syncShards).

// lazyShardConf is one shard's configuration: its epoch and its members
// (indexes into lazyRun.shards[s]), the primary first; pending are the
// members that joined and have not caught up yet.
type lazyShardConf struct {
	epoch   uint64
	members []int
	pending map[int]bool
}

// primary is the current primary of shard s; nil once no replica is
// left.
func (w *lazyRun) primary(s cut.ShardID) *shardNode {
	if len(w.shardConf[s].members) == 0 {
		return nil
	}
	return w.shards[s][w.shardConf[s].members[0]]
}

// members are the replicas of shard s's current configuration.
func (w *lazyRun) members(s cut.ShardID) []*shardNode {
	var out []*shardNode
	for _, j := range w.shardConf[s].members {
		out = append(out, w.shards[s][j])
	}
	return out
}

// isMember says whether n is in its shard's current configuration.
func (w *lazyRun) isMember(n *shardNode) bool {
	return slices.Contains(w.shardConf[n.shard].members, n.idx)
}

// isPending says whether n joined its shard's configuration and has not
// caught up yet.
func (w *lazyRun) isPending(n *shardNode) bool { return w.shardConf[n.shard].pending[n.idx] }

// survivor says whether n may carry its shard alone: up, in the
// configuration, not about to be taken out, not pending.
func (w *lazyRun) survivor(n *shardNode) bool {
	return n.up && !n.doomed && w.isMember(n) && !w.isPending(n)
}

// canCrashShard says whether n may crash within the fault budget: another
// replica of its configuration survives it.
func (w *lazyRun) canCrashShard(n *shardNode) bool {
	if n == nil || !n.up || n.doomed || n.gone || !w.isMember(n) {
		return false
	}
	for _, m := range w.members(n.shard) {
		if m != n && w.survivor(m) {
			return true
		}
	}
	return false
}

// crashShard crashes n and has the detector take it out.
func (w *lazyRun) crashShard(n *shardNode, down time.Duration) {
	w.stats.shardCrashes++
	n.doomed = true
	n.crash(down)
	outs := n.outs
	w.after(lazyDetectAfter, func() { w.takeOut(n, outs) })
}

// takeOut is the failure detector's verdict on a crashed replica (or on
// one gone for good): the ordering leader proposes the shard's
// configuration without it through Raft, again after lazyDetectAfter
// until it is applied (the proposal may be lost with a deposed or
// crashed leader, or refused for an epoch that moved). It stops once the
// replica was taken out since the crash (outs moved: it may have rejoined
// by now). The last replica is taken out only when it is gone for good:
// that finalizes the shard.
func (w *lazyRun) takeOut(n *shardNode, outs int) {
	conf := w.shardConf[n.shard]
	if n.outs != outs || !w.isMember(n) || (len(conf.members) < 2 && !n.gone) {
		return
	}
	if o := w.lead; o != nil && o.ctl != nil {
		o.propose(control.Command{Reconfig: &control.ReconfigCommand{Shard: n.shard, Epoch: conf.epoch, Remove: []string{n.name}}})
	}
	w.after(lazyDetectAfter, func() { w.takeOut(n, outs) })
}

// syncShards takes the shard table the world learned (the truth): each
// shard's epoch, members and pending ones, none once finalized; every
// replica of a shard whose configuration changed learns it (the shard
// table's event).
func (w *lazyRun) syncShards() {
	for _, row := range w.truth.Shards {
		s := row.ID
		added := int(s) >= len(w.shards)
		if added {
			// A shard added mid-run: its replicas start now.
			var reps []*shardNode
			for j, r := range row.Replicas {
				reps = append(reps, &shardNode{node: node{name: r.ID, up: true}, w: w, shard: s, idx: j})
			}
			w.shards = append(w.shards, reps)
			w.shardConf = append(w.shardConf, lazyShardConf{})
			w.stats.added++
		}
		conf := &w.shardConf[s]
		next := lazyShardConf{epoch: row.Epoch}
		if row.State != control.Finalized {
			for _, r := range row.Replicas {
				j := slices.IndexFunc(w.shards[s], func(n *shardNode) bool { return n.name == r.ID })
				next.members = append(next.members, j)
				if r.Pending {
					if next.pending == nil {
						next.pending = map[int]bool{}
					}
					next.pending[j] = true
				}
			}
		}
		if conf.epoch == next.epoch && slices.Equal(conf.members, next.members) && maps.Equal(conf.pending, next.pending) {
			continue
		}
		old := *conf
		*conf = next
		if added {
			for _, m := range w.shards[s] {
				m.boot()
			}
			continue
		}
		w.tracef("control: shard %d epoch %d, members %v, pending %v, %v", s, row.Epoch, next.members, next.pending, row.State)
		if len(old.members) > 0 && len(next.members) > 0 && old.members[0] != next.members[0] {
			w.stats.failovers++
		}
		for _, j := range old.members {
			if n := w.shards[s][j]; !slices.Contains(next.members, j) {
				n.outs++
				n.doomed = false
			}
		}
		for _, j := range next.members {
			n := w.shards[s][j]
			switch {
			case !slices.Contains(old.members, j):
				w.stats.rejoins++
				w.joined(n)
			case old.pending[j] && !next.pending[j]:
				w.primaryMayDie(n)
			}
		}
		if row.State == control.Finalized && int(s) == w.lost {
			w.finalizedAt, w.endAt = w.elapsed(), w.stableEnd()
			if w.endAt == ^uint64(0) {
				// No live shard has a table yet (the only one left was
				// added a moment ago).
				w.endAt = 0
			}
		}
		w.announce(s)
	}
}

// announce brings every replica of shard s the shard table's event.
func (w *lazyRun) announce(s cut.ShardID) {
	for _, m := range w.shards[s] {
		w.send("ctl", &m.node, m.follow)
	}
}

// follow brings the replica's core to its shard's configuration, by its
// place in it.
func (n *shardNode) follow() {
	w := n.w
	conf := w.shardConf[n.shard]
	if !w.isMember(n) && w.plant == bugLazyOutStaysIn {
		w.planted = true
		return
	}
	var members []string
	for _, m := range w.members(n.shard) {
		members = append(members, m.name)
	}
	var out lazy.ShardOutput[int]
	wasPrimary := n.core.Primary()
	n.core.Follow(conf.epoch, members, n.name, &out)
	if n.core.Primary() && !wasPrimary {
		w.tracef("%s: promoted to primary of shard %d in epoch %d", n.name, n.shard, conf.epoch)
	}
	n.carry(out)
}

// shardConfig is the core configuration n boots with.
func (n *shardNode) shardConfig() lazy.ShardConfig {
	w := n.w
	conf := w.shardConf[n.shard]
	cfg := lazy.ShardConfig{ID: n.shard, Primary: w.primary(n.shard) == n, Epoch: conf.epoch, NoopAfter: lazyNoopAfter}
	if cfg.Primary {
		for _, b := range w.members(n.shard)[1:] {
			cfg.Backups = append(cfg.Backups, b.name)
		}
	}
	return cfg
}
