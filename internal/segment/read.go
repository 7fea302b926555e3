package segment

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// Read returns record local. It fails with ErrTrimmed below Start, with
// ErrOutOfRange at or after Len, and with ErrCorrupt if the stored frame
// does not check out.
func (s *Store) Read(local uint64) (Entry, error) {
	frame, err := s.readFrame(local)
	if err != nil {
		return Entry{}, err
	}
	e, err := decodeRecordFrame(frame)
	if err != nil {
		return Entry{}, fmt.Errorf("segment: read record %d: %w", local, err)
	}
	return e, nil
}

// readFrame preads the frame of record local. mu is held only for the
// pread itself, which keeps Trim and Close from closing the file under it.
func (s *Store) readFrame(local uint64) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.readableRLocked(local); err != nil {
		return nil, err
	}
	g := s.segmentOfRLocked(local)
	i := local - g.base
	off, end := int64(g.offsets[i]), g.size
	if i+1 < uint64(len(g.offsets)) {
		end = int64(g.offsets[i+1])
	}
	frame := make([]byte, end-off)
	if _, err := g.f.ReadAt(frame, off); err != nil {
		return nil, fmt.Errorf("segment: read record %d from %s at offset %d: %w", local, s.segmentPath(g.base), off, err)
	}
	return frame, nil
}

func (s *Store) readableRLocked(local uint64) error {
	switch {
	case s.closed:
		return ErrClosed
	case local < s.start:
		return fmt.Errorf("read record %d, first stored is %d: %w", local, s.start, ErrTrimmed)
	case local >= s.length:
		return fmt.Errorf("read record %d, next to append is %d: %w", local, s.length, ErrOutOfRange)
	}
	return nil
}

// segmentOfRLocked returns the segment holding local, which must be in
// [start, length).
func (s *Store) segmentOfRLocked(local uint64) *segment {
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base > local }) - 1
	if i < 0 || local >= s.segs[i].end() {
		invariantf("record %d not in any segment", local)
	}
	return s.segs[i]
}

// Scan calls fn for each record from max(from, Start) up to the Len at the
// time of the call, in order, until fn returns false. Records appended
// during the scan are not visited. It reads up to scanChunkBytesMax per
// pread and holds no lock while fn runs, so fn may call other methods of
// the Store. A concurrent Trim past the scan's position ends it with
// ErrTrimmed.
func (s *Store) Scan(from uint64, fn func(local uint64, e Entry) bool) error {
	s.mu.RLock()
	closed, next, limit := s.closed, max(from, s.start), s.length
	s.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	var buf []byte
	for next < limit {
		var (
			n   uint64
			err error
		)
		buf, n, err = s.readChunk(next, limit, buf)
		if err != nil {
			return fmt.Errorf("segment: scan: %w", err)
		}
		rest := buf
		for ; n > 0; n-- {
			e, size, err := decodeRecordPrefix(rest)
			if err != nil {
				return fmt.Errorf("segment: scan record %d: %w", next, err)
			}
			// buf is reused for the next chunk, so the payload must not
			// alias it.
			if e.Payload != nil {
				e.Payload = append([]byte(nil), e.Payload...)
			}
			rest = rest[size:]
			if !fn(next, e) {
				return nil
			}
			next++
		}
		if len(rest) != 0 {
			return fmt.Errorf("segment: scan before record %d: %w", next, corruptf("%d bytes left over after the chunk's frames", len(rest)))
		}
	}
	return nil
}

// readChunk preads into buf the frames of consecutive records from next,
// stopping before limit, at the end of next's segment, or at
// scanChunkBytesMax bytes (but always at least one record), and returns
// how many it read.
func (s *Store) readChunk(next, limit uint64, buf []byte) ([]byte, uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.readableRLocked(next); err != nil {
		return buf, 0, err
	}
	g := s.segmentOfRLocked(next)
	end := func(k uint64) int64 { // where record g.base+k-1 ends
		if k < uint64(len(g.offsets)) {
			return int64(g.offsets[k])
		}
		return g.size
	}
	i := next - g.base
	off := int64(g.offsets[i])
	j := i + 1 // records [i, j) are read
	for j < uint64(len(g.offsets)) && g.base+j < limit && end(j+1)-off <= scanChunkBytesMax {
		j++
	}
	n := end(j) - off
	if int64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := g.f.ReadAt(buf, off); err != nil {
		return buf, 0, fmt.Errorf("read records [%d, %d) from %s at offset %d: %w", next, g.base+j, s.segmentPath(g.base), off, err)
	}
	return buf, j - i, nil
}

// decodeRecordPrefix decodes the record frame at the start of b and
// returns it with the frame's size. e.Payload aliases b.
func decodeRecordPrefix(b []byte) (Entry, int, error) {
	if len(b) < frameHeaderBytes {
		return Entry{}, 0, corruptf("%d bytes left, less than a frame header", len(b))
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n > len(b)-frameHeaderBytes {
		return Entry{}, 0, corruptf("frame body of %d bytes overruns the %d bytes read", n, len(b)-frameHeaderBytes)
	}
	e, err := decodeRecordFrame(b[:frameHeaderBytes+n])
	return e, frameHeaderBytes + n, err
}
