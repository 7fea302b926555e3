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
	shard   cut.ShardID
	views   []*viewMsg
	items   []spec.Item[int64]
	confirm uint64
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
	// m is a speculative subscriber's merger, em an eager one's.
	m             *spec.Merger[int64]
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
	// mustFail is set when a view change voided deliveries: the next event
	// must be Fail at failAt.
	mustFail bool
	failAt   uint64
	fails    int
}

func (sb *sub) init() { sb.s.rules.subscribe(sb) }

// mine reports whether position p is one this subscriber delivers.
func (sb *sub) mine(p uint64) bool {
	return !sb.oneShard || p >= uint64(len(sb.s.eagerShard)) || sb.s.eagerShard[p] == sb.shard
}

func (sb *sub) on(m *subMsg) {
	s := sb.s
	if sb.oneShard && m.shard != sb.shard {
		return
	}
	if sb.em != nil {
		sb.onEager(m)
		return
	}
	for _, v := range m.views {
		before := sb.m.View()
		sb.m.ViewChange(v.view, v.cgp, v.failed)
		if sb.m.View() != before {
			// Anything delivered at or after confirmed-gp must fail.
			for p := v.cgp; p < uint64(len(sb.cur)); p++ {
				if sb.cur[p] != noop {
					sb.mustFail, sb.failAt = true, v.cgp
					break
				}
			}
			s.tracef("sub %d: view %d from shard %d (cgp %d, failed %d), must fail %v", sb.id, v.view, m.shard, v.cgp, v.failed, sb.mustFail)
		}
		sb.consume()
		if sb.mustFail {
			s.errorf("sub %d: delivered past confirmed-gp %d but got no Fail on the view change", sb.id, sb.failAt)
			sb.mustFail = false
		}
	}
	if m.confirm > 0 {
		sb.m.Confirm(m.confirm)
	}
	if len(m.items) > 0 {
		sb.m.Add(m.items...)
	}
	sb.consume()
}

// onEager runs an eager stream message through the eager merger. Every
// delivery is final, and each release of a cut moves the end below which
// the consumer holds the final order: a Confirm in the history.
func (sb *sub) onEager(m *subMsg) {
	s := sb.s
	if len(m.batches) == 0 {
		return // the status says nothing an eager stream does not
	}
	if err := sb.em.Step(uint32(m.shard), &pb.SubscribeResponse{Batches: m.batches}); err != nil {
		s.errorf("sub %d: stream of shard %d: %v", sb.id, m.shard, err)
	}
	for {
		ev, ok := sb.em.Next()
		if !ok {
			break
		}
		if ev.Kind != merge.EventDeliver {
			s.errorf("sub %d: eager merger emitted %v at %d", sb.id, ev.Kind, ev.Pos)
			continue
		}
		sb.deliver(spec.Event[int64]{Kind: spec.EventDeliver, Pos: ev.Pos, Rec: recordID(ev.Rec.GetKey())})
	}
	if end := sb.em.Resume(); end > max(sb.from, sb.confirmedEnd()) {
		sb.record(check.SubEvent{Kind: check.Confirm, Pos: end})
	}
}

func (sb *sub) consume() {
	s := sb.s
	for {
		ev, ok := sb.m.Next()
		if !ok {
			return
		}
		if sb.mustFail {
			if ev.Kind != spec.EventFail || ev.Pos != sb.failAt {
				s.errorf("sub %d: after a view change %v at %d, want fail at %d", sb.id, ev.Kind, ev.Pos, sb.failAt)
			}
			sb.mustFail = false
		}
		switch ev.Kind {
		case spec.EventDeliver:
			sb.deliver(ev)
		case spec.EventConfirm:
			sb.confirm(ev.Pos)
		case spec.EventFail:
			sb.fail(ev)
		}
	}
}

func (sb *sub) deliver(ev spec.Event[int64]) {
	s := sb.s
	p := ev.Pos
	if ev.View > uint64(len(s.views)) {
		s.errorf("sub %d: delivery in view %d while the cluster is in view %d", sb.id, ev.View, len(s.views))
	}
	if !sb.mine(p) && p < uint64(len(s.eager)) {
		s.errorf("sub %d: delivered %d at %d, which shard %d holds", sb.id, ev.Rec, p, s.eagerShard[p])
	}
	for uint64(len(sb.cur)) <= p {
		sb.cur = append(sb.cur, noop)
	}
	sb.cur[p] = ev.Rec
	shard := sb.shard
	if !sb.oneShard && p < uint64(len(s.eagerShard)) {
		shard = s.eagerShard[p]
	}
	sb.record(check.SubEvent{Kind: check.Deliver, Pos: p, Shard: uint32(shard), Record: s.name(ev.Rec), Speculative: ev.Speculative})
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
	if k > sb.m.Position() && !sb.oneShard {
		sb.s.errorf("sub %d: confirm %d beyond what it delivered (%d)", sb.id, k, sb.m.Position())
	}
	sb.record(check.SubEvent{Kind: check.Confirm, Pos: k})
	if s := sb.s; s.plant == bugRevise && !s.planted && k > sb.from+1 && !sb.oneShard && !sb.confirmedOnly {
		s.planted = true
		sb.record(check.SubEvent{Kind: check.Fail, Pos: k - 1})
	}
}

func (sb *sub) fail(ev spec.Event[int64]) {
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
