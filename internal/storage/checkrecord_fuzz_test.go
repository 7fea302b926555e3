package storage

import (
	"encoding/binary"
	"strings"
	"testing"

	pb "github.com/augur-log/augur/api/augurpb"
)

// storedBytes is what rec costs in a segment beyond the fixed uvarints of
// client id, sequence number, key length and tag count: key, payload, and
// each tag with its length prefix. Written out here as an independent
// reading of the segment's record body format.
func storedBytes(rec *pb.Record) int {
	n := len(rec.Key) + len(rec.Payload)
	for _, t := range rec.Tags {
		n += len(binary.AppendUvarint(nil, uint64(len(t)))) + len(t)
	}
	return n
}

// FuzzCheckRecord checks the admission of appended records: no panic on
// any record; an admitted record has a payload and costs the store at
// most the limit (plus the fixed uvarints), however it spreads its bytes
// over key, tags and payload.
func FuzzCheckRecord(f *testing.F) {
	f.Add(false, "key", "a\x00b", []byte("payload"), uint16(100))
	f.Add(false, "", "", []byte{1}, uint16(1))
	f.Add(false, "k", "", []byte(nil), uint16(100))
	f.Add(true, "", "", []byte(nil), uint16(0))
	f.Fuzz(func(t *testing.T, missing bool, key, tags string, payload []byte, limit uint16) {
		var rec *pb.Record
		if !missing {
			rec = &pb.Record{Key: key, Payload: payload}
			if tags != "" {
				rec.Tags = strings.Split(tags, "\x00")
			}
		}
		msg := checkRecord(rec, int(limit))
		if msg != "" {
			return
		}
		if rec == nil || len(rec.Payload) == 0 {
			t.Fatalf("admitted %+v, which has no payload", rec)
		}
		if n := storedBytes(rec); n > int(limit) {
			t.Fatalf("admitted a record that stores %d bytes under a limit of %d: key %d bytes, %d tags, payload %d bytes",
				n, limit, len(rec.Key), len(rec.Tags), len(rec.Payload))
		}
	})
}

// TestCheckRecordCountsTagPrefixes is the case FuzzCheckRecord found: empty
// tags cost a length byte each in the store, so a record of a one-byte
// payload and many empty tags must not pass a small limit.
func TestCheckRecordCountsTagPrefixes(t *testing.T) {
	rec := &pb.Record{Payload: []byte{1}, Tags: make([]string, 1000)}
	if msg := checkRecord(rec, 100); msg == "" {
		t.Fatalf("admitted a record of 1000 empty tags under a limit of 100 bytes")
	}
	rec.Tags = rec.Tags[:99]
	if msg := checkRecord(rec, 100); msg != "" {
		t.Fatalf("refused a record that stores exactly 100 bytes: %s", msg)
	}
}
