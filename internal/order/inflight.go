package order

import "time"

// Inflight tracks proposals awaiting commit by their command ids, up to a
// bound. A slot is freed when its own proposal commits (or the state
// refuses it) or fails to propose; if none of them commits for
// proposalStaleAfter after the newest was taken, Raft dropped them and
// every slot is freed. A proposal whose slot was freed that way still
// may commit later: its id is no longer tracked, so it frees nothing.
type Inflight struct {
	ids map[string]bool
	max int
	// newest is when the latest slot was taken.
	newest time.Time
}

// NewInflight returns a tracker of at most max proposals.
func NewInflight(max int) Inflight {
	return Inflight{ids: map[string]bool{}, max: max}
}

// Free is how many more proposals may go in flight.
func (f *Inflight) Free() int {
	return f.max - len(f.ids)
}

// Take marks the proposal with command id id in flight at now.
func (f *Inflight) Take(id string, now time.Time) {
	if len(f.ids) >= f.max {
		panic("order: in-flight proposal beyond the bound")
	}
	f.ids[id] = true
	f.newest = now
}

// Done frees the slot of the proposal id, which committed or failed, and
// reports whether it held one (a proposal Expire gave up on holds none).
func (f *Inflight) Done(id string) bool {
	if !f.ids[id] {
		return false
	}
	delete(f.ids, id)
	return true
}

// Expire frees every slot when the newest proposal is older than
// proposalStaleAfter, and reports whether it did.
func (f *Inflight) Expire(now time.Time) bool {
	if len(f.ids) == 0 || now.Sub(f.newest) <= proposalStaleAfter {
		return false
	}
	clear(f.ids)
	return true
}
