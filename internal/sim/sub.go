package sim

// The subscribers: a mode's merger each, fed by every shard's stream, and
// a consumer that records every event for the checkers of package check
// and checks on the spot what only the speculative protocol's views can
// say.

import (
	"slices"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/check"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/merge"
	"github.com/augur-log/augur/internal/spec"
)

// subMsg is one message of a shard's subscription stream: view changes,
// the confirmed end (0: none), then entries, applied in that order (the
// confirmed end was already true when the entries were sent).
// A shard's later entries may never precede a view change it announced;
// entries it sent before one are valid in the new view too (a live
// shard's positions do not change), so they may follow it.
type subMsg struct {
	shard cut.ShardID
	// view is the view the shard was in when it sent the message.
	view    uint64
	views   []*viewMsg
	items   []spec.Item[int64]
	confirm uint64
	// status says the message is a status poll, not a stream's.
	status bool
	// batches are an eager stream's cut batches.
	batches []*pb.CutBatch
}

type viewMsg struct {
	view, cgp uint64
	failed    cut.ShardID
}

// statusPollDelay is how late a one-shard subscriber learns of a view
// change from the cluster status rather than from its shard's stream.
const statusPollDelay = 20 * time.Millisecond

type sub struct {
	s  *cluster
	id int
	// em is the client's merger of the mode: merge.Eager, or
	// spec.StreamMerger around spec.Merger.
	em            merge.Merger
	confirmedOnly bool
	from          uint64
	// oneShard subscribers follow only shard's stream: they check only
	// that shard's positions.
	oneShard bool
	shard    cut.ShardID

	// cur is what the consumer holds now, by position (noop where nothing
	// was delivered).
	cur []int64
	// events is the consumer's history for package check.
	events []check.SubEvent
	// at is when each delivery came, by event index, for the statistics.
	at []time.Time
	// view is the last view the consumer heard of.
	view uint64
	// mustFail is set when a view change voided deliveries: the next event
	// must be Fail at failAt.
	mustFail bool
	failAt   uint64
	fails    int
}

// init gives the subscriber its mode's merger, as the client builds it.
// An eager merger releases only complete committed cuts, so every
// delivery is final.
func (sb *sub) init() {
	if !sb.s.md.Speculative() {
		sb.confirmedOnly = true
	}
	sb.em = sb.s.md.NewMerger(sb.from, sb.confirmedOnly, sb.oneShard)
}

// mine reports whether position p is one this subscriber delivers.
func (sb *sub) mine(p uint64) bool {
	return !sb.oneShard || p >= uint64(len(sb.s.eagerShard)) || sb.s.eagerShard[p] == sb.shard
}

func (sb *sub) on(m *subMsg) {
	if sb.oneShard && m.shard != sb.shard {
		return
	}
	if !sb.s.md.Speculative() {
		sb.onEager(m)
		return
	}
	sb.onSpec(m)
}

// onSpec runs a speculative stream message, or a status poll, through the
// client's speculative merger as the wire carries it: each view change in
// a response of its own, then the confirmed end and the entries.
func (sb *sub) onSpec(m *subMsg) {
	s := sb.s
	for i, v := range m.views {
		if v.view <= sb.view {
			continue
		}
		sb.newView(v, m.shard)
		vc := &pb.ViewChange{View: v.view, ConfirmedGp: v.cgp, FailedShard: uint32(v.failed)}
		if m.status {
			st := &pb.StatusResponse{Spec: &pb.SpecState{}}
			for _, w := range m.views[:i+1] {
				st.Spec.Void = append(st.Spec.Void, &pb.ViewChange{View: w.view, ConfirmedGp: w.cgp, FailedShard: uint32(w.failed)})
			}
			sb.em.Observe(st)
		} else {
			sb.step(m.shard, &pb.SubscribeResponse{ViewChange: vc, View: v.view})
		}
		sb.consume()
		if sb.mustFail {
			s.errorf("sub %d: delivered past confirmed-gp %d but got no Fail on the view change", sb.id, sb.failAt)
			sb.mustFail = false
		}
	}
	if m.status {
		sb.em.Observe(&pb.StatusResponse{Tail: m.confirm, Spec: &pb.SpecState{}})
		sb.consume()
		return
	}
	r := &pb.SubscribeResponse{Confirmed: m.confirm, View: m.view}
	for _, it := range m.items {
		e := &pb.SpecEntry{Position: it.Pos, Shard: uint32(it.Shard), Skip: it.Skip}
		if it.Skip == 0 {
			e.Record = s.pbRecord(it.Rec)
		}
		r.Entries = append(r.Entries, e)
	}
	sb.step(m.shard, r)
	sb.consume()
}

// newView notes a view change the consumer is about to hear: anything it
// holds at or after confirmed-gp must fail.
func (sb *sub) newView(v *viewMsg, from cut.ShardID) {
	sb.view = v.view
	for p := v.cgp; p < uint64(len(sb.cur)); p++ {
		if sb.cur[p] != noop {
			sb.mustFail, sb.failAt = true, v.cgp
			break
		}
	}
	sb.s.tracef("sub %d: view %d from shard %d (cgp %d, failed %d), must fail %v", sb.id, v.view, from, v.cgp, v.failed, sb.mustFail)
}

func (sb *sub) step(shard cut.ShardID, r *pb.SubscribeResponse) {
	if err := sb.em.Step(uint32(shard), r); err != nil {
		sb.s.errorf("sub %d: stream of shard %d: %v", sb.id, shard, err)
	}
}

// onEager runs an eager stream message through the client's eager
// merger. Every delivery is final, and each release of a cut moves the
// end below which the consumer holds the final order: a Confirm in the
// history.
func (sb *sub) onEager(m *subMsg) {
	if len(m.batches) == 0 {
		return // the status says nothing an eager stream does not
	}
	sb.step(m.shard, &pb.SubscribeResponse{Batches: m.batches})
	sb.consume()
	if end := sb.em.Resume(); end > max(sb.from, sb.confirmedEnd()) {
		sb.record(check.SubEvent{Kind: check.Confirm, Pos: end})
	}
}

func (sb *sub) consume() {
	s := sb.s
	for {
		ev, ok := sb.em.Next()
		if !ok {
			return
		}
		if sb.mustFail {
			if ev.Kind != merge.EventFail || ev.Pos != sb.failAt {
				s.errorf("sub %d: after a view change %v at %d, want fail at %d", sb.id, ev.Kind, ev.Pos, sb.failAt)
			}
			sb.mustFail = false
		}
		switch ev.Kind {
		case merge.EventDeliver:
			sb.deliver(ev)
		case merge.EventConfirm:
			sb.confirm(ev.Pos)
		case merge.EventFail:
			sb.fail(ev)
		}
	}
}

func (sb *sub) deliver(ev merge.Event) {
	s := sb.s
	p, rec := ev.Pos, recordID(ev.Rec.GetKey())
	if ev.View > uint64(len(s.views)) {
		s.errorf("sub %d: delivery in view %d while the cluster is in view %d", sb.id, ev.View, len(s.views))
	}
	if !sb.mine(p) && p < uint64(len(s.eager)) {
		s.errorf("sub %d: delivered %d at %d, which shard %d holds", sb.id, rec, p, s.eagerShard[p])
	}
	for uint64(len(sb.cur)) <= p {
		sb.cur = append(sb.cur, noop)
	}
	sb.cur[p] = rec
	sb.record(check.SubEvent{Kind: check.Deliver, Pos: p, Shard: ev.Shard, Record: s.name(rec), Speculative: ev.Speculative})
	s.stats.delivered++
	if ev.Speculative {
		s.stats.specDeliveries++
	}
}

func (sb *sub) record(ev check.SubEvent) {
	sb.events = append(sb.events, ev)
	sb.at = append(sb.at, sb.s.now)
}

func (sb *sub) confirm(k uint64) {
	if k > sb.em.Resume() && !sb.oneShard {
		sb.s.errorf("sub %d: confirm %d beyond what it delivered (%d)", sb.id, k, sb.em.Resume())
	}
	sb.record(check.SubEvent{Kind: check.Confirm, Pos: k})
	if s := sb.s; s.plant == bugRevise && !s.planted && k > sb.from+1 && !sb.oneShard && !sb.confirmedOnly {
		s.planted = true
		sb.record(check.SubEvent{Kind: check.Fail, Pos: k - 1})
	}
}

func (sb *sub) fail(ev merge.Event) {
	s := sb.s
	k := ev.Pos
	sb.fails++
	s.stats.fails++
	if ev.View == 0 || ev.View > uint64(len(s.views)) || s.views[ev.View-1].ConfirmedGP != k {
		s.errorf("sub %d: fail %d in view %d, which is not that view's confirmed-gp", sb.id, k, ev.View)
	}
	for p := k; p < uint64(len(sb.cur)); p++ {
		sb.cur[p] = noop
	}
	sb.record(check.SubEvent{Kind: check.Fail, Pos: k})
}

// confirmedEnd returns the last confirmed end the consumer saw.
func (sb *sub) confirmedEnd() uint64 {
	for i := len(sb.events) - 1; i >= 0; i-- {
		if sb.events[i].Kind == check.Confirm {
			return sb.events[i].Pos
		}
	}
	return 0
}

// history returns the subscription's history for package check.
func (sb *sub) history() check.Subscription {
	h := check.Subscription{Name: sb.name(), From: sb.from, ConfirmedOnly: sb.confirmedOnly, Events: sb.events}
	if sb.oneShard {
		h.Shards = []uint32{uint32(sb.shard)}
	}
	return h
}

func (sb *sub) name() string {
	if sb.oneShard {
		return "sub " + itoa(sb.id) + " (shard " + itoa(int(sb.shard)) + ")"
	}
	return "sub " + itoa(sb.id)
}

// log returns what the consumer holds below end at the end of the run.
func (sb *sub) log(end uint64) check.Log {
	s := sb.s
	l := check.Log{Reader: sb.name(), From: min(sb.from, end), End: end}
	if sb.oneShard {
		l.Shards = []uint32{uint32(sb.shard)}
	}
	for p := l.From; p < min(end, uint64(len(sb.cur))); p++ {
		if e := sb.cur[p]; e != noop {
			l.Entries = append(l.Entries, check.Entry{Pos: p, Shard: uint32(s.eagerShard[p]), Record: s.name(e)})
		}
	}
	return l
}

// specLead adds up, over the confirmed speculative deliveries no Fail
// voided, how long before its confirmation each came.
func (sb *sub) specLead() (sum time.Duration, n uint64) {
	type confirmAt struct {
		end uint64
		at  time.Time
	}
	var confirms []confirmAt
	for i, ev := range sb.events {
		if ev.Kind == check.Confirm {
			confirms = append(confirms, confirmAt{ev.Pos, sb.at[i]})
		}
	}
	for i, ev := range sb.events {
		if ev.Kind != check.Deliver || !ev.Speculative {
			continue
		}
		j, _ := slices.BinarySearchFunc(confirms, ev.Pos, func(c confirmAt, p uint64) int {
			if c.end <= p {
				return -1
			}
			return 1
		})
		if j < len(confirms) && !confirms[j].at.Before(sb.at[i]) {
			sum += confirms[j].at.Sub(sb.at[i])
			n++
		}
	}
	return sum, n
}
