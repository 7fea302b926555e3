package segment

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParseSyncPolicy(t *testing.T) {
	for _, p := range []SyncPolicy{SyncNever, SyncInterval, SyncAlways, SyncGroup} {
		got, err := ParseSyncPolicy(p.String())
		if err != nil || got != p {
			t.Fatalf("ParseSyncPolicy(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
	}
	for _, s := range []string{"", "Always", "sometimes", " never"} {
		if _, err := ParseSyncPolicy(s); err == nil {
			t.Fatalf("ParseSyncPolicy(%q) succeeded, want an error", s)
		}
	}
	if got := SyncPolicy(9).String(); got != "SyncPolicy(9)" {
		t.Fatalf("String of unknown policy = %q", got)
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, opts := range []Options{
		{},
		{Dir: dir, SegmentBytesMax: -1},
		{Dir: dir, SegmentBytesMax: segmentBytesMaxLimit + 1},
		{Dir: dir, Sync: SyncPolicy(7)},
	} {
		if s, err := Open(opts); err == nil {
			s.Close()
			t.Fatalf("Open(%+v) succeeded, want an error", opts)
		}
	}
}

func TestAppendReadAcrossRollover(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncNever, SyncInterval, SyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, Options{Dir: dir, SegmentBytesMax: 1000, Sync: policy})
			defer s.Close()
			appendTest(t, s, 200, 7)
			if s.Len() != 200 || s.Start() != 0 {
				t.Fatalf("Len, Start = %d, %d; want 200, 0", s.Len(), s.Start())
			}
			if err := s.Sync(); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if err := s.Sync(); err != nil {
				t.Fatalf("second Sync: %v", err)
			}
			checkRecords(t, s, 0, 200)
			checkRecords(t, s, 123, 200)

			paths := segFiles(t, dir)
			if len(paths) < 5 {
				t.Fatalf("got %d segments, want rollover to make several", len(paths))
			}
			if got := filepath.Base(paths[0]); got != "00000000000000000000.seg" {
				t.Fatalf("first segment is %s", got)
			}
			// Each segment is named by its first record, and batches are
			// never split, so every name is a multiple of the batch size.
			for i, g := range s.segs {
				if filepath.Base(paths[i]) != filepath.Base(s.segmentPath(g.base)) || g.base%7 != 0 {
					t.Fatalf("segment %d: file %s, base %d", i, paths[i], g.base)
				}
				if i < len(s.segs)-1 && fileSize(t, paths[i]) < 1000 {
					t.Fatalf("segment %s rolled over below SegmentBytesMax", paths[i])
				}
			}
		})
	}
}

func TestReadAndScanBounds(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir()})
	defer s.Close()
	if _, err := s.Read(0); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Read on empty store: %v, want ErrOutOfRange", err)
	}
	appendTest(t, s, 10, 3)
	_, err := s.Read(10)
	wantErr(t, err, ErrOutOfRange, "Read(Len)")
	calls := 0
	if err := s.Scan(10, func(uint64, Entry) bool { calls++; return true }); err != nil || calls != 0 {
		t.Fatalf("Scan(Len) = %v after %d calls", err, calls)
	}
	if err := s.Scan(3, func(uint64, Entry) bool { calls++; return false }); err != nil || calls != 1 {
		t.Fatalf("Scan stopping at once = %v after %d calls", err, calls)
	}
}

func TestScanChunksLargeRecords(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir()})
	defer s.Close()
	// Records around scanChunkBytesMax exercise both chunk limits: many
	// records per pread, and one record larger than a chunk.
	sizes := []int{10, scanChunkBytesMax / 3, scanChunkBytesMax / 3, scanChunkBytesMax, 5, scanChunkBytesMax + 17, 1, 2}
	var want []Entry
	for i, n := range sizes {
		want = append(want, Entry{Seq: uint64(i), Payload: bytes.Repeat([]byte{byte(i + 1)}, n)})
	}
	if _, err := s.Append(want[:4]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(want[4:]); err != nil {
		t.Fatal(err)
	}
	var got []Entry
	if err := s.Scan(0, func(_ uint64, e Entry) bool { got = append(got, e); return true }); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Scan returned %d records, not the %d appended", len(got), len(want))
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytesMax: 2000, Sync: SyncInterval}
	s := mustOpen(t, opts)
	appendTest(t, s, 100, 9)
	if err := s.Assign(Run{Cut: 1, CutStart: 0, CutEnd: 60, LocalStart: 0, GlobalStart: 10, Count: 50}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	s = mustOpen(t, opts)
	defer s.Close()
	if s.Len() != 100 || s.Ordered() != 50 {
		t.Fatalf("after reopen Len, Ordered = %d, %d; want 100, 50", s.Len(), s.Ordered())
	}
	checkRecords(t, s, 0, 100)
	appendTest(t, s, 30, 4)
	checkRecords(t, s, 0, 130)
}

func TestAppendRejectsBadInput(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir()})
	defer s.Close()
	_, err := s.Append(nil)
	wantErr(t, err, ErrInvalid, "empty batch")
	big := Entry{Payload: make([]byte, recordBytesMax)}
	_, err = s.Append([]Entry{testEntry(0), big})
	wantErr(t, err, ErrInvalid, "oversized record")
	if s.Len() != 0 {
		t.Fatalf("rejected appends changed Len to %d", s.Len())
	}
	appendTest(t, s, 3, 3)
	checkRecords(t, s, 0, 3)
}

func TestClosedStore(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir()})
	appendTest(t, s, 3, 3)
	mustClose(t, s)
	_, err := s.Append(testEntries(3, 1))
	wantErr(t, err, ErrClosed, "Append")
	_, err = s.Read(0)
	wantErr(t, err, ErrClosed, "Read")
	wantErr(t, s.Scan(0, func(uint64, Entry) bool { return true }), ErrClosed, "Scan")
	wantErr(t, s.Assign(Run{Cut: 1, CutEnd: 3, Count: 3}), ErrClosed, "Assign")
	wantErr(t, s.Trim(10), ErrClosed, "Trim")
	wantErr(t, s.Sync(), ErrClosed, "Sync")
}

// TestSyncedLen checks that SyncedLen counts only what an fsync covered:
// nothing appended since the last Sync under SyncInterval, everything under
// SyncAlways, and the sealed segments after a rollover.
func TestSyncedLen(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), Sync: SyncInterval})
	defer s.Close()
	appendTest(t, s, 10, 5)
	if got := s.SyncedLen(); got != 0 {
		t.Fatalf("SyncedLen before any Sync = %d, want 0", got)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	appendTest(t, s, 3, 3)
	if got := s.SyncedLen(); got != 10 {
		t.Fatalf("SyncedLen after Sync and 3 more = %d, want 10", got)
	}

	always := mustOpen(t, Options{Dir: t.TempDir(), Sync: SyncAlways})
	defer always.Close()
	appendTest(t, always, 4, 2)
	if got := always.SyncedLen(); got != 4 {
		t.Fatalf("SyncedLen under SyncAlways = %d, want 4", got)
	}

	rolled := mustOpen(t, Options{Dir: t.TempDir(), SegmentBytesMax: 100, Sync: SyncNever})
	defer rolled.Close()
	appendTest(t, rolled, 40, 1)
	if got := rolled.SyncedLen(); got == 0 || got >= 40 {
		t.Fatalf("SyncedLen after rollovers = %d, want the sealed segments' end, in (0, 40)", got)
	}
}

// TestSyncRecordsLeavesPositions: SyncRecords syncs the records (SyncedLen
// covers them) and leaves the positions file for a later Sync.
func TestSyncRecordsLeavesPositions(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), Sync: SyncGroup})
	defer s.Close()
	appendTest(t, s, 6, 2)
	if err := s.Assign(Run{Cut: 1, CutStart: 0, CutEnd: 6, LocalStart: 0, GlobalStart: 0, Count: 6}); err != nil {
		t.Fatal(err)
	}
	if err := s.SyncRecords(); err != nil {
		t.Fatal(err)
	}
	if got := s.SyncedLen(); got != 6 {
		t.Fatalf("SyncedLen after SyncRecords = %d, want 6", got)
	}
	if s.activeDirty || !s.posDirty {
		t.Fatalf("after SyncRecords: segment dirty %v, positions dirty %v; want false, true", s.activeDirty, s.posDirty)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if s.posDirty {
		t.Fatal("positions still dirty after Sync")
	}
}
