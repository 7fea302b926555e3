package check

import (
	"slices"
	"strconv"
)

// SubEventKind says what a subscription event does.
type SubEventKind uint8

const (
	// Deliver hands the consumer a record at a position, speculatively or
	// final.
	Deliver SubEventKind = iota + 1
	// Confirm says every position below Pos is final.
	Confirm
	// Fail voids every delivery at Pos and above: the correct records
	// follow.
	Fail
)

func (k SubEventKind) String() string {
	switch k {
	case Deliver:
		return "deliver"
	case Confirm:
		return "confirm"
	case Fail:
		return "fail"
	}
	return "?"
}

// SubEvent is one event a subscription's consumer saw.
type SubEvent struct {
	Kind SubEventKind
	// Pos is the delivered position, the confirmed end, or the first
	// failed position.
	Pos uint64
	// Shard, Record and Speculative describe a delivery.
	Shard       uint32
	Record      string
	Speculative bool
}

// Subscription is the history of one subscription's consumer.
type Subscription struct {
	Name string
	// From is the first position the subscription asked for.
	From uint64
	// Shards, when not nil, are the only shards it follows.
	Shards []uint32
	// ConfirmedOnly says it asked for final records only: no speculative
	// delivery and no Fail may reach it.
	ConfirmedOnly bool
	Events        []SubEvent
}

// replay is a subscription's consumer state rebuilt from its events.
type replay struct {
	sub   *Subscription
	final *Log
	// held is what the consumer holds, by position: what it was delivered
	// and no Fail voided since.
	held []Entry
	has  []bool
	// next is one past the last delivery; confirmed the confirmed end.
	next, confirmed uint64
}

func (r *replay) hold(e Entry) {
	if n := e.Pos + 1; n > uint64(len(r.held)) {
		r.held = slices.Grow(r.held, int(n)-len(r.held))[:n]
		r.has = slices.Grow(r.has, int(n)-len(r.has))[:n]
	}
	r.held[e.Pos], r.has[e.Pos] = e, true
}

func (r *replay) at(p uint64) (Entry, bool) {
	if p < uint64(len(r.held)) && r.has[p] {
		return r.held[p], true
	}
	return Entry{}, false
}

func (r *replay) run(c *collector) {
	s, fl := r.sub, r.final
	full := s.Shards == nil
	r.next = s.From
	for i, ev := range s.Events {
		switch ev.Kind {
		case Deliver:
			p := ev.Pos
			switch {
			case p < s.From:
				c.add(2, s.Name, p, ev.Record, "event %d delivers position %d before the start %d", i, p, s.From)
			case p < r.confirmed && (full || ev.Speculative):
				// A one-shard subscriber's confirmed end covers other
				// shards' positions; its own records below it come final.
				c.add(4, s.Name, p, ev.Record, "event %d delivers position %d below the confirmed end %d", i, p, r.confirmed)
			case p < r.next:
				c.add(2, s.Name, p, ev.Record, "event %d delivers position %d after %d", i, p, r.next-1)
			case s.ConfirmedOnly && ev.Speculative:
				c.add(4, s.Name, p, ev.Record, "event %d delivers position %d speculatively to a confirmed-only subscription", i, p)
			}
			if !ev.Speculative {
				if e, ok := fl.at(p); !ok || p >= fl.End || e.Record != ev.Record {
					c.add(4, s.Name, p, ev.Record, "event %d delivers %q at %d as final, but the final order has %s there", i, ev.Record, p, describe(e, ok, p < fl.End))
				}
			}
			r.hold(Entry{Pos: p, Shard: ev.Shard, Record: ev.Record})
			r.next = p + 1
		case Confirm:
			k := ev.Pos
			if k <= r.confirmed {
				c.add(4, s.Name, k, "", "event %d confirms %d after %d", i, k, r.confirmed)
				continue
			}
			if k > fl.End {
				c.add(4, s.Name, k, "", "event %d confirms %d beyond the final order's end %d", i, k, fl.End)
				continue
			}
			if bad, ok := r.differ(max(r.confirmed, s.From), k, !full); ok {
				c.add(4, s.Name, bad.Pos, bad.Record, "event %d confirms %d, but %s", i, k, bad.Msg)
			}
			r.confirmed = k
		case Fail:
			k := ev.Pos
			switch {
			case s.ConfirmedOnly:
				c.add(4, s.Name, k, "", "event %d fails from %d on a confirmed-only subscription", i, k)
			case k < r.confirmed:
				c.add(4, s.Name, k, "", "event %d fails from %d, below the confirmed end %d: a confirmed speculation is revised", i, k, r.confirmed)
			}
			for p := k; p < uint64(len(r.has)); p++ {
				r.has[p] = false
			}
			r.next = min(r.next, max(k, s.From))
		}
	}
}

// differ returns the first position in [from, to) the subscription follows
// where what it holds is not the final order. With lenient, a position it
// holds nothing at passes: its record may still be on its way.
func (r *replay) differ(from, to uint64, lenient bool) (Violation, bool) {
	fl := r.final
	for p := from; p < to; p++ {
		want, wok := fl.at(p)
		if wok && !r.sub.follows(want.Shard) {
			continue
		}
		got, gok := r.at(p)
		if gok && !r.sub.follows(got.Shard) {
			continue
		}
		switch {
		case !gok && !wok:
		case !gok && lenient:
		case gok != wok || got.Record != want.Record:
			return Violation{Pos: p, Record: got.Record, Msg: "position " + strconv.FormatUint(p, 10) + " holds " + describe(got, gok, true) + " where the final order has " + describe(want, wok, p < fl.End)}, true
		}
	}
	return Violation{}, false
}

func (s *Subscription) follows(shard uint32) bool {
	if s.Shards == nil {
		return true
	}
	for _, x := range s.Shards {
		if x == shard {
			return true
		}
	}
	return false
}

func describe(e Entry, ok, inRange bool) string {
	switch {
	case !inRange:
		return "nothing yet"
	case !ok:
		return "a no-op"
	}
	return "\"" + e.Record + "\""
}

// Speculation checks invariant 4 over one subscription against the final
// order (what the committed cuts say; Dense or not as the mode is):
// positions delivered in increasing order from its start, no delivery and
// no Fail below the confirmed end (a confirmed speculation is never
// revised), a final delivery or a confirmed end only over what the final
// order says, and no speculation or Fail for a confirmed-only subscription.
func Speculation(sub Subscription, final Log) error {
	final.index = nil
	var c collector
	r := replay{sub: &sub, final: &final}
	r.run(&c)
	return c.err()
}

// Converged checks the rest of invariant 4 once faults have stopped and
// the run has settled: the subscription confirmed everything the final
// order holds (of the shards it follows), no speculation stays pending, and what it holds after its
// last Fail is the correct records, each at its final position.
func Converged(sub Subscription, final Log) error {
	final.index = nil
	var c collector
	r := replay{sub: &sub, final: &final}
	var ignore collector // Speculation reports these
	r.run(&ignore)
	// A subscription of some shards need only reach past their last
	// record: nothing it follows tells it of later positions.
	need := final.End
	if sub.Shards != nil {
		need = 0
		for _, e := range final.Entries {
			if sub.follows(e.Shard) {
				need = e.Pos + 1
			}
		}
	}
	if need > sub.From && r.confirmed < need {
		c.add(4, sub.Name, r.confirmed, "", "confirmed up to %d, the final order ends at %d", r.confirmed, need)
	}
	end := max(final.End, uint64(len(r.held)))
	if bad, ok := r.differ(sub.From, end, false); ok {
		c.add(4, sub.Name, bad.Pos, bad.Record, "at the end, %s", bad.Msg)
	}
	return c.err()
}
