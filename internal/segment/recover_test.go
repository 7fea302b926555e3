package segment

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// TestRecoverTornTail writes whole records, damages the end of the last
// segment the way a crash mid-write would, and checks that Open keeps every
// whole record, drops the torn one, and appends after it.
func TestRecoverTornTail(t *testing.T) {
	torn := recordFrame(testEntry(40))
	hugeLen := binary.LittleEndian.AppendUint32(nil, recordBytesMax+1)
	hugeLen = append(hugeLen, 1, 2, 3, 4, 5, 6, 7, 8)
	cases := map[string][]byte{
		"half frame":       torn[:len(torn)/2],
		"header only":      torn[:frameHeaderBytes],
		"short header":     torn[:3],
		"all but one byte": torn[:len(torn)-1],
		"garbage":          []byte("this is not a frame at all, just bytes"),
		"zeros":            make([]byte, 4096),
		"length too large": hugeLen,
	}
	for name, tail := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, SegmentBytesMax: 1500, Sync: SyncAlways}
			s := mustOpen(t, opts)
			appendTest(t, s, 40, 3)
			mustClose(t, s)
			path := lastSeg(t, dir)
			whole := fileSize(t, path)
			appendFile(t, path, tail)

			s = mustOpen(t, opts)
			defer s.Close()
			if s.Len() != 40 {
				t.Fatalf("Len after recovery = %d, want 40", s.Len())
			}
			if got := fileSize(t, path); got != whole {
				t.Fatalf("last segment is %d bytes after recovery, want %d", got, whole)
			}
			_, err := s.Read(40)
			wantErr(t, err, ErrOutOfRange, "Read of the torn record")
			checkRecords(t, s, 0, 40)
			appendTest(t, s, 25, 4)
			checkRecords(t, s, 0, 65)

			// And once more, to be sure the continued file is clean.
			mustClose(t, s)
			s = mustOpen(t, opts)
			if s.Len() != 65 {
				t.Fatalf("Len after second reopen = %d, want 65", s.Len())
			}
			checkRecords(t, s, 0, 65)
		})
	}
}

func TestRecoverCorruptChecksumInTail(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytesMax: 1500}
	s := mustOpen(t, opts)
	appendTest(t, s, 30, 30)
	appendTest(t, s, 1, 1)
	g := s.active()
	lastOff := int64(g.offsets[len(g.offsets)-1])
	mustClose(t, s)

	path := lastSeg(t, dir)
	flipByte(t, path, fileSize(t, path)-1) // inside the last record's body
	s = mustOpen(t, opts)
	defer s.Close()
	if s.Len() != 30 {
		t.Fatalf("Len = %d, want 30 after dropping the corrupt last record", s.Len())
	}
	if got := fileSize(t, path); got != lastOff {
		t.Fatalf("segment truncated to %d bytes, want %d", got, lastOff)
	}
	checkRecords(t, s, 0, 30)
	appendTest(t, s, 2, 2)
	checkRecords(t, s, 0, 32)
}

// TestRecoverJunkAfterEarlierSegmentFails appends bytes to a segment that
// has a successor. Damage there is kept and reported when the successor's
// first index says how many records it held (see damage_test.go); here it
// says none, so the bytes are not records of this store and Open refuses.
func TestRecoverJunkAfterEarlierSegmentFails(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytesMax: 500}
	s := mustOpen(t, opts)
	appendTest(t, s, 60, 2)
	mustClose(t, s)
	paths := segFiles(t, dir)
	if len(paths) < 3 {
		t.Fatalf("want several segments, got %d", len(paths))
	}
	appendFile(t, paths[1], []byte("junk that holds no record"))
	_, err := Open(opts)
	wantErr(t, err, ErrCorrupt, "Open with junk after a non-final segment")
}

func TestRecoverMissingMiddleSegmentFails(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytesMax: 500}
	s := mustOpen(t, opts)
	appendTest(t, s, 60, 2)
	mustClose(t, s)
	paths := segFiles(t, dir)
	if err := os.Remove(paths[1]); err != nil {
		t.Fatal(err)
	}
	_, err := Open(opts)
	wantErr(t, err, ErrCorrupt, "Open with a gap between segments")
}

func TestRecoverEmptyLastSegment(t *testing.T) {
	// A crash right after rollover leaves an empty last segment.
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytesMax: 500}
	s := mustOpen(t, opts)
	appendTest(t, s, 20, 4)
	mustClose(t, s)
	empty := filepath.Join(dir, "00000000000000000020.seg")
	if err := os.WriteFile(empty, nil, filePerm); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, opts)
	defer s.Close()
	if s.Len() != 20 {
		t.Fatalf("Len = %d, want 20", s.Len())
	}
	appendTest(t, s, 5, 5)
	checkRecords(t, s, 0, 25)
	if s.segs[len(s.segs)-1].base != 20 {
		t.Fatalf("appends went to segment %d, want the empty one at 20", s.segs[len(s.segs)-1].base)
	}
}

func TestRecoverRejectsStrayName(t *testing.T) {
	dir := t.TempDir()
	writeFormat(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "12.seg"), nil, filePerm); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Options{Dir: dir})
	wantErr(t, err, ErrCorrupt, "Open with a misnamed segment")
}

// TestReadChecksRecords damages a record behind an open store's back:
// Read and Scan must notice instead of returning the bytes.
func TestReadChecksRecords(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir})
	defer s.Close()
	appendTest(t, s, 10, 10)
	off := int64(s.active().offsets[4])
	flipByte(t, lastSeg(t, dir), off+frameHeaderBytes+1)

	_, err := s.Read(4)
	wantErr(t, err, ErrCorrupt, "Read of a damaged record")
	checkRecords(t, s, 5, 10)
	err = s.Scan(0, func(uint64, Entry) bool { return true })
	wantErr(t, err, ErrCorrupt, "Scan over a damaged record")
}
