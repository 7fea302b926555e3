package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// logTo returns opts with a logger writing into a fresh buffer.
func logTo(opts Options) (Options, *bytes.Buffer) {
	var buf bytes.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	return opts, &buf
}

// wantLogged fails unless the log holds a line at level with every one of
// the attributes.
func wantLogged(t *testing.T, log *bytes.Buffer, level string, attrs ...string) {
	t.Helper()
	for _, line := range strings.Split(log.String(), "\n") {
		ok := strings.Contains(line, "level="+level)
		for _, a := range attrs {
			ok = ok && strings.Contains(line, a)
		}
		if ok {
			return
		}
	}
	t.Fatalf("no %s log line with %q in:\n%s", level, attrs, log)
}

// wantDamaged checks that Read and Scan of local fail with a DamagedError
// naming want.
func wantDamaged(t *testing.T, s *Store, local uint64, want DamagedRange) {
	t.Helper()
	_, err := s.Read(local)
	var de *DamagedError
	if !errors.Is(err, ErrDamaged) || !errors.As(err, &de) {
		t.Fatalf("Read(%d) = %v, want a DamagedError", local, err)
	}
	if de.Range.First != want.First || de.Range.End != want.End || de.Range.File != want.File || de.Range.Offset != want.Offset {
		t.Fatalf("Read(%d) names %+v, want %+v", local, de.Range, want)
	}
	err = s.Scan(local, func(uint64, Entry) bool {
		t.Fatalf("Scan(%d) visited a damaged record", local)
		return false
	})
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("Scan(%d) = %v, want ErrDamaged", local, err)
	}
}

// wantOneDamaged checks that Damaged lists exactly [first, end) in file at
// offset and returns it.
func wantOneDamaged(t *testing.T, s *Store, first, end uint64, file string, offset int64) DamagedRange {
	t.Helper()
	d := s.Damaged()
	if len(d) != 1 || d[0].First != first || d[0].End != end || d[0].File != file || d[0].Offset != offset {
		t.Fatalf("Damaged() = %+v, want one range [%d, %d) of %s at offset %d", d, first, end, file, offset)
	}
	return d[0]
}

// TestDamageMidSegmentKeepsRecords damages a record in the middle of the
// only segment, one byte at several places of its frame, or its length
// word rewritten to name the end of the file (which made it a torn final
// frame, and every record after it was truncated, while nothing checked
// the word), and checks that reopening keeps every other record at its
// local index, truncates nothing, reports the damaged one, and refuses to
// read it.
func TestDamageMidSegmentKeepsRecords(t *testing.T) {
	const n, damaged = 300, 150
	// flip flips the byte of the frame at rel(frame length).
	flip := func(rel func(frameLen int64) int64) func(t *testing.T, path string, off, frameLen, size int64) {
		return func(t *testing.T, path string, off, frameLen, _ int64) { flipByte(t, path, off+rel(frameLen)) }
	}
	for _, at := range []struct {
		name string
		// hit damages the frame at off, frameLen bytes long, of the
		// segment at path, size bytes long.
		hit func(t *testing.T, path string, off, frameLen, size int64)
	}{
		{"body middle", flip(func(l int64) int64 { return frameHeaderBytes + (l-frameHeaderBytes)/2 })},
		{"body last byte", flip(func(l int64) int64 { return l - 1 })},
		{"checksum", flip(func(int64) int64 { return 5 })},
		{"length low byte", flip(func(int64) int64 { return 0 })},
		{"length second byte", flip(func(int64) int64 { return 1 })},
		{"length top byte", flip(func(int64) int64 { return 3 })},
		{"length checksum", flip(func(int64) int64 { return 9 })},
		{"length naming the end of the file", func(t *testing.T, path string, off, _, size int64) {
			overwrite(t, path, off, binary.LittleEndian.AppendUint32(nil, uint32(size-off-frameHeaderBytes)))
		}},
	} {
		t.Run(at.name, func(t *testing.T) {
			dir := t.TempDir()
			opts, log := logTo(Options{Dir: dir, Sync: SyncAlways})
			s := mustOpen(t, opts)
			appendTest(t, s, n, 7)
			g := s.active()
			off := frameOffset(g, damaged)
			frameLen := frameOffset(g, damaged+1) - off
			mustClose(t, s)
			path := lastSeg(t, dir)
			size := fileSize(t, path)
			at.hit(t, path, off, frameLen, size)

			s = mustOpen(t, opts)
			defer s.Close()
			if s.Len() != n {
				t.Fatalf("Len = %d after reopening, want %d", s.Len(), n)
			}
			if got := fileSize(t, path); got != size {
				t.Fatalf("segment is %d bytes after reopening, want %d untouched", got, size)
			}
			d := wantOneDamaged(t, s, damaged, damaged+1, path, off)
			if d.Bytes != frameLen {
				t.Fatalf("damaged range is %d bytes, want the frame's %d", d.Bytes, frameLen)
			}
			wantDamaged(t, s, damaged, d)
			checkRecords(t, s, 0, damaged)
			checkRecords(t, s, damaged+1, n)
			wantLogged(t, log, "ERROR", "file="+path, fmt.Sprintf("offset=%d", off), "first=150", "end=151")

			// The store goes on taking appends, and the damage survives a
			// reopen unchanged.
			appendTest(t, s, 20, 5)
			mustClose(t, s)
			s = mustOpen(t, opts)
			wantOneDamaged(t, s, damaged, damaged+1, path, off)
			checkRecords(t, s, damaged+1, n+20)
		})
	}
}

// TestDamageScanStopsBeforeDamage checks that Scan visits every record
// before a damaged one, then fails naming it, and can resume after it.
func TestDamageScanStopsBeforeDamage(t *testing.T) {
	dir := t.TempDir()
	opts, _ := logTo(Options{Dir: dir})
	s := mustOpen(t, opts)
	appendTest(t, s, 50, 50)
	off := frameOffset(s.active(), 20)
	mustClose(t, s)
	flipByte(t, lastSeg(t, dir), off+frameHeaderBytes+1)

	s = mustOpen(t, opts)
	defer s.Close()
	var seen []uint64
	err := s.Scan(0, func(local uint64, e Entry) bool {
		if !reflect.DeepEqual(e, testEntry(local)) {
			t.Fatalf("Scan at %d = %+v, want %+v", local, e, testEntry(local))
		}
		seen = append(seen, local)
		return true
	})
	var de *DamagedError
	if !errors.As(err, &de) || de.Local != 20 || de.Range.First != 20 || de.Range.End != 21 {
		t.Fatalf("Scan(0) = %v, want a DamagedError at 20 naming [20, 21)", err)
	}
	if len(seen) != 20 || seen[19] != 19 {
		t.Fatalf("Scan(0) visited %v before the damage, want 0..19", seen)
	}
	checkRecords(t, s, de.Range.End, 50)
}

// TestTornTailTruncatedAndLogged cuts k bytes off the end of the last
// segment for several k and checks that reopening truncates it to the
// last whole frame and logs a warning naming file, offset and bytes
// dropped.
func TestTornTailTruncatedAndLogged(t *testing.T) {
	const n = 40
	dir := t.TempDir()
	s := mustOpen(t, Options{Dir: dir, SegmentBytesMax: 1500})
	appendTest(t, s, n, 3)
	lastOff := frameOffset(s.active(), n-1)
	mustClose(t, s)
	path := lastSeg(t, dir)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	frameLen := int64(len(whole)) - lastOff
	for _, k := range []int64{1, 2, 5, frameHeaderBytes, frameHeaderBytes + 1, frameLen / 2, frameLen - 1} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			if err := os.WriteFile(path, whole[:int64(len(whole))-k], filePerm); err != nil {
				t.Fatal(err)
			}
			opts, log := logTo(Options{Dir: dir, SegmentBytesMax: 1500})
			s := mustOpen(t, opts)
			defer s.Close()
			if s.Len() != n-1 {
				t.Fatalf("Len = %d, want %d", s.Len(), n-1)
			}
			if got := fileSize(t, path); got != lastOff {
				t.Fatalf("segment is %d bytes, want it cut to the last whole frame at %d", got, lastOff)
			}
			if d := s.Damaged(); d != nil {
				t.Fatalf("a torn tail is not damage, got %+v", d)
			}
			checkRecords(t, s, 0, n-1)
			wantLogged(t, log, "WARN", "torn tail", "file="+path, fmt.Sprintf("offset=%d", lastOff), fmt.Sprintf("dropped_bytes=%d", frameLen-k))
		})
	}
}

// TestTornTailOfSeveralBadFrames ends the last segment with the frames of
// a write a crash cut short: a whole-length frame whose body did not reach
// the disk intact, then the first bytes of the next frame. Nothing whole
// follows the first of them, so all of it is a torn tail, cut in the first
// Open; keeping the first as damage cut only the rest, and the next Open
// then found the damaged frame final and cut it too (FuzzOpenSegment
// found a second Open disagreeing with the first).
func TestTornTailOfSeveralBadFrames(t *testing.T) {
	const n = 10
	dir := t.TempDir()
	opts, log := logTo(Options{Dir: dir})
	s := mustOpen(t, opts)
	appendTest(t, s, n, 5)
	mustClose(t, s)
	path := lastSeg(t, dir)
	size := fileSize(t, path)
	bad := recordFrame(testEntry(n))
	bad[len(bad)-1] ^= 0xff
	appendFile(t, path, append(bad, recordFrame(testEntry(n + 1))[:5]...))
	for range 2 {
		s = mustOpen(t, opts)
		if s.Len() != n || s.Damaged() != nil {
			t.Fatalf("Len %d, Damaged %+v; want %d records and no damage", s.Len(), s.Damaged(), n)
		}
		if got := fileSize(t, path); got != size {
			t.Fatalf("segment is %d bytes, want it cut to the last whole frame at %d", got, size)
		}
		checkRecords(t, s, 0, n)
		mustClose(t, s)
	}
	wantLogged(t, log, "WARN", "torn tail", "file="+path, fmt.Sprintf("offset=%d", size), fmt.Sprintf("dropped_bytes=%d", len(bad)+5))
}

// TestDamageLastFrameOfEarlierSegment damages the final frame of a segment
// that has successors: valid records follow in the later segments, so it
// is damage, kept and reported, not a torn tail nor a refusal to open.
func TestDamageLastFrameOfEarlierSegment(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(path string)
	}{
		{"flipped byte", func(path string) { flipByte(t, path, fileSize(t, path)-1) }},
		{"cut short", func(path string) {
			if err := os.Truncate(path, fileSize(t, path)-3); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			opts, log := logTo(Options{Dir: dir, SegmentBytesMax: 500})
			s := mustOpen(t, opts)
			appendTest(t, s, 60, 2)
			g := s.segs[1]
			last := g.end() - 1
			off := frameOffset(g, last)
			mustClose(t, s)
			paths := segFiles(t, dir)
			if len(paths) < 3 {
				t.Fatalf("want several segments, got %d", len(paths))
			}
			c.damage(paths[1])

			s = mustOpen(t, opts)
			defer s.Close()
			if s.Len() != 60 {
				t.Fatalf("Len = %d, want 60", s.Len())
			}
			d := wantOneDamaged(t, s, last, last+1, paths[1], off)
			wantDamaged(t, s, last, d)
			checkRecords(t, s, 0, last)
			checkRecords(t, s, last+1, 60)
			wantLogged(t, log, "ERROR", "file="+paths[1])
		})
	}
}

// TestDamageUnknownCountInLastSegmentRefuses hits both the length word
// and the body of a record of the last segment: the bytes no longer say
// how many records they held, so Open must refuse rather than guess (every
// later record would shift) or truncate the records after them. It
// refuses before touching anything, even the torn tail behind them.
func TestDamageUnknownCountInLastSegmentRefuses(t *testing.T) {
	dir := t.TempDir()
	opts, _ := logTo(Options{Dir: dir})
	s := mustOpen(t, opts)
	appendTest(t, s, 30, 30)
	off := frameOffset(s.active(), 10)
	mustClose(t, s)
	path := lastSeg(t, dir)
	appendFile(t, path, recordFrame(testEntry(30))[:20])
	size := fileSize(t, path)
	flipByte(t, path, off+3)
	flipByte(t, path, off+frameHeaderBytes+2)
	_, err := Open(opts)
	wantErr(t, err, ErrCorrupt, "Open with damage of unknown count in the last segment")
	if !strings.Contains(err.Error(), fmt.Sprintf("[%d, ", off)) {
		t.Fatalf("error %q does not name offset %d", err, off)
	}
	if got := fileSize(t, path); got != size {
		t.Fatalf("segment is %d bytes after the refusal, want %d untouched", got, size)
	}
}

// TestDamageUnknownCountInEarlierSegment zeroes several frames of a segment
// that has a successor: the zeroes no longer say how many records they
// held, and the frames after them might not start where records did, so
// the rest of the segment is reported as one damaged range, counted by
// the successor's first local index, and everything else is served.
func TestDamageUnknownCountInEarlierSegment(t *testing.T) {
	dir := t.TempDir()
	opts, _ := logTo(Options{Dir: dir, SegmentBytesMax: 2000})
	s := mustOpen(t, opts)
	appendTest(t, s, 80, 4)
	g := s.segs[0]
	end := g.end()
	from, to := frameOffset(g, 3), frameOffset(g, 7) // records 3..6
	mustClose(t, s)
	path := segFiles(t, dir)[0]
	size := fileSize(t, path)
	overwrite(t, path, from, make([]byte, to-from))
	s = mustOpen(t, opts)
	defer s.Close()
	d := wantOneDamaged(t, s, 3, end, path, from)
	if d.Bytes != size-from {
		t.Fatalf("damaged range is %d bytes, want the %d to the end of the segment", d.Bytes, size-from)
	}
	for _, i := range []uint64{3, 6, end - 1} {
		wantDamaged(t, s, i, d)
	}
	checkRecords(t, s, 0, 3)
	checkRecords(t, s, end, 80)
}

// TestDamageEmbeddedFrameNotServed stores records whose payloads hold
// whole frames of other records, then damages a segment so that the search
// for the next frame lands inside a payload. No such embedded frame may be
// served as a record of the store.
func TestDamageEmbeddedFrameNotServed(t *testing.T) {
	for _, last := range []bool{false, true} {
		t.Run(fmt.Sprintf("last segment %v", last), func(t *testing.T) {
			dir := t.TempDir()
			opts, _ := logTo(Options{Dir: dir, SegmentBytesMax: 1500})
			s := mustOpen(t, opts)
			// Each payload ends with the frame of a record that is not
			// in the store, so an embedded frame ends where its record
			// does.
			var es []Entry
			for i := uint64(0); i < 40; i++ {
				e := testEntry(i)
				e.Payload = append(e.Payload, recordFrame(Entry{Seq: 1000 + i, Payload: []byte("embedded")})...)
				es = append(es, e)
			}
			for i := range es {
				if _, err := s.Append(es[i : i+1]); err != nil {
					t.Fatal(err)
				}
			}
			g := s.segs[0]
			if last {
				g = s.active()
			}
			if len(g.offsets) < 4 {
				t.Fatalf("segment at %d holds %d frames, want a few", g.base, len(g.offsets))
			}
			// Zero two whole records and the header of the third: only
			// the frame in the third's payload is whole after them.
			from := int64(g.offsets[0])
			to := int64(g.offsets[2]) + frameHeaderBytes
			mustClose(t, s)
			path := segFiles(t, dir)[0]
			if last {
				path = lastSeg(t, dir)
			}
			overwrite(t, path, from, make([]byte, to-from))
			s, err := Open(opts)
			if err != nil {
				wantErr(t, err, ErrCorrupt, "Open")
				if !last {
					t.Fatalf("Open refused damage in a segment with a successor: %v", err)
				}
				return
			}
			defer s.Close()
			for i := uint64(0); i < s.Len(); i++ {
				e, err := s.Read(i)
				if errors.Is(err, ErrDamaged) {
					continue
				}
				if err != nil || !reflect.DeepEqual(e, es[i]) {
					t.Fatalf("Read(%d) = %+v, %v; want %+v or ErrDamaged", i, e, err, es[i])
				}
			}
		})
	}
}

// TestDamagePositionsMidFileRefuses damages a run in the middle of the
// positions file: the runs after it are whole and describe ordered
// records, so Open must neither truncate them nor guess the damaged run.
func TestDamagePositionsMidFileRefuses(t *testing.T) {
	dir := t.TempDir()
	opts, _ := logTo(Options{Dir: dir})
	s := mustOpen(t, opts)
	appendTest(t, s, 10, 10)
	for i := range uint64(5) {
		r := Run{Cut: i + 1, CutStart: 2 * i, CutEnd: 2*i + 2, LocalStart: 2 * i, GlobalStart: 2 * i, Count: 2}
		if err := s.Assign(r); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, s)
	path := filepath.Join(dir, positionsName)
	size := fileSize(t, path)
	flipByte(t, path, size/2)
	_, err := Open(opts)
	wantErr(t, err, ErrCorrupt, "Open with a damaged run in the middle of the positions file")
	if got := fileSize(t, path); got != size {
		t.Fatalf("positions file is %d bytes after the refusal, want %d untouched", got, size)
	}

	// A damaged final run is a torn tail: cut off, with a warning.
	flipByte(t, path, size/2)
	flipByte(t, path, size-1)
	opts, log := logTo(opts)
	s = mustOpen(t, opts)
	defer s.Close()
	if s.Ordered() != 8 {
		t.Fatalf("Ordered = %d after cutting the torn final run, want 8", s.Ordered())
	}
	wantLogged(t, log, "WARN", "torn tail", "file="+path)
}

// TestDamageTrimmedAway checks that a damaged range goes from Damaged once
// Trim deletes its segment, and stays while its segment is kept.
func TestDamageTrimmedAway(t *testing.T) {
	dir := t.TempDir()
	opts, _ := logTo(Options{Dir: dir, SegmentBytesMax: 500})
	s := mustOpen(t, opts)
	appendTest(t, s, 60, 2)
	if err := s.Assign(Run{Cut: 1, CutEnd: 60, Count: 60}); err != nil {
		t.Fatal(err)
	}
	g := s.segs[1]
	damaged := g.base + 1
	off := frameOffset(g, damaged)
	trimTo := s.segs[2].base
	mustClose(t, s)
	paths := segFiles(t, dir)
	flipByte(t, paths[1], off+frameHeaderBytes+1)

	s = mustOpen(t, opts)
	defer s.Close()
	wantOneDamaged(t, s, damaged, damaged+1, paths[1], off)
	if err := s.Trim(g.base); err != nil {
		t.Fatal(err)
	}
	wantOneDamaged(t, s, damaged, damaged+1, paths[1], off)
	if err := s.Trim(trimTo); err != nil {
		t.Fatal(err)
	}
	if s.Start() != trimTo {
		t.Fatalf("Start = %d after trimming, want %d", s.Start(), trimTo)
	}
	if d := s.Damaged(); d != nil {
		t.Fatalf("Damaged() = %+v after its segment was trimmed", d)
	}
	_, err := s.Read(damaged)
	wantErr(t, err, ErrTrimmed, "Read of a trimmed damaged record")
}

// TestDamageLengthWordLeadingIntoPayload rewrites the length word of a
// record so that it leads exactly to a whole frame inside a payload: the
// next record's, or its own. The word no longer verifies, but the record's
// bytes still do under its body checksum: it is the one damaged record,
// and every other reads as appended. Taking the word at its value served
// the embedded frame at the next record's index (format 1, where nothing
// checked a length word, in the second case).
func TestDamageLengthWordLeadingIntoPayload(t *testing.T) {
	for _, c := range []struct {
		last bool
		into int // the frame whose payload the word leads into
	}{{false, 2}, {true, 2}, {false, 1}, {true, 1}} {
		last := c.last
		t.Run(fmt.Sprintf("last segment %v, into frame %d", last, c.into), func(t *testing.T) {
			dir := t.TempDir()
			opts, _ := logTo(Options{Dir: dir, SegmentBytesMax: 1500})
			s := mustOpen(t, opts)
			embedded := recordFrame(Entry{Seq: 1000, Payload: []byte("embedded")})
			var es []Entry
			for i := uint64(0); i < 40; i++ {
				e := testEntry(i)
				e.Payload = append(e.Payload, embedded...)
				es = append(es, e)
			}
			for i := range es {
				if _, err := s.Append(es[i : i+1]); err != nil {
					t.Fatal(err)
				}
			}
			g := s.segs[0]
			if last {
				g = s.active()
			}
			// Record g.base+1's length word now leads to the frame
			// embedded at the end of the record of frame c.into.
			off := int64(g.offsets[1])
			into := g.frameEnd(c.into) - int64(len(embedded))
			mustClose(t, s)
			path := segFiles(t, dir)[0]
			if last {
				path = lastSeg(t, dir)
			}
			overwrite(t, path, off, binary.LittleEndian.AppendUint32(nil, uint32(into-off-frameHeaderBytes)))
			s = mustOpen(t, opts)
			defer s.Close()
			if s.Len() != uint64(len(es)) {
				t.Fatalf("Len = %d, want %d", s.Len(), len(es))
			}
			wantOneDamaged(t, s, g.base+1, g.base+2, path, off)
			for i := uint64(0); i < s.Len(); i++ {
				if i == g.base+1 {
					continue
				}
				if e, err := s.Read(i); err != nil || !reflect.DeepEqual(e, es[i]) {
					t.Fatalf("Read(%d) = %+v, %v; want %+v", i, e, err, es[i])
				}
			}
		})
	}
}
