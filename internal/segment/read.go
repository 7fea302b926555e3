package segment

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// Read returns the entry at local index local: a record, or, inside a run
// of no-ops, Entry{Noops: k} where k counts the no-op indexes from local to
// the end of the stored run (so local+k is the next index past it). It
// fails with ErrTrimmed below Start, with ErrOutOfRange at or after Len,
// with a *DamagedError (ErrDamaged) inside a range Open found damaged, and
// with ErrCorrupt if the stored frame does not check out.
func (s *Store) Read(local uint64) (Entry, error) {
	frame, first, end, err := s.readFrame(local)
	if err != nil {
		return Entry{}, err
	}
	e, err := decodeFrame(frame)
	if err == nil {
		err = checkCovers(&e, first, end)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("segment: read record %d: %w", local, err)
	}
	if e.isNoop() {
		e.Noops = end - local
	}
	return e, nil
}

// checkCovers checks that the decoded frame e covers as many indexes as the
// in-memory index says its frame covers, [first, end).
func checkCovers(e *Entry, first, end uint64) error {
	n := uint64(1)
	if e.isNoop() {
		n = e.Noops
	}
	if n != end-first {
		return corruptf("frame covers %d indexes, the index says %d", n, end-first)
	}
	return nil
}

// readFrame preads the frame holding local index local, and returns it with
// the local indexes [first, end) the index says it covers. mu is held only
// for the pread itself, which keeps Trim and Close from closing the file
// under it.
func (s *Store) readFrame(local uint64) (frame []byte, first, end uint64, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.readableRLocked(local); err != nil {
		return nil, 0, 0, err
	}
	if err := s.checkDamagedRLocked(local); err != nil {
		return nil, 0, 0, err
	}
	g := s.segmentOfRLocked(local)
	k, first, end := g.locate(local)
	off := int64(g.offsets[k])
	frame = make([]byte, g.frameEnd(k)-off)
	if _, err := g.f.ReadAt(frame, off); err != nil {
		return nil, 0, 0, fmt.Errorf("segment: read record %d from %s at offset %d: %w", local, s.segmentPath(g.base), off, err)
	}
	return frame, first, end, nil
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

// Scan calls fn for each stored entry from max(from, Start) up to the Len
// at the time of the call, in order, until fn returns false: once per
// record and once per no-op run, not once per no-op index. local is the
// first index the call covers; a run comes as Entry{Noops: k} covering
// [local, local+k), and if the scan starts inside a run, the first call
// covers the rest of it. Entries appended during the scan are not visited.
// It reads up to scanChunkBytesMax per pread and holds no lock while fn
// runs, so fn may call other methods of the Store. A concurrent Trim past
// the scan's position ends it with ErrTrimmed. A damaged range (see
// Damaged) ends it with a *DamagedError once everything before it has been
// visited; a caller that wants to skip it scans again from its End.
func (s *Store) Scan(from uint64, fn func(local uint64, e Entry) bool) error {
	s.mu.RLock()
	closed, next, limit := s.closed, max(from, s.start), s.length
	s.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	var c chunk
	for next < limit {
		if err := s.readChunk(next, limit, &c); err != nil {
			return fmt.Errorf("segment: scan: %w", err)
		}
		rest := c.buf
		at := c.first // the first index of the frame at the start of rest
		for n := c.frames; n > 0; n-- {
			e, size, err := decodeFramePrefix(rest)
			if err != nil {
				return fmt.Errorf("segment: scan record %d: %w", at, err)
			}
			rest = rest[size:]
			covers := uint64(1)
			if e.isNoop() {
				covers = e.Noops
			}
			if covers > c.end-at {
				return fmt.Errorf("segment: scan record %d: %w", at, corruptf("frame covers %d indexes, past the %d the index says are left in the chunk", covers, c.end-at))
			}
			at += covers
			if e.isNoop() {
				// Only the first frame can start before next.
				e.Noops = at - next
			} else if e.Payload != nil {
				// buf is reused for the next chunk, so the payload must
				// not alias it.
				e.Payload = append([]byte(nil), e.Payload...)
			}
			if !fn(next, e) {
				return nil
			}
			next = at
		}
		if len(rest) != 0 || at != c.end {
			return fmt.Errorf("segment: scan before record %d: %w", next, corruptf("chunk frames cover %d indexes and leave %d bytes, the index says %d and 0", at-c.first, len(rest), c.end-c.first))
		}
	}
	return nil
}

// chunk is what one pread of Scan returns: frames consecutive frames in
// buf, covering the local indexes [first, end).
type chunk struct {
	buf        []byte
	frames     int
	first, end uint64
}

// readChunk preads into c the consecutive frames from the one holding
// next, stopping before the index limit, at the end of next's segment, or
// at scanChunkBytesMax bytes (but always at least one frame). c.buf is
// reused if large enough.
func (s *Store) readChunk(next, limit uint64, c *chunk) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.readableRLocked(next); err != nil {
		return err
	}
	// The chunk stops before the first damaged range after next.
	if i := s.damagedFromRLocked(next); i < len(s.damaged) {
		if s.damaged[i].First <= next {
			return &DamagedError{Local: next, Range: s.damaged[i]}
		}
		limit = min(limit, s.damaged[i].First)
	}
	g := s.segmentOfRLocked(next)
	k, first, at := g.locate(next)
	// Walk frames k+1, ... with at the first index of frame j and nj the
	// position in g.noops of the first no-op frame numbered j or later.
	nj := g.firstNoopFrom(k + 1)
	off := int64(g.offsets[k])
	j := k + 1 // frames [k, j) are read
	for j < len(g.offsets) && at < limit && g.frameEnd(j)-off <= scanChunkBytesMax {
		if nj < len(g.noops) && int(g.noops[nj].frame) == j {
			at = g.noops[nj].end
			nj++
		} else {
			at++
		}
		j++
	}
	n := g.frameEnd(j-1) - off
	if int64(cap(c.buf)) < n {
		c.buf = make([]byte, n)
	}
	c.buf = c.buf[:n]
	c.frames, c.first, c.end = j-k, first, at
	if _, err := g.f.ReadAt(c.buf, off); err != nil {
		return fmt.Errorf("read records [%d, %d) from %s at offset %d: %w", first, at, s.segmentPath(g.base), off, err)
	}
	return nil
}

// decodeFramePrefix decodes the frame at the start of b and returns it with
// the frame's size. A record's e.Payload aliases b.
func decodeFramePrefix(b []byte) (Entry, int, error) {
	if len(b) < frameHeaderBytes {
		return Entry{}, 0, corruptf("%d bytes left, less than a frame header", len(b))
	}
	n := int(binary.LittleEndian.Uint32(b) &^ noopFlag)
	if n > len(b)-frameHeaderBytes {
		return Entry{}, 0, corruptf("frame body of %d bytes overruns the %d bytes read", n, len(b)-frameHeaderBytes)
	}
	e, err := decodeFrame(b[:frameHeaderBytes+n])
	return e, frameHeaderBytes + n, err
}
