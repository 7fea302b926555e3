package segment

import (
	"errors"
	"testing"
)

// TestTruncateDropsTheTailAcrossSegments checks that Truncate drops the
// tail from an index on, across segment files and through a no-op run,
// keeps what is before it and its runs, and that a reopen finds the same.
func TestTruncateDropsTheTailAcrossSegments(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentBytesMax: 512, Sync: SyncGroup}
	s := mustOpen(t, opts)
	appendTest(t, s, 10, 3)
	if _, err := s.Append([]Entry{{Noops: 10}}); err != nil { // [10, 20)
		t.Fatal(err)
	}
	if err := s.Assign(Run{Cut: 1, CutStart: 0, CutEnd: 15, LocalStart: 0, GlobalStart: 0, Count: 15}); err != nil {
		t.Fatal(err)
	}
	for s.Len() < 60 {
		if _, err := s.Append([]Entry{testEntry(s.Len())}); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.segs) < 3 {
		t.Fatalf("want the test to span several segments, have %d", len(s.segs))
	}
	// Below what is ordered, or past the end: refused, nothing changes.
	for _, bad := range []uint64{14, 61} {
		if err := s.Truncate(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Truncate(%d): %v, want ErrInvalid", bad, err)
		}
	}
	if s.Len() != 60 {
		t.Fatalf("refused truncation changed the length to %d", s.Len())
	}
	// In the middle of the no-op run: its first 7 indexes stay.
	if err := s.Truncate(17); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		if s.Len() != 17 || s.Ordered() != 15 {
			t.Fatalf("len %d ordered %d, want 17, 15", s.Len(), s.Ordered())
		}
		checkRecords(t, s, 0, 10)
		var got []Entry
		if err := s.Scan(10, func(_ uint64, e Entry) bool { got = append(got, e); return true }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Noops != 7 {
			t.Fatalf("after the truncation, from 10: %+v, want one run of 7 no-ops", got)
		}
	}
	check(s)
	if s.SyncedLen() != 17 {
		t.Fatalf("synced %d after the truncation, want 17", s.SyncedLen())
	}
	// Appends go on from the new end.
	if first, err := s.Append([]Entry{testEntry(17)}); err != nil || first != 17 {
		t.Fatalf("append after truncation at %d: %v", first, err)
	}
	if err := s.Truncate(17); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = mustOpen(t, opts)
	defer mustClose(t, s)
	check(s)
}
