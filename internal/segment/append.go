package segment

import (
	"fmt"
)

// Append stores entries as consecutive records and returns the local index
// of entries[0]. All frames go to the file in one write. With SyncAlways
// the records are fsynced before Append returns and before readers can see
// them; otherwise readers see them as soon as they are written.
//
// A batch is never split across segments: rollover happens before a batch,
// once the active segment has reached SegmentBytesMax.
func (s *Store) Append(entries []Entry) (first uint64, err error) {
	if len(entries) == 0 {
		return 0, invalidf("append: empty batch")
	}
	total := 0
	for i := range entries {
		n := recordBodyLen(&entries[i])
		if n > recordBytesMax {
			return 0, invalidf("append: record %d of the batch is %d bytes, more than %d", i, n, recordBytesMax)
		}
		total += frameHeaderBytes + n
		if total > appendBytesMax {
			return 0, invalidf("append: batch of %d records exceeds %d bytes", len(entries), appendBytesMax)
		}
	}

	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writableLocked(); err != nil {
		return 0, fmt.Errorf("append: %w", err)
	}
	g := s.active()
	if g.size >= s.opts.SegmentBytesMax && len(g.offsets) > 0 {
		if g, err = s.rollLocked(); err != nil {
			return 0, fmt.Errorf("append: %w", err)
		}
	}

	buf, offs := s.buf[:0], s.offBuf[:0]
	for i := range entries {
		offs = append(offs, uint32(g.size+int64(len(buf))))
		buf = appendRecordFrame(buf, &entries[i], recordBodyLen(&entries[i]))
	}
	if len(buf) != total {
		invariantf("encoded batch is %d bytes, sized as %d", len(buf), total)
	}
	if g.size+int64(len(buf)) > segmentFileBytesMax {
		invariantf("segment %d would grow to %d bytes", g.base, g.size+int64(len(buf)))
	}
	if cap(buf) <= appendBufRetainBytesMax {
		s.buf, s.offBuf = buf, offs
	}

	if _, err := g.f.WriteAt(buf, g.size); err != nil {
		return 0, fmt.Errorf("append: write %s: %w", s.segmentPath(g.base), s.failLocked(g, err))
	}
	if s.opts.Sync == SyncAlways {
		if err := g.f.Sync(); err != nil {
			// After a failed fsync the page cache may already have dropped
			// the dirty pages, so what is on disk is unknown.
			s.failed = err
			return 0, fmt.Errorf("append: sync %s: %w", s.segmentPath(g.base), err)
		}
	} else {
		s.activeDirty = true
	}

	s.mu.Lock()
	first = s.length
	g.offsets = append(g.offsets, offs...)
	g.size += int64(len(buf))
	s.length += uint64(len(entries))
	s.mu.Unlock()
	return first, nil
}

// failLocked handles a failed write to g: it cuts off any partial frame so
// the file ends at the last published record, and makes the store refuse
// further writes either way, since the cause (full disk, I/O error) is
// unlikely to go away by itself.
func (s *Store) failLocked(g *segment, err error) error {
	s.failed = err
	if terr := g.f.Truncate(g.size); terr != nil {
		return fmt.Errorf("%w (and truncating the partial write failed: %v)", err, terr)
	}
	return err
}

// rollLocked fsyncs the active segment and starts a new one. The fsync is
// done whatever the SyncPolicy: Open treats damage in a non-final segment as
// corruption, which is only sound if no crash can tear one.
func (s *Store) rollLocked() (*segment, error) {
	old := s.active()
	if s.activeDirty {
		if err := old.f.Sync(); err != nil {
			s.failed = err
			return nil, fmt.Errorf("sync %s before rollover: %w", s.segmentPath(old.base), err)
		}
		s.activeDirty = false
	}
	g, err := s.createSegment(s.length)
	if err != nil {
		s.failed = err
		return nil, err
	}
	s.mu.Lock()
	s.segs = append(s.segs, g)
	s.mu.Unlock()
	return g, nil
}
