package segment

import (
	"errors"
	"testing"
)

// checkBased checks that s starts empty at base: nothing below it reads,
// and it counts as ordered.
func checkBased(t *testing.T, s *Store, base uint64) {
	t.Helper()
	if s.Start() != base || s.Len() != base || s.Ordered() != base {
		t.Fatalf("Start, Len, Ordered = %d, %d, %d; want %d each", s.Start(), s.Len(), s.Ordered(), base)
	}
	if base > 0 {
		_, err := s.Read(base - 1)
		wantErr(t, err, ErrTrimmed, "Read below the base")
	}
	if _, ok := s.GlobalOf(base - 1); ok && base > 0 {
		t.Fatalf("GlobalOf(%d) has a position below the base", base-1)
	}
	if err := s.Scan(0, func(l uint64, _ Entry) bool { t.Fatalf("Scan of an empty store visited %d", l); return false }); err != nil {
		t.Fatal(err)
	}
}

func TestRebaseStartsEmptyAtTheBaseAndSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytesMax: 1, Sync: SyncInterval}
	s := mustOpen(t, opts)
	if err := s.Rebase(30); err != nil {
		t.Fatal(err)
	}
	checkBased(t, s, 30)
	if s.SyncedLen() < 30 {
		t.Fatalf("SyncedLen = %d below the base", s.SyncedLen())
	}
	mustClose(t, s)
	s = mustOpen(t, opts)
	checkBased(t, s, 30)

	// It takes entries from the base on, and positions from there: local
	// k at global 1000+k, runs of 3 as in trimFixture, the first starting
	// at the base.
	appendTest(t, s, 12, 4)
	if s.Len() != 42 {
		t.Fatalf("Len = %d, want 42", s.Len())
	}
	// A run over indexes below the base is refused: none is stored.
	if err := s.Assign(fixtureRun(9, 3)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Assign below the base: %v, want ErrInvalid", err)
	}
	for k := uint64(10); k < 14; k++ {
		if err := s.Assign(fixtureRun(k, 3)); err != nil {
			t.Fatalf("Assign run %d: %v", k, err)
		}
	}
	checkRecords(t, s, 30, 42)
	mustClose(t, s)

	s = mustOpen(t, opts)
	defer mustClose(t, s)
	if s.Start() != 30 || s.Len() != 42 || s.Ordered() != 42 {
		t.Fatalf("reopened: Start, Len, Ordered = %d, %d, %d; want 30, 42, 42", s.Start(), s.Len(), s.Ordered())
	}
	checkRecords(t, s, 30, 42)
	if g, ok := s.GlobalOf(31); !ok || g != fixtureGlobal(31) {
		t.Fatalf("GlobalOf(31) = %d, %v; want %d", g, ok, fixtureGlobal(31))
	}
	// Trim works as on any store: segments of 4 entries at 30, 34, 38.
	if err := s.Trim(fixtureGlobal(36)); err != nil {
		t.Fatal(err)
	}
	if s.Start() != 34 {
		t.Fatalf("Start after trim = %d, want 34", s.Start())
	}
	checkRecords(t, s, 34, 42)
}

func TestRebaseDropsAStoresEntriesAndPositions(t *testing.T) {
	dir := t.TempDir()
	s, opts := trimFixture(t, dir)
	if err := s.Trim(fixtureGlobal(18)); err != nil {
		t.Fatal(err)
	}
	// Below the length: refused, nothing changes.
	if err := s.Rebase(49); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Rebase below Len: %v, want ErrInvalid", err)
	}
	checkRecords(t, s, 15, 50)
	if err := s.Rebase(60); err != nil {
		t.Fatal(err)
	}
	checkBased(t, s, 60)
	if n := len(segFiles(t, dir)); n != 1 {
		t.Fatalf("%d segment files after a rebase, want 1", n)
	}
	appendTest(t, s, 3, 3)
	if err := s.Assign(fixtureRun(20, 3)); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	s = mustOpen(t, opts)
	defer mustClose(t, s)
	if s.Start() != 60 || s.Len() != 63 || s.Ordered() != 63 {
		t.Fatalf("reopened: Start, Len, Ordered = %d, %d, %d; want 60, 63, 63", s.Start(), s.Len(), s.Ordered())
	}
	checkRecords(t, s, 60, 63)
}

// A crash after the base file is written and before the old store is gone
// leaves both: Open finishes the rebase.
func TestOpenFinishesAnInterruptedRebase(t *testing.T) {
	dir := t.TempDir()
	s, opts := trimFixture(t, dir)
	mustClose(t, s)
	if err := writeBase(dir, 70); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, opts)
	checkBased(t, s, 70)
	if n := len(segFiles(t, dir)); n != 1 {
		t.Fatalf("%d segment files, want the new store's 1", n)
	}
	appendTest(t, s, 2, 2)
	mustClose(t, s)
	s = mustOpen(t, opts)
	defer mustClose(t, s)
	if s.Start() != 70 || s.Len() != 72 || s.Ordered() != 70 {
		t.Fatalf("reopened: Start, Len, Ordered = %d, %d, %d; want 70, 72, 70", s.Start(), s.Len(), s.Ordered())
	}
	checkRecords(t, s, 70, 72)
}

func TestDamagedBaseFileFailsOpen(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir}
	s := mustOpen(t, opts)
	if err := s.Rebase(5); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	flipByte(t, dir+"/"+baseName, frameHeaderBytes)
	if _, err := Open(opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a damaged base file: %v, want ErrCorrupt", err)
	}
}
