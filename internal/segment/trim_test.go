package segment

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// trimFixture has 50 records in segments of 5 (SegmentBytesMax 1 rolls
// before every batch) and runs of 3 records: run k holds locals
// [3k, 3k+3) at globals 1000+10k.., cut k+1 covering [1000+10k, 1010+10k).
func trimFixture(t *testing.T, dir string) (*Store, Options) {
	t.Helper()
	opts := Options{Dir: dir, SegmentBytesMax: 1, Sync: SyncInterval}
	s := mustOpen(t, opts)
	appendTest(t, s, 50, 5)
	for k := uint64(0); k < 16; k++ {
		if err := s.Assign(fixtureRun(k, 3)); err != nil {
			t.Fatal(err)
		}
	}
	if s.Ordered() != 48 {
		t.Fatalf("Ordered = %d, want 48", s.Ordered())
	}
	return s, opts
}

func fixtureRun(k, count uint64) Run {
	return Run{Cut: k + 1, CutStart: 1000 + 10*k, CutEnd: 1010 + 10*k, LocalStart: 3 * k, GlobalStart: 1000 + 10*k, Count: count}
}

func fixtureGlobal(local uint64) uint64 { return 1000 + 10*(local/3) + local%3 }

func TestTrim(t *testing.T) {
	dir := t.TempDir()
	s, opts := trimFixture(t, dir)
	if n := len(segFiles(t, dir)); n != 10 {
		t.Fatalf("fixture has %d segments, want 10", n)
	}

	// Globals below that of local 18 are locals 0..17: segments [0,5),
	// [5,10) and [10,15) go, [15,20) stays (local 19 is not below).
	if err := s.Trim(fixtureGlobal(18)); err != nil {
		t.Fatalf("Trim: %v", err)
	}
	if s.Start() != 15 || s.Len() != 50 {
		t.Fatalf("Start, Len = %d, %d; want 15, 50", s.Start(), s.Len())
	}
	if n := len(segFiles(t, dir)); n != 7 {
		t.Fatalf("%d segments left, want 7", n)
	}
	_, err := s.Read(14)
	wantErr(t, err, ErrTrimmed, "Read below Start")
	checkRecords(t, s, 15, 50)
	first := uint64(1 << 63)
	if err := s.Scan(0, func(l uint64, _ Entry) bool { first = l; return false }); err != nil || first != 15 {
		t.Fatalf("Scan(0) started at %d (%v), want Start 15", first, err)
	}
	if _, ok := s.GlobalOf(14); ok {
		t.Fatalf("run wholly below Start still maps local 14")
	}
	if l, ok := s.Locate(fixtureGlobal(15)); !ok || l != 15 {
		t.Fatalf("Locate(global of 15) = %d, %v", l, ok)
	}
	if got := s.Runs(0)[0]; got != fixtureRun(5, 3) {
		t.Fatalf("first retained run = %+v, want %+v", got, fixtureRun(5, 3))
	}

	// Trimming to the same point again changes nothing.
	if err := s.Trim(fixtureGlobal(18)); err != nil || s.Start() != 15 {
		t.Fatalf("repeated Trim: %v, Start %d", err, s.Start())
	}

	// Everything ordered: segments up to [40,45) go; [45,50) is active.
	if err := s.Trim(1 << 62); err != nil {
		t.Fatal(err)
	}
	if s.Start() != 45 {
		t.Fatalf("Start = %d, want 45", s.Start())
	}
	if got, want := s.Runs(0), []Run{fixtureRun(15, 3)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Runs = %+v, want %+v", got, want)
	}
	posPath := filepath.Join(dir, positionsName)
	if got, want := fileSize(t, posPath), int64(len(appendRunFrame(nil, &Run{Cut: 16, CutStart: 1150, CutEnd: 1160, LocalStart: 45, GlobalStart: 1150, Count: 3}))); got != want {
		t.Fatalf("positions file is %d bytes after compaction, want %d", got, want)
	}

	// The active segment stays even when every record in it is ordered.
	if err := s.Assign(Run{Cut: 17, CutStart: 1160, CutEnd: 1170, LocalStart: 48, GlobalStart: 1160, Count: 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.Trim(1 << 62); err != nil || s.Start() != 45 {
		t.Fatalf("Trim with only the active segment left: %v, Start %d", err, s.Start())
	}

	// Once it is no longer active it goes, and only the last run survives.
	appendTest(t, s, 5, 5)
	if err := s.Trim(1 << 62); err != nil || s.Start() != 50 {
		t.Fatalf("Trim after rollover: %v, Start %d", err, s.Start())
	}
	last := Run{Cut: 17, CutStart: 1160, CutEnd: 1170, LocalStart: 48, GlobalStart: 1160, Count: 2}
	if got := s.Runs(0); !reflect.DeepEqual(got, []Run{last}) {
		t.Fatalf("Runs = %+v, want only the last run", got)
	}
	mustClose(t, s)

	s = mustOpen(t, opts)
	defer s.Close()
	if s.Start() != 50 || s.Len() != 55 || s.Ordered() != 50 {
		t.Fatalf("after reopen Start, Len, Ordered = %d, %d, %d; want 50, 55, 50", s.Start(), s.Len(), s.Ordered())
	}
	checkRecords(t, s, 50, 55)
	wantErr(t, s.Assign(Run{Cut: 17, CutStart: 1170, CutEnd: 1180, LocalStart: 50, GlobalStart: 1170, Count: 1}), ErrInvalid, "cut reused after trim and reopen")
	if err := s.Assign(Run{Cut: 18, CutStart: 1170, CutEnd: 1180, LocalStart: 50, GlobalStart: 1170, Count: 5}); err != nil {
		t.Fatal(err)
	}
}

// TestTrimInterruptedBeforeRewrite simulates a crash after Trim deleted
// segments but before it replaced the positions file.
func TestTrimInterruptedBeforeRewrite(t *testing.T) {
	dir := t.TempDir()
	s, opts := trimFixture(t, dir)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	posPath := filepath.Join(dir, positionsName)
	old, err := os.ReadFile(posPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Trim(fixtureGlobal(18)); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	if err := os.WriteFile(posPath, old, filePerm); err != nil {
		t.Fatal(err)
	}
	// And a rewrite that never got renamed into place.
	if err := os.WriteFile(filepath.Join(dir, positionsTmpName), []byte("half"), filePerm); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, opts)
	defer s.Close()
	if s.Start() != 15 || s.Ordered() != 48 {
		t.Fatalf("Start, Ordered = %d, %d; want 15, 48", s.Start(), s.Ordered())
	}
	if _, err := os.Stat(filepath.Join(dir, positionsTmpName)); !os.IsNotExist(err) {
		t.Fatalf("stale %s not removed: %v", positionsTmpName, err)
	}
	if got := s.Runs(0)[0]; got != fixtureRun(5, 3) {
		t.Fatalf("first run = %+v, want %+v", got, fixtureRun(5, 3))
	}
	// The next Trim compacts the file even with no segment to delete.
	if err := s.Trim(fixtureGlobal(18)); err != nil {
		t.Fatal(err)
	}
	if got := fileSize(t, posPath); got >= int64(len(old)) {
		t.Fatalf("positions file still %d bytes, want it compacted below %d", got, len(old))
	}
	checkRecords(t, s, 15, 50)
}
