package segment

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
)

// # Frames
//
// Every file of a store is a sequence of frames: a 12-byte header, then
// the body. The header holds the body's length (with the no-op kind bit,
// in segments), the body's checksum, and a checksum of the length word.
// That last one is what lets recovery trust a length word: when it
// verifies and the body does not, the frame's extent, and so the local
// indexes a damaged record held, are known; without it, a length word hit
// so that it leads to a frame embedded in a payload could not be told from
// a hit body (see damage.go).

const (
	frameHeaderBytes = 12
	// recordBodyBytesMin is the smallest record body: one byte each for
	// ClientID, Seq, len(Key) and len(Tags).
	recordBodyBytesMin = 4
	// runBodyBytesMin and runBodyBytesMax bound a run body of six uvarints.
	runBodyBytesMin = 6
	runBodyBytesMax = 6 * binary.MaxVarintLen64

	// noopFlag is set in the length word of a no-op frame. A record body is
	// at most recordBytesMax (64 MiB) long, so no record frame ever has this
	// bit set: segments written before no-op frames existed read unchanged.
	noopFlag = 1 << 31
	// noopBodyBytesMin and noopBodyBytesMax bound a no-op body, one uvarint.
	noopBodyBytesMin = 1
	noopBodyBytesMax = binary.MaxVarintLen64
)

// frameKind tells the two kinds of segment frame apart.
type frameKind uint8

const (
	kindRecord frameKind = iota
	kindNoop
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// recordBodyLen is the encoded body size of e.
func recordBodyLen(e *Entry) int {
	n := uvarintLen(e.ClientID) + uvarintLen(e.Seq) +
		uvarintLen(uint64(len(e.Key))) + len(e.Key) +
		uvarintLen(uint64(len(e.Tags)))
	for _, t := range e.Tags {
		n += uvarintLen(uint64(len(t))) + len(t)
	}
	return n + len(e.Payload)
}

// appendRecordFrame appends the frame of e, whose body is bodyLen bytes
// (from recordBodyLen), to dst.
func appendRecordFrame(dst []byte, e *Entry, bodyLen int) []byte {
	hdr := len(dst)
	dst = append(dst, emptyHeader[:]...)
	body := len(dst)
	dst = binary.AppendUvarint(dst, e.ClientID)
	dst = binary.AppendUvarint(dst, e.Seq)
	dst = binary.AppendUvarint(dst, uint64(len(e.Key)))
	dst = append(dst, e.Key...)
	dst = binary.AppendUvarint(dst, uint64(len(e.Tags)))
	for _, t := range e.Tags {
		dst = binary.AppendUvarint(dst, uint64(len(t)))
		dst = append(dst, t...)
	}
	dst = append(dst, e.Payload...)
	if len(dst)-body != bodyLen {
		invariantf("record body is %d bytes, sized as %d", len(dst)-body, bodyLen)
	}
	sealFrame(dst[hdr:])
	return dst
}

// appendRunFrame appends the frame of r to dst.
func appendRunFrame(dst []byte, r *Run) []byte {
	hdr := len(dst)
	dst = append(dst, emptyHeader[:]...)
	for _, v := range [...]uint64{r.Cut, r.CutStart, r.CutEnd, r.LocalStart, r.GlobalStart, r.Count} {
		dst = binary.AppendUvarint(dst, v)
	}
	sealFrame(dst[hdr:])
	return dst
}

// appendNoopFrame appends the frame of a run of count no-op indexes to dst.
func appendNoopFrame(dst []byte, count uint64) []byte {
	hdr := len(dst)
	dst = append(dst, emptyHeader[:]...)
	dst = binary.AppendUvarint(dst, count)
	frame := dst[hdr:]
	binary.LittleEndian.PutUint32(frame[0:4], noopFlag|uint32(len(frame)-frameHeaderBytes))
	binary.LittleEndian.PutUint32(frame[4:8], noopChecksum(frame[0:4], frame[frameHeaderBytes:]))
	sealHeader(frame)
	return dst
}

// noopFrameBytes is the size of the frame of a run of count no-op indexes.
func noopFrameBytes(count uint64) int { return frameHeaderBytes + uvarintLen(count) }

// noopChecksum is the checksum of a no-op frame: the CRC-32C of its length
// word (kind bit included) followed by its body. Covering the length word
// means a flipped kind bit fails the checksum instead of turning one kind
// of frame into the other.
func noopChecksum(lengthWord, body []byte) uint32 {
	return crc32.Update(crc32.Checksum(lengthWord, castagnoli), castagnoli, body)
}

// emptyHeader is the space a frame's header takes until sealed.
var emptyHeader [frameHeaderBytes]byte

// sealFrame fills in the header of a frame whose body is already in place.
func sealFrame(frame []byte) {
	body := frame[frameHeaderBytes:]
	binary.LittleEndian.PutUint32(frame[0:4], uint32(len(body)))
	binary.LittleEndian.PutUint32(frame[4:8], crc32.Checksum(body, castagnoli))
	sealHeader(frame)
}

// sealHeader writes the checksum of the header's length word, which must
// be in place.
func sealHeader(h []byte) {
	binary.LittleEndian.PutUint32(h[8:12], crc32.Checksum(h[0:4], castagnoli))
}

// checkHeader verifies the checksum of a header's length word: once it
// holds, the frame's length and kind are as written.
func checkHeader(h []byte) error {
	if sum, got := binary.LittleEndian.Uint32(h[8:12]), crc32.Checksum(h[0:4], castagnoli); got != sum {
		return corruptf("frame length checksum mismatch: stored %#08x, computed %#08x", sum, got)
	}
	return nil
}

// frameHeader verifies a frame's length word and checks the body length
// against [bodyMin, bodyMax]. A length out of bounds can only be a torn or
// corrupt header, so it is reported before anything tries to read that
// many bytes.
func frameHeader(h []byte, bodyMin, bodyMax int) (bodyLen int, sum uint32, err error) {
	if err := checkHeader(h); err != nil {
		return 0, 0, err
	}
	n := binary.LittleEndian.Uint32(h[0:4])
	if uint64(n) < uint64(bodyMin) || uint64(n) > uint64(bodyMax) {
		return 0, 0, corruptf("frame body length %d outside [%d, %d]", n, bodyMin, bodyMax)
	}
	return int(n), binary.LittleEndian.Uint32(h[4:8]), nil
}

// segmentFrameHeader verifies the length word of a segment frame, of
// either kind, and checks its body length against the bounds of that kind.
func segmentFrameHeader(h []byte) (kind frameKind, bodyLen int, err error) {
	if err := checkHeader(h); err != nil {
		return 0, 0, err
	}
	w := binary.LittleEndian.Uint32(h[0:4])
	if w&noopFlag != 0 {
		n := w &^ noopFlag
		if n < noopBodyBytesMin || n > noopBodyBytesMax {
			return 0, 0, corruptf("no-op frame body length %d outside [%d, %d]", n, noopBodyBytesMin, noopBodyBytesMax)
		}
		return kindNoop, int(n), nil
	}
	if w < recordBodyBytesMin || w > recordBytesMax {
		return 0, 0, corruptf("frame body length %d outside [%d, %d]", w, recordBodyBytesMin, recordBytesMax)
	}
	return kindRecord, int(w), nil
}

// checkSegmentBody checks the checksum of a segment frame of kind whose
// header is h.
func checkSegmentBody(kind frameKind, h, body []byte) error {
	sum := binary.LittleEndian.Uint32(h[4:8])
	if kind == kindNoop {
		if got := noopChecksum(h[0:4], body); got != sum {
			return corruptf("no-op frame checksum mismatch: stored %#08x, computed %#08x", sum, got)
		}
		return nil
	}
	return checkBody(body, sum)
}

func checkBody(body []byte, sum uint32) error {
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return corruptf("checksum mismatch: stored %#08x, computed %#08x", sum, got)
	}
	return nil
}

// bodyReader walks a body; the first failure sticks and later reads return
// zero values, so decoders check err once at the end.
type bodyReader struct {
	b   []byte
	err error
}

func (r *bodyReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = corruptf("bad uvarint for %s", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *bodyReader) bytes(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = corruptf("%s of %d bytes overruns the body (%d bytes left)", what, n, len(r.b))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// parseRecordBody validates a record body and, if e is not nil, decodes it
// into e. e.Payload aliases body; every other field is copied.
func parseRecordBody(body []byte, e *Entry) error {
	r := bodyReader{b: body}
	clientID := r.uvarint("client id")
	seq := r.uvarint("seq")
	key := r.bytes(r.uvarint("key length"), "key")
	ntags := r.uvarint("tag count")
	// Each tag takes at least its length byte, which bounds the allocation
	// below by the body size whatever the count says.
	if r.err == nil && ntags > uint64(len(r.b)) {
		return corruptf("tag count %d exceeds the %d bytes left", ntags, len(r.b))
	}
	var tags []string
	if e != nil && ntags > 0 {
		tags = make([]string, ntags)
	}
	for i := uint64(0); i < ntags && r.err == nil; i++ {
		t := r.bytes(r.uvarint("tag length"), "tag")
		if e != nil {
			tags[i] = string(t)
		}
	}
	if r.err != nil {
		return r.err
	}
	if e != nil {
		*e = Entry{ClientID: clientID, Seq: seq, Key: string(key), Tags: tags}
		if len(r.b) > 0 {
			e.Payload = r.b
		}
	}
	return nil
}

func parseRunBody(body []byte) (Run, error) {
	r := bodyReader{b: body}
	run := Run{
		Cut:         r.uvarint("cut"),
		CutStart:    r.uvarint("cut start"),
		CutEnd:      r.uvarint("cut end"),
		LocalStart:  r.uvarint("local start"),
		GlobalStart: r.uvarint("global start"),
		Count:       r.uvarint("count"),
	}
	if r.err != nil {
		return Run{}, r.err
	}
	if len(r.b) != 0 {
		return Run{}, corruptf("%d trailing bytes after run", len(r.b))
	}
	return run, nil
}

// parseNoopBody decodes a no-op body: the count, as a minimal uvarint
// greater than zero, and nothing else.
func parseNoopBody(body []byte) (uint64, error) {
	count, n := binary.Uvarint(body)
	switch {
	case n <= 0:
		return 0, corruptf("bad uvarint for no-op count")
	case n != len(body):
		return 0, corruptf("%d trailing bytes after no-op count", len(body)-n)
	case count == 0:
		return 0, corruptf("no-op run of zero indexes")
	case n != uvarintLen(count):
		return 0, corruptf("no-op count %d not minimally encoded", count)
	}
	return count, nil
}

// decodeFrame decodes frame, which must be exactly one segment frame: a
// record, or a no-op run returned as Entry{Noops: count}. For a record,
// e.Payload aliases frame.
func decodeFrame(frame []byte) (Entry, error) {
	if len(frame) < frameHeaderBytes {
		return Entry{}, corruptf("frame of %d bytes is shorter than its header", len(frame))
	}
	kind, n, err := segmentFrameHeader(frame)
	if err != nil {
		return Entry{}, err
	}
	body := frame[frameHeaderBytes:]
	if n != len(body) {
		return Entry{}, corruptf("frame says body is %d bytes, index says %d", n, len(body))
	}
	if err := checkSegmentBody(kind, frame, body); err != nil {
		return Entry{}, err
	}
	if kind == kindNoop {
		count, err := parseNoopBody(body)
		if err != nil {
			return Entry{}, err
		}
		return Entry{Noops: count}, nil
	}
	var e Entry
	if err := parseRecordBody(body, &e); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// checkSegmentFrame checks a whole segment frame, header h and body: length
// bounds, checksum, then decoding. It returns the local indexes the frame
// covers: one for a record, the count of a no-op run.
func checkSegmentFrame(h, body []byte) (uint64, error) {
	kind, n, err := segmentFrameHeader(h)
	if err != nil {
		return 0, err
	}
	if n != len(body) {
		return 0, corruptf("frame says body is %d bytes, got %d", n, len(body))
	}
	if err := checkSegmentBody(kind, h, body); err != nil {
		return 0, err
	}
	if kind == kindNoop {
		return parseNoopBody(body)
	}
	if err := parseRecordBody(body, nil); err != nil {
		return 0, err
	}
	return 1, nil
}

// checkRunFrame checks a whole positions-file frame, header h and body,
// and decodes its run.
func checkRunFrame(h, body []byte) (Run, error) {
	n, sum, err := frameHeader(h, runBodyBytesMin, runBodyBytesMax)
	if err != nil {
		return Run{}, err
	}
	if n != len(body) {
		return Run{}, corruptf("frame says body is %d bytes, got %d", n, len(body))
	}
	if err := checkBody(body, sum); err != nil {
		return Run{}, err
	}
	return parseRunBody(body)
}
