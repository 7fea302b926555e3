package segment

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
)

func TestRecordFrameRoundTrip(t *testing.T) {
	cases := []Entry{
		{},
		{ClientID: 1<<64 - 1, Seq: 1<<64 - 1},
		{Key: "k", Tags: []string{"", "x"}, Payload: []byte("hello")},
		{Tags: []string{"only"}},
		{Payload: bytes.Repeat([]byte{0xff}, 70000)},
	}
	for _, e := range cases {
		frame := recordFrame(e)
		if got := len(frame) - frameHeaderBytes; got != recordBodyLen(&e) {
			t.Fatalf("body of %+v is %d bytes, recordBodyLen says %d", e, got, recordBodyLen(&e))
		}
		got, err := decodeFrame(frame)
		if err != nil {
			t.Fatalf("decode %+v: %v", e, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip: got %+v, want %+v", got, e)
		}
	}
}

func TestRunFrameRoundTrip(t *testing.T) {
	r := Run{Cut: 1<<64 - 1, CutStart: 2, CutEnd: 3, LocalStart: 4, GlobalStart: 5, Count: 6}
	frame := appendRunFrame(nil, &r)
	if len(frame)-frameHeaderBytes > runBodyBytesMax {
		t.Fatalf("run body %d bytes exceeds runBodyBytesMax %d", len(frame)-frameHeaderBytes, runBodyBytesMax)
	}
	got, err := parseRunBody(frame[frameHeaderBytes:])
	if err != nil || got != r {
		t.Fatalf("parseRunBody = %+v, %v; want %+v", got, err, r)
	}
}

func TestDecodeRecordFrameRejectsDamage(t *testing.T) {
	frame := recordFrame(testEntry(5))
	for i := range frame {
		bad := bytes.Clone(frame)
		bad[i] ^= 0x01
		if _, err := decodeFrame(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipping byte %d: got %v, want ErrCorrupt", i, err)
		}
	}
	for n := 0; n < len(frame); n++ {
		if _, err := decodeFrame(frame[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("frame cut to %d bytes: got %v, want ErrCorrupt", n, err)
		}
	}
}

// FuzzParseRecordBody checks that no body makes the decoder panic or
// allocate without bound, and that whatever decodes re-encodes the same.
func FuzzParseRecordBody(f *testing.F) {
	for i := uint64(0); i < 6; i++ {
		f.Add(recordFrame(testEntry(i))[frameHeaderBytes:])
	}
	f.Add([]byte{0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, body []byte) {
		var e Entry
		if err := parseRecordBody(body, &e); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		again := recordFrame(e)[frameHeaderBytes:]
		var e2 Entry
		if err := parseRecordBody(again, &e2); err != nil || !reflect.DeepEqual(e, e2) {
			t.Fatalf("re-encoding %+v gives %+v, %v", e, e2, err)
		}
	})
}

func TestNoopFrameRoundTrip(t *testing.T) {
	for _, count := range []uint64{1, 2, 127, 128, 300, 1 << 32, 1<<64 - 1} {
		frame := appendNoopFrame(nil, count)
		if len(frame) != noopFrameBytes(count) {
			t.Fatalf("frame of %d no-ops is %d bytes, noopFrameBytes says %d", count, len(frame), noopFrameBytes(count))
		}
		got, err := decodeFrame(frame)
		if err != nil || !reflect.DeepEqual(got, Entry{Noops: count}) {
			t.Fatalf("decode the frame of %d no-ops: %+v, %v", count, got, err)
		}
	}
}

// TestFrameFormatGolden pins the bytes of both frame kinds of format 2: a
// record frame is the length word, the CRC-32C of the body, the CRC-32C of
// the length word, then the body; a no-op frame is the length word with
// bit 31 set, the CRC-32C of length word and body, the CRC-32C of the
// length word, then uvarint(count).
func TestFrameFormatGolden(t *testing.T) {
	record := Entry{ClientID: 1, Seq: 2, Key: "k", Tags: []string{"t"}, Payload: []byte("p")}
	cases := []struct {
		frame []byte
		want  Entry
		hex   string
	}{
		{recordFrame(record), record, "080000002840c0a3212823be0102016b01017470"},
		{appendNoopFrame(nil, 300), Entry{Noops: 300}, "0200008062606cb13e53f675ac02"},
		{appendNoopFrame(nil, 1), Entry{Noops: 1}, "010000806360cb7407dad41701"},
	}
	for _, c := range cases {
		if got := hex.EncodeToString(c.frame); got != c.hex {
			t.Fatalf("frame of %+v is %s, want %s", c.want, got, c.hex)
		}
		if got, err := decodeFrame(c.frame); err != nil || !reflect.DeepEqual(got, c.want) {
			t.Fatalf("decode %s = %+v, %v; want %+v", c.hex, got, err, c.want)
		}
	}
}

func TestDecodeNoopFrameRejectsDamage(t *testing.T) {
	for _, frame := range [][]byte{appendNoopFrame(nil, 1), appendNoopFrame(nil, 1<<40+3)} {
		for i := range frame {
			for bit := range 8 {
				bad := bytes.Clone(frame)
				bad[i] ^= 1 << bit
				if e, err := decodeFrame(bad); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("flipping bit %d of byte %d: got %+v, %v; want ErrCorrupt", bit, i, e, err)
				}
			}
		}
		for n := 0; n < len(frame); n++ {
			if _, err := decodeFrame(frame[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("frame cut to %d bytes: got %v, want ErrCorrupt", n, err)
			}
		}
	}
	// A record frame with the kind bit set is not a no-op frame.
	bad := recordFrame(Entry{ClientID: 0xff, Seq: 0xffff, Key: "kk"})
	bad[3] ^= 0x80
	if e, err := decodeFrame(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("record frame with the kind bit set: got %+v, %v; want ErrCorrupt", e, err)
	}
	// Bodies that checksum fine but are not one minimal non-zero count.
	for _, body := range [][]byte{{0}, {0x81, 0}, {1, 1}, {0x80}} {
		frame := binary.LittleEndian.AppendUint32(nil, noopFlag|uint32(len(body)))
		frame = binary.LittleEndian.AppendUint32(frame, noopChecksum(frame[0:4], body))
		frame = append(frame, body...)
		if e, err := decodeFrame(frame); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("no-op body %x: got %+v, %v; want ErrCorrupt", body, e, err)
		}
	}
}

// FuzzDecodeFrame checks that no frame makes the decoder panic, that a
// no-op frame that decodes re-encodes to the same bytes (its encoding is
// canonical), and that a record that decodes re-encodes to the same entry.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(recordFrame(testEntry(3)))
	f.Add(appendNoopFrame(nil, 1))
	f.Add(appendNoopFrame(nil, 1<<63))
	f.Add([]byte{1, 0, 0, 0x80, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, frame []byte) {
		e, err := decodeFrame(frame)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if e.Noops > 0 {
			if again := appendNoopFrame(nil, e.Noops); !bytes.Equal(again, frame) {
				t.Fatalf("%x decodes to %+v, which encodes to %x", frame, e, again)
			}
			return
		}
		if e2, err := decodeFrame(recordFrame(e)); err != nil || !reflect.DeepEqual(e, e2) {
			t.Fatalf("re-encoding %+v gives %+v, %v", e, e2, err)
		}
	})
}
