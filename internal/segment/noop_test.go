package segment

import (
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// scanCall is one call of a Scan callback.
type scanCall struct {
	Local uint64
	E     Entry
}

// scanAll returns every call Scan(from) makes.
func scanAll(t testing.TB, s *Store, from uint64) []scanCall {
	t.Helper()
	var calls []scanCall
	if err := s.Scan(from, func(l uint64, e Entry) bool {
		calls = append(calls, scanCall{l, e})
		return true
	}); err != nil {
		t.Fatalf("Scan(%d): %v", from, err)
	}
	return calls
}

func TestNoopAppendReadScan(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir()})
	defer s.Close()
	r0, r6, r7 := testEntry(0), testEntry(6), testEntry(7)
	// Locals: 0 record, [1, 6) one run of 5 (two entries coalesced),
	// 6 and 7 records, [8, 1008) a run of 1000.
	first, err := s.Append([]Entry{r0, {Noops: 3}, {Noops: 2}, r6, r7, {Noops: 1000}})
	if err != nil || first != 0 {
		t.Fatalf("Append = %d, %v", first, err)
	}
	if s.Len() != 1008 {
		t.Fatalf("Len = %d, want 1008", s.Len())
	}
	if frames, noops := frameCounts(s); frames != 5 || noops != 2 {
		t.Fatalf("index holds %d frames, %d of them no-op; want 5 and 2", frames, noops)
	}
	want := func(l uint64) Entry {
		switch {
		case l == 0:
			return r0
		case l < 6:
			return Entry{Noops: 6 - l}
		case l == 6:
			return r6
		case l == 7:
			return r7
		}
		return Entry{Noops: 1008 - l}
	}
	for l := uint64(0); l < 1008; l++ {
		if e, err := s.Read(l); err != nil || !reflect.DeepEqual(e, want(l)) {
			t.Fatalf("Read(%d) = %+v, %v; want %+v", l, e, err, want(l))
		}
	}
	all := []scanCall{{0, r0}, {1, Entry{Noops: 5}}, {6, r6}, {7, r7}, {8, Entry{Noops: 1000}}}
	for from, calls := range map[uint64][]scanCall{
		0:    all,
		1:    all[1:],
		4:    append([]scanCall{{4, Entry{Noops: 2}}}, all[2:]...),
		7:    all[3:],
		500:  {{500, Entry{Noops: 508}}},
		1007: {{1007, Entry{Noops: 1}}},
		1008: nil,
	} {
		if got := scanAll(t, s, from); !reflect.DeepEqual(got, calls) {
			t.Fatalf("Scan(%d) = %+v, want %+v", from, got, calls)
		}
	}

	// A run appended on its own is its own frame, and index numbering goes
	// on after it.
	if first, err := s.Append([]Entry{{Noops: 4}}); err != nil || first != 1008 {
		t.Fatalf("Append of a lone run = %d, %v", first, err)
	}
	if first, err := s.Append([]Entry{testEntry(1012)}); err != nil || first != 1012 {
		t.Fatalf("Append after the run = %d, %v", first, err)
	}
	if got := scanAll(t, s, 1000); !reflect.DeepEqual(got, []scanCall{{1000, Entry{Noops: 8}}, {1008, Entry{Noops: 4}}, {1012, testEntry(1012)}}) {
		t.Fatalf("Scan(1000) = %+v", got)
	}
	checkIndex(t, s)
}

func TestNoopAppendRejectsDataAndOverflow(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir})
	defer s.Close()
	appendTest(t, s, 3, 3)
	size := fileSize(t, lastSeg(t, dir))
	for _, batch := range [][]Entry{
		{{Noops: 1, ClientID: 1}},
		{{Noops: 1, Seq: 1}},
		{{Noops: 1, Key: "k"}},
		{{Noops: 1, Tags: []string{""}}},
		{{Noops: 1, Payload: []byte{0}}},
		{testEntry(3), {Noops: 2}, {Noops: 2, Key: "k"}},
		{{Noops: math.MaxUint64}, {Noops: 1}},
		{{Noops: math.MaxUint64 - 1}},
		{{Noops: math.MaxUint64 / 2}, testEntry(3), {Noops: math.MaxUint64 / 2}},
	} {
		_, err := s.Append(batch)
		wantErr(t, err, ErrInvalid, "Append of a bad no-op batch")
		if s.Len() != 3 || fileSize(t, lastSeg(t, dir)) != size {
			t.Fatalf("rejected Append changed the store: Len %d, file %d bytes", s.Len(), fileSize(t, lastSeg(t, dir)))
		}
	}
	// Empty but non-nil Tags and Payload carry nothing.
	if _, err := s.Append([]Entry{{Noops: 2, Tags: []string{}, Payload: []byte{}}}); err != nil {
		t.Fatalf("Append of a run with empty slices: %v", err)
	}
	// The largest run that still fits the index space.
	if first, err := s.Append([]Entry{{Noops: math.MaxUint64 - 5}}); err != nil || first != 5 || s.Len() != math.MaxUint64 {
		t.Fatalf("Append of the largest run = %d, %v; Len %d", first, err, s.Len())
	}
	_, err := s.Append([]Entry{{Noops: 1}})
	wantErr(t, err, ErrInvalid, "Append past the index space")
	_, err = s.Append(testEntries(0, 1))
	wantErr(t, err, ErrInvalid, "Append of a record past the index space")
	checkIndex(t, s)
}

// TestNoopIndexIsCompact checks that the in-memory index grows by frame,
// not by no-op index.
func TestNoopIndexIsCompact(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir()})
	defer s.Close()
	const fills = 2000
	for i := range uint64(fills) {
		// A quota fill: a record, then tens of no-ops in one frame.
		if _, err := s.Append([]Entry{testEntry(i), {Noops: 40}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Append([]Entry{{Noops: 1 << 40}}); err != nil {
		t.Fatal(err)
	}
	if frames, noops := frameCounts(s); frames != 2*fills+1 || noops != fills+1 {
		t.Fatalf("index holds %d frames, %d of them no-op; want %d and %d", frames, noops, 2*fills+1, fills+1)
	}
	if s.Len() != fills*41+1<<40 {
		t.Fatalf("Len = %d", s.Len())
	}
	if e, err := s.Read(fills*41 + 1<<39); err != nil || e.Noops != 1<<39 {
		t.Fatalf("Read inside the huge run = %+v, %v", e, err)
	}
	if e, err := s.Read(41*1234 + 7); err != nil || e.Noops != 34 {
		t.Fatalf("Read inside a fill = %+v, %v", e, err)
	}
	if e, err := s.Read(41 * 1234); err != nil || !reflect.DeepEqual(e, testEntry(1234)) {
		t.Fatalf("Read of a record between fills = %+v, %v", e, err)
	}
	checkIndex(t, s)
}

// TestNoopTornTail tears the no-op frame at the end of the last segment
// the ways a crash can: Open drops it like a torn record.
func TestNoopTornTail(t *testing.T) {
	frame := appendNoopFrame(nil, 1<<20+5)
	badSum := append([]byte(nil), frame...)
	badSum[5] ^= 1
	kindFlipped := recordFrame(testEntry(40))
	kindFlipped[3] ^= 0x80
	cases := map[string][]byte{
		"short header":      frame[:3],
		"header only":       frame[:frameHeaderBytes],
		"all but one byte":  frame[:len(frame)-1],
		"bad checksum":      badSum,
		"kind bit on a rec": kindFlipped,
		"record then torn":  append(recordFrame(testEntry(40)), frame[:len(frame)-2]...),
	}
	for name, tail := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, Sync: SyncAlways}
			s := mustOpen(t, opts)
			if _, err := s.Append([]Entry{testEntry(0), {Noops: 9}, testEntry(10), {Noops: 30}}); err != nil {
				t.Fatal(err)
			}
			mustClose(t, s)
			path := lastSeg(t, dir)
			whole := fileSize(t, path)
			appendFile(t, path, tail)

			s = mustOpen(t, opts)
			defer s.Close()
			wantLen := uint64(41)
			if name == "record then torn" {
				wantLen, whole = 42, whole+int64(len(recordFrame(testEntry(40))))
			}
			if s.Len() != wantLen || fileSize(t, path) != whole {
				t.Fatalf("after recovery Len %d, file %d bytes; want %d, %d", s.Len(), fileSize(t, path), wantLen, whole)
			}
			if e, err := s.Read(35); err != nil || e.Noops != 6 {
				t.Fatalf("Read(35) = %+v, %v", e, err)
			}
			if _, err := s.Append([]Entry{{Noops: 3}}); err != nil {
				t.Fatal(err)
			}
			mustClose(t, s)
			s = mustOpen(t, opts)
			if s.Len() != wantLen+3 {
				t.Fatalf("Len after reopen = %d, want %d", s.Len(), wantLen+3)
			}
			if e, err := s.Read(wantLen); err != nil || e.Noops != 3 {
				t.Fatalf("Read(%d) = %+v, %v", wantLen, e, err)
			}
			checkIndex(t, s)
		})
	}
}

// TestNoopDamageInEarlierSegmentFails: a bad no-op frame in a segment that
// is not the last cannot be a torn write.
// TestNoopDamageInEarlierSegment damages the no-op frame of a middle
// segment: its body no longer says how many indexes it covers, but the
// next segment's first index does, so the run is reported as damaged and
// the indexes around it are served.
func TestNoopDamageInEarlierSegment(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytesMax: 1, Logger: slog.New(slog.DiscardHandler)}
	s := mustOpen(t, opts)
	for range 3 {
		if _, err := s.Append([]Entry{{Noops: 7}}); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, s)
	paths := segFiles(t, dir)
	if len(paths) != 3 {
		t.Fatalf("%d segments, want 3", len(paths))
	}
	flipByte(t, paths[1], fileSize(t, paths[1])-1)
	s = mustOpen(t, opts)
	defer s.Close()
	d := wantOneDamaged(t, s, 7, 14, paths[1], 0)
	for _, i := range []uint64{7, 13} {
		wantDamaged(t, s, i, d)
	}
	for _, i := range []uint64{0, 14} {
		if e, err := s.Read(i); err != nil || e.Noops != 7 {
			t.Fatalf("Read(%d) = %+v, %v; want a run of 7 no-ops", i, e, err)
		}
	}
}

// TestReadChecksNoopFrames damages a no-op frame behind an open store's
// back: Read and Scan notice, as they do for records.
func TestReadChecksNoopFrames(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir})
	defer s.Close()
	if _, err := s.Append([]Entry{testEntry(0), {Noops: 300}, testEntry(301)}); err != nil {
		t.Fatal(err)
	}
	off := frameOffset(s.active(), 1)
	flipByte(t, lastSeg(t, dir), off+frameHeaderBytes+1)
	_, err := s.Read(100)
	wantErr(t, err, ErrCorrupt, "Read inside a damaged run")
	checkRecords(t, s, 0, 1)
	err = s.Scan(0, func(uint64, Entry) bool { return true })
	wantErr(t, err, ErrCorrupt, "Scan over a damaged run")

	// A frame that checks out but covers a different count than the
	// index says (here: the frame rewritten to 299) is corrupt too.
	frame := appendNoopFrame(nil, 299)
	f, err := os.OpenFile(lastSeg(t, dir), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(frame, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = s.Read(100)
	wantErr(t, err, ErrCorrupt, "Read inside a run of the wrong length")
	err = s.Scan(50, func(uint64, Entry) bool { return true })
	wantErr(t, err, ErrCorrupt, "Scan over a run of the wrong length")
}

// TestNoopRolloverTrimReopen puts runs in several segments, orders them
// with cuts that give no-op indexes global positions, trims whole segments
// and reopens.
func TestNoopRolloverTrimReopen(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytesMax: 1, Sync: SyncInterval}
	s := mustOpen(t, opts)
	// SegmentBytesMax 1 rolls before every batch: batch k (a segment of
	// its own) is 2 records around a run of 50 no-ops, locals
	// [52k, 52k+52); batch 3 is only a run of 1000 no-ops.
	var want []Entry
	for k := uint64(0); k < 6; k++ {
		batch := []Entry{testEntry(52 * k), {Noops: 50}, testEntry(52*k + 51)}
		if k == 3 {
			batch = []Entry{{Noops: 1000}}
		}
		first, err := s.Append(batch)
		if err != nil || first != uint64(len(want)) {
			t.Fatalf("Append %d = %d, %v; want %d", k, first, err, len(want))
		}
		for _, e := range batch {
			for n := e.Noops; n > 0; n-- {
				want = append(want, Entry{Noops: n})
			}
			if e.Noops == 0 {
				want = append(want, e)
			}
		}
	}
	// Each run lives in the segment of its frame, so the big run makes its
	// segment cover 1000 indexes.
	var bases []string
	for _, p := range segFiles(t, dir) {
		bases = append(bases, filepath.Base(p))
	}
	if want := []string{"00000000000000000000.seg", "00000000000000000052.seg", "00000000000000000104.seg",
		"00000000000000000156.seg", "00000000000000001156.seg", "00000000000000001208.seg"}; !reflect.DeepEqual(bases, want) {
		t.Fatalf("segments %v, want %v", bases, want)
	}
	if e, err := s.Read(1155); err != nil || e.Noops != 1 {
		t.Fatalf("Read of the last index of the big run = %+v, %v", e, err)
	}
	s.mu.RLock()
	segs := append([]*segment(nil), s.segs...)
	s.mu.RUnlock()
	// One cut per segment but the last, whose indexes, records and no-ops
	// alike, get global positions 10000+2*base onwards.
	for i, g := range segs[:5] {
		n := g.end() - g.base
		r := Run{Cut: uint64(i + 1), CutStart: 10000 + 2*g.base, CutEnd: 10000 + 2*g.end(), LocalStart: g.base, GlobalStart: 10000 + 2*g.base, Count: n}
		if err := s.Assign(r); err != nil {
			t.Fatalf("Assign(%+v): %v", r, err)
		}
	}
	globalOf := func(l uint64) uint64 {
		for _, g := range segs {
			if l < g.end() {
				return 10000 + 2*g.base + (l - g.base)
			}
		}
		panic("beyond the store")
	}
	checkOrdered := func() {
		t.Helper()
		for l := s.Start(); l < s.Ordered(); l++ {
			if g, ok := s.GlobalOf(l); !ok || g != globalOf(l) {
				t.Fatalf("GlobalOf(%d) = %d, %v; want %d", l, g, ok, globalOf(l))
			}
			if back, ok := s.Locate(globalOf(l)); !ok || back != l {
				t.Fatalf("Locate(%d) = %d, %v; want %d", globalOf(l), back, ok, l)
			}
		}
	}
	checkOrdered()

	// Trim below the global position of the middle of the big run: the
	// three segments before it go, its own stays (not all below).
	if err := s.Trim(globalOf(156 + 500)); err != nil {
		t.Fatal(err)
	}
	if s.Start() != 156 {
		t.Fatalf("Start = %d, want 156", s.Start())
	}
	checkStore := func(lo uint64) {
		t.Helper()
		if s.Len() != uint64(len(want)) || s.Start() != lo {
			t.Fatalf("Len, Start = %d, %d; want %d, %d", s.Len(), s.Start(), len(want), lo)
		}
		for l := lo; l < uint64(len(want)); l++ {
			if e, err := s.Read(l); err != nil || !reflect.DeepEqual(e, want[l]) {
				t.Fatalf("Read(%d) = %+v, %v; want %+v", l, e, err, want[l])
			}
		}
		var calls []scanCall
		for l := lo; l < uint64(len(want)); l += covers(want[l]) {
			calls = append(calls, scanCall{l, want[l]})
		}
		if got := scanAll(t, s, 0); !reflect.DeepEqual(got, calls) {
			t.Fatalf("Scan(0) = %+v, want %+v", got, calls)
		}
		checkOrdered()
		checkIndex(t, s)
	}
	checkStore(156)
	_, err := s.Read(120)
	wantErr(t, err, ErrTrimmed, "Read of a trimmed no-op index")
	if got := scanAll(t, s, 120); len(got) == 0 || got[0].Local != 156 {
		t.Fatalf("Scan from a trimmed run gives %+v, want it to start at local 156", got)
	}

	// Past the whole big run: its segment goes too.
	if err := s.Trim(globalOf(1156)); err != nil {
		t.Fatal(err)
	}
	checkStore(1156)
	mustClose(t, s)
	s = mustOpen(t, opts)
	defer s.Close()
	checkStore(1156)
	if s.Ordered() != 1208 {
		t.Fatalf("Ordered after reopen = %d, want 1208", s.Ordered())
	}
}
