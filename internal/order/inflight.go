package order

import "time"

// Inflight counts proposals awaiting commit, up to a bound. A slot is freed
// when the proposal commits (or the state refuses it) or fails to propose;
// if none of them commits for proposalStaleAfter after the newest was
// taken, Raft dropped them and every slot is freed.
type Inflight struct {
	n, max int
	// newest is when the latest slot was taken.
	newest time.Time
}

// NewInflight returns a tracker of at most max proposals.
func NewInflight(max int) Inflight {
	return Inflight{max: max}
}

// Free is how many more proposals may go in flight.
func (f *Inflight) Free() int {
	return f.max - f.n
}

// Take marks one more proposal in flight at now.
func (f *Inflight) Take(now time.Time) {
	if f.n >= f.max {
		panic("order: in-flight proposal beyond the bound")
	}
	f.n++
	f.newest = now
}

// Done frees the slot of one proposal that committed or failed.
func (f *Inflight) Done() {
	if f.n > 0 {
		f.n--
	}
}

// Expire frees every slot when the newest proposal is older than
// proposalStaleAfter, and reports whether it did.
func (f *Inflight) Expire(now time.Time) bool {
	if f.n == 0 || now.Sub(f.newest) <= proposalStaleAfter {
		return false
	}
	f.n = 0
	return true
}
