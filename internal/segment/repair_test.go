package segment

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestRepairMidSegmentRecord damages one record in the middle of the
// active segment, repairs it with the entry a peer holds, and checks that
// the record reads again, that every other record keeps its index, that
// the store takes appends after it, and that the repair survives a reopen.
func TestRepairMidSegmentRecord(t *testing.T) {
	const n, damaged = 300, 150
	dir := t.TempDir()
	opts, _ := logTo(Options{Dir: dir, Sync: SyncAlways})
	s := mustOpen(t, opts)
	appendTest(t, s, n, 7)
	g := s.active()
	off := frameOffset(g, damaged)
	mustClose(t, s)
	flipByte(t, lastSeg(t, dir), off+frameHeaderBytes+1)

	s = mustOpen(t, opts)
	wantOneDamaged(t, s, damaged, damaged+1, lastSeg(t, dir), off)
	if err := s.Repair(damaged, testEntries(damaged, 1)); err != nil {
		t.Fatalf("Repair: %v", err)
	}
	if d := s.Damaged(); len(d) != 0 {
		t.Fatalf("Damaged() = %+v after the repair, want none", d)
	}
	checkIndex(t, s)
	checkRecords(t, s, 0, n)
	appendTest(t, s, 20, 5)
	checkRecords(t, s, 0, n+20)
	mustClose(t, s)

	s = mustOpen(t, opts)
	defer s.Close()
	if d := s.Damaged(); len(d) != 0 {
		t.Fatalf("Damaged() = %+v after reopening the repaired store", d)
	}
	checkRecords(t, s, 0, n+20)
}

// TestRepairRangeWithNoops zeroes a stretch of an earlier segment that
// holds records and no-op runs (a damaged range of unknown count, which
// runs to the end of the segment) and repairs it with entries as a peer's
// Scan returns them.
func TestRepairRangeWithNoops(t *testing.T) {
	dir := t.TempDir()
	opts, _ := logTo(Options{Dir: dir, SegmentBytesMax: 2000})
	s := mustOpen(t, opts)
	// The peer holds the same entries at the same indexes.
	peer := mustOpen(t, Options{Dir: filepath.Join(t.TempDir(), "peer")})
	defer peer.Close()
	for i := range 40 {
		batch := testEntries(s.Len(), 3)
		if i%4 == 1 {
			batch = []Entry{{Noops: uint64(i + 2)}}
		}
		for _, st := range []*Store{s, peer} {
			if _, err := st.Append(batch); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(s.segs) < 2 {
		t.Fatalf("want at least two segments, got %d", len(s.segs))
	}
	g := s.segs[0]
	from := frameOffset(g, 3)
	mustClose(t, s)
	path := segFiles(t, dir)[0]
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 40), from); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s = mustOpen(t, opts)
	defer s.Close()
	d := s.Damaged()
	if len(d) != 1 {
		t.Fatalf("Damaged() = %+v, want one range", d)
	}
	var fetched []Entry
	if err := peer.Scan(d[0].First, func(local uint64, e Entry) bool {
		if local >= d[0].End {
			return false
		}
		if e.Noops > d[0].End-local {
			e.Noops = d[0].End - local
		}
		fetched = append(fetched, e)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	// Bad input changes nothing.
	if err := s.Repair(d[0].First, fetched[:len(fetched)-1]); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Repair with an entry short = %v, want ErrInvalid", err)
	}
	if err := s.Repair(d[0].First+1, fetched); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Repair at an index no range starts at = %v, want ErrInvalid", err)
	}
	if err := s.Repair(d[0].First, append(fetched, Entry{Noops: 1})); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Repair with an entry too many = %v, want ErrInvalid", err)
	}
	if got := s.Damaged(); len(got) != 1 {
		t.Fatalf("Damaged() = %+v after refused repairs, want the range still", got)
	}
	if err := s.Repair(d[0].First, fetched); err != nil {
		t.Fatalf("Repair: %v", err)
	}
	checkIndex(t, s)
	sameEntries(t, s, peer)
	mustClose(t, s)
	s = mustOpen(t, opts)
	if len(s.Damaged()) != 0 {
		t.Fatalf("damage came back after reopening")
	}
	sameEntries(t, s, peer)
}

// sameEntries checks that a and b read the same entry at every index.
func sameEntries(t *testing.T, a, b *Store) {
	t.Helper()
	if a.Len() != b.Len() {
		t.Fatalf("Len %d vs %d", a.Len(), b.Len())
	}
	for i := range a.Len() {
		ea, err := a.Read(i)
		if err != nil {
			t.Fatalf("Read(%d): %v", i, err)
		}
		eb, err := b.Read(i)
		if err != nil {
			t.Fatalf("peer Read(%d): %v", i, err)
		}
		if Checksum(ea) != Checksum(eb) || ea.Noops != eb.Noops {
			t.Fatalf("index %d: %+v, peer holds %+v", i, ea, eb)
		}
	}
}

// TestRepairLeftoverRemoved checks that Open removes the file of a repair
// that a crash cut short before its rename.
func TestRepairLeftoverRemoved(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir})
	appendTest(t, s, 10, 3)
	mustClose(t, s)
	stale := lastSeg(t, dir) + repairTmpSuffix
	if err := os.WriteFile(stale, []byte("half a repair"), filePerm); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Options{Dir: dir})
	defer s.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale repair file still there: %v", err)
	}
	checkRecords(t, s, 0, 10)
}
