package sim

import (
	"slices"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/lazy"
)

// Rejoin of a lazy shard replica in the simulator, through the cores'
// rules (lazy/rejoin.go): a replica taken out copies the primary's log
// from a cursor while out, asks the control plane to join once it copied
// what the primary held, joins pending, and copies on until it holds what
// the primary's catch-up mark names; then the control plane confirms it.
// The primary may die mid-copy (the cursor starts over in the new
// primary's log), right after the join, or right after the confirm.

// lazyCopyMax bounds the records one copy answer carries.
const lazyCopyMax = 16

// copyStep asks the primary for the next records of its log, if n is out
// of its configuration or pending.
func (n *shardNode) copyStep() {
	w := n.w
	if n.core == nil || (w.isMember(n) && !w.isPending(n)) {
		return
	}
	p := w.primary(n.shard)
	if p == nil || p == n || !p.up {
		return
	}
	from := n.cursor
	if p.name != n.src {
		from = 0
	}
	w.send(n.name, &p.node, func() {
		var recs []int
		l := from
		for ; l < uint64(len(p.log)) && len(recs) < lazyCopyMax; l++ {
			id := w.recs[p.log[l].rec].id
			if local, ok := p.core.LocalOf(id); ok && local == l {
				recs = append(recs, p.log[l].rec)
			}
		}
		total, epoch := uint64(len(p.log)), w.shardConf[n.shard].epoch
		mark, marked := p.core.CatchUpMark()
		w.send(p.name, &n.node, func() { n.copied(p.name, from, l, total, epoch, recs, mark, marked) })
		if w.faulty() && from > 0 && l < total && w.r.IntN(6) == 0 && w.canCrashShard(p) {
			w.tracef("%s: the source of %s's copy dies mid-copy", p.name, n.name)
			w.stats.sourceDeaths++
			w.crashShard(p, w.uniform(2*time.Millisecond, 10*time.Millisecond))
		}
	})
}

// copied takes the answer of src to a copy of its log from from: records
// up to next, of a log total long, in configuration epoch, with src's
// catch-up mark if it is primary.
func (n *shardNode) copied(src string, from, next, total, epoch uint64, recs []int, mark lazy.CatchUpMark, marked bool) {
	w := n.w
	if n.core == nil {
		return
	}
	if src != n.src {
		if from != 0 {
			return
		}
		n.src, n.cursor = src, 0
	}
	if from != n.cursor {
		return
	}
	for _, rec := range recs {
		var out lazy.ShardOutput[int]
		local, fresh, err := n.core.CopyRecord(w.recs[rec].id, &out)
		if err != nil {
			w.errorf("%s: copy %s: %v", n.name, w.recs[rec].name, err)
			return
		}
		// Persisted without a view (0): never taken for an orphan.
		if fresh {
			n.log = append(n.log, logRec{rec: rec})
		} else if local < uint64(len(n.log)) {
			n.log[local].view = 0
		}
		n.carry(out)
	}
	n.cursor = next
	switch {
	case !w.isMember(n) && next >= total:
		w.join(n, epoch)
	case w.isPending(n) && marked && n.core.CaughtUp(mark, n.cursor):
		w.confirm(n, mark.Epoch)
	}
}

// join asks the ordering leader to Join n, which copied from the
// configuration of epoch: the control state takes it back in, pending, at
// the next epoch, if the shard is still in that configuration and has
// room (the copy goes on, and asks again, until it is in).
func (w *lazyRun) join(n *shardNode, epoch uint64) {
	conf := w.shardConf[n.shard]
	if !n.up || w.isMember(n) || conf.epoch != epoch || len(conf.members) >= len(w.shards[n.shard]) {
		return
	}
	w.ask(n, control.ReconfigCommand{Shard: n.shard, Epoch: epoch, Join: &control.Replica{ID: n.name}})
}

// confirm asks the ordering leader to Confirm pending n in epoch (the
// Confirm names it): it holds what its primary's mark names, and counts
// from then on.
func (w *lazyRun) confirm(n *shardNode, epoch uint64) {
	if w.shardConf[n.shard].epoch != epoch || !w.isPending(n) {
		return
	}
	w.ask(n, control.ReconfigCommand{Shard: n.shard, Epoch: epoch, Confirm: true, Vouched: n.name})
}

// ask sends n's reconfiguration to the ordering leader, which proposes it
// through Raft; at most once every lazyDetectAfter (a lost request or
// proposal is asked again).
func (w *lazyRun) ask(n *shardNode, c control.ReconfigCommand) {
	o := w.lead
	if o == nil || (!n.askedAt.IsZero() && w.now.Sub(n.askedAt) < lazyDetectAfter) {
		return
	}
	n.askedAt = w.now
	w.send(n.name, &o.node, func() {
		if o.ctl != nil {
			o.propose(control.Command{Reconfig: &c})
		}
	})
}

// joined is the applied Join of n.
func (w *lazyRun) joined(n *shardNode) {
	conf := w.shardConf[n.shard]
	w.tracef("control: %s rejoins shard %d in epoch %d (pending %v), members %v", n.name, n.shard, conf.epoch, w.isPending(n), conf.members)
	if w.plant == bugLazyJoinerCounts && w.isPending(n) {
		// Counted at once, as if it held everything acknowledged.
		w.planted = true
		if o := w.lead; o != nil && o.ctl != nil {
			o.propose(control.Command{Reconfig: &control.ReconfigCommand{Shard: n.shard, Epoch: conf.epoch, Confirm: true, Vouched: n.name}})
		}
	}
	w.primaryMayDie(n)
}

// primaryMayDie crashes the primary of n's shard a moment after n joined
// or was confirmed, in some seeds, if the shard can take it.
func (w *lazyRun) primaryMayDie(n *shardNode) {
	if !w.f.Crash || !w.faulty() || w.r.IntN(3) != 0 {
		return
	}
	w.after(w.uniform(0, 500*time.Microsecond), func() {
		p := w.primary(n.shard)
		if !w.faulty() || !w.canCrashShard(p) {
			return
		}
		w.tracef("%s: the primary dies as %s rejoins", p.name, n.name)
		w.stats.primaryDeathsOnJoin++
		w.crashShard(p, w.uniform(2*time.Millisecond, 10*time.Millisecond))
	})
}

// rejoined checks, once healed, that every replica is back in its
// shard's configuration and caught up.
func (w *lazyRun) rejoined() {
	for s, conf := range w.shardConf {
		if s == w.lost {
			continue
		}
		if len(conf.members) != len(w.shards[s]) || len(conf.pending) > 0 {
			var out []string
			for _, n := range w.shards[s] {
				if !slices.Contains(conf.members, n.idx) || conf.pending[n.idx] {
					out = append(out, n.name)
				}
			}
			w.errorf("heal: shard %d epoch %d: %v not back (members %v, pending %v)", s, conf.epoch, out, conf.members, conf.pending)
		}
	}
}
