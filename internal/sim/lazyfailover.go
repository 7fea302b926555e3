package sim

import (
	"slices"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
)

// A lazy shard's configuration in the simulator, as the control plane
// records it in the shard table through the ordering replicas' Raft: a
// crashed primary is taken out after lazyDetectAfter (its session broke,
// as a restarted server comes back with another incarnation) and the
// backup is promoted; the replica taken out stays out (rejoin is not
// built). A crashed backup restarts in place. A shard whose every replica
// died for good is taken out replica by replica, and the last removal
// finalizes it. A shard added mid-run registers through Raft too.

// lazyShardConf is one shard's configuration: its epoch and its members
// (indexes into lazyRun.shards[s]), the primary first.
type lazyShardConf struct {
	epoch   uint64
	members []int
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

// takeOut is the failure detector's verdict on a crashed primary (or on
// a replica gone for good): the ordering leader proposes the shard's
// configuration without it through Raft, again after lazyDetectAfter
// until it is applied (the proposal may be lost with a deposed or
// crashed leader, or refused for an epoch that moved). The last replica
// is taken out only when it is gone for good: that finalizes the shard.
func (w *lazyRun) takeOut(n *shardNode) {
	conf := w.shardConf[n.shard]
	if !w.isMember(n) || (len(conf.members) < 2 && !n.gone) {
		return
	}
	if o := w.lead; o != nil && o.ctl != nil {
		o.propose(control.Command{Reconfig: &control.ReconfigCommand{Shard: n.shard, Epoch: conf.epoch, Remove: []string{n.name}}})
	}
	w.after(lazyDetectAfter, func() { w.takeOut(n) })
}

// syncShards takes the shard table the world learned (the truth): each
// shard's epoch and members, none once finalized; every replica of a
// shard whose configuration changed learns it (the shard table's event).
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
		if conf.epoch == row.Epoch && (row.State != control.Finalized || len(conf.members) == 0) {
			continue
		}
		next := lazyShardConf{epoch: row.Epoch}
		if row.State != control.Finalized {
			for _, r := range row.Replicas {
				next.members = append(next.members, slices.IndexFunc(w.shards[s], func(n *shardNode) bool { return n.name == r.ID }))
			}
		}
		if !added {
			w.stats.failovers++
		}
		*conf = next
		w.tracef("control: shard %d epoch %d, members %v, %v", s, row.Epoch, next.members, row.State)
		if row.State == control.Finalized && int(s) == w.lost {
			w.finalizedAt, w.endAt = w.elapsed(), w.stableEnd()
			if w.endAt == ^uint64(0) {
				// No live shard has a table yet (the only one left was
				// added a moment ago).
				w.endAt = 0
			}
		}
		for _, m := range w.shards[s] {
			if added {
				m.boot()
				continue
			}
			w.send("ctl", &m.node, m.follow)
		}
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
