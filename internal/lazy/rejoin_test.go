package lazy

import (
	"errors"
	"testing"
)

// TestShardRejoinedReplicaCatchesUpUnderItsPrimary: a backup that failed
// and was taken out copies the primary's log, joins, gets the primary's
// whole order in one base, and counts as caught up only once it holds the
// record acknowledged after its copy and before its join.
func TestShardRejoinedReplicaCatchesUpUnderItsPrimary(t *testing.T) {
	p := NewShard[int](ShardConfig{ID: 0, Primary: true, Epoch: 1, Backups: []string{"b"}}, ShardState{})
	b := NewShard[int](ShardConfig{ID: 0, Epoch: 1}, ShardState{})
	a, d, e := meta(1, 1, 0, 1), meta(1, 2, 0, 1), meta(1, 3, 0, 1)
	accept(t, p, a.ID, 1)
	accept(t, b, a.ID, 1)
	var o out
	p.Map(mapping(1, 0, a), t0, &o)
	var bo out
	if err := b.Place(*o.Place, &bo); err != nil {
		t.Fatal(err)
	}
	p.BackupApplied("b", bo.AppliedTerm, bo.AppliedSeq, &o)

	// b fails: epoch 2 holds p alone, which acknowledges d (placed) and e
	// (unordered) by itself.
	p.Follow(2, []string{"p"}, "p", &o)
	b = NewShard[int](ShardConfig{ID: 0, Epoch: 1}, ShardState{Len: 1, Records: []StoredRecord{{ID: a.ID, Local: 0, View: 1}}, Placements: []Placement{*bo.Place}})
	b.Follow(2, []string{"p"}, "b", &bo)
	if !b.Out() {
		t.Fatal("a replica outside the configuration is not out")
	}
	accept(t, p, d.ID, 1)
	o = out{}
	p.Map(mapping(1, 1, d), t0, &o)
	if o.Ack == nil || o.Ack.End != 2 {
		t.Fatalf("p alone did not acknowledge the mapping: %+v", o.Ack)
	}
	p.Stable(StableGP{View: 1, Stable: 2}, &o)

	// b copies p's log while out, up to d; e comes after the copy.
	copied := uint64(0)
	copyTo := func(end uint64) {
		for ; copied < end; copied++ {
			id := []RecordID{a.ID, d.ID, e.ID}[copied]
			if local, ok := p.LocalOf(id); !ok || local != copied {
				t.Fatalf("p holds %v at %d, %v", id, local, ok)
			}
			if _, _, err := b.CopyRecord(id, &bo); err != nil {
				t.Fatal(err)
			}
		}
	}
	copyTo(2)
	accept(t, p, e.ID, 1)

	// The join: epoch 3 holds p and b.
	p.Follow(3, []string{"p", "b"}, "p", &o)
	b.Follow(3, []string{"p", "b"}, "b", &bo)
	if b.Out() || b.Primary() || b.Epoch() != 3 {
		t.Fatalf("b after its join: out %v, primary %v, epoch %d", b.Out(), b.Primary(), b.Epoch())
	}
	mark, ok := p.CatchUpMark()
	if !ok || mark != (CatchUpMark{Epoch: 3, Term: 1, Len: 3, Seq: 2}) {
		t.Fatalf("mark %+v, %v", mark, ok)
	}
	if _, ok := b.CatchUpMark(); ok {
		t.Fatal("a backup gave a catch-up mark")
	}
	if err := p.FenceData(2); !errors.Is(err, ErrStaleConfig) {
		t.Fatalf("data for epoch 2 after the join: %v", err)
	}
	if err := p.FenceData(3); err != nil {
		t.Fatal(err)
	}
	if b.CaughtUp(mark, copied) {
		t.Fatal("caught up before it applied the primary's placements")
	}

	// p's placement 2 was never sent to b: b gets p's whole order.
	rs := p.Resend("b")
	if len(rs) != 1 || !rs[0].Base || rs[0].Seq != 2 || rs[0].From != 0 || rs[0].End != 2 || len(rs[0].Slots) != 2 {
		t.Fatalf("resend to the joined backup: %+v", rs)
	}
	bo = out{}
	if err := b.Place(rs[0], &bo); err != nil || !bo.Applied || bo.AppliedSeq != 2 || len(bo.Fetch) != 0 {
		t.Fatalf("b applies the base: %+v, %v", bo, err)
	}
	o = out{}
	p.BackupApplied("b", bo.AppliedTerm, bo.AppliedSeq, &o)
	if len(p.Resend("b")) != 0 {
		t.Fatal("the base is sent again after b applied it")
	}
	if b.CaughtUp(mark, copied) {
		t.Fatal("caught up without e, which p acknowledged before the join")
	}
	copyTo(3)
	if !b.CaughtUp(mark, copied) {
		t.Fatal("not caught up with everything p held at the join")
	}

	// From the join on, a mapping needs b.
	o = out{}
	p.Map(mapping(1, 2, e), t0, &o)
	if o.Place == nil || o.Ack != nil {
		t.Fatalf("mapping of e: placement %+v, ack %+v (want a placement, no ack)", o.Place, o.Ack)
	}
	bo = out{}
	if err := b.Place(*o.Place, &bo); err != nil || !bo.Applied {
		t.Fatalf("b applies placement 3: %v", err)
	}
	p.BackupApplied("b", bo.AppliedTerm, bo.AppliedSeq, &o)
	if o.Ack == nil || o.Ack.End != 3 {
		t.Fatalf("ack after b applied: %+v", o.Ack)
	}
	b.Stable(StableGP{View: 1, Stable: 3}, &bo)
	for pos, id := range []RecordID{a.ID, d.ID, e.ID} {
		bo = out{}
		if err := b.Read(pos, uint64(pos), &bo); err != nil || len(bo.Reads) != 1 {
			t.Fatalf("b reads %d: %+v, %v", pos, bo.Reads, err)
		}
		if local, _ := b.LocalOf(id); bo.Reads[0].Local != local || bo.Reads[0].Noop {
			t.Fatalf("b reads %d: %+v, want %v at %d", pos, bo.Reads[0], id, local)
		}
	}
}

// TestShardJoinedBackupAnsweringForOldPlacementsStillGetsTheWholeOrder:
// a backup that joined and says it applied placements from before it left
// is not sent the ones after them (forgotten here), but the base.
func TestShardJoinedBackupAnsweringForOldPlacementsStillGetsTheWholeOrder(t *testing.T) {
	p := NewShard[int](ShardConfig{ID: 0, Primary: true, Epoch: 1}, ShardState{})
	var o out
	for i := range uint64(3) {
		m := meta(1, i+1, 0, 1)
		accept(t, p, m.ID, 1)
		p.Map(mapping(1, i, m), t0, &o)
	}
	p.Reconfigure(2, []string{"b"}, &o)
	p.BackupApplied("b", 1, 1, &o)
	rs := p.Resend("b")
	if len(rs) != 1 || !rs[0].Base || rs[0].Seq != 3 || rs[0].From != 0 {
		t.Fatalf("resend: %+v", rs)
	}
	p.BackupApplied("b", 1, 3, &o)
	if len(p.Resend("b")) != 0 {
		t.Fatal("resent after b applied everything")
	}
}

// TestShardRejoinedReplicaNeverScrubsWhatItHeldOrCopied: a record the
// replica held in an old view, or copied, may have been appended again in
// a newer view while it was out; the scrub keeps it.
func TestShardRejoinedReplicaNeverScrubsWhatItHeldOrCopied(t *testing.T) {
	s := NewShard[int](ShardConfig{ID: 0, Epoch: 1}, ShardState{})
	var o out
	if _, _, err := s.CopyRecord(RecordID{}, &o); !errors.Is(err, ErrBadInput) {
		t.Fatalf("copy of an invalid id: %v", err)
	}
	held, copied := RecordID{1, 1}, RecordID{1, 2}
	accept(t, s, held, 1)
	s.Follow(2, []string{"p"}, "b", &o)
	if _, fresh, err := s.CopyRecord(copied, &o); err != nil || !fresh {
		t.Fatalf("copy: %v, %v", fresh, err)
	}
	if _, fresh, err := s.CopyRecord(copied, &o); err != nil || fresh {
		t.Fatalf("copy again: %v, %v", fresh, err)
	}
	s.Follow(3, []string{"p", "b"}, "b", &o)
	s.Stable(StableGP{View: 3, Stable: 0}, &o)
	if got := s.Scrub(); len(got) != 0 {
		t.Fatalf("scrubbed %v", got)
	}
	fresh := RecordID{1, 3}
	accept(t, s, fresh, 3)
	s.Stable(StableGP{View: 4, Stable: 0}, &o)
	if got := s.Scrub(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("scrubbed %v, want the record appended after the rejoin only (local 2)", got)
	}
}

// TestShardPromotedBeforeItsFirstPlacementBacksUpFromWhereItsTableStarts:
// a shard added to a running order whose primary fails before it placed
// anything: the new primary's base is empty, and its first placement
// starts the table past 0 (joinAt); the backup that applied the empty
// base starts its table there too, rather than refusing the placement
// for a gap.
func TestShardPromotedBeforeItsFirstPlacementBacksUpFromWhereItsTableStarts(t *testing.T) {
	b := NewShard[int](ShardConfig{ID: 1, Epoch: 1}, ShardState{})
	c := NewShard[int](ShardConfig{ID: 1, Epoch: 1}, ShardState{})
	a := meta(1, 1, 1, 1)
	accept(t, b, a.ID, 1)
	accept(t, c, a.ID, 1)

	// The primary failed; epoch 2: b primary, c backup.
	var bo, co out
	b.Follow(2, []string{"b", "c"}, "b", &bo)
	if !b.Primary() || bo.Place == nil {
		t.Fatalf("b after its promotion: primary %v, base %+v", b.Primary(), bo.Place)
	}
	if err := c.Place(*bo.Place, &co); err != nil {
		t.Fatalf("the empty base: %v", err)
	}
	bo = out{}
	if err := b.Map(mapping(1, 5, a), t0, &bo); err != nil || bo.Place == nil {
		t.Fatalf("map at 5: %v, placement %+v", err, bo.Place)
	}
	co = out{}
	if err := c.Place(*bo.Place, &co); err != nil {
		t.Fatalf("the first placement past the empty base: %v", err)
	}
	if !co.Applied || co.AppliedEnd != 6 {
		t.Fatalf("c applied %v up to %d, want up to 6", co.Applied, co.AppliedEnd)
	}
}

// TestShardRejoinKeepsOnlyWhatStableOfAnAppliedViewCovered: a backup
// taken out that has not heard it yet may get stable-gp of a view whose
// flush rebound positions it placed in an older one; its rejoin keeps
// none of those as final, and it takes its primary's order there.
func TestShardRejoinKeepsOnlyWhatStableOfAnAppliedViewCovered(t *testing.T) {
	p := NewShard[int](ShardConfig{ID: 0, Primary: true, Epoch: 1, Backups: []string{"b"}}, ShardState{})
	b := NewShard[int](ShardConfig{ID: 0, Epoch: 1}, ShardState{})
	x, y := meta(1, 1, 0, 1), meta(2, 1, 0, 1)
	for _, s := range []*Shard[int]{p, b} {
		accept(t, s, x.ID, 1)
		accept(t, s, y.ID, 1)
	}
	var o, bo out
	p.Map(mapping(1, 0, x, y), t0, &o)
	if err := b.Place(*o.Place, &bo); err != nil {
		t.Fatal(err)
	}
	// View 2's flush rebinds [0, 2) the other way round at the primary
	// alone (b was taken out), and stable-gp moves to 2 in view 2.
	p.Follow(2, []string{"p"}, "p", &o)
	o = out{}
	if err := p.Map(mapping(2, 0, y, x), t0, &o); err != nil {
		t.Fatal(err)
	}
	b.Stable(StableGP{View: 2, Stable: 2}, &bo)
	// Taken back in, it keeps none of view 1's order as final, and
	// takes the primary's.
	p.Follow(3, []string{"p", "b"}, "p", &o)
	b.Follow(2, []string{"p"}, "b", &bo)
	b.Follow(3, []string{"p", "b"}, "b", &bo)
	if r := b.Readable(); r != 0 {
		t.Fatalf("b rejoined keeping view 1's order, which view 2 rebound, as final: readable %d", r)
	}
	bo = out{}
	for _, pl := range p.Resend("b") {
		if err := b.Place(pl, &bo); err != nil {
			t.Fatal(err)
		}
	}
	b.Stable(StableGP{View: 2, Stable: 2}, &bo)
	bo = out{}
	b.Read(0, 0, &bo)
	if b.Readable() != 2 || len(bo.Reads) != 1 || b.slots[0].ID != y.ID {
		t.Fatalf("after the primary's order: readable %d, reads %+v, slots %+v", b.Readable(), bo.Reads, b.slots)
	}
}
