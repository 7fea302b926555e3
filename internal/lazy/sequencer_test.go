package lazy

import (
	"errors"
	"testing"
)

func rid(c, s uint64) RecordID { return RecordID{Client: c, Seq: s} }

func meta(c, s uint64, shard uint32, view uint64) Meta {
	return Meta{ID: rid(c, s), Shard: shard, View: view}
}

// open returns a sequencer running view 1 from position 0.
func open(t *testing.T, ringMax int) *Sequencer {
	t.Helper()
	s := NewSequencer(SequencerConfig{RingMax: ringMax}, SequencerState{})
	if _, err := s.Start(StartView{View: 1}); err != nil {
		t.Fatal(err)
	}
	return s
}

func mustAppend(t *testing.T, s *Sequencer, m Meta, wantDup bool) {
	t.Helper()
	dup, err := s.Append(m)
	if err != nil || dup != wantDup {
		t.Fatalf("append %v: dup %v, %v; want dup %v", m.ID, dup, err, wantDup)
	}
}

func TestSequencerTakesAppendsOnlyInAStartedView(t *testing.T) {
	s := NewSequencer(SequencerConfig{}, SequencerState{})
	if _, err := s.Append(meta(1, 1, 0, 0)); !errors.Is(err, ErrSealed) {
		t.Fatalf("a new replica took an append before any view: %v", err)
	}
	if _, err := s.Start(StartView{View: 1, Ordered: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(meta(1, 1, 0, 2)); !errors.Is(err, ErrWrongView) {
		t.Errorf("append of view 2 in view 1: %v", err)
	}
	if _, err := s.Append(Meta{ID: rid(0, 1), View: 1}); !errors.Is(err, ErrBadInput) {
		t.Errorf("client 0: %v", err)
	}
	mustAppend(t, s, meta(1, 1, 0, 1), false)
	if s.Ordered() != 7 || s.Len() != 1 {
		t.Errorf("ordered %d, len %d; want 7, 1", s.Ordered(), s.Len())
	}
	if _, err := s.Start(StartView{View: 0}); !errors.Is(err, ErrWrongView) {
		t.Errorf("started an older view: %v", err)
	}
}

func TestSequencerFullRingPushesBackUntilCollected(t *testing.T) {
	s := open(t, 2)
	mustAppend(t, s, meta(1, 1, 0, 1), false)
	mustAppend(t, s, meta(1, 2, 0, 1), false)
	if _, err := s.Append(meta(1, 3, 0, 1)); !errors.Is(err, ErrRingFull) {
		t.Fatalf("third append to a ring of 2: %v", err)
	}
	if s.Len() != 2 {
		t.Fatalf("a refused append changed the ring: len %d", s.Len())
	}
	// A retry of a held record is no new entry: a full ring still acks it.
	mustAppend(t, s, meta(1, 2, 0, 1), true)
	if err := s.Collect(GC{View: 1, From: 0, End: 1, IDs: []RecordID{rid(1, 1)}}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, meta(1, 3, 0, 1), false)
}

func TestSequencerUnorderedIsTheLocalOrderAfterCollection(t *testing.T) {
	s := open(t, 0)
	for _, seq := range []uint64{3, 1, 2, 5, 4} {
		mustAppend(t, s, meta(9, seq, 0, 1), false)
	}
	if err := s.Collect(GC{View: 1, From: 0, End: 2, IDs: []RecordID{rid(9, 3), rid(9, 2)}}); err != nil {
		t.Fatal(err)
	}
	got := s.Unordered(10)
	want := []uint64{1, 5, 4}
	if len(got) != len(want) {
		t.Fatalf("unordered %v, want seqs %v", got, want)
	}
	for i, m := range got {
		if m.ID.Seq != want[i] {
			t.Fatalf("unordered %v, want seqs %v", got, want)
		}
	}
	if got := s.Unordered(2); len(got) != 2 || got[1].ID.Seq != 5 {
		t.Errorf("Unordered(2) = %v", got)
	}
}

func TestSequencerDedupSurvivesCollectionRestartAndViews(t *testing.T) {
	s := open(t, 0)
	mustAppend(t, s, meta(1, 1, 0, 1), false)
	mustAppend(t, s, meta(1, 2, 0, 1), false)
	if err := s.Collect(GC{View: 1, From: 0, End: 1, IDs: []RecordID{rid(1, 1)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Collect(GC{View: 1, From: 1, End: 2, IDs: []RecordID{rid(1, 2)}}); err != nil {
		t.Fatal(err)
	}
	// A copy arriving after the leader collected it (the paper's
	// footnote) is a duplicate, not a new entry.
	mustAppend(t, s, meta(1, 2, 0, 1), true)
	if s.Len() != 0 {
		t.Fatalf("a collected record came back: len %d", s.Len())
	}
	r := NewSequencer(SequencerConfig{}, s.State())
	if _, err := r.Start(StartView{View: 2, From: 2, Ordered: 2}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, r, meta(1, 1, 0, 2), true)
	mustAppend(t, r, meta(1, 3, 0, 2), false)
	// A view change also marks what its flush ordered.
	if _, err := r.Seal(2); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Start(StartView{View: 3, Ordered: 3, Flushed: []RecordID{rid(1, 3)}}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, r, meta(1, 3, 0, 3), true)
}

// A per-client high-water mark would drop a pipelined record that reached
// this replica after a later one of its client was ordered.
func TestSequencerKeepsALowerSeqThatArrivesAfterAHigherOneIsOrdered(t *testing.T) {
	s := open(t, 0)
	mustAppend(t, s, meta(1, 5, 0, 1), false)
	if err := s.Collect(GC{View: 1, From: 0, End: 1, IDs: []RecordID{rid(1, 5)}}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, meta(1, 4, 0, 1), false)
	if s.Len() != 1 {
		t.Fatalf("seq 4 was dropped as a duplicate of the ordered seq 5")
	}
	// The client's floor lets the replica forget what lies below it.
	m := meta(1, 7, 0, 1)
	m.Floor = 7
	mustAppend(t, s, m, false)
	mustAppend(t, s, meta(1, 6, 0, 1), true)
	if _, err := s.Append(meta(1, 6+ClientAheadMax, 0, 1)); err != nil {
		t.Errorf("within the bound: %v", err)
	}
	if _, err := s.Append(meta(1, 6+ClientAheadMax+1, 0, 1)); !errors.Is(err, ErrTooFarAhead) {
		t.Errorf("beyond ClientAheadMax past the floor: %v", err)
	}
}

func TestSequencerCollectIsIdempotentAndRefusesGapsAndOtherViews(t *testing.T) {
	s := open(t, 0)
	mustAppend(t, s, meta(1, 1, 0, 1), false)
	gc := GC{View: 1, From: 0, End: 1, IDs: []RecordID{rid(1, 1)}}
	if err := s.Collect(gc); err != nil {
		t.Fatal(err)
	}
	if err := s.Collect(gc); err != nil || s.Ordered() != 1 {
		t.Errorf("repeated collect: %v, ordered %d", err, s.Ordered())
	}
	if err := s.Collect(GC{View: 1, From: 3, End: 4}); !errors.Is(err, ErrBadInput) {
		t.Errorf("collect past a gap: %v", err)
	}
	if err := s.Collect(GC{View: 2, From: 1, End: 2}); !errors.Is(err, ErrWrongView) {
		t.Errorf("collect of another view: %v", err)
	}
	if err := s.Collect(GC{View: 1, From: 1, End: 2, IDs: []RecordID{rid(1, 2), rid(1, 3)}}); !errors.Is(err, ErrBadInput) {
		t.Errorf("collect of more records than positions: %v", err)
	}
	if s.Ordered() != 1 {
		t.Errorf("refused collects moved ordered to %d", s.Ordered())
	}
}

func TestSealedReplicaRefusesAppendsAndCollectsAndReportsItsRing(t *testing.T) {
	s := open(t, 0)
	mustAppend(t, s, meta(1, 2, 0, 1), false)
	mustAppend(t, s, meta(2, 1, 1, 1), false)
	rep, err := s.Seal(1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.View != 1 || rep.Ordered != 0 || rep.Amnesiac || len(rep.Entries) != 2 || rep.Entries[0].ID != rid(1, 2) {
		t.Fatalf("seal reply %+v", rep)
	}
	if _, err := s.Append(meta(3, 1, 0, 1)); !errors.Is(err, ErrSealed) {
		t.Errorf("sealed replica: %v", err)
	}
	if err := s.Collect(GC{View: 1, From: 0, End: 1, IDs: []RecordID{rid(1, 2)}}); !errors.Is(err, ErrSealed) {
		t.Errorf("sealed replica collected: %v", err)
	}
	if _, err := s.Seal(0); !errors.Is(err, ErrWrongView) {
		t.Errorf("seal of an older view: %v", err)
	}
	// A restarted replica lost its ring: it must say so.
	r := NewSequencer(SequencerConfig{}, s.State())
	if rep, _ := r.Seal(1); !rep.Amnesiac {
		t.Error("a restarted replica's seal reply does not say it lost its ring")
	}
}

// A StartView resent late must not reopen the view a seal closed: appends
// could then commit in a view whose unordered entries were flushed.
func TestSealedViewNeverReopens(t *testing.T) {
	s := open(t, 0)
	sv := StartView{View: 2, Ordered: 0, Leader: 1}
	if _, err := s.Start(sv); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(sv); err != nil {
		t.Errorf("starting the running view again: %v", err)
	}
	if _, err := s.Seal(2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(sv); !errors.Is(err, ErrSealed) {
		t.Fatalf("a late StartView reopened a sealed view: %v", err)
	}
	if _, err := s.Append(meta(1, 1, 0, 2)); !errors.Is(err, ErrSealed) {
		t.Errorf("append after the late StartView: %v", err)
	}
	// A restarted replica does not rejoin the view it lost its ring in.
	r := NewSequencer(SequencerConfig{}, SequencerState{View: 2})
	if _, err := r.Start(sv); !errors.Is(err, ErrSealed) {
		t.Errorf("a restarted replica rejoined its old view: %v", err)
	}
}

// A record a replica collected at a position not stable yet is a
// duplicate only as long as that binding may stand: when a view change
// recovers from a replica that had not collected it, the flush binds those
// positions again without it (it was never acknowledged), and a retry of
// it in the new view must be taken as new, or its client would count this
// replica's acknowledgement for a record no log holds.
func TestCollectedRecordComesBackWhenAViewChangeRebindsItsPosition(t *testing.T) {
	s := open(t, 0)
	x := meta(2, 46, 0, 1)
	mustAppend(t, s, x, false)
	if err := s.Collect(GC{View: 1, From: 140, End: 141, IDs: []RecordID{x.ID}}); err == nil {
		t.Fatal("collect past a gap")
	}
	s.ordered = 140
	if err := s.Collect(GC{View: 1, From: 140, End: 141, IDs: []RecordID{x.ID}}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, x, true)
	s.Seal(1)
	// The recovery replica had ordered up to 140 and held another record.
	y := meta(3, 1, 1, 1)
	if _, err := s.Start(StartView{View: 2, From: 140, Ordered: 141, Flushed: []RecordID{y.ID}}); err != nil {
		t.Fatal(err)
	}
	x.View, y.View = 2, 2
	mustAppend(t, s, x, false)
	mustAppend(t, s, y, true)
	// Once stable (the leader collects the next batch), a collected record
	// is a duplicate for good.
	if err := s.Collect(GC{View: 2, From: 141, End: 142, IDs: []RecordID{x.ID}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Collect(GC{View: 2, From: 142, End: 142}); err != nil {
		t.Fatal(err)
	}
	s.Seal(2)
	if _, err := s.Start(StartView{View: 3, From: 142, Ordered: 142}); err != nil {
		t.Fatal(err)
	}
	x.View = 3
	mustAppend(t, s, x, true)
}

func TestCollectDropsTheRecordsOfAFinalizedShardFromTheRing(t *testing.T) {
	s := open(t, 0)
	a, b, c := meta(1, 1, 0, 1), meta(1, 2, 1, 1), meta(1, 3, 0, 1)
	for _, m := range []Meta{a, b, c} {
		mustAppend(t, s, m, false)
	}
	if err := s.Collect(GC{View: 1, From: 0, End: 2, IDs: []RecordID{a.ID, c.ID}, Dropped: []RecordID{b.ID}}); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 || len(s.Unordered(10)) != 0 || s.Ordered() != 2 {
		t.Fatalf("ring holds %d (%v), ordered %d; want it empty at 2", s.Len(), s.Unordered(10), s.Ordered())
	}
	// A GC with nothing ordered only drops.
	mustAppend(t, s, meta(2, 1, 1, 1), false)
	if err := s.Collect(GC{View: 1, From: 2, End: 2, Dropped: []RecordID{rid(2, 1)}}); err != nil || s.Len() != 0 || s.Ordered() != 2 {
		t.Fatalf("drop-only GC: %v, ring %d, ordered %d", err, s.Len(), s.Ordered())
	}
}
