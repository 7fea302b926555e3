package segment

import (
	"bytes"
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
		got, err := decodeRecordFrame(frame)
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
		if _, err := decodeRecordFrame(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipping byte %d: got %v, want ErrCorrupt", i, err)
		}
	}
	for n := 0; n < len(frame); n++ {
		if _, err := decodeRecordFrame(frame[:n]); !errors.Is(err, ErrCorrupt) {
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
