package sim

import (
	"slices"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
)

// A lazy shard's configuration in the simulator, as the control plane
// records it in the shard table: a crashed primary is taken out after
// lazyDetectAfter (its session broke, as a restarted server comes back
// with another incarnation) and the backup is promoted; the replica
// taken out stays out (rejoin is not built). A crashed backup restarts in
// place.

// lazyShardConf is one shard's configuration: its epoch and its members
// (indexes into lazyRun.shards[s]), the primary first.
type lazyShardConf struct {
	epoch   uint64
	members []int
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

// takeOut is the failure detector's verdict on a crashed primary: the
// control plane commits the shard's configuration without it, and every
// replica learns it (the shard table's event).
func (w *lazyRun) takeOut(n *shardNode) {
	conf := &w.shardConf[n.shard]
	if !w.isMember(n) || len(conf.members) < 2 {
		return
	}
	conf.epoch++
	conf.members = slices.DeleteFunc(conf.members, func(j int) bool { return j == n.idx })
	w.stats.failovers++
	w.tracef("control: shard %d epoch %d without %s, primary %s", n.shard, conf.epoch, n.name, w.primary(n.shard).name)
	for _, m := range w.shards[n.shard] {
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
