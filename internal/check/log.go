package check

import "slices"

// Returned checks that every operation succeeded: for runs whose faults
// stay within the fault budget, where the client must complete every
// append and read. It is a test's policy, not an invariant, so its
// violations carry invariant 0.
func Returned(appends []Append, reads []Read) error {
	var c collector
	for _, a := range appends {
		if a.Outcome != Acked {
			c.add(0, "", 0, a.Record, "%v did not succeed (%v): %v", a, a.Outcome, a.Err)
		}
	}
	for _, r := range reads {
		if r.Err != nil {
			c.add(0, "", r.Pos, "", "read of position %d by client %d (called %v, returned %v) failed: %v", r.Pos, r.Client, r.Call, r.Return, r.Err)
		}
	}
	return c.err()
}

// Acknowledged checks invariant 1: every acknowledged append is in every
// log that covers its position and shard, at the position and shard its
// acknowledgement gave.
func Acknowledged(appends []Append, logs ...Log) error {
	logs = own(logs)
	var c collector
	for i := range logs {
		l := &logs[i]
		var where map[string]Entry // built only to report a misplaced record
		for _, a := range appends {
			if a.Outcome != Acked || !l.covers(a.Position, a.Shard) {
				continue
			}
			if e, ok := l.at(a.Position); ok && e.Record == a.Record && e.Shard == a.Shard {
				continue
			}
			if where == nil {
				where = make(map[string]Entry, len(l.Entries))
				for _, e := range l.Entries {
					where[e.Record] = e
				}
			}
			e, ok := where[a.Record]
			switch {
			case !ok:
				c.add(1, l.Reader, a.Position, a.Record, "acknowledged %v at position %d (shard %d) is missing", a, a.Position, a.Shard)
			case e.Pos != a.Position:
				c.add(1, l.Reader, e.Pos, a.Record, "%q was acknowledged at position %d but sits at %d", a.Record, a.Position, e.Pos)
			default:
				c.add(1, l.Reader, e.Pos, a.Record, "%q was acknowledged by shard %d but comes from shard %d", a.Record, a.Shard, e.Shard)
			}
		}
	}
	return c.err()
}

// Order checks invariant 2 over the logs readers received: each log's
// positions increase within its range (densely when it is Dense), it holds
// only records some client appended and no failed append, and every two
// logs agree at every position both speak for: the same record, or a
// no-op in both.
func Order(appends []Append, logs ...Log) error {
	logs = own(logs)
	var c collector
	outcome := map[string]Outcome{}
	for _, a := range appends {
		// One acknowledged attempt makes the record acknowledged; one
		// unknown attempt keeps it possible.
		if o, ok := outcome[a.Record]; !ok || o == Failed || a.Outcome == Acked {
			outcome[a.Record] = a.Outcome
		}
	}
	for i := range logs {
		l := &logs[i]
		next := l.From
		for j, e := range l.Entries {
			switch {
			case e.Pos < l.From || e.Pos >= l.End:
				c.add(2, l.Reader, e.Pos, e.Record, "entry %d at position %d is outside the log's range [%d, %d)", j, e.Pos, l.From, l.End)
			case j > 0 && e.Pos <= l.Entries[j-1].Pos:
				c.add(2, l.Reader, e.Pos, e.Record, "entry %d at position %d follows position %d: positions do not increase", j, e.Pos, l.Entries[j-1].Pos)
			case l.Dense && e.Pos != next:
				c.add(2, l.Reader, e.Pos, e.Record, "entry %d at position %d, expected %d: positions are not dense", j, e.Pos, next)
			}
			next = e.Pos + 1
			switch o, ok := outcome[e.Record]; {
			case !ok:
				c.add(2, l.Reader, e.Pos, e.Record, "position %d holds %q, which no client appended", e.Pos, e.Record)
			case o == Failed:
				c.add(2, l.Reader, e.Pos, e.Record, "position %d holds %q, whose append failed", e.Pos, e.Record)
			}
		}
		if l.Dense && next < l.End {
			c.add(2, l.Reader, next, "", "the log ends at %d but claims to cover [%d, %d): positions are not dense", next, l.From, l.End)
		}
	}
	for i := range logs {
		for j := i + 1; j < len(logs); j++ {
			// Report the first disagreement of each pair, seen from either
			// side: every later position may differ as a result.
			v, ok := firstDisagreement(&logs[i], &logs[j])
			if w, ok2 := firstDisagreement(&logs[j], &logs[i]); ok2 && (!ok || w.Pos < v.Pos) {
				v, ok = w, true
			}
			if ok {
				c.vs = append(c.vs, v)
			}
		}
	}
	return c.err()
}

// firstDisagreement returns the first entry of a at which b, speaking for
// that position and shard, holds another record or a no-op.
func firstDisagreement(a, b *Log) (Violation, bool) {
	var c collector
	for _, e := range a.Entries {
		if !b.covers(e.Pos, e.Shard) {
			continue
		}
		f, ok := b.at(e.Pos)
		switch {
		case !ok:
			c.add(2, a.Reader+" vs "+b.Reader, e.Pos, e.Record, "position %d: %s has %q (shard %d), %s has a no-op", e.Pos, a.Reader, e.Record, e.Shard, b.Reader)
		case f.Record != e.Record || f.Shard != e.Shard:
			c.add(2, a.Reader+" vs "+b.Reader, e.Pos, e.Record, "position %d: %s has %q (shard %d), %s has %q (shard %d)", e.Pos, a.Reader, e.Record, e.Shard, b.Reader, f.Record, f.Shard)
		default:
			continue
		}
		return c.vs[0], true
	}
	return Violation{}, false
}

// Reads checks the second half of invariant 2, positions never change once
// exposed: every successful read of a position returned what the log (the
// order every reader agreed on) holds there.
func Reads(reads []Read, log Log) error {
	log.index = nil
	var c collector
	for _, r := range reads {
		if r.Err != nil {
			continue
		}
		if r.Pos < log.From || r.Pos >= log.End {
			c.add(2, log.Reader, r.Pos, r.Record, "read of position %d returned %q, outside the log's range [%d, %d)", r.Pos, r.Record, log.From, log.End)
			continue
		}
		e, ok := log.at(r.Pos)
		switch {
		case !ok:
			c.add(2, log.Reader, r.Pos, r.Record, "read of position %d returned %q, but the log has a no-op there", r.Pos, r.Record)
		case e.Record != r.Record:
			c.add(2, log.Reader, r.Pos, r.Record, "read of position %d returned %q, but the log has %q there", r.Pos, r.Record, e.Record)
		}
	}
	return c.err()
}

// StoredOnce checks invariant 5: an append, retries included, is stored at
// most once in each log, and one client's sequence number names one
// record.
func StoredOnce(appends []Append, logs ...Log) error {
	logs = own(logs)
	var c collector
	type id struct{ client, seq uint64 }
	names := map[id]string{}
	for _, a := range appends {
		k := id{a.Client, a.Seq}
		if r, ok := names[k]; ok && r != a.Record {
			c.add(5, "", 0, a.Record, "client %d used seq %d for both %q and %q", a.Client, a.Seq, r, a.Record)
			continue
		}
		names[k] = a.Record
	}
	for i := range logs {
		l := &logs[i]
		seen := make(map[string]uint64, len(l.Entries))
		for _, e := range l.Entries {
			if p, dup := seen[e.Record]; dup {
				c.add(5, l.Reader, e.Pos, e.Record, "%q is stored twice: at positions %d and %d", e.Record, p, e.Pos)
				continue
			}
			seen[e.Record] = e.Pos
		}
	}
	return c.err()
}

// LogOf returns the log a reader received from its entries in the order it
// received them, covering From up to one past the last entry.
func LogOf(reader string, from uint64, dense bool, entries []Entry) Log {
	l := Log{Reader: reader, From: from, End: from, Dense: dense, Entries: slices.Clone(entries)}
	if n := len(entries); n > 0 {
		l.End = max(from, entries[n-1].Pos+1)
	}
	return l
}

// own returns copies of logs for a checker to index, so that nothing it
// caches lands in the caller's slice.
func own(logs []Log) []Log {
	out := make([]Log, len(logs))
	for i, l := range logs {
		l.index = nil
		out[i] = l
	}
	return out
}
