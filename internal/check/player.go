package check

// Applied is what one target of the player applied, in the order it
// applied it: the log's entries, by position and record (empty entries,
// which only advance a target's index, are left out).
type Applied struct {
	Target  string
	Entries []Entry
}

// ExactlyOnce checks invariant 6 over the targets' applied sequences: each
// target applied the entries of log that routes sends to it, in log order,
// each once, with no gap, as a prefix of that sequence; when complete (the
// faults stopped and the run converged), all of them. routes names the
// targets of one entry of the log; no-ops go nowhere and are not passed.
func ExactlyOnce(log Log, routes func(Entry) []string, applied []Applied, complete bool) error {
	want := map[string][]Entry{}
	for _, e := range log.Entries {
		for _, t := range routes(e) {
			want[t] = append(want[t], e)
		}
	}
	var c collector
	for _, a := range applied {
		w := want[a.Target]
		reader := "target " + a.Target
		for i, e := range a.Entries {
			if i >= len(w) {
				c.add(6, reader, e.Pos, e.Record, "applied %q at position %d past the %d entries routed to it", e.Record, e.Pos, len(w))
				break
			}
			if e.Pos != w[i].Pos || e.Record != w[i].Record {
				what := "a gap or a reordering"
				if i > 0 && e.Pos <= a.Entries[i-1].Pos {
					what = "a duplicate or a reordering"
				}
				c.add(6, reader, e.Pos, e.Record, "applied entry #%d is %q at position %d, want %q at position %d (%s)",
					i, e.Record, e.Pos, w[i].Record, w[i].Pos, what)
				break
			}
		}
		if complete && len(a.Entries) < len(w) {
			m := w[len(a.Entries)]
			c.add(6, reader, m.Pos, m.Record, "applied %d of the %d entries routed to it once the faults stopped; the first missing is %q at position %d",
				len(a.Entries), len(w), m.Record, m.Pos)
		}
	}
	return c.err()
}
