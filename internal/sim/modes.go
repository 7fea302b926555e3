package sim

import (
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/merge"
	"github.com/augur-log/augur/internal/order"
	"github.com/augur-log/augur/internal/spec"
)

// modeRules is what an ordering mode supplies to the simulator: the
// control state a cluster starts from, the ordering leader's policy, each
// shard's behaviour and each subscriber's merger. The world supplies the
// network, the clock, the clients, the faults and the truth. A new mode
// plugs in as one more implementation.
type modeRules interface {
	// state returns the control state of a new cluster.
	state(sc *scenario) *control.State
	// policy returns a fresh leader's policy (at start and after every
	// failover).
	policy(sc *scenario) order.Policy
	// shard returns one shard's behaviour.
	shard(sh *shard) shardRules
	// subscribe gives a subscriber its mode's merger.
	subscribe(sb *sub)
	// servesAfterFailure says a failed shard's durable entries stay
	// readable (their backups serve the streams) rather than voided.
	servesAfterFailure() bool
	// dense says the order has no no-ops.
	dense() bool
}

func rulesOf(m Mode) modeRules {
	if m == Eager {
		return eagerRules{}
	}
	return specRules{}
}

// ---- speculative order ----

type specRules struct{}

func (specRules) state(sc *scenario) *control.State { return control.NewSpec("sim", sc.windowCuts) }

func (specRules) policy(sc *scenario) order.Policy { return order.NewSpec(sc.cfg) }

func (specRules) shard(sh *shard) shardRules {
	s := sh.s
	return &specShard{sh: sh, adh: spec.NewShard(sh.id, 0, s.sc.fillAfter, s.sc.interval*time.Duration(s.sc.windowCuts), s.now), filled: map[uint64]bool{}}
}

// subscribe: a speculative subscriber runs the client's speculative
// merger (spec.StreamMerger) over the shards' streams and status polls.
func (specRules) subscribe(sb *sub) {
	sb.em = spec.NewStreamMerger(sb.from, sb.confirmedOnly, sb.oneShard)
}

func (specRules) servesAfterFailure() bool { return false }

func (specRules) dense() bool { return false }

// specShard is a storage server's speculative step around spec.Shard:
// fill no-ops when due, report at quota boundaries, stream what is
// durable and predictable, fill a failed shard's slots when chosen.
type specShard struct {
	sh  *shard
	adh *spec.Shard
	// sent is the next own entry to stream; filled the views whose void
	// slots went out.
	sent      uint64
	filled    map[uint64]bool
	fillArmed bool
	fillAt    time.Time
}

func (x *specShard) onState(ev control.Event, snap *control.State) {
	sh, s := x.sh, x.sh.s
	x.adh.SetWindows(snap.Spec.Windows)
	for _, v := range snap.Spec.Void {
		if v.View > sh.view {
			// A stream carries every view change before the slots it
			// voids, as a storage server's does: a shard that
			// registered after failures, and adopted their slots,
			// announces them first.
			sh.view = v.View
			vc := &viewMsg{view: v.View, cgp: v.ConfirmedGP, failed: v.Shard}
			sh.broadcast(func(m *subMsg) { m.views = append(m.views, vc) })
		}
		if v.Filler != sh.id || x.filled[v.View] {
			continue
		}
		x.filled[v.View] = true
		// The void lists the slots: the windows that located them may be
		// gone from the state by the time a later failure hands them to a
		// new filler.
		var items []spec.Item[int64]
		for _, rg := range v.Slots {
			items = append(items, spec.Item[int64]{Pos: rg.Start, Shard: sh.id, Skip: rg.Count})
		}
		s.tracef("shard %d fills the slots of shard %d: %d runs", sh.id, v.Shard, len(items))
		sh.stream(items)
	}
	if ev.Cut != nil {
		end := snap.LastCut.End
		sh.broadcast(func(m *subMsg) { m.confirm = max(m.confirm, end) })
	}
	sh.knownCut = snap.LastCut
	x.poke()
}

func (x *specShard) stored() {
	x.adh.Stored(uint64(len(x.sh.log)), x.sh.records, x.sh.s.now)
}

func (x *specShard) durable() {
	x.adh.Durable(x.sh.durable)
	x.poke()
}

func (x *specShard) lagFix(target uint64) {
	sh := x.sh
	if !sh.alive || sh.finalized {
		return
	}
	n := x.adh.LagFix(target)
	sh.s.tracef("shard %d: lag-fix to %d: %d no-ops (stored %d)", sh.id, target, n, len(sh.log))
	sh.appendNoops(n)
	x.poke()
}

// poke is the storage server's speculative step: fill no-ops when due,
// report at a quota boundary, stream what became durable and predictable,
// arm the fill timer.
func (x *specShard) poke() {
	sh, s := x.sh, x.sh.s
	if !sh.alive || sh.finalized {
		return
	}
	if n := x.adh.Fill(s.now); n > 0 {
		sh.appendNoops(n)
	}
	if l, ok := x.adh.Report(s.now); ok {
		sh.lastReport, sh.lastRecords = l, x.adh.Records()
		sh.sendReport()
	}
	x.streamDurable()
	if at, ok := x.adh.FillAt(); ok {
		if at.Before(s.now) {
			at = s.now
		}
		if !x.fillArmed || at.Before(x.fillAt) {
			x.fillArmed, x.fillAt = true, at
			s.at(at, func() {
				if x.fillArmed && x.fillAt.Equal(at) {
					x.fillArmed = false
					x.poke()
				}
			})
		}
	}
}

// streamDurable sends every durable entry whose position is predictable:
// records as themselves, no-ops as skips.
func (x *specShard) streamDurable() {
	sh := x.sh
	var items []spec.Item[int64]
	for x.sent < sh.durable {
		pos, ok := x.adh.Predict(x.sent)
		if !ok {
			if x.sent < sh.knownCut.Len(sh.id) {
				sh.s.errorf("shard %d: entry %d is ordered but no window predicts it", sh.id, x.sent)
			}
			break
		}
		e := sh.log[x.sent]
		x.sent++
		if e == noop {
			if n := len(items); n > 0 && items[n-1].Skip > 0 && items[n-1].Pos+items[n-1].Skip == pos {
				items[n-1].Skip++
				continue
			}
			items = append(items, spec.Item[int64]{Pos: pos, Shard: sh.id, Skip: 1})
			continue
		}
		items = append(items, spec.Item[int64]{Pos: pos, Shard: sh.id, Rec: e})
	}
	sh.stream(items)
}

// ---- eager order ----

type eagerRules struct{}

func (eagerRules) state(*scenario) *control.State { return control.New("sim") }

func (eagerRules) policy(sc *scenario) order.Policy { return order.NewEager(sc.interval) }

func (eagerRules) shard(sh *shard) shardRules { return &eagerShard{sh: sh} }

// subscribe: an eager subscriber runs the client's eager merger
// (merge.Eager) over the shards' cut batches; it releases only complete
// committed cuts, so every delivery is final.
func (eagerRules) subscribe(sb *sub) {
	sb.confirmedOnly = true
	if sb.oneShard {
		sb.em = merge.NewEagerShard(sb.from)
		return
	}
	sb.em = merge.NewEager(sb.from)
}

// servesAfterFailure: a cut orders only what every replica holds, so a
// failed primary's committed entries stay readable from its backups.
func (eagerRules) servesAfterFailure() bool { return true }

func (eagerRules) dense() bool { return true }

// eagerShard is a Scalog storage server: it reports the length every
// replica holds, and streams each committed cut's share of its log.
type eagerShard struct{ sh *shard }

func (x *eagerShard) onState(ev control.Event, snap *control.State) {
	sh, s := x.sh, x.sh.s
	if ev.Cut == nil {
		return
	}
	c := snap.LastCut
	parts, err := cut.Interleave(sh.knownCut, c)
	if err != nil {
		s.errorf("shard %d: cut %d after %d: %v", sh.id, c.Index, sh.knownCut.Index, err)
		return
	}
	for _, p := range parts {
		if p.Shard != sh.id || p.Count == 0 {
			continue
		}
		// The storage server streams the run the cut gave the shard,
		// as one batch of the cut, once the cut is committed.
		items := make([]spec.Item[int64], 0, p.Count)
		for k := range p.Count {
			local := p.LocalStart + k
			if local >= sh.durable {
				s.errorf("shard %d: cut %d orders entry %d, but only %d are durable", sh.id, c.Index, local, sh.durable)
				return
			}
			items = append(items, spec.Item[int64]{Pos: p.GlobalStart + k, Shard: sh.id, Rec: sh.log[local]})
		}
		items = s.plantInStream(items)
		b := &pb.CutBatch{Cut: c.Index, CutStart: c.Start, CutEnd: c.End, Shard: uint32(sh.id), RunStart: p.GlobalStart, RunCount: p.Count}
		for _, it := range items {
			if it.Skip > 0 {
				continue // only a planted bug drops a record
			}
			b.Records = append(b.Records, &pb.LogEntry{Position: it.Pos, Shard: uint32(sh.id), Record: s.pbRecord(it.Rec)})
		}
		sh.streamBatch(b)
	}
}

func (x *eagerShard) stored() {}

// durable reports the new durable length at once, as the eager storage
// server's report loop does.
func (x *eagerShard) durable() {
	sh := x.sh
	if !sh.alive || sh.finalized {
		return
	}
	sh.lastReport, sh.lastRecords = sh.durable, sh.records
	sh.sendReport()
}

func (x *eagerShard) lagFix(uint64) {}
