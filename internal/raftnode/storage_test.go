package raftnode

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

var testConfState = &pb.ConfState{Voters: []uint64{1, 2, 3}}

func ent(index, term uint64, data string) *pb.Entry {
	return &pb.Entry{Index: new(index), Term: new(term), Type: pb.EntryNormal.Enum(), Data: []byte(data)}
}

func hardState(term, vote, commit uint64) *pb.HardState {
	return &pb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
}

func openTestStorage(t *testing.T, dir string) (*diskStorage, *pb.Snapshot) {
	t.Helper()
	s, snap, err := openStorage(dir, true, testConfState, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("openStorage: %v", err)
	}
	return s, snap
}

func closeStorage(t *testing.T, s *diskStorage) {
	t.Helper()
	if err := s.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func save(t *testing.T, s *diskStorage, ents []*pb.Entry, hs *pb.HardState) {
	t.Helper()
	rd := raft.Ready{Entries: ents, HardState: hs, MustSync: true}
	if err := s.saveReady(&rd); err != nil {
		t.Fatalf("saveReady: %v", err)
	}
}

// logString renders the in-memory log as "index/term:data" items.
func logString(t *testing.T, s *diskStorage) string {
	t.Helper()
	first, _ := s.ms.FirstIndex()
	last, _ := s.ms.LastIndex()
	if last < first {
		return ""
	}
	ents, err := s.ms.Entries(first, last+1, math.MaxUint64)
	if err != nil {
		t.Fatalf("entries: %v", err)
	}
	var parts []string
	for _, e := range ents {
		parts = append(parts, fmt.Sprintf("%d/%d:%s", e.GetIndex(), e.GetTerm(), e.GetData()))
	}
	return strings.Join(parts, " ")
}

func onlySegment(t *testing.T, dir string) string {
	t.Helper()
	segs, err := listSegments(dir)
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, err %v; want exactly one", segs, err)
	}
	return filepath.Join(dir, segmentName(segs[0]))
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestWALReplaysEntriesAndHardState(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTestStorage(t, dir)
	save(t, s, []*pb.Entry{ent(1, 1, "a"), ent(2, 1, "b")}, hardState(1, 2, 1))
	save(t, s, []*pb.Entry{ent(3, 1, "c")}, hardState(1, 2, 3))
	closeStorage(t, s)

	s, snap := openTestStorage(t, dir)
	defer closeStorage(t, s)
	if snap != nil {
		t.Fatalf("unexpected snapshot %v", snap)
	}
	if got, want := logString(t, s), "1/1:a 2/1:b 3/1:c"; got != want {
		t.Fatalf("log %q, want %q", got, want)
	}
	hs, cs, _ := s.ms.InitialState()
	if !proto.Equal(hs, hardState(1, 2, 3)) {
		t.Errorf("hard state %v", hs)
	}
	if !proto.Equal(cs, pb.EnsureConfState(proto.Clone(testConfState).(*pb.ConfState))) {
		t.Errorf("conf state %v, want the bootstrap members", cs)
	}
}

func TestWALReplayAppliesLogTruncation(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTestStorage(t, dir)
	save(t, s, []*pb.Entry{ent(1, 1, "a"), ent(2, 1, "b"), ent(3, 1, "c"), ent(4, 1, "d"), ent(5, 1, "e")}, hardState(1, 1, 2))
	// A new leader overwrites the uncommitted tail with a shorter one.
	save(t, s, []*pb.Entry{ent(3, 2, "x"), ent(4, 2, "y")}, hardState(2, 0, 2))
	closeStorage(t, s)

	s, _ = openTestStorage(t, dir)
	defer closeStorage(t, s)
	if got, want := logString(t, s), "1/1:a 2/1:b 3/2:x 4/2:y"; got != want {
		t.Fatalf("log %q, want %q", got, want)
	}
}

func TestWALTornTailIsTruncated(t *testing.T) {
	cases := []struct {
		name string
		tear func(t *testing.T, path string, lastRecord int64)
	}{
		{"last record cut short", func(t *testing.T, path string, lastRecord int64) {
			if err := os.Truncate(path, fileSize(t, path)-2); err != nil {
				t.Fatal(err)
			}
		}},
		{"header only", func(t *testing.T, path string, lastRecord int64) {
			if err := os.Truncate(path, lastRecord+4); err != nil {
				t.Fatal(err)
			}
		}},
		{"zeroes after the data", func(t *testing.T, path string, lastRecord int64) {
			if err := os.Truncate(path, lastRecord); err != nil {
				t.Fatal(err)
			}
			appendBytes(t, path, make([]byte, 4096))
		}},
		{"last record garbled", func(t *testing.T, path string, lastRecord int64) {
			flipByte(t, path, fileSize(t, path)-1)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := openTestStorage(t, dir)
			save(t, s, []*pb.Entry{ent(1, 1, "a"), ent(2, 1, "b")}, hardState(1, 1, 1))
			path := onlySegment(t, dir)
			lastRecord := fileSize(t, path)
			save(t, s, []*pb.Entry{ent(3, 1, "c")}, nil)
			closeStorage(t, s)
			tc.tear(t, path, lastRecord)

			s, _ = openTestStorage(t, dir)
			if got, want := logString(t, s), "1/1:a 2/1:b"; got != want {
				t.Fatalf("log %q, want %q", got, want)
			}
			if got := fileSize(t, path); got != lastRecord {
				t.Fatalf("segment is %d bytes after open, want the %d bytes before the torn record", got, lastRecord)
			}
			// The repaired segment takes new records.
			save(t, s, []*pb.Entry{ent(3, 1, "z")}, hardState(1, 1, 3))
			closeStorage(t, s)
			s, _ = openTestStorage(t, dir)
			defer closeStorage(t, s)
			if got, want := logString(t, s), "1/1:a 2/1:b 3/1:z"; got != want {
				t.Fatalf("log after repair %q, want %q", got, want)
			}
		})
	}
}

func TestWALCorruptionBeforeTailIsAnError(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTestStorage(t, dir)
	save(t, s, []*pb.Entry{ent(1, 1, "aaaa"), ent(2, 1, "bbbb")}, hardState(1, 1, 2))
	closeStorage(t, s)
	path := onlySegment(t, dir)
	flipByte(t, path, int64(len(walMagic)+walFrameHeaderBytes+2)) // inside entry 1

	_, _, err := openStorage(dir, true, testConfState, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "corrupt record") {
		t.Fatalf("open = %v, want a corrupt record error", err)
	}
}

func TestStorageSnapshotRotatesWAL(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTestStorage(t, dir)
	var ents []*pb.Entry
	for i := uint64(1); i <= 6; i++ {
		ents = append(ents, ent(i, 1, string(rune('a'+i-1))))
	}
	save(t, s, ents, hardState(1, 1, 6))
	if err := s.snapshot(4, testConfState, []byte("fsm@4"), 0); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if got, want := logString(t, s), "5/1:e 6/1:f"; got != want {
		t.Fatalf("compacted log %q, want %q", got, want)
	}
	save(t, s, []*pb.Entry{ent(7, 1, "g")}, hardState(1, 1, 7))
	closeStorage(t, s)
	assertDirBounded(t, dir)

	s, snap := openTestStorage(t, dir)
	defer closeStorage(t, s)
	if snap.GetMetadata().GetIndex() != 4 || string(snap.GetData()) != "fsm@4" {
		t.Fatalf("snapshot %v, want index 4 with the FSM data", snap)
	}
	if got, want := logString(t, s), "5/1:e 6/1:f 7/1:g"; got != want {
		t.Fatalf("log %q, want %q", got, want)
	}
	if hs, _, _ := s.ms.InitialState(); hs.GetCommit() != 7 {
		t.Errorf("commit %d, want 7", hs.GetCommit())
	}
}

func TestStorageCrashBetweenSnapshotAndRotation(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTestStorage(t, dir)
	save(t, s, []*pb.Entry{ent(1, 1, "a"), ent(2, 1, "b"), ent(3, 2, "c"), ent(4, 2, "d")}, hardState(2, 1, 4))
	snap, err := s.ms.CreateSnapshot(3, testConfState, []byte("fsm@3"))
	if err != nil {
		t.Fatal(err)
	}
	if err := writeSnapshotFile(dir, snap); err != nil {
		t.Fatal(err)
	}
	closeStorage(t, s)
	// A leftover of an interrupted atomic write must not matter.
	if err := os.WriteFile(filepath.Join(dir, segmentName(2)+tmpExt), []byte("junk"), 0o640); err != nil {
		t.Fatal(err)
	}

	s, loaded := openTestStorage(t, dir)
	defer closeStorage(t, s)
	if loaded.GetMetadata().GetIndex() != 3 {
		t.Fatalf("snapshot %v, want index 3", loaded)
	}
	if got, want := logString(t, s), "4/2:d"; got != want {
		t.Fatalf("log %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, segmentName(2)+tmpExt)); !os.IsNotExist(err) {
		t.Errorf("temporary file survived open: %v", err)
	}
}

func TestStorageInstallsLeaderSnapshot(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTestStorage(t, dir)
	save(t, s, []*pb.Entry{ent(1, 1, "a"), ent(2, 1, "b"), ent(3, 1, "stale")}, hardState(1, 1, 2))
	snap := &pb.Snapshot{
		Data:     []byte("leader@10"),
		Metadata: &pb.SnapshotMetadata{Index: new(uint64(10)), Term: new(uint64(3)), ConfState: testConfState},
	}
	rd := raft.Ready{Snapshot: snap, Entries: []*pb.Entry{ent(11, 3, "k")}, HardState: hardState(3, 0, 10), MustSync: true}
	if err := s.saveReady(&rd); err != nil {
		t.Fatalf("saveReady with snapshot: %v", err)
	}
	closeStorage(t, s)
	assertDirBounded(t, dir)

	s, loaded := openTestStorage(t, dir)
	defer closeStorage(t, s)
	if loaded.GetMetadata().GetIndex() != 10 || string(loaded.GetData()) != "leader@10" {
		t.Fatalf("snapshot %v, want the leader's at 10", loaded)
	}
	if got, want := logString(t, s), "11/3:k"; got != want {
		t.Fatalf("log %q, want %q", got, want)
	}
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[off] ^= 0xff
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

func TestWALSegmentsBeforeRotationAreSuperseded(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTestStorage(t, dir)
	save(t, s, []*pb.Entry{ent(1, 1, "a"), ent(2, 1, "b"), ent(3, 1, "c")}, hardState(1, 1, 3))
	old := onlySegment(t, dir)
	oldData, err := os.ReadFile(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.snapshot(2, testConfState, []byte("fsm@2"), 0); err != nil {
		t.Fatal(err)
	}
	closeStorage(t, s)
	// A crash between the rename of the new segment and the removal of the
	// old one leaves the old one behind, possibly damaged if it was never
	// synced.
	oldData[len(walMagic)+walFrameHeaderBytes+1] ^= 0xff
	if err := os.WriteFile(old, oldData, 0o640); err != nil {
		t.Fatal(err)
	}

	s, _ = openTestStorage(t, dir)
	defer closeStorage(t, s)
	if got, want := logString(t, s), "3/1:c"; got != want {
		t.Fatalf("log %q, want %q", got, want)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("superseded segment survived open: %v", err)
	}
}
