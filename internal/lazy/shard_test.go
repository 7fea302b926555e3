package lazy

import (
	"errors"
	"slices"
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

type out = ShardOutput[int]

func accept(t *testing.T, s *Shard[int], id RecordID, view uint64) uint64 {
	t.Helper()
	var o out
	local, fresh, err := s.Accept(id, view, &o)
	if err != nil || !fresh {
		t.Fatalf("accept %v: local %d, fresh %v, %v", id, local, fresh, err)
	}
	return local
}

func mapping(view, from uint64, recs ...Meta) Mapping {
	return Mapping{View: view, From: from, Records: recs}
}

func TestShardOrdersItsRecordsByTheMappingNotByArrival(t *testing.T) {
	p := NewShard[int](ShardConfig{ID: 0, Primary: true, NoopAfter: time.Millisecond}, ShardState{})
	a, b, x := meta(1, 1, 0, 1), meta(2, 1, 0, 1), meta(3, 1, 1, 1)
	lb := accept(t, p, b.ID, 1)
	la := accept(t, p, a.ID, 1)
	var o out
	if err := p.Map(mapping(1, 0, a, x, b), t0, &o); err != nil {
		t.Fatal(err)
	}
	pl := o.Place
	if pl == nil || pl.From != 0 || pl.End != 3 || len(pl.Slots) != 2 || pl.Slots[0] != (Slot{Pos: 0, ID: a.ID}) || pl.Slots[1] != (Slot{Pos: 2, ID: b.ID}) {
		t.Fatalf("placement %+v", pl)
	}
	if want := []Run{{0, 1, 0}, {1, 2, 1}, {2, 3, 0}}; !slices.Equal(pl.Runs, want) {
		t.Errorf("runs %v, want %v", pl.Runs, want)
	}
	if o.Ack == nil || o.Ack.End != 3 {
		t.Fatalf("a primary without backups did not ack: %+v", o.Ack)
	}
	// Nothing is readable before stable-gp passes it.
	o = out{}
	for pos := range uint64(3) {
		if err := p.Read(int(pos), pos, &o); err != nil {
			t.Fatal(err)
		}
	}
	if len(o.Reads) != 0 || p.Held() != 3 {
		t.Fatalf("reads above stable answered: %+v", o.Reads)
	}
	p.Stable(StableGP{View: 1, Stable: 2}, &o)
	want := []ReadAnswer[int]{{Waiter: 0, Pos: 0, Shard: 0, Local: la}, {Waiter: 1, Pos: 1, Shard: 1}}
	if !slices.Equal(o.Reads, want) || p.Held() != 1 {
		t.Fatalf("after stable 2: %+v, held %d; want %+v", o.Reads, p.Held(), want)
	}
	o = out{}
	p.Stable(StableGP{View: 1, Stable: 3}, &o)
	if len(o.Reads) != 1 || o.Reads[0].Local != lb || o.Reads[0].Pos != 2 {
		t.Fatalf("after stable 3: %+v", o.Reads)
	}
	// Fast path: below stable, answered at once.
	o = out{}
	if err := p.Read(9, 0, &o); err != nil || len(o.Reads) != 1 || o.Reads[0].Local != la {
		t.Fatalf("fast read: %+v, %v", o.Reads, err)
	}
	if got := p.Locate(1, 10); !slices.Equal(got, []Run{{1, 2, 1}, {2, 3, 0}}) {
		t.Errorf("locate from 1: %v", got)
	}
}

func TestShardHeldReadsAreBoundedAndCancellable(t *testing.T) {
	s := NewShard[int](ShardConfig{ID: 0, Primary: true, HeldReadsMax: 2}, ShardState{})
	var o out
	s.Read(1, 5, &o)
	s.Read(2, 6, &o)
	if err := s.Read(3, 7, &o); !errors.Is(err, ErrBusy) {
		t.Fatalf("third held read: %v", err)
	}
	s.Cancel(1)
	if err := s.Read(3, 7, &o); err != nil || s.Held() != 2 {
		t.Fatalf("after a cancel: %v, held %d", err, s.Held())
	}
}

func TestShardBindsANoopWhenDataDoesNotComeAndRefusesItLate(t *testing.T) {
	p := NewShard[int](ShardConfig{ID: 0, Primary: true, Epoch: 1, Backups: []string{"b"}, NoopAfter: 5 * time.Millisecond}, ShardState{})
	bk := NewShard[int](ShardConfig{ID: 0}, ShardState{})
	a, c := meta(1, 1, 0, 1), meta(2, 1, 0, 1)
	accept(t, p, a.ID, 1)
	accept(t, bk, a.ID, 1)
	var o out
	p.Map(mapping(1, 0, a, c), t0, &o)
	if o.Place != nil || !o.WakeAt.Equal(t0.Add(5*time.Millisecond)) {
		t.Fatalf("placed before c's data or its deadline: %+v", o)
	}
	o = out{}
	p.Tick(t0.Add(4*time.Millisecond), &o)
	if o.Place != nil {
		t.Fatal("no-op bound before the deadline")
	}
	p.Tick(t0.Add(5*time.Millisecond), &o)
	pl := o.Place
	if pl == nil || len(pl.Slots) != 2 || pl.Slots[0].Noop || !pl.Slots[1].Noop || len(o.Voided) != 1 || o.Voided[0] != c.ID {
		t.Fatalf("placement after the deadline %+v, voided %v", pl, o.Voided)
	}
	if o.Ack != nil {
		t.Fatal("acked before the backup applied the placement")
	}
	if _, _, err := p.Accept(c.ID, 1, &out{}); !errors.Is(err, ErrLate) {
		t.Fatalf("late data on the primary: %v", err)
	}
	var bo out
	if err := bk.Place(*pl, &bo); err != nil || !bo.Applied || bo.AppliedEnd != 2 {
		t.Fatalf("backup place: %+v, %v", bo, err)
	}
	if _, _, err := bk.Accept(c.ID, 1, &out{}); !errors.Is(err, ErrLate) {
		t.Fatalf("late data on the backup: %v", err)
	}
	o = out{}
	p.BackupApplied("b", bo.AppliedTerm, bo.AppliedSeq, &o)
	if o.Ack == nil || o.Ack.End != 2 {
		t.Fatalf("ack after the backup applied: %+v", o.Ack)
	}
	// Data that comes in time stops the wait at once.
	d := meta(3, 1, 0, 1)
	o = out{}
	p.Map(mapping(1, 2, d), t0, &o)
	if o.Place != nil {
		t.Fatal("placed without d's data")
	}
	p.Accept(d.ID, 1, &o)
	if o.Place == nil || o.Place.Slots[0].Noop {
		t.Fatalf("d's arrival did not place it: %+v", o.Place)
	}
}

func TestShardBackupFetchesPlacedDataItLacks(t *testing.T) {
	p := NewShard[int](ShardConfig{ID: 0, Primary: true, Epoch: 1, Backups: []string{"b"}}, ShardState{})
	bk := NewShard[int](ShardConfig{ID: 0}, ShardState{})
	a := meta(1, 1, 0, 1)
	accept(t, p, a.ID, 1)
	var o out
	p.Map(mapping(1, 0, a), t0, &o)
	var bo out
	bk.Place(*o.Place, &bo)
	if bo.Applied || len(bo.Fetch) != 1 || bo.Fetch[0] != a.ID {
		t.Fatalf("backup without a's data: %+v", bo)
	}
	bk.Stable(StableGP{View: 1, Stable: 1}, &bo)
	bo = out{}
	if bk.Read(1, 0, &bo); len(bo.Reads) != 0 {
		t.Fatal("a backup served a position it has not applied")
	}
	if _, fresh, err := bk.Copy(a.ID, &bo); err != nil || !fresh {
		t.Fatal(err)
	}
	if !bo.Applied || bo.AppliedEnd != 1 || len(bo.Reads) != 1 || bo.Reads[0].Noop {
		t.Fatalf("after the copy: %+v", bo)
	}
}

func TestShardNewViewRebindsOnlyAboveStable(t *testing.T) {
	p := NewShard[int](ShardConfig{ID: 0, Primary: true}, ShardState{})
	a, b, c := meta(1, 1, 0, 1), meta(2, 1, 0, 1), meta(3, 1, 0, 1)
	for _, m := range []Meta{a, b, c} {
		accept(t, p, m.ID, 1)
	}
	var o out
	p.Map(mapping(1, 0, a, c, b), t0, &o)
	p.Stable(StableGP{View: 1, Stable: 1}, &o)
	o = out{}
	if err := p.Map(mapping(2, 0, a, b, c), t0, &o); !errors.Is(err, ErrBadInput) {
		t.Fatalf("a flush rebinding stable position 0: %v", err)
	}
	if err := p.Map(mapping(0, 1, b), t0, &o); !errors.Is(err, ErrWrongView) {
		t.Fatalf("a mapping of an older view: %v", err)
	}
	if err := p.Map(mapping(2, 1, b, c), t0, &o); err != nil {
		t.Fatal(err)
	}
	if o.Place == nil || o.Place.Slots[0].ID != b.ID || o.Place.Slots[1].ID != c.ID || o.Ack == nil || o.Ack.View != 2 {
		t.Fatalf("flush of view 2: %+v", o)
	}
	p.Stable(StableGP{View: 2, Stable: 3}, &o)
	o = out{}
	for pos := range uint64(3) {
		p.Read(int(pos), pos, &o)
	}
	var got []RecordID
	for _, r := range o.Reads {
		got = append(got, p.slots[r.Pos].ID)
	}
	if !slices.Equal(got, []RecordID{a.ID, b.ID, c.ID}) {
		t.Errorf("order after the flush %v", got)
	}
	// A mapping that binds a record already placed makes a no-op of the
	// second binding: a record is stored once.
	o = out{}
	p.Map(mapping(2, 3, a), t0, &o)
	if o.Place == nil || !o.Place.Slots[0].Noop || len(o.Voided) != 0 {
		t.Fatalf("rebinding a placed record: %+v", o.Place)
	}
}

func TestShardDedupsDataAcrossTrimAndRestart(t *testing.T) {
	p := NewShard[int](ShardConfig{ID: 0, Primary: true}, ShardState{})
	a, b := meta(1, 1, 0, 1), meta(1, 2, 0, 1)
	la := accept(t, p, a.ID, 1)
	accept(t, p, b.ID, 1)
	var o out
	if local, fresh, err := p.Accept(a.ID, 1, &o); err != nil || fresh || local != la {
		t.Fatalf("retry: %d %v %v", local, fresh, err)
	}
	p.Map(mapping(1, 0, a), t0, &o)
	pl := *o.Place
	p.Stable(StableGP{View: 1, Stable: 1}, &o)
	if p.Trim(5) != 1 {
		t.Fatal("trimmed past stable")
	}
	if local, fresh, err := p.Accept(a.ID, 1, &o); err != nil || fresh || local != Gone {
		t.Fatalf("retry after trim: %d %v %v", local, fresh, err)
	}
	if err := p.Read(0, 0, &o); !errors.Is(err, ErrTrimmed) {
		t.Errorf("read of a trimmed position: %v", err)
	}
	// A restart replays the log's records and the placements.
	r := NewShard[int](ShardConfig{ID: 0, Primary: true}, ShardState{
		Len: 2, Records: []StoredRecord{{ID: a.ID, Local: 0}, {ID: b.ID, Local: 1}},
		Placements: []Placement{pl}, Stable: 1, StableView: 1,
	})
	o = out{}
	if local, fresh, err := r.Accept(b.ID, 1, &o); err != nil || fresh || local != 1 {
		t.Fatalf("retry after restart: %d %v %v", local, fresh, err)
	}
	if err := r.Read(0, 0, &o); err != nil || len(o.Reads) != 1 || o.Reads[0].Local != 0 {
		t.Fatalf("read after restart: %+v %v", o.Reads, err)
	}
	if r.PlacedEnd() != 1 || r.Unordered() != 1 {
		t.Errorf("restart: placed to %d, %d unordered", r.PlacedEnd(), r.Unordered())
	}
}

func TestShardScrubsOrphansOnlyAfterAViewChangeCompleted(t *testing.T) {
	p := NewShard[int](ShardConfig{ID: 0, Primary: true}, ShardState{})
	orphan, kept := meta(1, 1, 0, 1), meta(2, 1, 0, 2)
	lo := accept(t, p, orphan.ID, 1)
	accept(t, p, kept.ID, 2)
	if got := p.Scrub(); len(got) != 0 {
		t.Fatalf("scrubbed %v before any view change", got)
	}
	var o out
	p.Map(mapping(2, 0, meta(3, 1, 1, 2)), t0, &o)
	p.Stable(StableGP{View: 2, Stable: 1}, &o)
	if got := p.Scrub(); !slices.Equal(got, []uint64{lo}) {
		t.Fatalf("scrubbed %v, want the orphan at %d", got, lo)
	}
	if _, _, err := p.Accept(orphan.ID, 1, &o); !errors.Is(err, ErrWrongView) {
		t.Errorf("a late copy of the orphan: %v", err)
	}
	if p.Unordered() != 1 {
		t.Errorf("the record of the current view was scrubbed")
	}
}

// A backup applies its primary's placements in their order, each once:
// a late copy of an older one cannot undo a newer view's rebinding.
func TestShardBackupFollowsThePrimarysPlacementsInOrder(t *testing.T) {
	bk := NewShard[int](ShardConfig{ID: 0}, ShardState{})
	a, b := meta(1, 1, 0, 1), meta(2, 1, 1, 1)
	accept(t, bk, b.ID, 1)
	old := Placement{Seq: 1, View: 1, From: 0, End: 1, Runs: []Run{{0, 1, 0}}, Slots: []Slot{{Pos: 0, ID: a.ID}}}
	newer := Placement{Seq: 2, View: 2, From: 0, End: 1, Runs: []Run{{0, 1, 1}}}
	var o out
	bk.Place(old, &o)
	if len(o.Fetch) != 1 || o.Applied {
		t.Fatalf("placement without a's data: %+v", o)
	}
	o = out{}
	if err := bk.Place(newer, &o); !errors.Is(err, ErrBadInput) || o.Applied {
		t.Fatalf("placement 2 before 1 was applied: %+v, %v", o, err)
	}
	bk.Copy(a.ID, &o)
	if !o.Applied || o.AppliedSeq != 1 {
		t.Fatalf("after the copy: %+v", o)
	}
	o = out{}
	if err := bk.Place(newer, &o); err != nil || o.AppliedSeq != 2 {
		t.Fatalf("placement 2: %+v, %v", o, err)
	}
	o = out{}
	if err := bk.Place(old, &o); err != nil || o.AppliedSeq != 2 || o.Place != nil {
		t.Fatalf("a late copy of placement 1: %+v, %v", o, err)
	}
	bk.Stable(StableGP{View: 2, Stable: 1}, &o)
	o = out{}
	bk.Read(0, 0, &o)
	if len(o.Reads) != 1 || o.Reads[0].Shard != 1 {
		t.Fatalf("position 0: %+v, want it on shard 1 as view 2 bound it", o.Reads)
	}
}

// A record whose position became a no-op stays refused after a restart,
// even when the replica's log holds a copy of its data from before (one
// the orphan scrub dropped, which a restart finds again): otherwise its
// client would count the acknowledgement of a record no position holds.
func TestShardKeepsRefusingLateDataAfterARestart(t *testing.T) {
	p := NewShard[int](ShardConfig{ID: 0, Primary: true, NoopAfter: time.Millisecond}, ShardState{})
	x := meta(3, 20, 0, 2)
	accept(t, p, x.ID, 2)
	var o out
	p.Map(mapping(3, 0, meta(9, 1, 1, 3)), t0, &o)
	p.Stable(StableGP{View: 3, Stable: 1}, &o)
	if got := p.Scrub(); len(got) != 1 {
		t.Fatalf("scrubbed %v", got)
	}
	o = out{}
	p.Map(mapping(3, 1, x), t0, &o)
	p.Tick(t0.Add(time.Millisecond), &o)
	if o.Place == nil || !o.Place.Slots[0].Noop {
		t.Fatalf("placement %+v", o.Place)
	}
	places := []Placement{{Seq: 1, View: 3, From: 0, End: 1, Runs: []Run{{0, 1, 1}}}, *o.Place}
	r := NewShard[int](ShardConfig{ID: 0, Primary: true}, ShardState{
		Len: 1, Records: []StoredRecord{{ID: x.ID, Local: 0, View: 2}}, Placements: places, Stable: 1, StableView: 3,
	})
	if _, _, err := r.Accept(x.ID, 3, &out{}); !errors.Is(err, ErrLate) {
		t.Fatalf("late data after a restart: %v", err)
	}
}

func TestShardFollowsItsConfigurationBackupTakenOutIsNoLongerWaitedFor(t *testing.T) {
	p := NewShard[int](ShardConfig{ID: 0, Primary: true, Epoch: 1, Backups: []string{"b", "c"}}, ShardState{})
	a := meta(1, 1, 0, 1)
	accept(t, p, a.ID, 1)
	var o out
	p.Map(mapping(1, 0, a), t0, &o)
	if o.Place == nil || o.Ack != nil {
		t.Fatalf("placement %+v, ack %+v: want a placement, no ack", o.Place, o.Ack)
	}
	o = out{}
	p.BackupApplied("b", 1, 1, &o)
	if o.Ack != nil {
		t.Fatal("acked while backup c of the configuration lacks the placement")
	}
	p.BackupApplied("x", 1, 1, &o)
	if o.Ack != nil {
		t.Fatal("a server that is no backup counted for the ack")
	}
	// An older or equal epoch changes nothing.
	p.Reconfigure(1, []string{"b"}, &o)
	if o.Ack != nil || len(p.Resend("c")) != 1 {
		t.Fatalf("epoch 1 again changed the configuration: ack %+v", o.Ack)
	}
	// Epoch 2 takes c out: the mapping it held up is acknowledged.
	p.Reconfigure(2, []string{"b"}, &o)
	if o.Ack == nil || o.Ack.End != 1 || p.Epoch() != 2 {
		t.Fatalf("after c was taken out: ack %+v, epoch %d", o.Ack, p.Epoch())
	}
	if len(p.Resend("c")) != 0 {
		t.Fatal("placements still resent to a backup taken out")
	}
	// The next mapping needs b alone.
	d := meta(2, 1, 0, 1)
	accept(t, p, d.ID, 1)
	o = out{}
	p.Map(mapping(1, 1, d), t0, &o)
	if o.Ack != nil {
		t.Fatal("acked before b applied the second placement")
	}
	p.BackupApplied("c", 1, 2, &o)
	if o.Ack != nil {
		t.Fatal("the backup taken out counted for the ack")
	}
	p.BackupApplied("b", 1, 2, &o)
	if o.Ack == nil || o.Ack.End != 2 {
		t.Fatalf("ack after b applied: %+v", o.Ack)
	}
}

// failoverShard is a shard of three replicas, p primary of epoch 1 with
// backups b and c, where a is placed at 0 on all (acknowledged and
// stable) and d is placed at 1 by p and applied by c alone (not
// acknowledged).
func failoverShard(t *testing.T) (p, b, c *Shard[int], a, d Meta, pl2 Placement) {
	t.Helper()
	p = NewShard[int](ShardConfig{ID: 0, Primary: true, Epoch: 1, Backups: []string{"b", "c"}}, ShardState{})
	b = NewShard[int](ShardConfig{ID: 0, Epoch: 1}, ShardState{})
	c = NewShard[int](ShardConfig{ID: 0, Epoch: 1}, ShardState{})
	a, d = meta(1, 1, 0, 1), meta(2, 1, 0, 1)
	for _, s := range []*Shard[int]{p, b, c} {
		accept(t, s, a.ID, 1)
		accept(t, s, d.ID, 1)
	}
	var o out
	p.Map(mapping(1, 0, a), t0, &o)
	pl1 := *o.Place
	for name, bk := range map[string]*Shard[int]{"b": b, "c": c} {
		var bo out
		if err := bk.Place(pl1, &bo); err != nil || !bo.Applied || bo.AppliedTerm != 1 {
			t.Fatalf("%s applies placement 1: %+v, %v", name, bo, err)
		}
		p.BackupApplied(name, bo.AppliedTerm, bo.AppliedSeq, &o)
	}
	if o.Ack == nil || o.Ack.End != 1 {
		t.Fatalf("placement 1 not acknowledged: %+v", o.Ack)
	}
	for _, s := range []*Shard[int]{p, b, c} {
		s.Stable(StableGP{View: 1, Stable: 1}, &out{})
	}
	o = out{}
	p.Map(mapping(1, 1, d), t0, &o)
	pl2 = *o.Place
	var co out
	if err := c.Place(pl2, &co); err != nil || !co.Applied {
		t.Fatalf("c applies placement 2: %v", err)
	}
	p.BackupApplied("c", co.AppliedTerm, co.AppliedSeq, &o)
	if o.Ack != nil {
		t.Fatal("placement 2 acknowledged without b")
	}
	return p, b, c, a, d, pl2
}

func TestShardPromotedBackupRestatesItsOrderAndBackupsDropTheOldPrimarysTail(t *testing.T) {
	p, b, c, a, d, pl2 := failoverShard(t)
	// p fails; epoch 2 makes b primary with backup c.
	var o out
	b.Promote(2, []string{"c"}, &o)
	base := o.Place
	if !b.Primary() || base == nil || !base.Base || base.Term != 2 || base.Seq != 2 || base.From != 1 || base.End != 1 {
		t.Fatalf("promotion: primary %v, base %+v", b.Primary(), base)
	}
	if o.Ack != nil {
		t.Fatal("acknowledged before c took the base")
	}
	// c's answers about p's placements count for nothing with b.
	b.BackupApplied("c", 1, 2, &o)
	if o.Ack != nil {
		t.Fatal("an answer about the old primary's placements counted")
	}
	if got := b.Resend("c"); len(got) != 1 || !got[0].Base {
		t.Fatalf("resend to c after promotion: %+v", got)
	}
	var co out
	if err := c.Place(*base, &co); err != nil || !co.Applied || co.AppliedTerm != 2 || co.AppliedSeq != 2 || co.AppliedEnd != 1 {
		t.Fatalf("c takes the base: %+v, %v", co, err)
	}
	if c.PlacedEnd() != 1 {
		t.Fatalf("c kept the old primary's unacknowledged tail: placed end %d", c.PlacedEnd())
	}
	b.BackupApplied("c", co.AppliedTerm, co.AppliedSeq, &o)
	if o.Ack == nil || o.Ack.End != 1 {
		t.Fatalf("ack after c took the base: %+v", o.Ack)
	}
	// The orderer sends the mapping in flight again: b places it.
	o = out{}
	if err := b.Map(mapping(1, 1, d), t0, &o); err != nil || o.Place == nil || o.Place.Term != 2 || o.Place.Seq != 3 {
		t.Fatalf("new primary places the mapping in flight: %+v, %v", o.Place, err)
	}
	co = out{}
	if err := c.Place(*o.Place, &co); err != nil || co.AppliedSeq != 3 {
		t.Fatalf("c applies b's placement: %+v, %v", co, err)
	}
	b.BackupApplied("c", co.AppliedTerm, co.AppliedSeq, &o)
	if o.Ack == nil || o.Ack.End != 2 {
		t.Fatalf("ack of the mapping in flight: %+v", o.Ack)
	}
	// The old primary's placements are refused from now on, and change
	// nothing; the old primary, taken out, takes no mapping.
	old := pl2
	old.Seq = 4
	if err := c.Place(old, &out{}); !errors.Is(err, ErrStaleTerm) {
		t.Fatalf("placement of the replaced primary: %v", err)
	}
	p.Leave(2)
	if err := p.Map(mapping(1, 2, meta(3, 1, 0, 1)), t0, &out{}); !errors.Is(err, ErrNotInConfig) || p.Primary() {
		t.Fatalf("mapping to a primary taken out: %v", err)
	}
	// It holds its own placement of d at 1, which stable-gp 2 does not
	// make readable there: stable-gp covers the new primary's order.
	p.Stable(StableGP{View: 1, Stable: 2}, &out{})
	if p.Readable() != 1 {
		t.Fatalf("a primary taken out serves up to %d after stable-gp 2, want its old end 1", p.Readable())
	}
	// Position 0, stable before the failover, is a on every replica.
	for name, s := range map[string]*Shard[int]{"b": b, "c": c} {
		s.Stable(StableGP{View: 1, Stable: 2}, &out{})
		var ro out
		if err := s.Read(0, 0, &ro); err != nil || len(ro.Reads) != 1 || ro.Reads[0].Noop {
			t.Fatalf("%s reads 0: %+v, %v", name, ro.Reads, err)
		}
		if l, _ := s.LocalOf(a.ID); ro.Reads[0].Local != l {
			t.Fatalf("%s: position 0 changed: %+v", name, ro.Reads[0])
		}
		ro = out{}
		if err := s.Read(1, 1, &ro); err != nil || len(ro.Reads) != 1 || ro.Reads[0].Noop {
			t.Fatalf("%s reads 1: %+v, %v", name, ro.Reads, err)
		}
	}
}

func TestShardBaseKeepsWhatABackupHoldsBelowItsReadableEnd(t *testing.T) {
	_, b, c, _, d, _ := failoverShard(t)
	// c heard a newer stable-gp than b (the mapping of d was acknowledged
	// in an epoch where b was not a backup, say): b's base starts below
	// c's readable end, which c keeps.
	c.Stable(StableGP{View: 1, Stable: 2}, &out{})
	var bo out
	b.Place(Placement{Seq: 2, Term: 1, View: 1, From: 1, End: 2, Runs: []Run{{1, 2, 0}}, Slots: []Slot{{Pos: 1, ID: d.ID}}}, &bo)
	var o out
	b.Promote(2, []string{"c"}, &o)
	b.Stable(StableGP{View: 1, Stable: 1}, &out{})
	var co out
	if err := c.Place(*o.Place, &co); err != nil || !co.Applied || c.PlacedEnd() != 2 {
		t.Fatalf("c takes a base from below its readable end: %+v, %v, placed end %d", co, err, c.PlacedEnd())
	}
	var ro out
	if err := c.Read(0, 1, &ro); err != nil || len(ro.Reads) != 1 || ro.Reads[0].Noop {
		t.Fatalf("c reads 1 after the base: %+v, %v", ro.Reads, err)
	}
	if co.Place == nil || co.Place.From != 2 {
		t.Fatalf("c persists the base clipped at its readable end: %+v", co.Place)
	}
}

func TestShardBackupRefusesANewPrimarysPlacementBeforeItsBase(t *testing.T) {
	_, b, c, _, d, _ := failoverShard(t)
	var o out
	b.Promote(2, []string{"c"}, &o)
	base := *o.Place
	o = out{}
	b.Map(mapping(1, 1, d), t0, &o)
	next := *o.Place
	// Delivered out of order, the placement after the base would pass for
	// c's own number 3; it is refused until the base came.
	if err := c.Place(next, &out{}); !errors.Is(err, ErrBadInput) {
		t.Fatalf("a new primary's placement before its base: %v", err)
	}
	for _, pl := range []Placement{base, next} {
		var co out
		if err := c.Place(pl, &co); err != nil || !co.Applied {
			t.Fatalf("place %d: %v", pl.Seq, err)
		}
	}
	if c.PlacedEnd() != 2 {
		t.Fatalf("placed end %d", c.PlacedEnd())
	}
}

func TestShardPromotedRestartReplaysTheBase(t *testing.T) {
	_, b, c, _, d, _ := failoverShard(t)
	var o out
	b.Promote(2, []string{"c"}, &o)
	base := *o.Place
	var co out
	c.Place(base, &co)
	// c restarts from what it persisted: p's placements 1 and 2, then b's
	// base, which drops 2.
	st := ShardState{Len: 2, Records: []StoredRecord{{ID: meta(1, 1, 0, 1).ID, Local: 0}, {ID: d.ID, Local: 1}}}
	st.Placements = []Placement{{Seq: 1, Term: 1, View: 1, From: 0, End: 1, Runs: []Run{{0, 1, 0}}, Slots: []Slot{{Pos: 0, ID: meta(1, 1, 0, 1).ID}}},
		{Seq: 2, Term: 1, View: 1, From: 1, End: 2, Runs: []Run{{1, 2, 0}}, Slots: []Slot{{Pos: 1, ID: d.ID}}}, *co.Place}
	r := NewShard[int](ShardConfig{ID: 0, Epoch: 2}, st)
	if r.PlacedEnd() != 1 {
		t.Fatalf("restarted backup placed end %d, want 1", r.PlacedEnd())
	}
	o = out{}
	b.Map(mapping(1, 1, d), t0, &o)
	var ro out
	if err := r.Place(*o.Place, &ro); err != nil || ro.AppliedSeq != 3 {
		t.Fatalf("restarted backup takes the new primary's next placement: %+v, %v", ro, err)
	}
}

func TestShardReclaimsTheLogBelowItsFirstRecordStillNeeded(t *testing.T) {
	p := NewShard[int](ShardConfig{ID: 0, Primary: true}, ShardState{})
	a, b, c := meta(1, 1, 0, 1), meta(1, 2, 0, 1), meta(1, 3, 0, 1)
	accept(t, p, a.ID, 1)
	accept(t, p, c.ID, 1) // never mapped: it pins the log from local 1 on
	accept(t, p, b.ID, 1)
	var o out
	p.Map(mapping(1, 0, a, b), t0, &o)
	p.Stable(StableGP{View: 1, Stable: 2}, &o)
	if got := p.Reclaimable(); got != 0 {
		t.Fatalf("before a trim: reclaimable below %d, want 0", got)
	}
	if got := p.Trim(5); got != 2 {
		t.Fatalf("trim at 5 with stable-gp 2 trimmed to %d", got)
	}
	if got := p.Reclaimable(); got != 1 {
		t.Fatalf("after trimming a and b: reclaimable below %d, want 1 (c at local 1 is still needed)", got)
	}
	if err := p.Read(0, 1, &out{}); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("read below the trim point: %v", err)
	}
}

func TestShardNeverScrubsARecordRestoredWithoutItsView(t *testing.T) {
	a, b := meta(1, 1, 0, 1), meta(2, 1, 0, 1)
	// a's log kept no view (a retry in view 2 may have come before the
	// restart, its metadata waiting in view 2's ring); b's kept view 1.
	st := ShardState{Len: 2, Records: []StoredRecord{{ID: a.ID, Local: 0}, {ID: b.ID, Local: 1, View: 1}}, StableView: 1}
	p := NewShard[int](ShardConfig{ID: 0, Primary: true}, st)
	p.Stable(StableGP{View: 2}, &out{})
	if got := p.Scrub(); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("scrubbed %v, want b's local 1 alone", got)
	}
	if _, ok := p.LocalOf(a.ID); !ok {
		t.Fatal("a, restored without its view, was scrubbed")
	}
}

// A primary reopening with placements on disk takes over with a base of
// its configuration's epoch when that is newer than their term: its
// backups drop what the old term left unacknowledged. One reopening in
// its own term goes on with its placements (a base of the same term would
// not replace a backup's tail).
func TestShardOpenedPrimaryTakesOverOnlyInANewerTerm(t *testing.T) {
	_, _, c, a, d, pl2 := failoverShard(t)
	pl1 := Placement{Seq: 1, Term: 1, View: 1, From: 0, End: 1, Runs: []Run{{0, 1, 0}}, Slots: []Slot{{Pos: 0, ID: a.ID}}}
	disk := func(ps ...Placement) ShardState {
		return ShardState{Len: 2, Records: []StoredRecord{{ID: a.ID, Local: 0}, {ID: d.ID, Local: 1}}, Placements: ps, Stable: 1, StableView: 1}
	}
	var o out
	same := OpenShard(ShardConfig{ID: 0, Primary: true, Epoch: 1, Backups: []string{"b", "c"}}, disk(pl1, pl2), &o)
	if o.Place != nil || !same.Primary() || same.PlacedEnd() != 2 {
		t.Fatalf("reopened in its own term: placement %+v, placed end %d", o.Place, same.PlacedEnd())
	}
	// Reopened in epoch 2 without placement 2 (c holds it): the base of
	// term 2 replaces c's tail.
	o = out{}
	p := OpenShard(ShardConfig{ID: 0, Primary: true, Epoch: 2, Backups: []string{"b", "c"}}, disk(pl1), &o)
	base := o.Place
	if !p.Primary() || base == nil || !base.Base || base.Term != 2 || base.From != 1 {
		t.Fatalf("reopened in a newer epoch: primary %v, base %+v", p.Primary(), base)
	}
	var co out
	if err := c.Place(*base, &co); err != nil || !co.Applied || c.PlacedEnd() != 1 {
		t.Fatalf("c takes the base: %+v, %v, placed end %d", co, err, c.PlacedEnd())
	}
}

// Follow picks the call by the replica's place in its configuration.
func TestShardFollowByPlaceInTheConfiguration(t *testing.T) {
	_, b, c, _, _, _ := failoverShard(t)
	var o out
	b.Follow(2, []string{"b", "c"}, "b", &o)
	if !b.Primary() || o.Place == nil || !o.Place.Base {
		t.Fatalf("b first in epoch 2: primary %v, placement %+v, want promoted with a base", b.Primary(), o.Place)
	}
	o = out{}
	c.Follow(2, []string{"b", "c"}, "c", &o)
	if c.Primary() || c.Out() || c.Epoch() != 2 {
		t.Fatalf("c a backup in epoch 2: primary %v, out %v, epoch %d", c.Primary(), c.Out(), c.Epoch())
	}
	b.Follow(3, []string{"b"}, "b", &o)
	if !b.Primary() || b.Epoch() != 3 || len(b.Resend("c")) != 0 {
		t.Fatalf("b stays primary in epoch 3 without c: primary %v, epoch %d", b.Primary(), b.Epoch())
	}
	c.Follow(3, []string{"b"}, "c", &o)
	if !c.Out() {
		t.Fatal("c taken out in epoch 3 did not leave")
	}
}
