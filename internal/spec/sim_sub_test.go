package spec

// The subscribers of the simulation: a Merger each, fed by every shard's
// stream, and a consumer that checks every event against the truth the
// leader's committed cuts establish.

import (
	"slices"
	"time"

	"github.com/augur-log/augur/internal/cut"
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
	items   []Item[int64]
	confirm uint64
}

type viewMsg struct {
	view, cgp uint64
	failed    cut.ShardID
}

// delivery is one Deliver event a consumer saw.
type delivery struct {
	pos    uint64
	rec    int64
	spec   bool
	voided bool
	at     time.Time
}

// statusPollDelay is how late a one-shard subscriber learns of a view
// change from the cluster status rather than from its shard's stream.
const statusPollDelay = 20 * time.Millisecond

type simSub struct {
	s             *sim
	id            int
	m             *Merger[int64]
	confirmedOnly bool
	from          uint64
	// oneShard subscribers follow only shard's stream (NewShardMerger):
	// they check only that shard's positions.
	oneShard bool
	shard    cut.ShardID

	// cur is what the consumer holds now, by position (noop where nothing
	// was delivered); last is the last delivered position plus one.
	cur       []int64
	last      uint64
	confirmed uint64
	log       []delivery
	// mustFail is set when a view change voided deliveries: the next event
	// must be Fail at failAt.
	mustFail bool
	failAt   uint64
	fails    int
	// confirms holds each confirmed end and when it came.
	confirms []confirmAt
}

type confirmAt struct {
	end uint64
	at  time.Time
}

// mine reports whether position p is one this subscriber delivers.
func (sb *simSub) mine(p uint64) bool {
	return !sb.oneShard || p >= uint64(len(sb.s.eagerShard)) || sb.s.eagerShard[p] == sb.shard
}

func (sb *simSub) on(m *subMsg) {
	s := sb.s
	if sb.oneShard && m.shard != sb.shard {
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

func (sb *simSub) consume() {
	s := sb.s
	for {
		ev, ok := sb.m.Next()
		if !ok {
			return
		}
		if sb.mustFail {
			if ev.Kind != EventFail || ev.Pos != sb.failAt {
				s.errorf("sub %d: after a view change %v at %d, want fail at %d", sb.id, ev.Kind, ev.Pos, sb.failAt)
			}
			sb.mustFail = false
		}
		switch ev.Kind {
		case EventDeliver:
			sb.deliver(ev)
		case EventConfirm:
			sb.confirm(ev.Pos)
		case EventFail:
			sb.fail(ev)
		}
	}
}

func (sb *simSub) deliver(ev Event[int64]) {
	s := sb.s
	p := ev.Pos
	switch {
	case p < sb.from:
		s.errorf("sub %d: delivered %d before its start %d", sb.id, p, sb.from)
	case p < sb.last:
		s.errorf("sub %d: delivered %d after %d", sb.id, p, sb.last-1)
	case p < sb.confirmed && (!sb.oneShard || ev.Speculative):
		// A one-shard subscriber's confirmed end covers other shards'
		// positions; its own records below it come final.
		s.errorf("sub %d: delivered %d below the confirmed end %d", sb.id, p, sb.confirmed)
	case sb.confirmedOnly && ev.Speculative:
		s.errorf("sub %d: confirmed-only subscription delivered %d speculatively", sb.id, p)
	case ev.View > uint64(len(s.views)):
		s.errorf("sub %d: delivery in view %d while the cluster is in view %d", sb.id, ev.View, len(s.views))
	}
	if !sb.mine(p) && p < uint64(len(s.eager)) {
		s.errorf("sub %d: delivered %d at %d, which shard %d holds", sb.id, ev.Rec, p, s.eagerShard[p])
	}
	if !ev.Speculative {
		// Not speculative: committed already, and so final.
		if p >= uint64(len(s.eager)) || s.eager[p] != ev.Rec {
			s.errorf("sub %d: non-speculative delivery of %d at %d, but the cuts say otherwise", sb.id, ev.Rec, p)
		}
	}
	for uint64(len(sb.cur)) <= p {
		sb.cur = append(sb.cur, noop)
	}
	sb.cur[p] = ev.Rec
	sb.last = p + 1
	sb.log = append(sb.log, delivery{pos: p, rec: ev.Rec, spec: ev.Speculative, at: s.now})
	s.stats.delivered++
	if ev.Speculative {
		s.stats.specDeliveries++
	}
}

// confirm checks that what the consumer holds below k is what the
// committed cuts say.
func (sb *simSub) confirm(k uint64) {
	s := sb.s
	if k <= sb.confirmed {
		s.errorf("sub %d: confirm %d after %d", sb.id, k, sb.confirmed)
		return
	}
	if k > uint64(len(s.eager)) {
		s.errorf("sub %d: confirm %d beyond the committed end %d", sb.id, k, len(s.eager))
		return
	}
	if k > sb.m.Position() && !sb.oneShard {
		s.errorf("sub %d: confirm %d beyond what it delivered (%d)", sb.id, k, sb.m.Position())
	}
	for p := max(sb.confirmed, sb.from); p < k; p++ {
		if !sb.mine(p) {
			continue
		}
		got := noop
		if p < uint64(len(sb.cur)) {
			got = sb.cur[p]
		}
		if sb.oneShard && got == noop {
			// Its records below a confirmed end may still be on their
			// way, and come final; finish checks they all came.
			continue
		}
		if got != s.eager[p] {
			s.errorf("sub %d: confirmed position %d holds %d, the cuts say %d", sb.id, p, got, s.eager[p])
			return
		}
	}
	sb.confirmed = k
	sb.confirms = append(sb.confirms, confirmAt{end: k, at: s.now})
}

func (sb *simSub) fail(ev Event[int64]) {
	s := sb.s
	k := ev.Pos
	sb.fails++
	s.stats.fails++
	switch {
	case sb.confirmedOnly:
		s.errorf("sub %d: confirmed-only subscription got fail %d", sb.id, k)
	case k < sb.confirmed:
		s.errorf("sub %d: fail %d below the confirmed end %d", sb.id, k, sb.confirmed)
	case ev.View == 0 || ev.View > uint64(len(s.views)) || s.views[ev.View-1].ConfirmedGP != k:
		s.errorf("sub %d: fail %d in view %d, which is not that view's confirmed-gp", sb.id, k, ev.View)
	}
	for p := k; p < uint64(len(sb.cur)); p++ {
		sb.cur[p] = noop
	}
	if sb.last > k {
		sb.last = k
	}
	for i := len(sb.log) - 1; i >= 0 && sb.log[i].pos >= k; i-- {
		if !sb.log[i].voided {
			sb.log[i].voided = true
			s.stats.voided++
		}
	}
}

// finish checks the subscriber's end state against the eager sequence.
func (sb *simSub) finish() {
	s := sb.s
	end := uint64(len(s.eager))
	if sb.confirmed < max(end, sb.from) && end > sb.from {
		s.errorf("sub %d: confirmed up to %d, the cuts end at %d", sb.id, sb.confirmed, end)
	}
	for p := sb.from; p < max(end, uint64(len(sb.cur))); p++ {
		if !sb.mine(p) {
			continue
		}
		want, got := noop, noop
		if p < end {
			want = s.eager[p]
		}
		if p < uint64(len(sb.cur)) {
			got = sb.cur[p]
		}
		if got != want {
			s.errorf("sub %d: final position %d holds %d, eager order says %d", sb.id, p, got, want)
			return
		}
	}
	// Every delivery a Fail did not void was right, speculative or not.
	for _, d := range sb.log {
		if d.voided {
			continue
		}
		if d.spec {
			i, _ := slices.BinarySearchFunc(sb.confirms, d.pos, func(c confirmAt, p uint64) int {
				if c.end <= p {
					return -1
				}
				return 1
			})
			if i < len(sb.confirms) {
				s.stats.specLead += sb.confirms[i].at.Sub(d.at)
				s.stats.specLeadN++
			}
		}
		if d.pos >= end || s.eager[d.pos] != d.rec {
			s.errorf("sub %d: delivery of %d at %d (speculative %v) is not the final order", sb.id, d.rec, d.pos, d.spec)
			return
		}
	}
}
