package check

import (
	"slices"
	"testing"
)

// playerRoutes sends even positions to target a, odd ones to b, and every
// third to both.
func playerRoutes(e Entry) []string {
	var ts []string
	if e.Pos%2 == 0 || e.Pos%3 == 0 {
		ts = append(ts, "a")
	}
	if e.Pos%2 == 1 || e.Pos%3 == 0 {
		ts = append(ts, "b")
	}
	return ts
}

// routedTo returns the entries of log routed to target t.
func routedTo(log Log, t string) []Entry {
	var es []Entry
	for _, e := range log.Entries {
		if slices.Contains(playerRoutes(e), t) {
			es = append(es, e)
		}
	}
	return es
}

func TestExactlyOnce(t *testing.T) {
	_, _, log := cleanHistory()
	a, b := routedTo(log, "a"), routedTo(log, "b")
	if len(a) < 3 || len(b) < 3 {
		t.Fatalf("the clean history routes too little: %v, %v", a, b)
	}
	whole := []Applied{{"a", a}, {"b", b}}
	if err := ExactlyOnce(log, playerRoutes, whole, true); err != nil {
		t.Errorf("every entry applied once, in order: %v", err)
	}
	prefix := []Applied{{"a", a[:2]}, {"b", nil}}
	if err := ExactlyOnce(log, playerRoutes, prefix, false); err != nil {
		t.Errorf("a prefix while faults last: %v", err)
	}
	violated(t, "a prefix once the faults stopped", ExactlyOnce(log, playerRoutes, prefix, true), 6)

	dup := slices.Insert(slices.Clone(a), 2, a[1])
	violated(t, "a duplicate", ExactlyOnce(log, playerRoutes, []Applied{{"a", dup}, {"b", b}}, false), 6)
	gap := slices.Delete(slices.Clone(a), 1, 2)
	violated(t, "a gap", ExactlyOnce(log, playerRoutes, []Applied{{"a", gap}, {"b", b}}, false), 6)
	swapped := slices.Clone(b)
	swapped[0], swapped[1] = swapped[1], swapped[0]
	violated(t, "a reordering", ExactlyOnce(log, playerRoutes, []Applied{{"a", a}, {"b", swapped}}, false), 6)
	wrong := slices.Clone(a)
	wrong[0].Record = "elsewhere"
	violated(t, "another record at a position", ExactlyOnce(log, playerRoutes, []Applied{{"a", wrong}, {"b", b}}, false), 6)
	past := append(slices.Clone(a), Entry{Pos: log.End, Record: "r9"})
	violated(t, "an entry past the routed ones", ExactlyOnce(log, playerRoutes, []Applied{{"a", past}, {"b", b}}, false), 6)
}
