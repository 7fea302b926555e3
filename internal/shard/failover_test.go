package shard

import (
	"errors"
	"strings"
	"testing"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/segment"
)

// deliverFirst hands backup i its first n queued batches.
func (pr *pair) deliverFirst(i, n int) uint64 {
	var held uint64
	for _, b := range pr.inflight[i][:n] {
		if _, err := pr.backups[i].Replicated(0, b.First, b.Entries); err != nil {
			pr.t.Fatalf("backup %d: %v", i, err)
		}
		held = pr.backups[i].Durable()
	}
	pr.inflight[i] = pr.inflight[i][n:]
	return held
}

// entries reads [from, to) from a log, as an owner does for a resend or a
// joining backup's tail.
func entries(t *testing.T, l Log, from, to uint64) []segment.Entry {
	t.Helper()
	var out []segment.Entry
	if err := l.Scan(from, func(local uint64, e segment.Entry) bool {
		if local >= to {
			return false
		}
		out = append(out, e)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// failoverPair is a primary with backups b0 (holding the first ahead
// batches) and b1 (the first behind), both acknowledged, and a cut that
// ordered the first two records; the primary then fails.
func failoverPair(t *testing.T, ahead, behind int) *pair {
	pr := newPair(t, 2, nil)
	for q := uint64(1); q <= 4; q++ {
		pr.append("c", 7, q)
	}
	pr.p.BackupAcked(bk(0), 0, pr.deliverFirst(0, ahead))
	pr.p.BackupAcked(bk(1), 0, pr.deliverFirst(1, behind))
	if d := pr.p.Durable(); d != uint64(min(ahead, behind)) {
		t.Fatalf("durable %d, want %d", d, min(ahead, behind))
	}
	pr.cutAt(1, 0, 2, 100)
	return pr
}

// TestFailoverBackupBecomesPrimary: with the primary gone, backup b0
// (holding more than b1) becomes primary of configuration 1: it admits
// nothing until b1 joined, then resends b1 what it lacks, reports in
// epoch 1, answers a retry of a record its predecessor stored without
// storing it again, and the fenced primary's late batches and answers
// count for nothing.
func TestFailoverBackupBecomesPrimary(t *testing.T) {
	pr := failoverPair(t, 4, 2)
	old := pr.p
	np, b1 := pr.backups[0], pr.backups[1]
	out := &Output[string]{}
	np.Reconfigure(Membership{Epoch: 1, Role: RolePrimary, Backups: []string{bk(1)}}, t0, out)
	if np.Role() != RolePrimary || np.Epoch() != 1 {
		t.Fatalf("role %v epoch %d", np.Role(), np.Epoch())
	}
	if _, ok := np.Report(); ok {
		t.Fatal("a promoted primary reported before its backups joined")
	}
	out = &Output[string]{}
	np.Propose([]Append[string]{{Waiter: "c", Entry: rec(7, 5)}}, out)
	if len(out.Answers) != 1 || out.Answers[0].Verdict != Unavailable {
		t.Fatalf("append before the join answered %+v, want Unavailable", out.Answers)
	}
	// The fenced primary's batch, still in flight, reaches b1 after b1
	// joined configuration 1: refused.
	length, held, err := b1.Join(1)
	if err != nil || length != 2 || held != 2 {
		t.Fatalf("join: %d %d %v", length, held, err)
	}
	if _, err := b1.Replicated(0, 2, pr.inflight[1][0].Entries); !errors.Is(err, ErrFenced) {
		t.Fatalf("a batch of configuration 0 after the join: %v, want ErrFenced", err)
	}
	out = &Output[string]{}
	np.BackupJoined(bk(1), 1, length, held, 4, nil, t0, out)
	if len(out.Resend) != 1 || out.Resend[0] != (Resend{Backup: bk(1), From: 2, To: 4}) {
		t.Fatalf("resend %+v, want [2, 4) to b1", out.Resend)
	}
	if adv, err := b1.Replicated(1, 2, entries(t, pr.blogs[0], 2, 4)); err != nil || !adv || b1.Durable() != 4 {
		t.Fatalf("resend stored: advanced %v, holding %d, %v", adv, b1.Durable(), err)
	}
	// An acknowledgement of configuration 0 counts for nothing; one of 1 does.
	if adv, _ := np.BackupAcked(bk(1), 0, 4); adv {
		t.Fatal("an acknowledgement of configuration 0 advanced durable")
	}
	if adv, _ := np.BackupAcked(bk(1), 1, b1.Durable()); !adv {
		t.Fatal("b1's acknowledgement of configuration 1 did not advance durable")
	}
	if rep, ok := np.Report(); !ok || rep != (Report{Length: 4, Epoch: 1}) {
		t.Fatalf("report %+v %v, want length 4 in epoch 1", rep, ok)
	}
	// The old primary hears it was left out: its waiting appends are
	// answered Unavailable, and it answers nothing more.
	out = &Output[string]{}
	old.Reconfigure(Membership{Epoch: 1, Role: RoleFenced}, t0, out)
	if old.Role() != RoleFenced || len(out.Answers) != 2 || out.Answers[0].Verdict != Unavailable || !old.Lost() {
		t.Fatalf("fenced primary: role %v answers %+v lost %v", old.Role(), out.Answers, old.Lost())
	}
	if _, ok := old.Report(); ok {
		t.Fatal("a fenced primary reported")
	}
	// The clients retry at the new primary: an ordered record is answered
	// with its position, a stored one waits for its cut, a new one is
	// stored after everything the predecessor stored.
	out = &Output[string]{}
	np.Propose([]Append[string]{{Waiter: "c", Entry: rec(7, 1)}, {Waiter: "c", Entry: rec(7, 3)}, {Waiter: "c", Entry: rec(7, 5)}}, out)
	if len(out.Answers) != 2 || out.Answers[0] != (Answer[string]{Waiter: "c", Seq: 1, Verdict: Ordered, Position: 100}) ||
		out.Answers[1].Seq != 3 || out.Answers[1].Verdict != Waiting {
		t.Fatalf("retries answered %+v", out.Answers)
	}
	if len(out.Replicate) != 1 || out.Replicate[0].First != 4 || len(out.Replicate[0].Entries) != 1 {
		t.Fatalf("replicate %+v, want the new record at 4", out.Replicate)
	}
	np.Store(out)
	out = &Output[string]{}
	c := Cut{Index: 2, Start: 102, End: 104, Slice: cut.Slice{Shard: 1, LocalStart: 2, GlobalStart: 102, Count: 2}}
	np.ApplyCut(c, out)
	if len(out.Answers) != 1 || out.Answers[0] != (Answer[string]{Waiter: "c", Seq: 3, Verdict: Ordered, Position: 102}) {
		t.Fatalf("cut answers %+v, want the retried 3 at 102 (4 has no waiter)", out.Answers)
	}
}

// TestFailoverAdoptsALongerBackupTail: the backup that becomes primary
// holds less than the other one; it adopts the other's tail when it
// joins, so their logs agree and nothing is resent.
func TestFailoverAdoptsALongerBackupTail(t *testing.T) {
	pr := failoverPair(t, 2, 4)
	np, b1 := pr.backups[0], pr.backups[1]
	out := &Output[string]{}
	np.Reconfigure(Membership{Epoch: 1, Role: RolePrimary, Backups: []string{bk(1)}}, t0, out)
	length, held, err := b1.Join(1)
	if err != nil || length != 4 {
		t.Fatalf("join: %d %v", length, err)
	}
	out = &Output[string]{}
	np.BackupJoined(bk(1), 1, length, held, 2, entries(t, pr.blogs[1], 2, 4), t0, out)
	if len(out.Resend) != 0 || pr.blogs[0].Len() != 4 || np.Durable() != 4 {
		t.Fatalf("resend %+v, log %d, durable %d; want none, 4, 4", out.Resend, pr.blogs[0].Len(), np.Durable())
	}
	out = &Output[string]{}
	np.Propose([]Append[string]{{Waiter: "c", Entry: rec(7, 4)}}, out)
	if len(out.Answers) != 1 || out.Answers[0].Verdict != Waiting {
		t.Fatalf("retry of an adopted record answered %+v, want Waiting", out.Answers)
	}
	// A late join answer of a configuration the primary left changes
	// nothing.
	out = &Output[string]{}
	np.BackupJoined(bk(1), 0, 9, 9, 4, nil, t0, out)
	if pr.blogs[0].Len() != 4 || len(out.Resend) != 0 {
		t.Fatal("a join of another configuration changed the primary")
	}
}

// TestFailoverLastReplicaStandsAlone: a backup left as the only replica
// becomes primary at once: everything it holds is durable.
func TestFailoverLastReplicaStandsAlone(t *testing.T) {
	pr := failoverPair(t, 3, 3)
	np := pr.backups[0]
	out := &Output[string]{}
	np.Reconfigure(Membership{Epoch: 1, Role: RolePrimary}, t0, out)
	if rep, ok := np.Report(); !ok || rep != (Report{Length: 3, Epoch: 1}) {
		t.Fatalf("report %+v %v, want 3 in epoch 1", rep, ok)
	}
	// An older configuration never undoes a newer one.
	np.Reconfigure(Membership{Epoch: 1, Role: RoleFenced}, t0, &Output[string]{})
	if np.Role() != RolePrimary {
		t.Fatal("a repeated epoch changed the role")
	}
}

// TestFailoverCopyLeftOutOrdersNoReplacedTail: a primary stores (7,3) and
// (7,4) at local [2, 4) that its backup never gets, and is taken out; the
// backup, primary of configuration 1, stores the client's retry of (7,4)
// at local 2, a cut orders it, and the shard ends at 3. Neither the old
// primary, fenced, nor its copy after its server restarts (recovered, told
// of configuration 1) may take cut 2 for its own local 2, which holds
// (7,3): the recovered copy is lost instead. Nor may they deny (7,4),
// which they hold past the final length. A recovered copy that no
// configuration left out (a whole shard failed) follows cuts past what
// it ordered before its restart.
func TestFailoverCopyLeftOutOrdersNoReplacedTail(t *testing.T) {
	pr := newPair(t, 1, nil)
	pr.append("c", 7, 1, 2)
	pr.p.BackupAcked(bk(0), 0, pr.deliver(0))
	pr.cutAt(1, 0, 2, 100)
	pr.append("c", 7, 3, 4) // never reaches the backup
	if err := pr.plog.Sync(); err != nil {
		t.Fatal(err)
	}
	old, np := pr.p, pr.backups[0]
	old.Reconfigure(Membership{Epoch: 1, Role: RoleFenced}, t0, &Output[string]{})
	np.Reconfigure(Membership{Epoch: 1, Role: RolePrimary}, t0, &Output[string]{})
	out := &Output[string]{}
	np.Propose([]Append[string]{{Waiter: "c", Entry: rec(7, 4)}}, out)
	np.Store(out)
	c2 := Cut{Index: 2, Start: 102, End: 103, Slice: cut.Slice{Shard: 1, LocalStart: 2, GlobalStart: 102, Count: 1}}
	out = &Output[string]{}
	np.ApplyCut(c2, out)
	np.Finalize(3, out)
	if len(out.Answers) != 1 || out.Answers[0].Verdict != Ordered || out.Answers[0].Position != 102 {
		t.Fatalf("the new primary answered %+v, want (7,4) ordered at 102", out.Answers)
	}

	old.ApplyCut(c2, &Output[string]{})
	old.Finalize(3, &Output[string]{})
	if res, _ := old.Resolve(3, true); res != ResolvePending {
		t.Fatalf("the fenced primary, holding (7,4) past the final length: %v, want pending", res)
	}

	pr.plog.Crash()
	rec := NewReplica[string](Config{ID: 1, Role: RoleRecovered, LastCut: 1}, pr.plog)
	if rec.Reconfigure(Membership{Epoch: 1, Role: RoleFenced}, t0, &Output[string]{}) || rec.Role() != RoleRecovered {
		t.Fatalf("a recovered copy took a configuration: %v", rec.Role())
	}
	out = &Output[string]{}
	rec.ApplyCut(c2, out)
	if o := pr.plog.Ordered(); o != 2 || !rec.Lost() || len(out.Problems) != 1 || !strings.Contains(out.Problems[0].Error(), "left out") {
		t.Fatalf("recovered copy after cut 2: ordered %d, lost %v, problems %v; want 2, lost: left out", o, rec.Lost(), out.Problems)
	}
	rec.Finalize(3, &Output[string]{})
	if res, _ := rec.Resolve(3, true); res != ResolvePending {
		t.Fatalf("the recovered copy, holding (7,4) past the final length: %v, want pending", res)
	}
	if res, pos := rec.Resolve(1, true); res != ResolveOrdered || pos != 101 {
		t.Fatalf("an entry ordered before the failover: %v at %d, want ordered at 101", res, pos)
	}

	// A whole shard fails: both copies hold (7,1..3), a cut ordered two
	// of them, and the cut that orders the third commits after the
	// crash. The shard's configuration still names the copies.
	whole := newPair(t, 1, nil)
	whole.append("c", 7, 1, 2, 3)
	whole.p.BackupAcked(bk(0), 0, whole.deliver(0))
	whole.cutAt(1, 0, 2, 100)
	rec = NewReplica[string](Config{ID: 1, Role: RoleRecovered, LastCut: 1}, whole.plog)
	rec.Reconfigure(Membership{Epoch: 1, Role: RolePrimary}, t0, &Output[string]{})
	out = &Output[string]{}
	rec.ApplyCut(c2, out)
	if o := whole.plog.Ordered(); o != 3 || rec.Lost() || len(out.Problems) != 0 {
		t.Fatalf("recovered copy of a whole-shard failure after cut 2: ordered %d, lost %v, problems %v; want 3, not lost", o, rec.Lost(), out.Problems)
	}
}
