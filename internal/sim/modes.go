package sim

import (
	"math"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/segment"
	core "github.com/augur-log/augur/internal/shard"
	"github.com/augur-log/augur/internal/spec"
)

// The ordering modes. Every part the servers and the client build per
// mode — the control state, the leader's policy, each primary's ordering,
// each subscriber's merger — comes from mode.Mode, as it does for them.
// What stays here is what only the simulator's stand-in for the storage
// server's subscription feed does differently per mode (streamRules).

// newMode builds the cluster's mode from the scenario's parameters, as
// the servers build it from a cluster file.
func newMode(m Mode, sc *scenario) mode.Mode {
	md, err := mode.Parse(string(m), mode.Params{
		OrderingInterval: sc.interval, FailureTimeout: sc.failureTimeout,
		WindowCuts: sc.windowCuts, StaggerAbove: sc.staggerAbove,
	})
	if err != nil {
		panic("sim: " + err.Error())
	}
	if sp, ok := md.(mode.Spec); ok {
		sp.Config.EagerAbove = sc.eagerAbove
		md = sp
	}
	return md
}

// streamRules is a mode's subscription feed on one shard: what a storage
// server streams to subscribers, and when.
type streamRules interface {
	// onState takes an applied control change the shard heard of on its
	// watch stream, after its copies applied it.
	onState(ev control.Event, snap *control.State, cuts []shardCut)
	// changed says what subscribers may read changed (Output.Changed).
	changed()
	// replay streams what a copy that restarted can serve of cuts it
	// applied again.
	replay(c *copyOf, cuts []shardCut)
}

// shardCut is a committed cut and this shard's part of it.
type shardCut struct {
	c     cut.Cut
	slice cut.Slice
}

func (s *cluster) newStream(sh *shard) streamRules {
	if s.md.Speculative() {
		return &specStream{sh: sh, filled: map[uint64]bool{}}
	}
	return &eagerStream{sh: sh}
}

// servesAfterFailure says a failed shard's ordered entries stay readable
// (its other copies serve the streams) rather than voided: so in eager
// order, where a cut orders only what every replica holds.
func (s *cluster) servesAfterFailure() bool { return !s.md.Speculative() }

// dense says the order has no no-ops.
func (s *cluster) dense() bool { return !s.md.Speculative() }

// ---- speculative order ----

// specStream streams what the primary holds durably as soon as a window
// predicts its position, and a failed shard's slots when chosen to fill
// them.
type specStream struct {
	sh *shard
	// feed is where the shard's own entries stand, as in a storage
	// server's feed; filled the views whose void slots went out.
	feed   spec.Feed
	filled map[uint64]bool
	// confirm decides which cut ends the stream sends, as the storage
	// server's feed does.
	confirm spec.Confirmer
}

func (x *specStream) onState(ev control.Event, snap *control.State, _ []shardCut) {
	sh, s := x.sh, x.sh.s
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
		x.stream(items)
	}
	x.changed()
	if end := snap.LastCut.End; (ev.Cut != nil || len(ev.Cuts) > 0) && x.confirm.Confirm(end) {
		sh.broadcast(func(m *subMsg) { m.confirm = max(m.confirm, end) })
	}
}

// stream streams items and notes how far the stream reached.
func (x *specStream) stream(items []spec.Item[int64]) {
	for _, it := range items {
		x.confirm.Sent(it.Pos, it.Skip)
	}
	x.sh.stream(items)
}

// changed sends every durable entry of the primary whose position its
// ordering predicts or a cut placed, as the storage server's feed does:
// records as themselves, no-ops as skips. Once the shard failed or was
// finalized, its copies that are up serve what cuts placed below its final
// length, as a storage server's copies do whatever their role: entries an
// eager cut between windows ordered, which no prediction streamed before
// the failure, or entries cuts placed while the primary could not stream
// them (a primary that restarted recovers without an ordering). A paused
// primary sends nothing until it runs again.
func (x *specStream) changed() {
	sh := x.sh
	p := sh.primary()
	if !sh.alive || sh.finalized {
		x.servePlaced()
		return
	}
	if !p.running() {
		return
	}
	adh, ok := p.ord.(*core.Speculative)
	if !ok {
		return
	}
	// The entries to send: the durable ones a cut placed or the windows
	// predict (a prefix: eager cuts between windows place the log up to
	// a point, the windows predict it from there).
	predict := func(local uint64) (uint64, bool) {
		if pos, ok := adh.Predict(local); ok {
			return pos, true
		}
		if sh.s.plant == bugGuessBetweenWindows && sh.eager && local >= sh.knownCut.Len(sh.id) {
			sh.s.planted = true
			return sh.knownCut.End + local - sh.knownCut.Len(sh.id), true
		}
		return 0, false
	}
	if !x.send(p, predict, spec.FeedLimit(true, p.r.Durable(), p.log.Ordered(), false, 0)) {
		sh.s.errorf("shard %d: the primary's log lacks entries from %d on, which it holds durably", sh.id, x.feed.Next)
	}
}

// servePlaced streams, from a copy of a failed shard that is up, the
// entries cuts placed that were not streamed yet, up to the shard's final
// length (or its length in the last cut it knows, until it knows it is
// final): past the final length a view change voided the slots.
func (x *specStream) servePlaced() {
	sh := x.sh
	for _, c := range sh.copies {
		// A copy that cannot read them all (damaged) serves none; a
		// lost one (it cannot follow later cuts, such as those giving
		// the failed shard's void slots) still serves what it ordered.
		limit := min(sh.knownCut.Len(sh.id), spec.FeedLimit(false, 0, c.log.Ordered(), sh.finalized, sh.finalLen))
		if c.running() && c.log.Ordered() > x.feed.Next && x.send(c, nil, limit) {
			return
		}
	}
}

// send streams c's entries from the feed on, below limit, at the positions
// a cut gave them or predict gives them, as far as they have one; false if
// c's log cannot read them.
func (x *specStream) send(c *copyOf, predict func(uint64) (uint64, bool), limit uint64) bool {
	sh := x.sh
	var items []spec.Item[int64]
	at := x.feed
	err := at.Send(c.log, predict, limit, math.MaxInt, func(pos uint64, e segment.Entry) {
		if e.Noops == 0 {
			items = append(items, spec.Item[int64]{Pos: pos, Shard: sh.id, Rec: int64(e.Seq) - 1})
			return
		}
		if n := len(items); n > 0 && items[n-1].Skip > 0 && items[n-1].Pos+items[n-1].Skip == pos {
			items[n-1].Skip++
			return
		}
		items = append(items, spec.Item[int64]{Pos: pos, Shard: sh.id, Skip: 1})
	})
	if err != nil {
		return false
	}
	// A copy that applied the cut that ordered the next entry places it;
	// one behind (restarted, caught up) streams it once it applies that
	// cut.
	if next := at.Next; next < limit && next < sh.knownCut.Len(sh.id) && next < c.log.Ordered() {
		sh.s.errorf("shard %d: entry %d is ordered but neither its cut nor a window places it", sh.id, next)
	}
	x.feed = at
	x.stream(items)
	return true
}

// replay: a speculative shard whose copy crashed has failed, and a failed
// shard's streams stop (its positions past the void point are voided).
func (x *specStream) replay(*copyOf, []shardCut) {}

// ---- eager order ----

// eagerStream streams each committed cut's share of the shard's log, as
// one batch of the cut, from a copy that applied the cut.
type eagerStream struct{ sh *shard }

func (x *eagerStream) onState(_ control.Event, _ *control.State, cuts []shardCut) {
	for _, sc := range cuts {
		x.serve(sc, nil)
	}
}

func (x *eagerStream) changed() {}

func (x *eagerStream) replay(c *copyOf, cuts []shardCut) {
	for _, sc := range cuts {
		x.serve(sc, c)
	}
}

// serve streams one cut's batch, read from copy from, or from the first
// copy that is up, not lost and ordered it. No copy holding it sends
// nothing: subscribers wait for a copy that restarts with it.
func (x *eagerStream) serve(sc shardCut, from *copyOf) {
	sh, s := x.sh, x.sh.s
	p := sc.slice
	if p.Count == 0 {
		return
	}
	var ids []int64
	for _, c := range sh.copies {
		if from != nil && c != from {
			continue
		}
		if !c.up || c.r.Lost() || c.log.Ordered() < p.LocalStart+p.Count {
			continue
		}
		// A copy that cannot read all of it (damaged) serves none of it.
		if got, ok := readIDs(c.log, p.LocalStart, p.LocalStart+p.Count); ok {
			ids = got
			break
		}
	}
	if ids == nil {
		s.tracef("shard %d: no copy serves cut %d's local [%d, %d)", sh.id, sc.c.Index, p.LocalStart, p.LocalStart+p.Count)
		return
	}
	items := make([]spec.Item[int64], 0, p.Count)
	for k, e := range ids {
		items = append(items, spec.Item[int64]{Pos: p.GlobalStart + uint64(k), Shard: sh.id, Rec: e})
	}
	items = s.plantInStream(items)
	c := sc.c
	b := &pb.CutBatch{Cut: c.Index, CutStart: c.Start, CutEnd: c.End, Shard: uint32(sh.id), RunStart: p.GlobalStart, RunCount: p.Count}
	for _, it := range items {
		if it.Skip > 0 || it.Rec == noop {
			continue // only a planted bug drops a record
		}
		b.Records = append(b.Records, &pb.LogEntry{Position: it.Pos, Shard: uint32(sh.id), Record: s.pbRecord(it.Rec)})
	}
	sh.streamBatch(b)
}
