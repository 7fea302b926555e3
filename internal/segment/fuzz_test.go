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

// quiet returns opts with recovery's reports discarded.
func quiet(opts Options) Options {
	opts.Logger = slog.New(slog.DiscardHandler)
	return opts
}

// FuzzOpenSegment opens a store whose only segment and positions file hold
// arbitrary bytes. Open must not panic and must fail only with ErrCorrupt;
// once open, every index outside Damaged must read back as a frame that
// lies, byte for byte, at its offset in the file as given (so its checksum
// verified against bytes the fuzzer wrote, not something recovery made up),
// Read and Scan must agree, and a second Open must find the same store.
func FuzzOpenSegment(f *testing.F) {
	var valid []byte
	for i := range uint64(5) {
		valid = append(valid, recordFrame(testEntry(i))...)
	}
	valid = appendNoopFrame(valid, 3)
	valid = append(valid, recordFrame(testEntry(8))...)
	runs := appendRunFrame(nil, &Run{Cut: 1, CutEnd: 4, Count: 4})
	f.Add(valid, runs)
	f.Add(valid[:len(valid)-3], runs[:len(runs)-2])
	mid := bytes.Clone(valid)
	mid[len(recordFrame(testEntry(0)))+10] ^= 0x40
	f.Add(mid, []byte(nil))
	f.Add([]byte("not a segment at all"), []byte("nor positions"))
	f.Add(make([]byte, 64), make([]byte, 20))

	f.Fuzz(func(t *testing.T, seg, pos []byte) {
		dir := t.TempDir()
		writeFormat(t, dir)
		path := filepath.Join(dir, "00000000000000000000"+segmentSuffix)
		if err := os.WriteFile(path, seg, filePerm); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, positionsName), pos, filePerm); err != nil {
			t.Fatal(err)
		}
		opts := quiet(Options{Dir: dir})
		s, err := Open(opts)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open failed with %v, want nil or ErrCorrupt", err)
			}
			return
		}
		checkOpenedOver(t, s, seg)
		length, damaged := s.Len(), s.Damaged()
		mustClose(t, s)
		s = mustOpen(t, opts)
		defer s.Close()
		if s.Len() != length || !reflect.DeepEqual(s.Damaged(), damaged) {
			t.Fatalf("second Open: Len %d, Damaged %+v; first: %d, %+v", s.Len(), s.Damaged(), length, damaged)
		}
	})
}

// checkOpenedOver checks a store opened over the single segment seg.
func checkOpenedOver(t *testing.T, s *Store, seg []byte) {
	t.Helper()
	damaged := s.Damaged()
	for i, d := range damaged {
		if d.First >= d.End || d.End > s.Len() || i > 0 && damaged[i-1].End > d.First {
			t.Fatalf("Damaged() = %+v: ranges out of order or outside [0, %d)", damaged, s.Len())
		}
	}
	// damagedAt returns the damaged range holding local, if any.
	damagedAt := func(local uint64) (DamagedRange, bool) {
		for _, d := range damaged {
			if d.First <= local && local < d.End {
				return d, true
			}
		}
		return DamagedRange{}, false
	}
	g := s.active()
	read := map[uint64]Entry{}
	for local := uint64(0); local < s.Len(); {
		e, err := s.Read(local)
		if d, ok := damagedAt(local); ok {
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("Read(%d) of a damaged index = %+v, %v; want ErrDamaged", local, e, err)
			}
			if _, err := s.Read(d.End - 1); !errors.Is(err, ErrDamaged) {
				t.Fatalf("Read(%d) of the last damaged index = %v, want ErrDamaged", d.End-1, err)
			}
			local = d.End // a range may cover a huge run of no-ops
			continue
		}
		if err != nil {
			t.Fatalf("Read(%d) = %v after a clean Open", local, err)
		}
		k, first, _ := g.locate(local)
		if e.isNoop() && first != local {
			t.Fatalf("Read(%d) is inside a run starting at %d", local, first)
		}
		off, end := int64(g.offsets[k]), g.frameEnd(k)
		if end > int64(len(seg)) {
			t.Fatalf("Read(%d) = %+v from bytes [%d, %d), past the %d the file was given", local, e, off, end, len(seg))
		}
		if fromFile, err := decodeFrame(seg[off:end]); err != nil || !reflect.DeepEqual(fromFile, e) {
			t.Fatalf("Read(%d) = %+v, but the file's bytes [%d, %d) decode as %+v, %v", local, e, off, end, fromFile, err)
		}
		read[local] = e
		if e.isNoop() {
			local += e.Noops
		} else {
			local++
		}
	}
	// Scan agrees with Read up to the first damaged range, from which it
	// resumes after each.
	for from := uint64(0); from < s.Len(); {
		err := s.Scan(from, func(local uint64, e Entry) bool {
			if want, ok := read[local]; !ok || !reflect.DeepEqual(e, want) {
				t.Fatalf("Scan at %d = %+v, Read gave %+v", local, e, want)
			}
			return true
		})
		var de *DamagedError
		switch {
		case err == nil:
			from = s.Len()
		case errors.As(err, &de):
			from = de.Range.End
		default:
			t.Fatalf("Scan(%d) = %v", from, err)
		}
	}
}

// FuzzRecoverDamage writes records, damages the segment files (byte
// overwrites and a cut at the end, as the fuzzer chooses), and reopens.
// Whatever Open decides, it must never serve a record at the wrong index:
// every index that reads without error holds what was appended there.
// That is the property that the damage rules exist for.
func FuzzRecoverDamage(f *testing.F) {
	f.Add(uint8(60), uint16(0), false, []byte{0x00, 0x10, 0x40})
	f.Add(uint8(60), uint16(400), true, []byte{0x01, 0x20, 0x01})
	f.Add(uint8(200), uint16(700), false, []byte{0x00, 0x03, 0x40, 0x02, 0x00, 0xff})
	f.Add(uint8(30), uint16(0), true, []byte{0xff, 0xff, 0x00, 0x00, 0x05})
	f.Fuzz(func(t *testing.T, n uint8, segBytes uint16, embed bool, damage []byte) {
		// With embed, every payload ends with a whole frame of a record
		// that is not in the store, for the search after damage to find.
		entry := func(i uint64) Entry {
			e := testEntry(i)
			if embed {
				e.Payload = append(e.Payload, recordFrame(Entry{Seq: 1000 + i, Payload: []byte("embedded")})...)
			}
			return e
		}
		// The segments Append would write for records 0..n, rolling over
		// once a segment reaches segBytes, built in memory so that no
		// fsync slows the fuzzer down.
		var segs [][]byte
		var bases []uint64
		for i := uint64(0); i <= uint64(n); i++ {
			if len(segs) == 0 || len(segs[len(segs)-1]) >= max(int(segBytes), 1) {
				segs, bases = append(segs, nil), append(bases, i)
			}
			segs[len(segs)-1] = append(segs[len(segs)-1], recordFrame(entry(i))...)
		}
		// damage is a list of (offset, xor) triples, the offset two bytes
		// scaled over all segments' bytes; an odd byte left over cuts that
		// many bytes off the end of the last segment.
		all := bytes.Join(segs, nil)
		for len(damage) >= 3 {
			off := int(binary.LittleEndian.Uint16(damage)) * len(all) / 65536
			all[off] ^= damage[2]
			damage = damage[3:]
		}
		dir := t.TempDir()
		writeFormat(t, dir)
		opts := quiet(Options{Dir: dir})
		for i, seg := range segs {
			b := all[:len(seg)]
			all = all[len(seg):]
			if i == len(segs)-1 && len(damage) > 0 {
				b = b[:len(b)-min(int(damage[0]), len(b))]
			}
			path := filepath.Join(dir, fmt.Sprintf("%020d%s", bases[i], segmentSuffix))
			if err := os.WriteFile(path, b, filePerm); err != nil {
				t.Fatal(err)
			}
		}

		s, err := Open(opts)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open failed with %v, want nil or ErrCorrupt", err)
			}
			return
		}
		defer s.Close()
		if s.Len() > uint64(n)+1 {
			t.Fatalf("Len = %d after damage, more than the %d appended", s.Len(), uint64(n)+1)
		}
		for local := uint64(0); local < s.Len(); local++ {
			e, err := s.Read(local)
			if errors.Is(err, ErrDamaged) {
				continue
			}
			if err != nil {
				t.Fatalf("Read(%d) = %v after a clean Open", local, err)
			}
			if want := entry(local); !reflect.DeepEqual(e, want) {
				t.Fatalf("Read(%d) = %+v, want %+v: a record served at the wrong index", local, e, want)
			}
		}
	})
}

// FuzzFrameChecks runs the frame checks recovery uses over arbitrary
// bytes: no panic, a prefix decode accepts only what a whole-frame decode
// accepts, a run frame that checks out encodes back to the same bytes, and
// checkSegmentFrame agrees with decodeFrame on what it accepts and how
// many indexes it covers.
func FuzzFrameChecks(f *testing.F) {
	for i := range uint64(4) {
		f.Add(recordFrame(testEntry(i)))
	}
	f.Add(appendNoopFrame(nil, 1))
	f.Add(appendNoopFrame(nil, 1<<40))
	f.Add(appendRunFrame(nil, &Run{Cut: 3, CutStart: 10, CutEnd: 20, LocalStart: 4, GlobalStart: 12, Count: 2}))
	f.Add([]byte{4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if e, size, err := decodeFramePrefix(b); err == nil {
			if size > len(b) {
				t.Fatalf("decodeFramePrefix says %d bytes of %d", size, len(b))
			}
			if _, err := decodeFrame(b[:size]); err != nil {
				t.Fatalf("decodeFramePrefix accepted %+v that decodeFrame rejects: %v", e, err)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decodeFramePrefix: %v, want ErrCorrupt", err)
		}
		if len(b) < frameHeaderBytes {
			return
		}
		h, body := b[:frameHeaderBytes], b[frameHeaderBytes:]
		if r, err := checkRunFrame(h, body); err == nil {
			if again := appendRunFrame(nil, &r); !bytes.Equal(again, b) {
				t.Fatalf("run frame %x decodes as %+v, which encodes as %x", b, r, again)
			}
		}
		count, err := checkSegmentFrame(h, body)
		e, derr := decodeFrame(b)
		if (err == nil) != (derr == nil) {
			t.Fatalf("checkSegmentFrame: %v; decodeFrame: %v", err, derr)
		}
		if err == nil && (e.isNoop() && e.Noops != count || !e.isNoop() && count != 1) {
			t.Fatalf("checkSegmentFrame says %d indexes, decodeFrame %+v", count, e)
		}
	})
}

// FuzzRecordRoundTrip encodes records built from arbitrary fields (tags
// separated by NUL) and checks they decode to the same record.
func FuzzRecordRoundTrip(f *testing.F) {
	f.Add(uint64(1), uint64(2), "key", "a\x00bb", []byte("payload"))
	f.Add(uint64(0), uint64(0), "", "", []byte(nil))
	f.Add(^uint64(0), ^uint64(0), "k", "\x00\x00", []byte{0})
	f.Fuzz(func(t *testing.T, client, seq uint64, key, tags string, payload []byte) {
		e := Entry{ClientID: client, Seq: seq, Key: key}
		if len(payload) > 0 {
			e.Payload = payload
		}
		if tags != "" {
			e.Tags = strings.Split(tags, "\x00")
		}
		frame := recordFrame(e)
		got, err := decodeFrame(frame)
		if err != nil {
			t.Fatalf("decodeFrame of the frame of %+v: %v", e, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("decodeFrame of the frame of %+v = %+v", e, got)
		}
	})
}
