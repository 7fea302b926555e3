package shard

import (
	"reflect"
	"testing"

	"github.com/augur-log/augur/internal/segment"
)

// trimmedShard is a primary and its backup holding (7,1)..(7,6), one
// frame each, ordered by cut 1 (local [0, 2) at 100), cut 2 ([2, 5) at
// 102) and cut 3 ([5, 6) at 105), both trimmed below global 103: their
// logs start at local 3, inside cut 2's run.
func trimmedShard(t *testing.T) *pair {
	t.Helper()
	pr := newPair(t, 1, nil)
	for q := uint64(1); q <= 6; q++ {
		pr.append("c", 7, q)
	}
	pr.p.BackupAcked(bk(0), 0, pr.deliver(0))
	pr.cutAt(1, 0, 2, 100)
	pr.cutAt(2, 2, 3, 102)
	pr.cutAt(3, 5, 1, 105)
	for _, l := range []*MemLog{pr.plog, pr.blogs[0]} {
		if err := l.Trim(103); err != nil {
			t.Fatal(err)
		}
		if l.Start() != 3 {
			t.Fatalf("fixture: trimmed log starts at %d, want 3", l.Start())
		}
	}
	return pr
}

// newCopy is a copy made empty to join the shard (a server added to its
// group), told of configuration epoch that leaves it out.
func newCopy(t *testing.T, orderedAtLeast, epoch uint64) (*Replica[string], *MemLog) {
	t.Helper()
	l := NewMemLog()
	r := NewReplica[string](Config{ID: 1, Role: RoleRecovered, OrderedAtLeast: orderedAtLeast}, l)
	r.Reconfigure(Membership{Epoch: epoch, Role: RoleFenced}, t0, &Output[string]{})
	if !r.Rejoining() {
		t.Fatal("a new copy left out of a live shard does not rejoin")
	}
	return r, l
}

// TestNewCopyStartsWhereTheTrimmedSourceStarts: a copy made empty to join
// a trimmed shard starts its log at the source's start (3), takes the
// positions of the run across it from there on, reads nothing below it,
// and is ready to rejoin holding the shard from there.
func TestNewCopyStartsWhereTheTrimmedSourceStarts(t *testing.T) {
	pr := trimmedShard(t)
	src := pr.blogs[0]
	nc, nlog := newCopy(t, 6, 1)
	plan, err := nc.PrepareRejoin()
	if err != nil {
		t.Fatal(err)
	}
	fetchAll(t, nc, plan, src)
	if nlog.Start() != 3 || nlog.Len() != 6 || nlog.Ordered() != 6 {
		t.Fatalf("new copy: start, len, ordered = %d, %d, %d; want 3, 6, 6", nlog.Start(), nlog.Len(), nlog.Ordered())
	}
	if got, want := entries(t, nlog, 0, 6), entries(t, src, 0, 6); !reflect.DeepEqual(got, want) {
		t.Fatalf("new copy holds %+v, the source %+v", got, want)
	}
	for local, want := range map[uint64]uint64{3: 103, 4: 104, 5: 105} {
		if g, ok := nlog.GlobalOf(local); !ok || g != want {
			t.Fatalf("local %d at %d (%v), want %d", local, g, ok, want)
		}
	}
	if g, ok := nlog.GlobalOf(2); ok {
		t.Fatalf("local 2, below the copy's start, has position %d", g)
	}
	epoch, held, ok := nc.RejoinReady()
	if !ok || epoch != 1 || held != 6 {
		t.Fatalf("RejoinReady = %d, %d, %v; want configuration 1, 6 entries", epoch, held, ok)
	}
	// Its primary joins it; a cut after that orders a new entry on it.
	pr.p.Reconfigure(Membership{Epoch: 2, Role: RolePrimary, Backups: []string{bk(0), "new"}}, t0, &Output[string]{})
	if length, _, err := nc.Join(2); err != nil || length != 6 || nc.Role() != RoleBackup {
		t.Fatalf("join: %d, %v as %v; want 6 as a backup", length, err, nc.Role())
	}
	out := &Output[string]{}
	nc.ApplyCut(Cut{Index: 4, Start: 106, End: 106}, out)
	if nc.Lost() || len(out.Problems) > 0 {
		t.Fatalf("a joined copy that starts at 3 is lost: %v", out.Problems)
	}
}

// TestNewCopyStartsOverWhenTheTrimPassesIt: the cluster trims past what a
// new copy fetched so far (its source can no longer serve from its
// length): the next round starts the copy over at the source's new start.
func TestNewCopyStartsOverWhenTheTrimPassesIt(t *testing.T) {
	pr := trimmedShard(t)
	src := pr.blogs[0]
	nc, nlog := newCopy(t, 6, 1)
	plan, err := nc.PrepareRejoin()
	if err != nil {
		t.Fatal(err)
	}
	// Round 1 copies local 3 from the source's start, then the source
	// trims past it and refuses the rest.
	c := mustCatchUp(t, CatchUpConfig{Gaps: plan.Gaps, Sources: 1})
	if _, ok := c.Next(); !ok {
		t.Fatal("no fetch")
	}
	es := entries(t, src, 3, 4)
	w, ok, err := c.Received(t0, 3, es, []uint32{segment.Checksum(es[0])}, 0)
	if err != nil || !ok || !w.Rebase {
		t.Fatalf("batch past the copy's length: %+v %v %v; want a rebase write", w, ok, err)
	}
	if err := nc.Repair(w); err != nil {
		t.Fatal(err)
	}
	if err := src.Trim(105); err != nil || src.Start() != 5 {
		t.Fatalf("trim the source: start %d, %v", src.Start(), err)
	}
	c.Ended(true)
	if !c.Done() {
		t.Fatal("the open tail is not done once its only source lacks the rest")
	}
	if _, _, ok := nc.RejoinReady(); ok {
		t.Fatal("ready holding local 3 alone")
	}
	// Round 2.
	plan, err = nc.PrepareRejoin()
	if err != nil {
		t.Fatal(err)
	}
	if plan.Gaps[0].First != 4 {
		t.Fatalf("round 2 fetches from %d, want the copy's length 4", plan.Gaps[0].First)
	}
	fetchAll(t, nc, plan, src)
	if nlog.Start() != 5 || nlog.Len() != 6 || nlog.Ordered() != 6 {
		t.Fatalf("new copy: start, len, ordered = %d, %d, %d; want 5, 6, 6", nlog.Start(), nlog.Len(), nlog.Ordered())
	}
	if g, ok := nlog.GlobalOf(5); !ok || g != 105 {
		t.Fatalf("local 5 at %d (%v), want 105", g, ok)
	}
	if _, _, ok := nc.RejoinReady(); !ok {
		t.Fatal("not ready holding the shard from the source's start")
	}
}

// TestCopyOfATrimmedShardStoresARetriedTrimmedAppendOnceReadable: the new
// copy becomes the shard's only replica. A retry of an append it holds is
// answered from its log; a retry of one below its start (trimmed before
// the client got its answer) cannot be told apart from a new append and
// is stored again, past the trim point: every reader sees it once (no
// server serves positions below the trim point), at the position of the
// retry's answer.
func TestCopyOfATrimmedShardStoresARetriedTrimmedAppendOnceReadable(t *testing.T) {
	pr := trimmedShard(t)
	nc, nlog := newCopy(t, 6, 1)
	plan, err := nc.PrepareRejoin()
	if err != nil {
		t.Fatal(err)
	}
	fetchAll(t, nc, plan, pr.blogs[0])
	if _, _, ok := nc.RejoinReady(); !ok {
		t.Fatal("not ready")
	}
	if _, _, err := nc.Join(2); err != nil {
		t.Fatal(err)
	}
	out := &Output[string]{}
	nc.Reconfigure(Membership{Epoch: 3, Role: RolePrimary}, t0, out)
	if nc.Role() != RolePrimary || out.Failed != nil {
		t.Fatalf("promotion of a copy that starts at 3: %v, %v", nc.Role(), out.Failed)
	}
	out = &Output[string]{}
	nc.Propose([]Append[string]{{Waiter: "r", Entry: rec(7, 5)}, {Waiter: "r", Entry: rec(7, 1)}}, out)
	nc.Store(out)
	if len(out.Answers) != 1 || out.Answers[0] != (Answer[string]{Waiter: "r", Seq: 5, Verdict: Ordered, Position: 104}) {
		t.Fatalf("retry of an append the copy holds: %+v, want ordered at 104", out.Answers)
	}
	if nlog.Len() != 7 {
		t.Fatalf("log holds %d entries, want 7: the trimmed append stored again", nlog.Len())
	}
	out = &Output[string]{}
	nc.ApplyCut(Cut{Index: 4, Start: 106, End: 107, Slice: cutOf(4, 6, 1, 106).Slice}, out)
	if len(out.Answers) != 1 || out.Answers[0].Seq != 1 || out.Answers[0].Position != 106 {
		t.Fatalf("answers %+v, want the retried trimmed append at 106", out.Answers)
	}
	// What readers can read (positions from the trim point 103 on) holds
	// every append once.
	seen := map[uint64]int{}
	for _, e := range entries(t, nlog, 0, nlog.Len()) {
		seen[e.Seq]++
	}
	if want := map[uint64]int{1: 1, 4: 1, 5: 1, 6: 1}; !reflect.DeepEqual(seen, want) {
		t.Fatalf("readable appends %v, want %v", seen, want)
	}
}

// TestCatchUpRebasesOnlyAnOpenTail: a batch past the copy's length starts
// the log over only in a rejoin's open tail; a damaged range or a closed
// gap must be copied whole, so such a batch is refused there.
func TestCatchUpRebasesOnlyAnOpenTail(t *testing.T) {
	e := rec(1, 1)
	sums := []uint32{segment.Checksum(e)}
	for _, g := range []Gap{{First: 2, End: 5, InPlace: true}, {First: 2, End: 5}} {
		c := mustCatchUp(t, CatchUpConfig{Gaps: []Gap{g}, Sources: 1})
		c.Next()
		if _, _, err := c.Received(t0, 4, []segment.Entry{e}, sums, 0); err == nil {
			t.Fatalf("gap %+v took a batch past its first index", g)
		}
	}
	c := mustCatchUp(t, CatchUpConfig{Gaps: []Gap{{First: 2, End: 1 << 62, Tail: true}}, Sources: 1})
	c.Next()
	w, ok, err := c.Received(t0, 9, nil, nil, 0)
	if err != nil || !ok || !w.Rebase || w.First != 9 || len(w.Entries) != 0 {
		t.Fatalf("empty batch from a source whose log starts at 9: %+v %v %v, want a rebase at 9", w, ok, err)
	}
	if w, ok, err = c.Received(t0, 9, []segment.Entry{e}, sums, 0); err != nil || !ok || w.Rebase || w.First != 9 {
		t.Fatalf("the next batch: %+v %v %v, want an append at 9", w, ok, err)
	}
}

// TestMemLogRebaseSurvivesACrash: a MemLog started at a base keeps it
// through a crash, as a store's base file does.
func TestMemLogRebaseSurvivesACrash(t *testing.T) {
	m := NewMemLog()
	mustAppend(t, m, rec(1, 1))
	if err := m.Rebase(0); err == nil {
		t.Fatal("rebase below the length taken")
	}
	if err := m.Rebase(10); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, m, rec(1, 2))
	m.Crash()
	if m.Start() != 10 || m.Len() != 10 || m.Ordered() != 10 {
		t.Fatalf("after a crash: start, len, ordered = %d, %d, %d; want 10 each", m.Start(), m.Len(), m.Ordered())
	}
}
