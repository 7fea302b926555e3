package shard

import (
	"reflect"
	"testing"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
	"github.com/augur-log/augur/internal/segment"
)

// fetchAll runs one catch-up of plan's gaps from src, as an owner does:
// one batch per fetch, checksums as the source computes them, the tail up
// to src's length, from src's start if that is past the fetch's first
// index (as the storage server serves a rejoin); then the source's runs
// from plan.RunsFrom.
func fetchAll(t *testing.T, r *Replica[string], plan RejoinPlan, src *MemLog) {
	t.Helper()
	c := mustCatchUp(t, CatchUpConfig{Gaps: plan.Gaps, Sources: 1})
	for !c.Done() {
		f, ok := c.Next()
		if !ok {
			t.Fatal("catch-up stalled with a live source")
		}
		first := max(f.First, src.Start())
		es := entries(t, src, first, min(f.End, src.Len()))
		sums := make([]uint32, len(es))
		for i, e := range es {
			sums[i] = segment.Checksum(e)
		}
		if len(es) > 0 || first > f.First {
			w, ok, err := c.Received(t0, first, es, sums, 0)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				if err := r.Repair(w); err != nil {
					t.Fatal(err)
				}
			}
		}
		if c.Fetching() {
			c.StreamEnded()
		}
	}
	var runs []segment.Run
	for _, run := range src.Runs(0) {
		if run.LocalStart+run.Count > plan.RunsFrom {
			runs = append(runs, run)
		}
	}
	out := &Output[string]{}
	if err := r.AssignFetched(runs, out); err != nil {
		t.Fatal(err)
	}
	r.Tick(t0, out)
}

func cutOf(index, from, n, g uint64) Cut {
	return Cut{Index: index, Start: g, End: g + n, Slice: cut.Slice{Shard: 1, LocalStart: from, GlobalStart: g, Count: n}}
}

// TestRejoinOldPrimaryDropsItsReplacedTailAndRejoins: a primary stores
// (7,3) and (7,4) that never reach its backup, and restarts. The backup,
// now primary of configuration 1, stores other entries at those indexes
// and a cut orders them. The restarted copy drops its tail, copies the
// shard's entries and positions from the new primary (a cut that orders
// entries it does not hold yet waits for them instead of making it lost),
// asks to rejoin only once it holds all the cuts it heard of order, and
// becomes a backup of the configuration that takes it in, from the join
// of its primary.
func TestRejoinOldPrimaryDropsItsReplacedTailAndRejoins(t *testing.T) {
	pr := newPair(t, 1, nil)
	pr.append("c", 7, 1, 2)
	pr.p.BackupAcked(bk(0), 0, pr.deliver(0))
	pr.cutAt(1, 0, 2, 100)
	pr.append("c", 7, 3, 4) // never reaches the backup
	if err := pr.plog.Sync(); err != nil {
		t.Fatal(err)
	}
	np, nlog := pr.backups[0], pr.blogs[0]
	np.Reconfigure(Membership{Epoch: 1, Role: RolePrimary}, t0, &Output[string]{})
	out := &Output[string]{}
	np.Propose([]Append[string]{{Waiter: "d", Entry: rec(8, 1)}, {Waiter: "d", Entry: rec(8, 2)}, {Waiter: "d", Entry: rec(8, 3)}}, out)
	np.Store(out)
	c2 := cutOf(2, 2, 2, 102)
	np.ApplyCut(c2, &Output[string]{})

	pr.plog.Crash()
	old := NewReplica[string](Config{ID: 1, Role: RoleRecovered, LastCut: 1}, pr.plog)
	if old.Rejoining() {
		t.Fatal("a copy that heard of no configuration leaving it out rejoins")
	}
	old.Reconfigure(Membership{Epoch: 1, Role: RoleFenced}, t0, &Output[string]{})
	if !old.Rejoining() {
		t.Fatal("a copy left out of a live shard does not rejoin")
	}
	plan, err := old.PrepareRejoin()
	if err != nil {
		t.Fatal(err)
	}
	if want := (RejoinPlan{Epoch: 1, Gaps: []Gap{{First: 2, End: plan.Gaps[0].End, Tail: true}}, RunsFrom: 2}); !reflect.DeepEqual(plan, want) || pr.plog.Len() != 2 {
		t.Fatalf("plan %+v with the log at %d, want %+v and the replaced tail dropped", plan, pr.plog.Len(), want)
	}
	// Cut 2 reaches the copy before the entries it orders.
	out = &Output[string]{}
	old.ApplyCut(c2, out)
	if old.Lost() && len(out.Problems) > 0 {
		t.Fatalf("a rejoining copy was lost for a cut it does not hold yet: %v", out.Problems)
	}
	if _, _, ok := old.RejoinReady(); ok {
		t.Fatal("ready to rejoin without the entries cut 2 orders")
	}
	fetchAll(t, old, plan, nlog)
	// Meanwhile the shard went on: one more entry, ordered by cut 3.
	out = &Output[string]{}
	np.Propose([]Append[string]{{Waiter: "d", Entry: rec(8, 4)}}, out)
	np.Store(out)
	c3 := cutOf(3, 4, 2, 104)
	np.ApplyCut(c3, &Output[string]{})
	old.ApplyCut(c3, &Output[string]{})
	if _, _, ok := old.RejoinReady(); ok {
		t.Fatal("ready to rejoin without the entry cut 3 orders")
	}
	plan, err = old.PrepareRejoin()
	if err != nil {
		t.Fatal(err)
	}
	fetchAll(t, old, plan, nlog)
	epoch, held, ok := old.RejoinReady()
	if !ok || epoch != 1 || held != 6 {
		t.Fatalf("RejoinReady = %d, %d, %v; want configuration 1, 6 entries", epoch, held, ok)
	}
	if got, want := entries(t, pr.plog, 0, 6), entries(t, nlog, 0, 6); !reflect.DeepEqual(got, want) {
		t.Fatalf("rejoining copy holds %+v, the shard %+v", got, want)
	}
	for local, want := range map[uint64]uint64{1: 101, 3: 103, 5: 105} {
		if g, ok := pr.plog.GlobalOf(local); !ok || g != want {
			t.Fatalf("local %d at %d (%v), want %d", local, g, ok, want)
		}
	}

	// Configuration 2 takes it in; its primary reaches it first.
	out = &Output[string]{}
	np.Reconfigure(Membership{Epoch: 2, Role: RolePrimary, Backups: []string{"old"}}, t0, out)
	length, bheld, err := old.Join(2)
	if err != nil || length != 6 || bheld != 6 || old.Role() != RoleBackup {
		t.Fatalf("join: %d, %d, %v as %v; want 6, 6 as a backup", length, bheld, err, old.Role())
	}
	np.BackupJoined("old", 2, length, bheld, nlog.Len(), nil, t0, out)
	out = &Output[string]{}
	np.Propose([]Append[string]{{Waiter: "d", Entry: rec(8, 5)}}, out)
	if len(out.Replicate) != 1 {
		t.Fatalf("the primary replicates %d batches after the join, want 1", len(out.Replicate))
	}
	b := out.Replicate[0]
	if _, err := old.Replicated(2, b.First, b.Entries); err != nil {
		t.Fatalf("the rejoined copy refused its primary's batch: %v", err)
	}
	np.Store(out)
	if d := np.Durable(); d != 6 {
		t.Fatalf("durable %d before the rejoined copy acknowledged the new entry, want 6", d)
	}
	if a, _ := np.BackupAcked("old", 2, 7); !a || np.Durable() != 7 {
		t.Fatalf("durable %d after the rejoined copy acknowledged, want 7", np.Durable())
	}
	// The membership arrives later and changes nothing.
	if old.Reconfigure(Membership{Epoch: 2, Role: RoleBackup}, t0, &Output[string]{}); old.Role() != RoleBackup || old.Epoch() != 2 {
		t.Fatalf("the membership after the join: %v", old.Role())
	}
}

// askedInThree returns a recovered copy over l, left out by configuration
// 3, that caught up (nothing is ordered) and asked to rejoin in it.
func askedInThree(t *testing.T, l Log) *Replica[string] {
	t.Helper()
	r := NewReplica[string](Config{ID: 1, Role: RoleRecovered}, l)
	r.Reconfigure(Membership{Epoch: 3, Role: RoleFenced}, t0, &Output[string]{})
	if _, err := r.PrepareRejoin(); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := r.RejoinReady(); !ok {
		t.Fatal("a copy with nothing ordered is not ready")
	}
	return r
}

// TestRejoinOnlyAfterAsking checks that a copy out of the configuration
// becomes a backup only of the configuration after the one it asked to
// rejoin in: not unasked, and not of a later one.
func TestRejoinOnlyAfterAsking(t *testing.T) {
	l := NewMemLog()
	if _, err := l.Append([]segment.Entry{rec(1, 1), rec(1, 2)}); err != nil {
		t.Fatal(err)
	}
	r := NewReplica[string](Config{ID: 1, Role: RoleRecovered}, l)
	r.Reconfigure(Membership{Epoch: 3, Role: RoleFenced}, t0, &Output[string]{})
	if _, _, err := r.Join(4); err == nil || r.Role() != RoleRecovered {
		t.Fatalf("a copy that never asked joined: %v as %v", err, r.Role())
	}
	if r.Reconfigure(Membership{Epoch: 4, Role: RoleBackup}, t0, &Output[string]{}) || r.Role() != RoleRecovered {
		t.Fatalf("a copy that never asked took a backup's place: %v", r.Role())
	}
	r2 := askedInThree(t, l)
	if _, _, err := r2.Join(5); err == nil || r2.Role() != RoleRecovered {
		t.Fatalf("joined by the primary of configuration 5 after asking in 3: %v", err)
	}
	// A newer configuration that leaves it out makes the ask stale.
	r2.Reconfigure(Membership{Epoch: 4, Role: RoleFenced}, t0, &Output[string]{})
	if _, _, ok := r2.RejoinReady(); ok || !r2.Rejoining() {
		t.Fatalf("ask of configuration 3 still good in 4 (ready %v, rejoining %v)", ok, r2.Rejoining())
	}
}

// TestConfigurationOfAnEarlierRunTakesNoCopyIn: a copy asked to rejoin
// configuration 3; configuration 4 comes naming its server as it ran
// before a restart (a Join decided for that run, committed after the
// restart). It does not take the copy in, nor leave its tail out, and a
// copy a primary of configuration 4 joined before it heard of it is
// fenced once it does.
func TestConfigurationOfAnEarlierRunTakesNoCopyIn(t *testing.T) {
	for _, joinFirst := range []bool{false, true} {
		l := NewMemLog()
		if _, err := l.Append([]segment.Entry{rec(1, 1), rec(1, 2)}); err != nil {
			t.Fatal(err)
		}
		r := askedInThree(t, l)
		if joinFirst {
			if _, _, err := r.Join(4); err != nil || r.Role() != RoleBackup {
				t.Fatalf("the primary of configuration 4 could not join the copy that asked in 3: %v", err)
			}
		}
		r.Reconfigure(Membership{Epoch: 4, Role: RoleBackup, EarlierRun: true}, t0, &Output[string]{})
		if want := map[bool]Role{false: RoleRecovered, true: RoleFenced}[joinFirst]; r.Role() != want {
			t.Fatalf("joined first %v: the configuration of an earlier run left the copy %v, want %v", joinFirst, r.Role(), want)
		}
	}
}

// TestSpecPrimaryVouchesOnlyOnceEveryReplicaHoldsWhatItAcknowledged: a
// speculative primary alone makes entries durable (acknowledged,
// streamed) past what a joining replica holds; in the configuration that
// takes the replica in, it reports nothing (so the leader confirms
// nothing, control.ReconfigCommand) until the replica holds all of them.
func TestSpecPrimaryVouchesOnlyOnceEveryReplicaHoldsWhatItAcknowledged(t *testing.T) {
	ord := NewSpeculative(1, 0, testFillAfter, testIdleAfter, t0)
	ord.SetWindows([]fixante.Window{specWindow()}, false)
	pr := newPair(t, 0, ord)
	pr.append("s", 7, 1, 2, 3)
	if d := pr.p.Durable(); d != 3 {
		t.Fatalf("a primary alone: durable %d, want 3", d)
	}
	out := &Output[string]{}
	pr.p.Reconfigure(Membership{Epoch: 2, Role: RolePrimary, Backups: []string{"r"}, Ordering: ord}, t0, out)
	if _, ok := pr.p.Report(); ok {
		t.Fatal("reported before the joined replica answered the join")
	}
	out = &Output[string]{}
	pr.p.BackupJoined("r", 2, 1, 1, 3, nil, t0, out)
	if len(out.Resend) != 1 || out.Resend[0] != (Resend{Backup: "r", From: 1, To: 3}) {
		t.Fatalf("resend %+v, want [1, 3) to r", out.Resend)
	}
	if rep, ok := pr.p.Report(); ok {
		t.Fatalf("reported %+v while the joined replica lacks acknowledged entries [1, 3)", rep)
	}
	pr.p.BackupAcked("r", 2, 2)
	if rep, ok := pr.p.Report(); ok {
		t.Fatalf("reported %+v while the joined replica lacks acknowledged entry 2", rep)
	}
	pr.p.BackupAcked("r", 2, 3)
	if rep, ok := pr.p.Report(); !ok || rep.Epoch != 2 {
		t.Fatalf("report %+v %v once the replica holds everything acknowledged, want one in epoch 2", rep, ok)
	}
}

// TestEagerPrimaryReportsWhatEveryReplicaHolds: in eager order nothing is
// acknowledged before a cut orders it, so a primary reports what every
// replica holds as soon as its backups joined.
func TestEagerPrimaryReportsWhatEveryReplicaHolds(t *testing.T) {
	pr := newPair(t, 0, nil)
	pr.append("s", 7, 1, 2, 3)
	out := &Output[string]{}
	pr.p.Reconfigure(Membership{Epoch: 2, Role: RolePrimary, Backups: []string{"r"}}, t0, out)
	pr.p.BackupJoined("r", 2, 1, 1, 3, nil, t0, out)
	if rep, ok := pr.p.Report(); !ok || rep != (Report{Length: 1, Epoch: 2}) {
		t.Fatalf("report %+v %v, want length 1 in epoch 2", rep, ok)
	}
}

// TestRejoinedFencedPrimaryAcknowledgesWhatItHolds: a primary paused past
// the failure timeout is fenced while its process runs, then rejoins as a
// backup of its successor. It must acknowledge what its log holds, not the
// least of that and what its own backup acknowledged before the pause: a
// copy that keeps its old primary's view of its backups holds its new
// primary's durable length, and so the shard's reports and cuts, still for
// good (the fault campaign's stall after SIGCONT of a primary).
func TestRejoinedFencedPrimaryAcknowledgesWhatItHolds(t *testing.T) {
	pr := newPair(t, 1, nil)
	pr.append("c", 7, 1, 2)
	pr.p.BackupAcked(bk(0), 0, pr.deliver(0))
	pr.cutAt(1, 0, 2, 100)
	pr.append("c", 7, 3) // never reaches the backup: the primary pauses
	old := pr.p

	np, nlog := pr.backups[0], pr.blogs[0]
	np.Reconfigure(Membership{Epoch: 1, Role: RolePrimary}, t0, &Output[string]{})
	out := &Output[string]{}
	np.Propose([]Append[string]{{Waiter: "d", Entry: rec(8, 1)}, {Waiter: "d", Entry: rec(8, 2)}}, out)
	np.Store(out)
	c2 := cutOf(2, 2, 2, 102)
	np.ApplyCut(c2, &Output[string]{})

	// The old primary resumes and hears of configuration 1 without it.
	out = &Output[string]{}
	old.Reconfigure(Membership{Epoch: 1, Role: RoleFenced}, t0, out)
	if old.Role() != RoleFenced || !old.Rejoining() {
		t.Fatalf("the resumed primary is a %v (rejoining %v), want a fenced copy that rejoins", old.Role(), old.Rejoining())
	}
	old.ApplyCut(c2, &Output[string]{})
	plan, err := old.PrepareRejoin()
	if err != nil {
		t.Fatal(err)
	}
	fetchAll(t, old, plan, nlog)
	if epoch, held, ok := old.RejoinReady(); !ok || epoch != 1 || held != 4 {
		t.Fatalf("RejoinReady = %d, %d, %v; want configuration 1, 4 entries", epoch, held, ok)
	}

	// Configuration 2 takes it in; the membership comes first here.
	np.Reconfigure(Membership{Epoch: 2, Role: RolePrimary, Backups: []string{"old"}}, t0, &Output[string]{})
	if !old.Reconfigure(Membership{Epoch: 2, Role: RoleBackup}, t0, &Output[string]{}) || old.Role() != RoleBackup {
		t.Fatalf("the configuration that takes it in left it a %v", old.Role())
	}
	length, held, err := old.Join(2)
	if err != nil || length != 4 || held != 4 {
		t.Fatalf("join: %d, %d, %v; want 4, 4", length, held, err)
	}
	out = &Output[string]{}
	np.BackupJoined("old", 2, length, held, nlog.Len(), nil, t0, out)
	for seq := uint64(3); seq <= 5; seq++ {
		out = &Output[string]{}
		np.Propose([]Append[string]{{Waiter: "d", Entry: rec(8, seq)}}, out)
		b := out.Replicate[0]
		if _, err := old.Replicated(2, b.First, b.Entries); err != nil {
			t.Fatalf("the rejoined copy refused its primary's batch: %v", err)
		}
		np.Store(out)
		acked := old.Durable()
		if want := b.First + 1; acked != want {
			t.Fatalf("the rejoined copy acknowledges %d entries holding %d", acked, want)
		}
		np.BackupAcked("old", 2, acked)
		if d := np.Durable(); d != b.First+1 {
			t.Fatalf("the new primary's durable length is %d with every replica holding %d", d, b.First+1)
		}
	}
	if rep, ok := np.Report(); !ok || rep.Length != 7 {
		t.Fatalf("report %+v %v, want length 7", rep, ok)
	}
}
