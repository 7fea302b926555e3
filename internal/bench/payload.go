package bench

import (
	"encoding/binary"
	"hash/maphash"
	"math/rand/v2"
	"time"
)

// A stamped record's payload starts with a header: the run's id (so that
// records of other writers or runs are told apart), the append's start
// time, and the record's identity (its appender and sequence number).
// The rest is filler derived from the seed.
const (
	headerRunOff   = 0
	headerStartOff = 8
	headerAppOff   = 16
	headerSeqOff   = 20
	// headerBytes is the smallest payload a workload with consumers needs.
	headerBytes = 28
)

// recID identifies one appended record within a run.
type recID struct {
	appender uint32
	seq      uint64
}

// putHeader stamps b (at least headerBytes long).
func putHeader(b []byte, run uint64, start time.Time, id recID) {
	binary.BigEndian.PutUint64(b[headerRunOff:], run)
	binary.BigEndian.PutUint64(b[headerStartOff:], uint64(start.UnixNano()))
	binary.BigEndian.PutUint32(b[headerAppOff:], id.appender)
	binary.BigEndian.PutUint64(b[headerSeqOff:], id.seq)
}

// readHeader decodes b's header; ok is false when b is not a record of run.
func readHeader(b []byte, run uint64) (start time.Time, id recID, ok bool) {
	if len(b) < headerBytes || binary.BigEndian.Uint64(b[headerRunOff:]) != run {
		return time.Time{}, recID{}, false
	}
	start = time.Unix(0, int64(binary.BigEndian.Uint64(b[headerStartOff:])))
	id = recID{appender: binary.BigEndian.Uint32(b[headerAppOff:]), seq: binary.BigEndian.Uint64(b[headerSeqOff:])}
	return start, id, true
}

// filler returns n payload bytes drawn from seed, and a run id from it that
// no other seed shares (with overwhelming likelihood).
func filler(seed uint64, n int) (payload []byte, run uint64) {
	r := rand.New(rand.NewPCG(seed, 0x6175677572)) // "augur"
	run = r.Uint64() | 1
	payload = make([]byte, n)
	for i := range payload {
		// Printable, so a record is readable with `augur read`.
		payload[i] = byte('a' + r.IntN(26))
	}
	return payload, run
}

// positionHash mixes a final position and the record there, so that two
// subscribers' sets of (position, record) pairs can be compared by sums.
func positionHash(seed maphash.Seed, pos uint64, id recID) uint64 {
	var b [20]byte
	binary.BigEndian.PutUint64(b[0:], pos)
	binary.BigEndian.PutUint32(b[8:], id.appender)
	binary.BigEndian.PutUint64(b[12:], id.seq)
	return maphash.Bytes(seed, b[:])
}
