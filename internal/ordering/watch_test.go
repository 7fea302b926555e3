package ordering

import (
	"testing"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
)

func apply(t *testing.T, st *control.State, c control.Command) {
	t.Helper()
	if _, ok := st.Apply(c); !ok {
		t.Fatalf("command %+v changed nothing", c)
	}
}

func register(group string, ids ...string) control.Command {
	var reps []control.Replica
	for _, id := range ids {
		reps = append(reps, control.Replica{ID: id, Incarnation: 1})
	}
	return control.Command{Register: &control.RegisterCommand{Group: group, Replicas: reps}}
}

func TestOnlyABackupsRoutineEventsGather(t *testing.T) {
	st := control.New("test")
	apply(t, st, register("a", "a1", "a2"))
	seen := func(server string) (bool, uint64) { return st.Primary(server), st.MembershipVersion }

	// Cuts: a backup's gather, a primary's and an unnamed watcher's do not.
	a1, mv := seen("a1")
	a2, _ := seen("a2")
	apply(t, st, control.Command{Cut: &control.CutCommand{Lengths: []cut.Length{{Shard: 0, Length: 2}}}})
	if !mayGather("a2", a2, mv, st) {
		t.Error("a backup's cut did not gather")
	}
	if mayGather("a1", a1, mv, st) || mayGather("", false, mv, st) {
		t.Error("a primary's or an unnamed watcher's cut gathered")
	}

	// A new shard whose primary was a backup: that server must hear at once.
	b1, mv := seen("a2")
	apply(t, st, register("b", "a2", "b2"))
	if mayGather("a2", b1, mv, st) {
		t.Error("the registration that made a server a primary gathered")
	}

	// The finalization of shard 0: its primary, which stops being one, and
	// its backup must both hear at once.
	a1, mv = seen("a1")
	b2, _ := seen("b2")
	apply(t, st, control.Command{Finalize: &control.FinalizeCommand{Shard: 0, Failed: true}})
	if mayGather("a1", a1, mv, st) {
		t.Error("the finalization of a primary's shard gathered")
	}
	if mayGather("b2", b2, mv, st) {
		t.Error("a change of the shard table gathered for a backup")
	}
}
