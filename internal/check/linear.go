package check

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// RealTime checks invariant 3 directly, with a clearer report than a
// linearizability checker gives: if acknowledged append A returned before
// acknowledged append B was invoked, A's position is lower.
func RealTime(appends []Append) error {
	var c collector
	var ok []Append
	for _, a := range appends {
		if a.Outcome == Acked {
			ok = append(ok, a)
		}
	}
	byRet := slices.Clone(ok)
	slices.SortFunc(byRet, func(a, b Append) int { return cmp64(int64(a.Return), int64(b.Return)) })
	byCall := ok
	slices.SortFunc(byCall, func(a, b Append) int { return cmp64(int64(a.Call), int64(b.Call)) })
	// Sweep B by invoke time, folding in every A that returned strictly
	// before B was invoked; keep the highest position among them.
	best, i := -1, 0
	for _, b := range byCall {
		for i < len(byRet) && byRet[i].Return < b.Call {
			if best < 0 || byRet[i].Position > byRet[best].Position {
				best = i
			}
			i++
		}
		if best >= 0 && byRet[best].Position >= b.Position {
			a := byRet[best]
			c.add(3, "", b.Position, b.Record, "real-time order violated: %v got position %d, but %v, invoked after it returned, got position %d",
				a, a.Position, b, b.Position)
		}
	}
	return c.err()
}

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// The porcupine model of the log: the state is how many positions are
// taken; an append takes the next one, and a read sees a position only
// once it is taken. What a read returned is checked by Reads. A log with
// no-ops is checked on ranks (see Linearizable).

type appendInput struct{ record string }

type readInput struct{ pos uint64 }

// Model is the porcupine model Linearizable checks against.
var Model = porcupine.Model{
	Init: func() any { return uint64(0) },
	Step: func(state, input, output any) (bool, any) {
		n := state.(uint64)
		switch in := input.(type) {
		case appendInput:
			if output.(uint64) == n {
				return true, n + 1
			}
			return false, n
		case readInput:
			return in.pos < n, n
		}
		panic(fmt.Sprintf("check: unknown input %T", input))
	},
	DescribeOperation: func(input, output any) string {
		switch in := input.(type) {
		case appendInput:
			return fmt.Sprintf("append(%s) -> %d", in.record, output)
		case readInput:
			return fmt.Sprintf("read(%d) -> %s", in.pos, output)
		}
		return fmt.Sprint(input, output)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%d positions taken", state) },
}

// NotLinearizable is Linearizable's error when the history has no
// linearization.
type NotLinearizable struct {
	Ops  int
	Info porcupine.LinearizationInfo
}

func (e *NotLinearizable) Error() string {
	return fmt.Sprintf("invariant 3: history of %d operations is not linearizable", e.Ops)
}

// Visualize writes porcupine's HTML view of the failed check to w.
func (e *NotLinearizable) Visualize(w io.Writer) error {
	return porcupine.Visualize(Model, e.Info, w)
}

// Operations returns the porcupine operations of the acknowledged appends
// and successful reads; the others have no output to check.
func Operations(appends []Append, reads []Read) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, a := range appends {
		if a.Outcome != Acked {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: int(a.Client), Input: appendInput{a.Record},
			Call: int64(a.Call), Output: a.Position, Return: int64(a.Return)})
	}
	for _, r := range reads {
		if r.Err != nil {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: int(r.Client), Input: readInput{r.Pos},
			Call: int64(r.Call), Output: r.Record, Return: int64(r.Return)})
	}
	return ops
}

// Linearizable checks invariant 3 with porcupine over the acknowledged
// appends and successful reads, searching for at most timeout (0: no
// bound). dense says the mode has no no-ops. With no-ops, every position
// is replaced by its rank among the acknowledged positions (see ranked
// for reads): the order
// is the same, two appends at one position still share a rank, and the
// search stays as cheap as for a log without gaps, where letting an
// append take any free position would make it explode. It returns a
// *NotLinearizable when there is no linearization (its visualization
// shows ranks when positions were ranked), and an error saying so when
// the search ran out of time.
func Linearizable(appends []Append, reads []Read, dense bool, timeout time.Duration) error {
	if !dense {
		appends, reads = ranked(appends, reads)
	}
	ops := Operations(appends, reads)
	res, info := porcupine.CheckOperationsVerbose(Model, ops, timeout)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return fmt.Errorf("invariant 3: linearizability check of %d operations timed out after %v", len(ops), timeout)
	}
	return &NotLinearizable{Ops: len(ops), Info: info}
}

// ranked returns copies of appends and reads with positions replaced by
// their ranks among the acknowledged positions.
func ranked(appends []Append, reads []Read) ([]Append, []Read) {
	var taken []uint64
	for _, a := range appends {
		if a.Outcome == Acked {
			taken = append(taken, a.Position)
		}
	}
	slices.Sort(taken)
	taken = slices.Compact(taken)
	as := slices.Clone(appends)
	for i := range as {
		if as[i].Outcome == Acked {
			r, _ := slices.BinarySearch(taken, as[i].Position)
			as[i].Position = uint64(r)
		}
	}
	// A read of a position sees every position below it taken: an
	// acknowledged one is its own rank; another (a no-op, a record whose
	// append did not return) needs only the acknowledged ones below it.
	var rs []Read
	for _, r := range reads {
		i, found := slices.BinarySearch(taken, r.Pos)
		switch {
		case found:
			r.Pos = uint64(i)
		case i > 0:
			r.Pos = uint64(i - 1)
		default:
			continue // nothing acknowledged below it: no constraint
		}
		rs = append(rs, r)
	}
	return as, rs
}
