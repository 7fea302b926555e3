package shard

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
	"github.com/augur-log/augur/internal/segment"
)

var t0 = time.Unix(1000, 0)

// pair is a primary with its backups, each on its own MemLog, wired by
// hand: the test decides when a batch reaches a backup and when its
// acknowledgement reaches the primary.
type pair struct {
	t       *testing.T
	p       *Replica[string]
	plog    *MemLog
	backups []*Replica[string]
	blogs   []*MemLog
	// inflight holds, per backup, the batches sent but not delivered.
	inflight [][]Batch
}

func newPair(t *testing.T, backups int, ord Ordering) *pair {
	pr := &pair{t: t, plog: NewMemLog(), inflight: make([][]Batch, backups)}
	pr.p = NewReplica[string](Config{ID: 1, Role: RolePrimary, Backups: names(backups), Ordering: ord}, pr.plog)
	for range backups {
		l := NewMemLog()
		pr.blogs = append(pr.blogs, l)
		pr.backups = append(pr.backups, NewReplica[string](Config{ID: 1, Role: RoleBackup}, l))
	}
	return pr
}

// send queues out's batches for every backup, as the owner's links do.
func (pr *pair) send(out *Output[string]) {
	for i := range pr.inflight {
		for _, b := range out.Replicate {
			// The batch's entries are the primary's staging buffer: a link
			// encodes them before the next Propose.
			pr.inflight[i] = append(pr.inflight[i], Batch{First: b.First, Entries: append([]segment.Entry(nil), b.Entries...)})
		}
	}
}

// append proposes records (client, seq) for waiter w, sends and stores them.
func (pr *pair) append(w string, client uint64, seqs ...uint64) *Output[string] {
	var batch []Append[string]
	for _, q := range seqs {
		batch = append(batch, Append[string]{Waiter: w, Entry: rec(client, q)})
	}
	out := &Output[string]{}
	pr.p.Propose(batch, out)
	pr.send(out)
	pr.p.Store(out)
	return out
}

// deliver hands backup i its queued batches and returns what it holds.
func (pr *pair) deliver(i int) uint64 {
	var held uint64
	for _, b := range pr.inflight[i] {
		if _, err := pr.backups[i].Replicated(0, b.First, b.Entries); err != nil {
			pr.t.Fatalf("backup %d: %v", i, err)
		}
		held = pr.backups[i].Durable()
	}
	pr.inflight[i] = nil
	return held
}

// cutAt applies a cut ordering local [from, from+n) at global position g to
// every copy; it returns the primary's output.
func (pr *pair) cutAt(index, from, n, g uint64) *Output[string] {
	c := Cut{Index: index, Start: g, End: g + n, Slice: cut.Slice{Shard: 1, LocalStart: from, GlobalStart: g, Count: n}}
	for _, b := range pr.backups {
		b.ApplyCut(c, &Output[string]{})
	}
	out := &Output[string]{}
	pr.p.ApplyCut(c, out)
	return out
}

func TestReplicaAnswersOnlyWhenDurableAndOrdered(t *testing.T) {
	pr := newPair(t, 1, nil)
	out := pr.append("s", 7, 1, 2)
	if len(out.Replicate) != 1 || out.Replicate[0].First != 0 || len(out.Replicate[0].Entries) != 2 {
		t.Fatalf("replicate %+v, want one batch of 2 from 0", out.Replicate)
	}
	if len(out.Answers) != 0 || out.Stored != 2 || !out.Unsynced {
		t.Fatalf("after store: %+v", out)
	}
	if out.Report || out.Durable {
		t.Fatal("a primary with a backup reported before the backup held anything")
	}
	if _, ok := pr.p.Report(); ok || pr.p.Durable() != 0 {
		t.Fatalf("report before the backup acknowledged: durable %d", pr.p.Durable())
	}
	held := pr.deliver(0)
	if held != 2 {
		t.Fatalf("backup holds %d, want 2", held)
	}
	advanced, step := pr.p.BackupAcked(bk(0), 0, held)
	if !advanced || step {
		t.Fatalf("ack: advanced %v step %v, want true false (eager)", advanced, step)
	}
	if rep, ok := pr.p.Report(); !ok || rep != (Report{Length: 2}) {
		t.Fatalf("report %+v %v, want length 2", rep, ok)
	}
	// A repeated acknowledgement changes nothing.
	if advanced, _ := pr.p.BackupAcked(bk(0), 0, 2); advanced {
		t.Fatal("the same acknowledgement advanced durable twice")
	}
	out = pr.cutAt(1, 0, 2, 40)
	want := []Answer[string]{{Waiter: "s", Seq: 1, Verdict: Ordered, Position: 40}, {Waiter: "s", Seq: 2, Verdict: Ordered, Position: 41}}
	if len(out.Answers) != 2 || out.Answers[0] != want[0] || out.Answers[1] != want[1] || !out.Changed || out.Ordered != 2 {
		t.Fatalf("cut output %+v, want answers %+v", out, want)
	}
	if pos, ok := pr.blogs[0].GlobalOf(1); !ok || pos != 41 {
		t.Fatalf("backup's position of local 1: %d %v", pos, ok)
	}
}

// TestReplicaHeldWhenSyncedCountsOnlySyncedEntries: with HeldWhenSynced a
// record counts toward durable, and so toward a report and an answer, only
// once every copy synced it; a power loss before that loses nothing that
// was reported.
func TestReplicaHeldWhenSyncedCountsOnlySyncedEntries(t *testing.T) {
	pr := &pair{t: t, plog: NewMemLog(), inflight: make([][]Batch, 1)}
	pr.p = NewReplica[string](Config{ID: 1, Role: RolePrimary, Backups: names(1), HeldWhenSynced: true}, pr.plog)
	pr.blogs = []*MemLog{NewMemLog()}
	pr.backups = []*Replica[string]{NewReplica[string](Config{ID: 1, Role: RoleBackup, HeldWhenSynced: true}, pr.blogs[0])}

	if out := pr.append("s", 7, 1, 2, 3); !out.Unsynced || out.Durable {
		t.Fatalf("after store: unsynced %v durable %v, want true false", out.Unsynced, out.Durable)
	}
	if held := pr.deliver(0); held != 0 {
		t.Fatalf("backup acknowledges %d before syncing, want 0", held)
	}
	if advanced, _ := pr.backups[0].Synced(); advanced {
		t.Fatal("backup advanced on a sync of nothing")
	}
	// The backup syncs: it now holds 3 and acknowledges them.
	if err := pr.blogs[0].Sync(); err != nil {
		t.Fatal(err)
	}
	if advanced, _ := pr.backups[0].Synced(); !advanced || pr.backups[0].Durable() != 3 {
		t.Fatalf("backup after its sync: durable %d, want 3", pr.backups[0].Durable())
	}
	// The primary has not synced: nothing is durable, nothing is reported.
	if advanced, _ := pr.p.BackupAcked(bk(0), 0, pr.backups[0].Durable()); advanced || pr.p.Durable() != 0 {
		t.Fatalf("primary durable %d before its own sync, want 0", pr.p.Durable())
	}
	if rep, _ := pr.p.Report(); rep.Length != 0 {
		t.Fatalf("report %+v before the primary synced, want length 0", rep)
	}
	// A power loss now loses the primary's unsynced records; none was
	// reported, so no cut can have ordered them.
	pr.plog.Crash()
	if n := pr.plog.Len(); n != 0 {
		t.Fatalf("primary's log after a power loss holds %d", n)
	}

	pr = &pair{t: t, plog: NewMemLog(), inflight: make([][]Batch, 1)}
	pr.p = NewReplica[string](Config{ID: 1, Role: RolePrimary, Backups: names(1), HeldWhenSynced: true}, pr.plog)
	pr.blogs = []*MemLog{NewMemLog()}
	pr.backups = []*Replica[string]{NewReplica[string](Config{ID: 1, Role: RoleBackup, HeldWhenSynced: true}, pr.blogs[0])}
	pr.append("s", 7, 1, 2)
	pr.deliver(0)
	if err := pr.plog.Sync(); err != nil {
		t.Fatal(err)
	}
	if advanced, _ := pr.p.Synced(); advanced {
		t.Fatal("primary advanced on its own sync while the backup holds nothing")
	}
	pr.blogs[0].Sync()
	pr.backups[0].Synced()
	if advanced, _ := pr.p.BackupAcked(bk(0), 0, pr.backups[0].Durable()); !advanced {
		t.Fatal("primary did not advance once both copies synced")
	}
	if rep, ok := pr.p.Report(); !ok || rep.Length != 2 {
		t.Fatalf("report %+v %v once both copies synced, want length 2", rep, ok)
	}
	if out := pr.cutAt(1, 0, 2, 10); len(out.Answers) != 2 || out.Answers[1].Position != 11 {
		t.Fatalf("cut answers %+v, want 2 ordered at 10 and 11", out.Answers)
	}
}

// rollingLog syncs whatever it holds on every append, as a segment store
// does when a batch crosses a rollover (it syncs the segment it closes).
type rollingLog struct{ *MemLog }

func (l rollingLog) Append(entries []segment.Entry) (uint64, error) {
	first, err := l.MemLog.Append(entries)
	if err == nil {
		err = l.MemLog.Sync()
	}
	return first, err
}

// TestReplicatedSaysWhenItsAppendSynced: with HeldWhenSynced a backup's
// durable length may grow inside Replicated (the append synced the batch);
// the next sync then finds nothing new. Replicated must say so, or the
// backup never acknowledges those entries and the primary never reports
// them (a storage server's appends hung forever on this).
func TestReplicatedSaysWhenItsAppendSynced(t *testing.T) {
	pr := &pair{t: t, plog: NewMemLog(), inflight: make([][]Batch, 1)}
	pr.p = NewReplica[string](Config{ID: 1, Role: RolePrimary, Backups: names(1), HeldWhenSynced: true}, pr.plog)
	blog := NewMemLog()
	b := NewReplica[string](Config{ID: 1, Role: RoleBackup, HeldWhenSynced: true}, rollingLog{blog})
	pr.append("s", 7, 1, 2, 3)
	batch := pr.inflight[0][0]
	advanced, err := b.Replicated(0, batch.First, batch.Entries)
	if err != nil {
		t.Fatal(err)
	}
	if !advanced || b.Durable() != 3 {
		t.Fatalf("Replicated of a batch its append synced: advanced %v, durable %d; want true, 3", advanced, b.Durable())
	}
	if advanced, _ := b.Synced(); advanced {
		t.Fatal("a later sync advanced again")
	}
}

// TestReplicaSyncedIgnoredWhenHeldWhenWritten: without HeldWhenSynced a
// write counts at once and a sync changes nothing.
func TestReplicaSyncedIgnoredWhenHeldWhenWritten(t *testing.T) {
	pr := newPair(t, 0, nil)
	if out := pr.append("s", 7, 1); !out.Durable || pr.p.Durable() != 1 {
		t.Fatalf("written record not durable without HeldWhenSynced: durable %d", pr.p.Durable())
	}
	pr.plog.Sync()
	if advanced, _ := pr.p.Synced(); advanced {
		t.Fatal("Synced advanced without HeldWhenSynced")
	}
}

// TestReplicaLaggingBackupHoldsDurableBack: durable is the least any copy
// holds, so a slow backup holds reports back.
func TestReplicaLaggingBackupHoldsDurableBack(t *testing.T) {
	pr := newPair(t, 2, nil)
	pr.append("s", 7, 1, 2, 3)
	pr.p.BackupAcked(bk(0), 0, pr.deliver(0))
	if d := pr.p.Durable(); d != 0 {
		t.Fatalf("durable %d with backup 1 holding nothing, want 0", d)
	}
	pr.append("s", 7, 4)
	pr.p.BackupAcked(bk(0), 0, pr.deliver(0))
	if advanced, _ := pr.p.BackupAcked(bk(1), 0, 2); !advanced || pr.p.Durable() != 2 {
		t.Fatalf("durable %d after backup 1 acknowledged 2, want 2", pr.p.Durable())
	}
	pr.p.BackupAcked(bk(1), 0, 4)
	if d := pr.p.Durable(); d != 4 {
		t.Fatalf("durable %d once both hold 4, want 4", d)
	}
}

// TestReplicaRetryStoredOnce: a retry of a stored append is not stored
// again; it waits for the first copy's cut and then gets its position.
func TestReplicaRetryStoredOnce(t *testing.T) {
	pr := newPair(t, 0, nil)
	pr.append("s1", 7, 1)
	out := pr.append("s2", 7, 1)
	if len(out.Answers) != 1 || out.Answers[0].Verdict != Waiting || len(out.Replicate) != 0 || out.Stored != 0 {
		t.Fatalf("retry before the cut: %+v", out)
	}
	if pr.plog.Len() != 1 {
		t.Fatalf("log holds %d entries after a retry, want 1", pr.plog.Len())
	}
	out = pr.cutAt(1, 0, 1, 5)
	if len(out.Answers) != 1 || out.Answers[0] != (Answer[string]{Waiter: "s2", Seq: 1, Verdict: Ordered, Position: 5}) {
		t.Fatalf("cut answers %+v, want the retry's stream answered", out.Answers)
	}
	out = pr.append("s3", 7, 1)
	if len(out.Answers) != 1 || out.Answers[0].Verdict != Ordered || out.Answers[0].Position != 5 || pr.plog.Len() != 1 {
		t.Fatalf("retry after the cut: %+v, log len %d", out.Answers, pr.plog.Len())
	}
}

// TestReplicaRetryInSameBatchStoredOnce: a retry that reaches the primary
// in the same batch as its original (the client re-sent it on a new stream
// while the old stream's request still sat in the shard's queue) is stored
// once; the retry's waiter is answered when the record is ordered.
func TestReplicaRetryInSameBatchStoredOnce(t *testing.T) {
	pr := newPair(t, 0, nil)
	out := &Output[string]{}
	pr.p.Propose([]Append[string]{
		{Waiter: "old", Entry: rec(7, 1)},
		{Waiter: "old", Entry: rec(7, 2)},
		{Waiter: "new", Entry: rec(7, 1)},
		{Waiter: "new", Entry: rec(7, 2)},
	}, out)
	pr.p.Store(out)
	if pr.plog.Len() != 2 || out.Stored != 2 {
		t.Fatalf("log holds %d entries (%d stored) after a batch with its own retries, want 2", pr.plog.Len(), out.Stored)
	}
	for _, a := range out.Answers {
		if a.Waiter != "new" || a.Verdict != Waiting {
			t.Fatalf("answer %+v before the cut, want only the retries told to wait", a)
		}
	}
	out = pr.cutAt(1, 0, 2, 5)
	want := []Answer[string]{{Waiter: "new", Seq: 1, Verdict: Ordered, Position: 5}, {Waiter: "new", Seq: 2, Verdict: Ordered, Position: 6}}
	if len(out.Answers) != 2 || out.Answers[0] != want[0] || out.Answers[1] != want[1] {
		t.Fatalf("cut answers %+v, want %+v", out.Answers, want)
	}
}

// TestReplicaMayRepeat: only a batch in which some client's sequence
// numbers do not increase is searched for copies.
func TestReplicaMayRepeat(t *testing.T) {
	r := NewReplica[string](Config{ID: 1, Role: RolePrimary}, NewMemLog())
	batch := func(cs ...[2]uint64) []Append[string] {
		var b []Append[string]
		for _, c := range cs {
			b = append(b, Append[string]{Entry: rec(c[0], c[1])})
		}
		return b
	}
	for _, tc := range []struct {
		name  string
		batch []Append[string]
		want  bool
	}{
		{"one append", batch([2]uint64{7, 1}), false},
		{"clients interleaved, each in order", batch([2]uint64{7, 1}, [2]uint64{7, 2}, [2]uint64{8, 1}, [2]uint64{7, 3}, [2]uint64{8, 5}), false},
		{"a copy after another client", batch([2]uint64{7, 1}, [2]uint64{7, 2}, [2]uint64{8, 1}, [2]uint64{7, 2}), true},
		{"an older append re-sent after newer ones", batch([2]uint64{7, 5}, [2]uint64{7, 3}), true},
	} {
		if got := r.mayRepeat(tc.batch); got != tc.want {
			t.Errorf("%s: mayRepeat %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReplicaFinalizeAnswersWaitingAppends(t *testing.T) {
	pr := newPair(t, 0, nil)
	pr.append("s", 7, 1, 2, 3)
	pr.cutAt(1, 0, 1, 0)
	out := &Output[string]{}
	pr.p.Finalize(1, out)
	if len(out.Answers) != 2 || out.Answers[0].Verdict != Abandoned || out.Answers[1].Seq != 3 || !out.Changed || len(out.Problems) != 0 {
		t.Fatalf("finalize output %+v, want seqs 2 and 3 abandoned", out)
	}
	if l, ok := pr.p.Final(); !ok || l != 1 {
		t.Fatalf("final %d %v", l, ok)
	}
	out = pr.append("s", 7, 4)
	if len(out.Answers) != 1 || out.Answers[0].Verdict != Finalized || pr.plog.Len() != 3 {
		t.Fatalf("append after finalize: %+v", out.Answers)
	}
	// A finalized primary neither fills nor reports.
	out = &Output[string]{}
	pr.p.Tick(t0, out)
	pr.p.LagFix(t0, 100, out)
	if out.Noops != 0 || out.Report {
		t.Fatalf("finalized primary acted: %+v", out)
	}
}

func TestReplicaCutItCannotFollowMarksLost(t *testing.T) {
	pr := newPair(t, 1, nil)
	pr.append("s", 7, 1, 2)
	pr.deliver(0)
	// A cut orders four entries; the backup holds two.
	c := Cut{Index: 1, End: 4, Slice: cut.Slice{Shard: 1, Count: 4}}
	out := &Output[string]{}
	pr.backups[0].ApplyCut(c, out)
	// The core refuses before it asks the log (which would refuse too).
	if !pr.backups[0].Lost() || len(out.Problems) != 1 || !strings.Contains(out.Problems[0].Error(), "cannot follow cut 1") {
		t.Fatalf("lost %v problems %v, want lost: cannot follow", pr.backups[0].Lost(), out.Problems)
	}
	if pr.blogs[0].Ordered() != 0 {
		t.Fatal("a lost copy assigned positions")
	}
	// A snapshot saying more is ordered than this copy assigned: lost too.
	fresh := NewReplica[string](Config{ID: 1, Role: RoleRecovered}, NewMemLog())
	out = &Output[string]{}
	fresh.ApplyCut(Cut{Slice: cut.Slice{Shard: 1}, OrderedAtLeast: 3}, out)
	if !fresh.Lost() {
		t.Fatal("a copy that missed cuts a snapshot skipped is not lost")
	}
	// A cut already assigned before a restart is skipped, not lost.
	pr.cutAt(2, 0, 2, 0)
	restarted := NewReplica[string](Config{ID: 1, Role: RoleRecovered, LastCut: 0}, pr.plog)
	out = &Output[string]{}
	restarted.ApplyCut(Cut{Index: 2, End: 2, Slice: cut.Slice{Shard: 1, Count: 2}}, out)
	if restarted.Lost() || len(out.Problems) != 0 {
		t.Fatalf("re-applying an assigned cut: lost %v problems %v", restarted.Lost(), out.Problems)
	}
}

func TestReplicaBackupRefusesGapsAndNonBackups(t *testing.T) {
	pr := newPair(t, 1, nil)
	if _, err := pr.backups[0].Replicated(0, 3, []segment.Entry{rec(1, 1)}); err == nil {
		t.Fatal("a backup stored a batch past its end")
	}
	if _, err := pr.p.Replicated(0, 0, []segment.Entry{rec(1, 1)}); !errors.Is(err, errNotBackup) {
		t.Fatalf("a primary took replication: %v", err)
	}
}

func TestReplicaLogFailureAnswersUnavailable(t *testing.T) {
	pr := newPair(t, 0, nil)
	boom := errors.New("disk full")
	pr.plog.Fail(boom)
	out := pr.append("s", 7, 1, 2)
	if out.Failed == nil || !errors.Is(out.StoreErr, boom) || len(out.Answers) != 2 || out.Answers[1].Verdict != Unavailable {
		t.Fatalf("output %+v, want both appends unavailable and the shard failed", out)
	}
	// Nothing was stored, so a retry is stored afresh (once the disk is back).
	pr.plog.mu.Lock()
	pr.plog.failErr = nil
	pr.plog.mu.Unlock()
	if out := pr.append("s", 7, 1); out.Stored != 1 {
		t.Fatalf("retry after a failed write: %+v", out)
	}
}

// specWindow gives shard 1 three entries per cut from local index 0, in a
// window of 4 cuts: quota boundaries at 3, 6, 9, 12.
func specWindow() fixante.Window {
	return fixante.Window{Cuts: 4, Groups: 1, Start: 100,
		Quotas: []fixante.Quota{{Shard: 0, PerCut: 2}, {Shard: 1, PerCut: 3}}}
}

const (
	testFillAfter = 1500 * time.Microsecond
	testIdleAfter = time.Second
)

// TestReplicaSpecFillsAndReportsAtBoundaries: a speculative primary
// announces records that end an idle spell, closes their quota with
// no-ops in the same step (replicated like records), and reports only
// when what every replica holds crosses a quota boundary.
func TestReplicaSpecFillsAndReportsAtBoundaries(t *testing.T) {
	ord := NewSpeculative(1, 0, testFillAfter, testIdleAfter, t0)
	ord.SetWindows([]fixante.Window{specWindow()}, false)
	pr := newPair(t, 1, ord)
	pr.append("s", 7, 1, 2)
	out := &Output[string]{}
	pr.p.Tick(t0, out)
	if rep, _ := pr.p.Report(); !out.Report || rep != (Report{Length: 0, Records: 2, Backlog: 3}) {
		t.Fatalf("at t0 with 2 of 3: %+v, report %+v; want the backlog announced", out, rep)
	}
	if out.Noops != 1 || len(out.Replicate) != 1 || out.Replicate[0].First != 2 || out.Replicate[0].Entries[0].Noops != 1 {
		t.Fatalf("no fill with records that ended an idle spell: %+v", out)
	}
	if out.Durable {
		t.Fatal("the fill was durable before the backup held it")
	}
	out2 := &Output[string]{}
	if pr.p.Tick(t0, out2); out2.Report || out2.Noops != 0 {
		t.Fatalf("announced or filled again: %+v", out2)
	}
	pr.send(out)
	advanced, step := pr.p.BackupAcked(bk(0), 0, pr.deliver(0))
	if !advanced || !step {
		t.Fatalf("ack: advanced %v step %v; a speculative primary must step on durable", advanced, step)
	}
	out = &Output[string]{}
	pr.p.Tick(t0.Add(100*time.Microsecond), out)
	if rep, _ := pr.p.Report(); !out.Report || rep.Length != 3 || rep.Records != 2 || rep.Backlog != 0 {
		t.Fatalf("at the boundary: report %v %+v, want length 3", out.Report, rep)
	}
	// Past the boundary but short of the next: no new report.
	pr.append("s", 7, 3)
	pr.p.BackupAcked(bk(0), 0, pr.deliver(0))
	out = &Output[string]{}
	pr.p.Tick(t0.Add(200*time.Microsecond), out)
	if rep, _ := pr.p.Report(); rep != (Report{Length: 3, Records: 3, Backlog: 1}) {
		t.Fatalf("between boundaries: report %+v, want none beyond 3, with the new record's backlog", rep)
	}
	if out.Noops != 0 {
		t.Fatalf("filled %d while its last report awaits its cut: records arriving meanwhile join the next", out.Noops)
	}
	// A lag-fix fills to the target's boundary at once.
	out = &Output[string]{}
	pr.p.LagFix(t0.Add(2*time.Millisecond), 9, out)
	if out.Noops != 5 || pr.plog.Len() != 9 {
		t.Fatalf("lag-fix to 9 added %d no-ops, log %d", out.Noops, pr.plog.Len())
	}
}

// TestReplicaSpecReportsDurableBetweenWindows: between windows (the
// leader's eager cuts) a speculative primary's report is what every
// replica holds as soon as a backup acknowledges it, as an eager one's
// is, without waiting for the owner's next Tick; once a window is
// announced it reports no length that is not a quota boundary.
func TestReplicaSpecReportsDurableBetweenWindows(t *testing.T) {
	ord := NewSpeculative(1, 0, testFillAfter, testIdleAfter, t0)
	ord.SetWindows(nil, true)
	pr := newPair(t, 1, ord)
	pr.append("s", 7, 1, 2)
	out := &Output[string]{}
	pr.p.Tick(t0, out)
	if out.Noops != 0 {
		t.Fatalf("filled %d no-ops between windows", out.Noops)
	}
	pr.send(out)
	if advanced, _ := pr.p.BackupAcked(bk(0), 0, pr.deliver(0)); !advanced {
		t.Fatal("the backup's acknowledgement did not move durable")
	}
	if rep, ok := pr.p.Report(); !ok || rep != (Report{Length: 2, Records: 2}) {
		t.Fatalf("after the acknowledgement, before a Tick: report %v %+v, want length 2", ok, rep)
	}
	ord.SetWindows([]fixante.Window{specWindow()}, false)
	if rep, _ := pr.p.Report(); rep.Length == 2 {
		t.Fatalf("in a window: report %+v, the durable length, which is no quota boundary", rep)
	}
}

// TestReplicaConcurrentPaths runs what the storage server runs at once:
// backup acknowledgements and reports beside the owner's appends and
// ticks on a primary, and replicated batches beside cuts on a backup. It
// checks the core's concurrency contract under the race detector.
func TestReplicaConcurrentPaths(t *testing.T) {
	const n = 200
	ord := NewSpeculative(1, 0, testFillAfter, testIdleAfter, t0)
	ord.SetWindows([]fixante.Window{specWindow()}, false)
	p := NewReplica[string](Config{ID: 1, Role: RolePrimary, Backups: names(1), Ordering: ord}, NewMemLog())
	blog := NewMemLog()
	b := NewReplica[string](Config{ID: 1, Role: RoleBackup}, blog)
	batches := make(chan Batch, n)
	done := make(chan struct{})
	go func() {
		// The backup's Replicate stream: store, then acknowledge.
		defer close(done)
		for bt := range batches {
			if _, err := b.Replicated(0, bt.First, bt.Entries); err != nil {
				t.Error(err)
				return
			}
			p.BackupAcked(bk(0), 0, b.Durable())
			p.Report()
		}
	}()
	var cuts uint64
	for i := range uint64(n) {
		out := &Output[string]{}
		p.Propose([]Append[string]{{Waiter: "s", Entry: rec(7, i+1)}}, out)
		for _, bt := range out.Replicate {
			batches <- Batch{First: bt.First, Entries: append([]segment.Entry(nil), bt.Entries...)}
		}
		p.Store(out)
		p.Tick(t0.Add(time.Duration(i)*time.Millisecond), out)
		for _, bt := range out.Replicate[1:] {
			batches <- bt
		}
		// The backup's loop applies cuts over what it acknowledged.
		if d := p.Durable(); d > cuts {
			b.ApplyCut(Cut{Index: cuts + 1, Start: cuts, End: d, Slice: cut.Slice{Shard: 1, LocalStart: cuts, GlobalStart: cuts, Count: d - cuts}}, &Output[string]{})
			cuts = d
		}
	}
	close(batches)
	<-done
	if b.Lost() || blog.Len() != p.primary.Next() {
		t.Fatalf("backup lost %v, holds %d of %d", b.Lost(), blog.Len(), p.primary.Next())
	}
}

// TestReplicaIngestAndFillWithoutBackups: records nobody waits for are
// stored and counted but answered to nobody; without backups a fill is
// durable at once and the boundary it reaches is reported in the same
// step.
func TestReplicaIngestAndFillWithoutBackups(t *testing.T) {
	ord := NewSpeculative(1, 0, testFillAfter, testIdleAfter, t0)
	ord.SetWindows([]fixante.Window{specWindow()}, false)
	log := NewMemLog()
	p := NewReplica[string](Config{ID: 1, Role: RolePrimary, Ordering: ord}, log)
	out := &Output[string]{}
	p.Ingest([]segment.Entry{{Seq: 10}, {Seq: 11}}, out)
	if !out.Durable || out.Stored != 2 || p.Records() != 2 || p.Durable() != 2 {
		t.Fatalf("ingest: %+v, records %d, durable %d", out, p.Records(), p.Durable())
	}
	out.Reset()
	p.Tick(t0.Add(testFillAfter), out)
	if out.Noops != 1 || !out.Report {
		t.Fatalf("fill without backups: %+v, want 1 no-op reported at once", out)
	}
	if rep, _ := p.Report(); rep.Length != 3 {
		t.Fatalf("report %+v, want the boundary 3", rep)
	}
	out.Reset()
	p.ApplyCut(Cut{Index: 1, End: 3, Slice: cut.Slice{Shard: 1, Count: 3}}, out)
	if len(out.Answers) != 0 || out.Ordered != 3 {
		t.Fatalf("cut over ingested records: %+v, want no answers", out)
	}
}

// TestOutputResetDropsOldElements: Reset keeps the slices' memory but not
// what their old elements point to, even past a length the owner cut
// short after carrying a slice out.
func TestOutputResetDropsOldElements(t *testing.T) {
	out := &Output[string]{}
	out.Replicate = append(out.Replicate, Batch{First: 1, Entries: []segment.Entry{rec(7, 1)}})
	out.Answers = append(out.Answers, Answer[string]{Waiter: "s", Seq: 1})
	out.Problems = append(out.Problems, errors.New("old"))
	out.Replicate, out.Answers = out.Replicate[:0], out.Answers[:0] // as the storage loop does
	out.Reset()
	if b := out.Replicate[:1][0]; b.Entries != nil {
		t.Errorf("a reset output still points to a replicated batch's entries")
	}
	if a := out.Answers[:1][0]; a.Waiter != "" {
		t.Errorf("a reset output still points to an answer's waiter")
	}
	if p := out.Problems[:1][0]; p != nil {
		t.Errorf("a reset output still points to a problem")
	}
}

// TestReplicaResolve: a copy tells an ordered append's position; only a
// copy that holds everything the final shard ordered denies one, so one
// that lost its tail in a crash answers pending instead.
func TestReplicaResolve(t *testing.T) {
	pr := newPair(t, 1, nil)
	pr.append("s", 7, 1, 2, 3)
	pr.p.BackupAcked(bk(0), 0, pr.deliver(0))
	if err := pr.blogs[0].Sync(); err != nil {
		t.Fatal(err)
	}
	pr.cutAt(1, 0, 2, 40)
	if res, pos := pr.p.Resolve(1, true); res != ResolveOrdered || pos != 41 {
		t.Fatalf("ordered append: %v at %d, want ordered at 41", res, pos)
	}
	if res, _ := pr.p.Resolve(2, true); res != ResolvePending {
		t.Fatalf("stored, unordered append of a live shard: %v, want pending", res)
	}
	pr.p.Finalize(2, &Output[string]{})
	if res, _ := pr.p.Resolve(2, true); res != ResolveNotOrdered {
		t.Fatalf("append past the final length: %v, want not ordered", res)
	}
	if res, _ := pr.p.Resolve(0, false); res != ResolveNotOrdered {
		t.Fatalf("append the final copy never stored: %v, want not ordered", res)
	}
	// Damage past the final length hides only entries never ordered;
	// damage below it may hide the append.
	if _, ok := pr.plog.Damage(2, 3); !ok {
		t.Fatal("Damage(2, 3) failed")
	}
	if res, _ := pr.p.Resolve(0, false); res != ResolveNotOrdered {
		t.Fatalf("append not found by a final copy damaged only past the final length: %v, want not ordered", res)
	}
	if _, ok := pr.plog.Damage(1, 2); !ok {
		t.Fatal("Damage(1, 2) failed")
	}
	if res, _ := pr.p.Resolve(0, false); res != ResolvePending {
		t.Fatalf("append not found by a final copy that could not read all it ordered: %v, want pending", res)
	}
	// The backup's server crashes before syncing the cut's positions: its
	// recovered copy holds the records but not their order, so it may
	// deny nothing.
	pr.blogs[0].Crash()
	rec := NewReplica[string](Config{ID: 1, Role: RoleRecovered}, pr.blogs[0])
	rec.Finalize(2, &Output[string]{})
	if n, o := pr.blogs[0].Len(), pr.blogs[0].Ordered(); n != 3 || o != 0 {
		t.Fatalf("the recovered log holds %d entries, %d ordered; want 3, 0", n, o)
	}
	if res, _ := rec.Resolve(0, true); res != ResolvePending {
		t.Fatalf("a copy that lost the cut's positions: %v, want pending", res)
	}
	if res, _ := rec.Resolve(0, false); res != ResolvePending {
		t.Fatalf("a copy that lost the cut's positions denies an append: %v, want pending", res)
	}
}

// TestReplicaResolveVoidedEntry: a speculative cut after a view change
// gives a failed shard's entries past its void point the void slots; a
// copy that applied it must still say those entries were never ordered.
func TestReplicaResolveVoidedEntry(t *testing.T) {
	pr := newPair(t, 1, nil)
	pr.append("s", 7, 1, 2, 3)
	pr.p.BackupAcked(bk(0), 0, pr.deliver(0))
	b := pr.backups[0]
	b.ApplyCut(Cut{Index: 1, Start: 40, End: 43, Slice: cut.Slice{Shard: 1, LocalStart: 0, GlobalStart: 40, Count: 3}}, &Output[string]{})
	b.Finalize(2, &Output[string]{})
	if res, pos := b.Resolve(1, true); res != ResolveOrdered || pos != 41 {
		t.Fatalf("entry below the final length: %v at %d, want ordered at 41", res, pos)
	}
	if res, _ := b.Resolve(2, true); res != ResolveNotOrdered {
		t.Fatalf("entry past the final length, placed in a void slot: %v, want not ordered", res)
	}
}

// TestReplicaAssignFailureStillAnswersOrderedAppends: a primary whose disk
// fills after it stored and reported records cannot write the positions a
// committed cut gives them. The cut is committed and the other copies
// serve those positions, so the waiting clients are answered with them
// (not left waiting forever, which a full disk did before), and the copy
// is marked lost.
func TestReplicaAssignFailureStillAnswersOrderedAppends(t *testing.T) {
	pr := newPair(t, 1, nil)
	pr.append("s", 7, 1, 2)
	pr.p.BackupAcked(bk(0), 0, pr.deliver(0))
	pr.plog.Fail(errors.New("no space left on device"))
	out := pr.cutAt(1, 0, 2, 40)
	want := []Answer[string]{{Waiter: "s", Seq: 1, Verdict: Ordered, Position: 40}, {Waiter: "s", Seq: 2, Verdict: Ordered, Position: 41}}
	if len(out.Answers) != 2 || out.Answers[0] != want[0] || out.Answers[1] != want[1] {
		t.Fatalf("answers %+v, want %+v", out.Answers, want)
	}
	if !pr.p.Lost() || len(out.Problems) != 1 || !strings.Contains(out.Problems[0].Error(), "assign positions") {
		t.Fatalf("lost %v problems %v, want lost: assign positions", pr.p.Lost(), out.Problems)
	}
	if pos, ok := pr.blogs[0].GlobalOf(1); !ok || pos != 41 {
		t.Fatalf("backup's position of local 1: %d %v", pos, ok)
	}
	// Records the primary stored before its disk filled and that a later
	// cut orders are answered too, though the copy is lost by then.
	pr.plog.mu.Lock()
	pr.plog.failErr = nil
	pr.plog.mu.Unlock()
	pr.append("s", 7, 3)
	pr.plog.Fail(errors.New("no space left on device"))
	pr.p.BackupAcked(bk(0), 0, pr.deliver(0))
	out = pr.cutAt(2, 2, 1, 42)
	if len(out.Answers) != 1 || out.Answers[0] != (Answer[string]{Waiter: "s", Seq: 3, Verdict: Ordered, Position: 42}) {
		t.Fatalf("answers of a later cut %+v, want seq 3 at 42", out.Answers)
	}
}

// bk names backup i.
func bk(i int) string { return "b" + string(rune('0'+i)) }

// names names n backups.
func names(n int) []string {
	var out []string
	for i := range n {
		out = append(out, bk(i))
	}
	return out
}

// TestHoldingsResolveTheFirstCopy: a log may hold an append twice (a
// retry stored again by a primary whose retry memory no longer knew it),
// once below a final shard's length, ordered, and once past it. Resolve
// must go by the first: the second alone would deny an ordered append.
func TestHoldingsResolveTheFirstCopy(t *testing.T) {
	log := NewMemLog()
	if _, err := log.Append([]segment.Entry{rec(7, 1), rec(7, 2), rec(7, 1)}); err != nil {
		t.Fatal(err)
	}
	b := NewReplica[string](Config{ID: 1, Role: RoleBackup}, log)
	b.ApplyCut(Cut{Index: 1, Start: 40, End: 42, Slice: cut.Slice{Shard: 1, LocalStart: 0, GlobalStart: 40, Count: 2}}, &Output[string]{})
	b.Finalize(2, &Output[string]{})
	held, err := Holdings(log, func(id AppendID) bool { return id.Client == 7 })
	if err != nil {
		t.Fatal(err)
	}
	local, ok := held[AppendID{Client: 7, Seq: 1}]
	if !ok || local != 0 {
		t.Fatalf("Holdings places the append held twice at %d (%v), want its first index 0", local, ok)
	}
	if res, pos := b.Resolve(local, true); res != ResolveOrdered || pos != 40 {
		t.Fatalf("the first copy resolves %v at %d, want ordered at 40", res, pos)
	}
	if res, _ := b.Resolve(2, true); res != ResolveNotOrdered {
		t.Fatalf("the retry's copy past the final length resolves %v: the test no longer shows why the first counts", res)
	}
}
