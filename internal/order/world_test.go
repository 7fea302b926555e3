package order

import (
	"fmt"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
)

var t0 = time.Unix(1000, 0)

const (
	tord    = time.Millisecond
	timeout = time.Second
)

// world is a committed control state and the Leader that watches it, at a
// time the test moves by hand.
type world struct {
	t   *testing.T
	st  *control.State
	l   *Leader
	now time.Time
	// ids holds the id of each cut the leader proposed.
	ids map[*control.CutCommand]string
}

// idPrefix starts the ids of the world's leader's commands.
const idPrefix = "leader/"

// newWorld registers shards with one replica each ("s0", "s1", ...) and
// then starts a leader with policy p at t0.
func newWorld(t *testing.T, st *control.State, shards int, p Policy) *world {
	w := &world{t: t, st: st, now: t0, ids: map[*control.CutCommand]string{}}
	for i := range shards {
		st.Apply(control.Command{Register: &control.RegisterCommand{Group: "g",
			Replicas: []control.Replica{{ID: fmt.Sprintf("s%d", i), Addr: "x", Incarnation: 1}}}})
	}
	w.l = NewLeader(p, timeout, st, w.now, idPrefix)
	w.settle()
	return w
}

// settle commits the empty command a new leader proposes first, so that
// it takes reports (see Leader.Settled).
func (w *world) settle() {
	w.t.Helper()
	for _, c := range w.l.Step(w.now).Propose {
		if c == (control.Command{ID: c.ID}) {
			w.apply(c, true)
		}
	}
	if !w.l.Settled() {
		w.t.Fatal("the new leader proposed no empty command to settle on")
	}
}

func (w *world) after(d time.Duration) { w.now = w.now.Add(d) }

// apply commits cmd; own says the leader proposed it. An own cut the
// leader proposed commits under the id it proposed it with.
func (w *world) apply(cmd control.Command, own bool) (news bool) {
	if own && cmd.Cut != nil && cmd.ID == "" {
		cmd.ID = w.ids[cmd.Cut]
	}
	w.st.Apply(cmd)
	return w.l.Applied(w.st, cmd, own, w.now)
}

func (w *world) report(shard cut.ShardID, length uint64) bool {
	var epoch uint64
	if sh := w.st.Shard(shard); sh != nil {
		epoch = sh.Epoch
	}
	return w.l.Report(Report{Shard: shard, Epoch: epoch, Length: length, Records: length}, w.now)
}

// cuts returns the cut commands among cmds.
func (w *world) cuts(cmds []control.Command) []*control.CutCommand {
	var out []*control.CutCommand
	for _, c := range cmds {
		if c.Cut != nil {
			w.ids[c.Cut] = c.ID
			out = append(out, c.Cut)
		}
	}
	return out
}

// proposal returns the command that proposed the cut c.
func (w *world) proposal(c *control.CutCommand) control.Command {
	return control.Command{Cut: c, ID: w.ids[c]}
}

// oneCut returns the only command of out, which must be a cut.
func (w *world) oneCut(out Output) *control.CutCommand {
	w.t.Helper()
	if len(out.Propose) != 1 || out.Propose[0].Cut == nil {
		w.t.Fatalf("at %v: proposals %+v, want one cut", w.now.Sub(t0), out.Propose)
	}
	return w.cuts(out.Propose)[0]
}

func (w *world) none(out Output) {
	w.t.Helper()
	if len(out.Propose) != 0 {
		w.t.Fatalf("at %v: proposed %+v, want nothing", w.now.Sub(t0), out.Propose)
	}
}
