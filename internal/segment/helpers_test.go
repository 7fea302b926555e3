package segment

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// testEntry is record i of a test: every field derives from i so readers
// can check what they get without shared state. Sizes vary so frames do.
func testEntry(i uint64) Entry {
	e := Entry{ClientID: i % 7, Seq: i, Key: fmt.Sprintf("key-%d", i)}
	switch i % 3 {
	case 1:
		e.Tags = []string{"a"}
	case 2:
		e.Tags = []string{"a", strings.Repeat("t", int(i%5))}
	}
	if n := (i * 37) % 200; n > 0 {
		e.Payload = bytes.Repeat([]byte{byte(i)}, int(n))
	}
	return e
}

func testEntries(first, n uint64) []Entry {
	es := make([]Entry, n)
	for i := range es {
		es[i] = testEntry(first + uint64(i))
	}
	return es
}

func mustOpen(t testing.TB, opts Options) *Store {
	t.Helper()
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open(%+v): %v", opts, err)
	}
	return s
}

func mustClose(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// appendTest appends testEntry(Len()...) in batches of batch and checks the
// returned indexes.
func appendTest(t testing.TB, s *Store, n, batch uint64) {
	t.Helper()
	for n > 0 {
		b := min(n, batch)
		want := s.Len()
		first, err := s.Append(testEntries(want, b))
		if err != nil {
			t.Fatalf("Append at %d: %v", want, err)
		}
		if first != want {
			t.Fatalf("Append returned %d, want %d", first, want)
		}
		n -= b
	}
}

// checkRecords reads [from, to) with Read and with Scan and compares them
// with testEntry.
func checkRecords(t testing.TB, s *Store, from, to uint64) {
	t.Helper()
	for i := from; i < to; i++ {
		e, err := s.Read(i)
		if err != nil {
			t.Fatalf("Read(%d): %v", i, err)
		}
		if want := testEntry(i); !reflect.DeepEqual(e, want) {
			t.Fatalf("Read(%d) = %+v, want %+v", i, e, want)
		}
	}
	next := from
	err := s.Scan(from, func(local uint64, e Entry) bool {
		if local != next {
			t.Fatalf("Scan visited %d, want %d", local, next)
		}
		if want := testEntry(local); !reflect.DeepEqual(e, want) {
			t.Fatalf("Scan at %d = %+v, want %+v", local, e, want)
		}
		next++
		return next < to
	})
	if err != nil {
		t.Fatalf("Scan(%d): %v", from, err)
	}
	if from < to && next != to {
		t.Fatalf("Scan stopped at %d, want %d", next, to)
	}
}

// segFiles returns the segment file paths in dir, ascending.
func segFiles(t testing.TB, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	return paths
}

func lastSeg(t testing.TB, dir string) string {
	t.Helper()
	paths := segFiles(t, dir)
	if len(paths) == 0 {
		t.Fatalf("no segments in %s", dir)
	}
	return paths[len(paths)-1]
}

func appendFile(t testing.TB, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// overwrite writes b over the bytes of the file at path from off.
func overwrite(t testing.TB, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

func recordFrame(e Entry) []byte {
	return appendRecordFrame(nil, &e, recordBodyLen(&e))
}

func wantErr(t testing.TB, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

// frameOffset returns the file offset of the frame holding local, which g
// must hold.
func frameOffset(g *segment, local uint64) int64 {
	k, _, _ := g.locate(local)
	return int64(g.offsets[k])
}

// checkIndex checks the in-memory index of every segment against itself:
// contiguous segments, packed ascending offsets, no-op frames in order, and
// locate agreeing with a walk over the frames.
func checkIndex(t testing.TB, s *Store) {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.start != s.segs[0].base || s.length != s.active().end() {
		t.Fatalf("start, length = %d, %d; segments span [%d, %d)", s.start, s.length, s.segs[0].base, s.active().end())
	}
	for i, g := range s.segs {
		if i > 0 && s.segs[i-1].end() != g.base {
			t.Fatalf("segment %d ends at %d, next starts at %d", i-1, s.segs[i-1].end(), g.base)
		}
		next, nj := g.base, 0
		for k := range g.offsets {
			if k == 0 && g.offsets[0] != 0 || k > 0 && g.offsets[k] <= g.offsets[k-1] || int64(g.offsets[k]) >= g.size {
				t.Fatalf("segment %d: frame %d at offset %d (previous %v, size %d)", g.base, k, g.offsets[k], g.offsets[:k], g.size)
			}
			first, end := next, next+1
			if nj < len(g.noops) && int(g.noops[nj].frame) == k {
				nf := g.noops[nj]
				if nf.first != next || nf.end <= nf.first {
					t.Fatalf("segment %d: no-op frame %+v, want it to start at %d", g.base, nf, next)
				}
				first, end = nf.first, nf.end
				nj++
			}
			for _, l := range []uint64{first, end - 1} {
				if gk, gf, ge := g.locate(l); gk != k || gf != first || ge != end {
					t.Fatalf("segment %d: locate(%d) = %d, [%d, %d); want %d, [%d, %d)", g.base, l, gk, gf, ge, k, first, end)
				}
			}
			next = end
		}
		if nj != len(g.noops) || next != g.end() {
			t.Fatalf("segment %d: frames cover [%d, %d) with %d of %d no-op frames; end() is %d", g.base, g.base, next, nj, len(g.noops), g.end())
		}
	}
}

// frameCounts returns how many frames, and how many of them no-op frames,
// the store's in-memory index holds.
func frameCounts(s *Store) (frames, noops int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, g := range s.segs {
		frames += len(g.offsets)
		noops += len(g.noops)
	}
	return frames, noops
}

// writeFormat marks dir as a store of this version's on-disk format, for
// tests that write a store's files by hand.
func writeFormat(t testing.TB, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, formatName), []byte(formatLine), filePerm); err != nil {
		t.Fatal(err)
	}
}
