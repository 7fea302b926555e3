// Package check holds the invariant checkers of DESIGN.md (invariants 1–6)
// over recorded histories. A history says what clients and readers saw —
// appends with their outcomes, reads, the logs subscribers received, the
// events of speculative subscriptions — and nothing of how it was
// recorded, so the seeded simulator, `augur sim` and the real-process tests
// all check the same rules with the same code.
//
// Every checker returns nil or a Violations error listing each broken rule
// with the positions and records involved.
package check

import (
	"fmt"
	"strings"
	"time"
)

// Outcome is how an append ended as its client saw it.
type Outcome uint8

const (
	// Unknown: the append never returned, or returned an error that leaves
	// it open whether the record is stored. The record may be in the log,
	// at most once.
	Unknown Outcome = iota
	// Acked: the service answered with a position; the record must be in
	// the log there, once.
	Acked
	// Failed: the service answered that the record is not stored; it must
	// not be in the log.
	Failed
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// Append is one append call as its client saw it. A retry of an append
// repeats its Client, Seq and Record; each attempt the client made may be
// its own Append, or one Append may stand for them all.
type Append struct {
	// Client and Seq identify the append: the client that made it and that
	// client's sequence number for it.
	Client, Seq uint64
	// Record names the record the log holds for it (its payload, or any
	// name unique to Client and Seq).
	Record string
	// Call and Return are when the append was invoked and when it
	// returned, on one clock shared by every operation of the history.
	Call, Return time.Duration
	Outcome      Outcome
	// Position and Shard are where the acknowledgement put the record
	// (Acked only).
	Position uint64
	Shard    uint32
	// Err is why the append did not succeed (Failed, Unknown), for reports.
	Err error
}

func (a Append) String() string {
	return fmt.Sprintf("append %q (client %d, seq %d, called %v, returned %v)", a.Record, a.Client, a.Seq, a.Call, a.Return)
}

// Read is one read of a single position.
type Read struct {
	Client       uint64
	Pos          uint64
	Call, Return time.Duration
	// Record is what the read returned, when Err is nil.
	Record string
	Err    error
}

// Entry is one record a reader received at a position.
type Entry struct {
	Pos    uint64
	Shard  uint32
	Record string
}

// Log is what one reader received of the log: entries at increasing
// positions within [From, End). A position in that range without an entry
// is a no-op, which only a mode with no-ops may leave out (Dense false).
type Log struct {
	// Reader names the reader in reports.
	Reader    string
	From, End uint64
	// Dense says every position in [From, End) must have an entry: the
	// mode has no no-ops, or delivers them.
	Dense bool
	// Shards, when not nil, says the reader followed only these shards:
	// it says nothing about the other shards' positions.
	Shards  []uint32
	Entries []Entry

	// index maps a position's offset from From to its entry (-1: none);
	// at builds it on first use.
	index []int32
}

// follows reports whether the reader follows shard.
func (l *Log) follows(shard uint32) bool {
	if l.Shards == nil {
		return true
	}
	for _, s := range l.Shards {
		if s == shard {
			return true
		}
	}
	return false
}

// covers reports whether the log speaks for position pos of shard.
func (l *Log) covers(pos uint64, shard uint32) bool {
	return pos >= l.From && pos < l.End && l.follows(shard)
}

// at returns the entry at pos, if the log holds one.
func (l *Log) at(pos uint64) (Entry, bool) {
	if pos < l.From || pos >= l.End {
		return Entry{}, false
	}
	if l.index == nil {
		// Checkers look positions up many times over; one pass makes
		// every lookup constant.
		l.index = make([]int32, l.End-l.From)
		for i := range l.index {
			l.index[i] = -1
		}
		for i, e := range l.Entries {
			if e.Pos >= l.From && e.Pos < l.End {
				l.index[e.Pos-l.From] = int32(i)
			}
		}
	}
	if i := l.index[pos-l.From]; i >= 0 {
		return l.Entries[i], true
	}
	return Entry{}, false
}

// Violation is one broken invariant.
type Violation struct {
	// Invariant is the number of the rule in DESIGN.md's list; 0 for
	// Returned's policy that every operation completes.
	Invariant int
	// Reader is whose view shows it, if one reader's.
	Reader string
	// Pos and Record locate it, when it has a position or a record.
	Pos    uint64
	Record string
	// Msg says what is wrong, positions and records included.
	Msg string
}

func (v Violation) String() string {
	rule := fmt.Sprintf("invariant %d", v.Invariant)
	if v.Invariant == 0 {
		rule = "completion" // Returned's policy, not one of DESIGN.md's rules
	}
	if v.Reader != "" {
		return fmt.Sprintf("%s: %s: %s", rule, v.Reader, v.Msg)
	}
	return fmt.Sprintf("%s: %s", rule, v.Msg)
}

// reportedMax bounds how many violations an error message lists; the
// error keeps them all.
const reportedMax = 10

// Violations is the error a checker returns: every broken rule it found.
type Violations []Violation

func (vs Violations) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d violation(s)", len(vs))
	for i, v := range vs {
		if i == reportedMax {
			fmt.Fprintf(&b, "\n  ... and %d more", len(vs)-reportedMax)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(v.String())
	}
	return b.String()
}

// collector gathers the violations of one checker run.
type collector struct{ vs Violations }

func (c *collector) add(inv int, reader string, pos uint64, rec string, format string, args ...any) {
	c.vs = append(c.vs, Violation{Invariant: inv, Reader: reader, Pos: pos, Record: rec, Msg: fmt.Sprintf(format, args...)})
}

// err returns the violations as an error, or nil when there are none (never
// a nil Violations inside a non-nil error).
func (c *collector) err() error {
	if len(c.vs) == 0 {
		return nil
	}
	return c.vs
}
