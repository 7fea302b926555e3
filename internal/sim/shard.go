package sim

import (
	"slices"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/order"
	"github.com/augur-log/augur/internal/spec"
)

// shard is one shard's storage: a log of records and no-ops that becomes
// durable after a replication delay, the report and heartbeat streams to
// the leader, and a subscription stream to every subscriber. What it
// reports, when it fills and what it streams is its mode's (shardRules).
type shard struct {
	s     *cluster
	id    cut.ShardID
	name  string
	rules shardRules
	// log holds record ids and no-ops; durable is how much every replica
	// holds.
	log     []int64
	records uint64
	durable uint64

	flushPending bool
	durableAt    time.Time

	alive, accepting, leaving, finalized bool

	knownCut cut.Cut // the last cut the shard heard of
	hist     []spec.Item[int64]
	streams  []*stream
	report   link
	// lastReport is the last length reported, with the records then.
	lastReport, lastRecords uint64
	reported                bool
	// straggle delays reports by extra while now is in [from, until).
	straggleFrom, straggleUntil time.Time
	straggleExtra               time.Duration
	// partitionedUntil is when the shard's partition from the leader
	// heals.
	partitionedUntil time.Time
	// view is the last view the shard heard of.
	view uint64
}

// shardRules is a mode's shard behaviour: what a storage server of that
// mode reports, fills and streams.
type shardRules interface {
	// onState takes an applied control change the shard heard of on its
	// watch stream, in commit order.
	onState(ev control.Event, snap *control.State)
	// stored says the log grew (records or no-ops).
	stored()
	// durable says every replica now holds the log up to sh.durable.
	durable()
	// lagFix takes a lag-fix from the leader.
	lagFix(target uint64)
}

// stream is a subscription stream: a link and the message being filled.
type stream struct {
	link
	pending *subMsg
}

// hist bounds: a stream that reconnects repeats part of what it sent.
const (
	histMax  = 4096
	histKeep = 64
	// repeatMax bounds how many items a reconnected stream repeats.
	repeatMax = 40
)

func (s *cluster) addShard(id cut.ShardID, name string, quota uint64, snap *control.State) {
	sh := &shard{s: s, id: id, name: name, alive: true, accepting: true, knownCut: snap.LastCut}
	sh.rules = s.rules.shard(sh)
	for range s.subs {
		sh.streams = append(sh.streams, &stream{})
	}
	s.shards[id] = sh
	s.order = append(s.order, sh)
	slices.SortFunc(s.order, func(a, b *shard) int { return int(a.id) - int(b.id) })
	s.tracef("shard %d registered (quota %d)", id, quota)
	sh.onState(control.Event{}, snap)
	sh.heartbeat()
}

// onState is a storage server hearing of an applied change: a view change
// goes to every subscriber first, then what the mode makes of it.
func (sh *shard) onState(ev control.Event, snap *control.State) {
	if !sh.alive && !sh.s.rules.servesAfterFailure() {
		return
	}
	if v := ev.View; v != nil {
		sh.view = max(sh.view, v.View)
	}
	if v := ev.View; v != nil && sh.alive {
		vc := &viewMsg{view: v.View, cgp: v.ConfirmedGP, failed: v.Void.Shard}
		sh.broadcast(func(m *subMsg) { m.views = append(m.views, vc) })
	}
	if row := snap.Shard(sh.id); row != nil && row.State == control.Finalized {
		sh.finalized = true
	}
	sh.rules.onState(ev, snap)
	sh.knownCut = snap.LastCut
}

// sendReport sends the last report to the leader, late while straggling,
// lost while cut off.
func (sh *shard) sendReport() {
	s := sh.s
	r := order.Report{Shard: sh.id, Length: sh.lastReport, Records: sh.lastRecords}
	r.Backlog = uint64(len(sh.log)) - min(r.Length, uint64(len(sh.log)))
	if s.partitioned(sh) || (s.faulty() && s.r.Float64() < s.sc.reportLoss) {
		s.stats.lostReports++
		return
	}
	delay := s.netDelay()
	if !s.now.Before(sh.straggleFrom) && s.now.Before(sh.straggleUntil) {
		delay += sh.straggleExtra
	}
	copies := 1
	if s.faulty() && s.r.Float64() < s.sc.reportDup {
		copies = 2 // resent on a reconnected heartbeat stream
	}
	for range copies {
		s.at(sh.report.arrival(s.now, delay), func() { s.ld.onReport(sh, r) })
	}
}

// heartbeat repeats the last report now and then, as a storage server's
// heartbeat does: a new leader learns the lengths from it, and the failure
// detector hears the server is alive.
func (sh *shard) heartbeat() {
	s := sh.s
	s.after(s.sc.heartbeat, func() {
		if !sh.alive || sh.finalized {
			return
		}
		sh.sendReport()
		sh.heartbeat()
	})
}

func (sh *shard) appendRecord(id int64) {
	sh.log = append(sh.log, id)
	sh.records++
	sh.s.stats.records++
	sh.stored()
}

func (sh *shard) appendNoops(n uint64) {
	if n == 0 {
		return
	}
	for range n {
		sh.log = append(sh.log, noop)
	}
	sh.s.stats.noops += n
	sh.s.stats.noopRuns++
	sh.stored()
}

// stored tells the mode the log grew, then replicates it.
func (sh *shard) stored() {
	sh.rules.stored()
	sh.replicate()
}

// replicate makes the log durable after a replication delay, in batches,
// in order.
func (sh *shard) replicate() {
	s := sh.s
	if sh.flushPending {
		return
	}
	sh.flushPending = true
	s.after(s.uniform(5*time.Microsecond, 40*time.Microsecond), func() {
		sh.flushPending = false
		if !sh.alive {
			return
		}
		target := uint64(len(sh.log))
		at := s.now.Add(s.uniform(60*time.Microsecond, 300*time.Microsecond))
		if at.Before(sh.durableAt) {
			at = sh.durableAt
		}
		sh.durableAt = at
		s.at(at, func() {
			if !sh.alive || target <= sh.durable {
				return
			}
			sh.durable = target
			sh.rules.durable()
		})
	})
}

// stream sends items to every subscriber; now and then a stream
// reconnects and repeats a stretch of what it sent before.
func (sh *shard) stream(items []spec.Item[int64]) {
	s := sh.s
	if len(items) == 0 {
		return
	}
	items = s.plantInStream(items)
	sh.hist = append(sh.hist, items...)
	if len(sh.hist) > histMax {
		sh.hist = slices.Clone(sh.hist[len(sh.hist)-histKeep:])
	}
	for i := range sh.streams {
		sh.send(i, func(m *subMsg) { m.items = append(m.items, items...) })
		if s.r.Float64() < s.sc.dupProb {
			s.stats.dupResends++
			back := min(len(sh.hist), 1+s.r.IntN(repeatMax))
			rep := slices.Clone(sh.hist[len(sh.hist)-back:])
			sh.send(i, func(m *subMsg) { m.items = append(m.items, rep...) })
		}
	}
}

// streamBatch sends an eager cut batch to every subscriber; now and then a
// stream reconnects and sends it again.
func (sh *shard) streamBatch(b *pb.CutBatch) {
	s := sh.s
	for i := range sh.streams {
		sh.send(i, func(m *subMsg) { m.batches = append(m.batches, b) })
		if s.r.Float64() < s.sc.dupProb {
			s.stats.dupResends++
			sh.send(i, func(m *subMsg) { m.batches = append(m.batches, b) })
		}
	}
}

// send adds to the next message of stream i: the one not yet delivered,
// or a new one. Like a storage server's next response, a message carries
// a view change, then the confirmed end, then entries.
func (sh *shard) send(i int, add func(*subMsg)) {
	s := sh.s
	st := sh.streams[i]
	if st.pending == nil {
		m := &subMsg{shard: sh.id}
		st.pending = m
		sb := s.subs[i]
		s.at(st.arrival(s.now, s.netDelay()), func() {
			if st.pending == m {
				st.pending = nil
			}
			sb.on(m)
		})
	}
	st.pending.view = max(st.pending.view, sh.view)
	add(st.pending)
}

func (sh *shard) broadcast(add func(*subMsg)) {
	for i := range sh.streams {
		sh.send(i, add)
	}
}

// fail stops the whole shard: it takes no appends, reports nothing and
// stops its heartbeats.
func (sh *shard) fail() {
	sh.alive, sh.accepting = false, false
	sh.s.tracef("shard %d fails (stored %d, durable %d)", sh.id, len(sh.log), sh.durable)
}

// plantInStream plants a swap or a drop in items, once.
func (s *cluster) plantInStream(items []spec.Item[int64]) []spec.Item[int64] {
	if s.planted || (s.plant != bugSwap && s.plant != bugDrop) || s.now.Before(s.start.Add(50*time.Millisecond)) {
		return items
	}
	var recs []int
	for i, it := range items {
		if it.Skip == 0 {
			recs = append(recs, i)
		}
	}
	switch {
	case s.plant == bugSwap && len(recs) >= 2:
		items = slices.Clone(items)
		a, b := recs[0], recs[1]
		items[a].Rec, items[b].Rec = items[b].Rec, items[a].Rec
	case s.plant == bugDrop && len(recs) >= 1:
		items = slices.Clone(items)
		items[recs[0]].Rec, items[recs[0]].Skip = 0, 1
	default:
		return items
	}
	s.planted = true
	s.tracef("planted %v in %+v", s.plant, items)
	return items
}
