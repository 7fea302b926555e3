package sim

import (
	"slices"
	"time"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
)

// A lazy shard's configuration in the simulator, as the control plane
// records it in the shard table: a crashed replica is taken out after
// lazyDetectAfter (its session broke, as a restarted server comes back
// with another incarnation); if it was the primary, the first replica
// left that is not pending is promoted. A replica taken out copies the
// primary's log and rejoins, pending until it caught up
// (lazyrejoin.go).

// lazyShardConf is one shard's configuration: its epoch and its members
// (indexes into lazyRun.shards[s]), the primary first; pending are the
// members that joined and have not caught up yet.
type lazyShardConf struct {
	epoch   uint64
	members []int
	pending map[int]bool
}

// primary is the current primary of shard s.
func (w *lazyRun) primary(s cut.ShardID) *shardNode {
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
	if !n.up || n.doomed || !w.isMember(n) {
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
	w.after(lazyDetectAfter, func() { w.takeOut(n) })
}

// takeOut is the failure detector's verdict on a crashed replica: the
// control plane commits the shard's configuration without it, and every
// replica learns it (the shard table's event). A primary taken out is
// replaced by the first replica left that is not pending.
func (w *lazyRun) takeOut(n *shardNode) {
	conf := &w.shardConf[n.shard]
	n.doomed = false
	if !w.isMember(n) || len(conf.members) < 2 {
		return
	}
	wasPrimary := w.primary(n.shard) == n
	conf.epoch++
	conf.members = slices.DeleteFunc(conf.members, func(j int) bool { return j == n.idx })
	delete(conf.pending, n.idx)
	if wasPrimary {
		i := slices.IndexFunc(conf.members, func(j int) bool { return !conf.pending[j] })
		if i < 0 {
			w.errorf("control: shard %d lost its primary %s with no replica caught up", n.shard, n.name)
			return
		}
		first := conf.members[i]
		conf.members = append([]int{first}, slices.Delete(conf.members, i, i+1)...)
		w.stats.failovers++
	}
	w.tracef("control: shard %d epoch %d without %s, primary %s", n.shard, conf.epoch, n.name, w.primary(n.shard).name)
	w.announce(n.shard)
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
