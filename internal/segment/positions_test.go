package segment

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

var (
	// locals 0-4 hold globals 3-7, cut 1 covers [0, 10)
	run1 = Run{Cut: 1, CutStart: 0, CutEnd: 10, LocalStart: 0, GlobalStart: 3, Count: 5}
	// locals 5-14 hold globals 20-29, cut 3 covers [15, 30)
	run2 = Run{Cut: 3, CutStart: 15, CutEnd: 30, LocalStart: 5, GlobalStart: 20, Count: 10}
)

func checkMapping(t *testing.T, s *Store) {
	t.Helper()
	locate := map[uint64]int64{2: -1, 3: 0, 7: 4, 8: -1, 19: -1, 20: 5, 29: 14, 30: -1}
	for g, want := range locate {
		l, ok := s.Locate(g)
		if (want < 0 && ok) || (want >= 0 && (!ok || l != uint64(want))) {
			t.Fatalf("Locate(%d) = %d, %v; want %d", g, l, ok, want)
		}
	}
	globalOf := map[uint64]int64{0: 3, 4: 7, 5: 20, 14: 29, 15: -1, 100: -1}
	for l, want := range globalOf {
		g, ok := s.GlobalOf(l)
		if (want < 0 && ok) || (want >= 0 && (!ok || g != uint64(want))) {
			t.Fatalf("GlobalOf(%d) = %d, %v; want %d", l, g, ok, want)
		}
	}
	runs := map[uint64][]Run{0: {run1, run2}, 9: {run1, run2}, 10: {run2}, 29: {run2}, 30: nil}
	for from, want := range runs {
		if got := s.Runs(from); !reflect.DeepEqual(got, want) {
			t.Fatalf("Runs(%d) = %+v, want %+v", from, got, want)
		}
	}
}

func TestAssignLocateGlobalOf(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytesMax: 600, Sync: SyncAlways}
	s := mustOpen(t, opts)
	appendTest(t, s, 20, 3)
	if s.Ordered() != 0 || s.Runs(0) != nil {
		t.Fatalf("fresh store: Ordered %d, Runs %v", s.Ordered(), s.Runs(0))
	}
	for _, r := range []Run{run1, run2} {
		if err := s.Assign(r); err != nil {
			t.Fatalf("Assign(%+v): %v", r, err)
		}
	}
	if s.Ordered() != 15 {
		t.Fatalf("Ordered = %d, want 15", s.Ordered())
	}
	checkMapping(t, s)

	// Runs hands out a copy.
	s.Runs(0)[0].Count = 99
	checkMapping(t, s)

	mustClose(t, s)
	s = mustOpen(t, opts)
	defer s.Close()
	if s.Ordered() != 15 {
		t.Fatalf("Ordered after reopen = %d, want 15", s.Ordered())
	}
	checkMapping(t, s)
}

func TestAssignRejectsBadRuns(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir()})
	defer s.Close()
	appendTest(t, s, 20, 20)
	wantErr(t, s.Assign(Run{Cut: 1, CutStart: 0, CutEnd: 10, LocalStart: 1, GlobalStart: 0, Count: 1}), ErrInvalid, "first run not at 0")
	for _, r := range []Run{run1, run2} {
		if err := s.Assign(r); err != nil {
			t.Fatal(err)
		}
	}
	next := Run{Cut: 4, CutStart: 30, CutEnd: 40, LocalStart: 15, GlobalStart: 30, Count: 5}
	bad := map[string]func(r *Run){
		"overlapping locals":       func(r *Run) { r.LocalStart = 14 },
		"gap in locals":            func(r *Run) { r.LocalStart = 16; r.Count = 4 },
		"empty":                    func(r *Run) { r.Count = 0 },
		"past Len":                 func(r *Run) { r.Count = 6; r.CutEnd = 40 },
		"same cut":                 func(r *Run) { r.Cut = 3 },
		"older cut":                func(r *Run) { r.Cut = 2 },
		"global overlap":           func(r *Run) { r.CutStart, r.GlobalStart = 29, 29 },
		"global going back":        func(r *Run) { r.CutStart, r.GlobalStart = 0, 5 },
		"cut overlaps last cut":    func(r *Run) { r.CutStart = 29 },
		"global before cut start":  func(r *Run) { r.CutStart = 31 },
		"global past cut end":      func(r *Run) { r.CutEnd = 34 },
		"global overflows":         func(r *Run) { r.GlobalStart, r.CutEnd = 1<<64-2, 1<<64-1 },
		"cut end below cut start":  func(r *Run) { r.CutEnd = 29 },
		"count overflows locals":   func(r *Run) { r.Count = 1<<64 - 1 },
		"count overflows cut end":  func(r *Run) { r.Count = 1<<64 - 20 },
		"all positions one behind": func(r *Run) { r.Cut, r.CutStart, r.GlobalStart, r.CutEnd = 3, 29, 29, 40 },
	}
	for name, mutate := range bad {
		r := next
		mutate(&r)
		wantErr(t, s.Assign(r), ErrInvalid, name)
		if s.Ordered() != 15 || len(s.Runs(0)) != 2 {
			t.Fatalf("%s: rejected run changed Ordered to %d, runs to %v", name, s.Ordered(), s.Runs(0))
		}
	}
	if err := s.Assign(next); err != nil {
		t.Fatalf("Assign(%+v): %v", next, err)
	}
	if got, ok := s.Locate(34); !ok || got != 19 {
		t.Fatalf("Locate(34) = %d, %v; want 19", got, ok)
	}
}

func TestPositionsTornTail(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Sync: SyncInterval}
	s := mustOpen(t, opts)
	appendTest(t, s, 20, 5)
	for _, r := range []Run{run1, run2} {
		if err := s.Assign(r); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, s)
	path := filepath.Join(dir, positionsName)
	whole := fileSize(t, path)
	frame := appendRunFrame(nil, &Run{Cut: 4, CutStart: 30, CutEnd: 40, LocalStart: 15, GlobalStart: 30, Count: 5})

	for _, tail := range [][]byte{frame[:len(frame)-1], frame[:5], []byte("garbage that is long enough")} {
		appendFile(t, path, tail)
		s = mustOpen(t, opts)
		if got := fileSize(t, path); got != whole {
			t.Fatalf("positions file is %d bytes after recovery, want %d", got, whole)
		}
		checkMapping(t, s)
		mustClose(t, s)
	}

	s = mustOpen(t, opts)
	defer s.Close()
	if err := s.Assign(Run{Cut: 4, CutStart: 30, CutEnd: 40, LocalStart: 15, GlobalStart: 30, Count: 5}); err != nil {
		t.Fatalf("Assign after recovery: %v", err)
	}
	mustClose(t, s)
	s = mustOpen(t, opts)
	if s.Ordered() != 20 {
		t.Fatalf("Ordered = %d after assigning past the recovered tail, want 20", s.Ordered())
	}
}

func TestPositionsBadRunOnDiskFails(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir}
	s := mustOpen(t, opts)
	appendTest(t, s, 20, 5)
	mustClose(t, s)
	// Checksummed fine, but not contiguous: written wrong, not torn.
	var b []byte
	b = appendRunFrame(b, &run1)
	b = appendRunFrame(b, &Run{Cut: 3, CutStart: 15, CutEnd: 30, LocalStart: 6, GlobalStart: 20, Count: 9})
	if err := os.WriteFile(filepath.Join(dir, positionsName), b, filePerm); err != nil {
		t.Fatal(err)
	}
	_, err := Open(opts)
	wantErr(t, err, ErrCorrupt, "Open with a non-contiguous run on disk")
}

// TestRunsPastLostRecordsAreDropped loses the unsynced tail of the records
// but not the runs that describe it: Open must drop those runs.
func TestRunsPastLostRecordsAreDropped(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, Sync: SyncNever}
	s := mustOpen(t, opts)
	appendTest(t, s, 30, 10)
	runs := []Run{
		{Cut: 1, CutStart: 0, CutEnd: 10, LocalStart: 0, GlobalStart: 0, Count: 10},
		{Cut: 2, CutStart: 10, CutEnd: 20, LocalStart: 10, GlobalStart: 10, Count: 10},
		{Cut: 3, CutStart: 20, CutEnd: 30, LocalStart: 20, GlobalStart: 20, Count: 10},
	}
	for _, r := range runs {
		if err := s.Assign(r); err != nil {
			t.Fatal(err)
		}
	}
	cut := int64(s.active().offsets[15]) + 3 // inside record 15
	mustClose(t, s)
	if err := os.Truncate(lastSeg(t, dir), cut); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, opts)
	if s.Len() != 15 || s.Ordered() != 10 {
		t.Fatalf("Len, Ordered = %d, %d; want 15, 10", s.Len(), s.Ordered())
	}
	if got := s.Runs(0); !reflect.DeepEqual(got, runs[:1]) {
		t.Fatalf("Runs = %+v, want %+v", got, runs[:1])
	}
	if want := int64(len(appendRunFrame(nil, &runs[0]))); fileSize(t, filepath.Join(dir, positionsName)) != want {
		t.Fatalf("positions file not truncated to its first run (%d bytes)", want)
	}
	checkRecords(t, s, 0, 15)
	appendTest(t, s, 5, 5)
	if err := s.Assign(runs[1]); err != nil {
		t.Fatalf("re-assigning the dropped run: %v", err)
	}
	mustClose(t, s)
	s = mustOpen(t, opts)
	defer s.Close()
	if got := s.Runs(0); !reflect.DeepEqual(got, runs[:2]) {
		t.Fatalf("Runs after reopen = %+v, want %+v", got, runs[:2])
	}
}
