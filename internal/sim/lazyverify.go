package sim

import (
	"errors"
	"fmt"
	"slices"

	"github.com/augur-log/augur/internal/check"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
)

// verify checks a finished lazy run: the final log every shard replica
// holds below the stable end agrees across replicas and readers, holds
// every acknowledged append exactly once, in real-time order, and every
// read returned what it holds.
func (w *lazyRun) verify() {
	if len(w.errs) > 0 {
		return
	}
	report := func(err error) {
		if vs, ok := err.(check.Violations); ok {
			for _, v := range vs {
				w.errorf("%v", v)
			}
		} else if err != nil {
			w.errorf("%v", err)
		}
	}
	// The stable end every replica of the shards' configurations serves
	// (one taken out keeps the end it had, and is checked up to it).
	end := w.stableEnd()
	w.verifyLiveness(end)
	var logs []check.Log
	final := check.Log{Reader: "final", End: end}
	// A shard whose every replica died for good took its records with it:
	// the logs say nothing of its positions.
	var kept []uint32
	if w.lost >= 0 {
		for s := range w.shards {
			if s != w.lost {
				kept = append(kept, uint32(s))
			}
		}
		final.Shards = kept
	}
	where := map[string]uint64{}
	for s, sh := range w.shards {
		for _, n := range sh {
			if n.gone {
				// Died for good with its shard: nothing left to check.
				continue
			}
			nEnd := min(end, n.core.Readable())
			l := check.Log{Reader: n.name, End: nEnd, Shards: []uint32{uint32(s)}}
			for pos := range nEnd {
				var out lazy.ShardOutput[int]
				err := n.core.Read(-1, pos, &out)
				if errors.Is(err, lazy.ErrTrimmed) && w.sc.shards <= s {
					// A shard added mid-run holds the table from its
					// first batch on.
					continue
				}
				if err != nil || len(out.Reads) != 1 {
					w.errorf("%s: position %d below the stable end %d unreadable: %v", n.name, pos, end, err)
					return
				}
				a := out.Reads[0]
				if a.Shard != n.shard || a.Noop {
					continue
				}
				rec, ok := n.recordAt(a.Local)
				if !ok {
					w.errorf("%s: position %d at local %d beyond its log", n.name, pos, a.Local)
					return
				}
				r := w.recs[rec]
				e := check.Entry{Pos: pos, Shard: r.shard, Record: r.name}
				l.Entries = append(l.Entries, e)
				if n == w.primary(cut.ShardID(s)) {
					final.Entries = append(final.Entries, e)
					if _, dup := where[r.name]; !dup {
						where[r.name] = pos
					}
				}
			}
			logs = append(logs, l)
		}
	}
	// Every replica names the same shard for every position.
	for pos := range end {
		var owner uint32
		seen := false
		for _, n := range w.allShardNodes() {
			var out lazy.ShardOutput[int]
			if n.gone || pos >= n.core.Readable() {
				continue
			}
			if err := n.core.Read(-1, pos, &out); err != nil {
				continue
			}
			if !seen {
				owner, seen = out.Reads[0].Shard, true
			} else if out.Reads[0].Shard != owner {
				w.errorf("invariant 2: position %d: %s says shard %d, another replica shard %d", pos, n.name, out.Reads[0].Shard, owner)
				return
			}
		}
	}
	sortEntries(final.Entries)
	var appends []check.Append
	for _, r := range w.recs {
		a := check.Append{Client: r.id.Client, Seq: r.id.Seq, Record: r.name, Call: r.call, Return: r.ret, Shard: r.shard}
		if r.acked && int(r.shard) == w.lost {
			// Lost with its shard (every replica died for good): beyond
			// the fault budget, as in every mode.
			w.stats.lostAcked++
		} else if r.acked {
			a.Outcome = check.Acked
			pos, ok := where[r.name]
			if !ok {
				w.errorf("invariant 1: acknowledged %v is not in the log below the stable end %d", a, end)
				continue
			}
			a.Position = pos
		} else {
			w.stats.unknown++
		}
		appends = append(appends, a)
	}
	for _, rd := range w.readers {
		l := check.LogOf(rd.name, 0, false, rd.entries)
		l.Shards = kept
		logs = append(logs, l)
	}
	logs = append(logs, final)
	report(check.Order(appends, logs...))
	report(check.StoredOnce(appends, logs...))
	report(check.Acknowledged(appends, final))
	report(check.RealTime(appends))
	// Positions below stable-gp never change: every read of one, at any
	// time in the run, returned what the final log holds.
	var readable []check.Read
	for _, r := range w.reads {
		if r.Pos < end && int(w.recs[w.byName(r.Record)].shard) != w.lost {
			readable = append(readable, r)
		}
	}
	report(check.Reads(readable, final))
	fi := map[uint64]string{}
	for _, e := range final.Entries {
		fi[e.Pos] = e.Record
	}
	for _, r := range w.noopRd {
		if rec, ok := fi[r.Pos]; ok && r.Pos < end && w.lost < 0 {
			w.errorf("invariant 2: a read of position %d returned a no-op, but the log has %q there", r.Pos, rec)
		}
	}
}

// byName returns the index of the record named name.
func (w *lazyRun) byName(name string) int {
	var c, q uint64
	fmt.Sscanf(name, "c%d.%d", &c, &q)
	return w.byID[lazy.RecordID{Client: c, Seq: q}]
}

// stableEnd is the stable end every replica of the live shards'
// configurations serves.
func (w *lazyRun) stableEnd() uint64 {
	end := ^uint64(0)
	for s := range w.shards {
		for _, n := range w.members(cut.ShardID(s)) {
			// A shard added after the last batch has no table yet (had
			// the orderer waited for it, the other shards would show).
			if n.core != nil && !(s >= w.sc.shards && n.core.PlacedEnd() == 0) {
				end = min(end, n.core.Readable())
			}
		}
	}
	return end
}

// verifyLiveness checks that the order went on once a shard whose every
// replica died was finalized: if appends to the other shards were made
// since, stable-gp advanced past where it stood (and invariant 1 says
// that every one acknowledged is ordered).
func (w *lazyRun) verifyLiveness(end uint64) {
	if w.lost < 0 {
		return
	}
	if w.finalizedAt == 0 {
		w.errorf("liveness: every replica of shard %d died, and the control state never finalized it", w.lost)
		return
	}
	after := 0
	for _, r := range w.recs {
		if int(r.shard) != w.lost && r.call > w.finalizedAt {
			after++
		}
	}
	if after > 0 && end <= w.endAt {
		w.errorf("liveness: shard %d was finalized at %v with stable end %d; %d appends to other shards were made since, and the stable end is still %d",
			w.lost, w.finalizedAt, w.endAt, after, end)
	}
}

func (w *lazyRun) allShardNodes() []*shardNode {
	var ns []*shardNode
	for _, sh := range w.shards {
		ns = append(ns, sh...)
	}
	return ns
}

func sortEntries(es []check.Entry) {
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].Pos < es[j-1].Pos; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

func (w *lazyRun) summary() string {
	st := w.stats
	return fmt.Sprintf("%d steps, %d appends (%d acknowledged, %d unknown, %d duplicates stored once), %d batches, %d views, %d no-ops, %d orphans scrubbed; "+
		"%d sequencing crashes (%d leaders), %d shard replica crashes (%d primaries failed over), %d client crashes, %d ordering replica crashes, %d ordering leaders cut off; %d fast reads, %d slow (%d timed out); %d appends pushed back by a full ring; %d messages lost; %d shards added; %d acknowledged appends lost with a shard whose every replica died",
		w.steps, len(w.recs), st.acked, st.unknown, st.dups, st.batches, st.views, st.noops, st.scrubbed,
		st.seqCrashes, st.leaderCrashes, st.shardCrashes, st.failovers, st.clientCr, st.ordCrashes, st.ordPartitions, st.fastReads, st.slowReads, st.readTimeouts, st.ringFull, st.lost,
		st.added, st.lostAcked)
}

// runLazy runs one seed of lazy order.
func runLazy(seed uint64, o Options) Result {
	w := newLazyRun(seed, o.Faults, replicasOf(seed, o), o.Trace, o.plant)
	w.run(w.start.Add(w.sc.runFor))
	if w.heal() {
		w.verify()
		w.healedView()
		w.rejoined()
	}
	return Result{
		Seed: seed, Mode: Lazy, Faults: o.Faults, Scenario: w.sc.String(), Summary: w.summary(), Errs: w.errs, Steps: w.steps,
		Crashes: w.stats.shardCrashes, SeqCrashes: w.stats.seqCrashes, LeaderCrashes: w.stats.leaderCrashes,
		ClientCrashes: w.stats.clientCr, Views: w.stats.views, RaftCrashes: w.stats.ordCrashes, CutOffLeaders: w.stats.ordPartitions, Noops: w.stats.noops, RingFull: w.stats.ringFull, Failovers: w.stats.failovers, planted: w.planted,
		Replicas: w.replicas, Rejoins: w.stats.rejoins, SourceDeaths: w.stats.sourceDeaths, PrimaryDeathsOnJoin: w.stats.primaryDeathsOnJoin,
		ShardsAdded: w.stats.added, ShardFailed: w.lost >= 0,
	}
}

// heal checks the run healed: once the faults stopped, every process is
// up again, so that its state can be checked.
func (w *lazyRun) heal() bool {
	if len(w.errs) > 0 {
		return false
	}
	for _, q := range w.seqs {
		if !q.up {
			w.errorf("heal: %s never came back", q.name)
			return false
		}
	}
	for _, n := range w.allShardNodes() {
		if !n.up && !n.gone {
			w.errorf("heal: %s never came back", n.name)
			return false
		}
	}
	return true
}

// healedView checks the sequencing layer healed: no control plane is in a
// view change, and every replica runs the recorded view.
func (w *lazyRun) healedView() {
	cfg := w.truth.Lazy
	if cfg == nil {
		w.errorf("heal: no view was ever recorded")
		return
	}
	for _, o := range w.ords {
		if o.ctl != nil && o.ctl.Changing() {
			w.errorf("heal: %s is still changing the view (recorded %+v, claimed %+v)", o.name, *cfg, w.truth.LazyClaim)
		}
	}
	for _, q := range w.seqs {
		switch v, sealed := q.core.View(); {
		case v > cfg.View:
			w.errorf("heal: %s runs view %d, which the control state never recorded (it recorded view %d of %v)", q.name, v, cfg.View, cfg.Replicas)
		case v != cfg.View || sealed || !slices.Contains(cfg.Replicas, q.id):
			w.errorf("heal: %s in view %d (sealed %v), the recorded view is %d of %v", q.name, v, sealed, cfg.View, cfg.Replicas)
		}
	}
}
