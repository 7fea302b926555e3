package segment

import "fmt"

// Append stores entries as consecutive local indexes and returns the local
// index of entries[0]. A record takes one index. An entry with Noops > 0 is
// a run of that many no-op indexes and must carry nothing else; consecutive
// no-op entries of the batch are coalesced and stored as one no-op frame,
// so Read and Scan return them as one run. (Runs from separate Append calls
// stay separate frames: callers that want one frame append the whole run
// at once.) Len advances by the number of indexes covered.
//
// All frames go to the file in one write. With SyncAlways the frames are
// fsynced before Append returns and before readers can see them; otherwise
// readers see them as soon as they are written.
//
// A batch is never split across segments: rollover happens before a batch,
// once the active segment has reached SegmentBytesMax. So a no-op run lives
// wholly in the segment of its frame.
func (s *Store) Append(entries []Entry) (first uint64, err error) {
	if len(entries) == 0 {
		return 0, invalidf("append: empty batch")
	}
	total := 0           // bytes of the encoded frames
	indexes := uint64(0) // local indexes the batch covers
	for i := 0; i < len(entries); {
		if entries[i].isNoop() {
			j, count := i, uint64(0)
			for ; j < len(entries) && entries[j].isNoop(); j++ {
				if entries[j].carriesData() {
					return 0, invalidf("append: entry %d of the batch is a run of %d no-ops that carries data", j, entries[j].Noops)
				}
				if count+entries[j].Noops < count {
					return 0, invalidf("append: no-op runs of the batch overflow the local index space")
				}
				count += entries[j].Noops
			}
			total += noopFrameBytes(count)
			if indexes+count < indexes {
				return 0, invalidf("append: batch overflows the local index space")
			}
			indexes += count
			i = j
		} else {
			n := recordBodyLen(&entries[i])
			if n > recordBytesMax {
				return 0, invalidf("append: record %d of the batch is %d bytes, more than %d", i, n, recordBytesMax)
			}
			total += frameHeaderBytes + n
			indexes++
			i++
		}
		if total > appendBytesMax {
			return 0, invalidf("append: batch of %d entries exceeds %d bytes", len(entries), appendBytesMax)
		}
	}

	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writableLocked(); err != nil {
		return 0, fmt.Errorf("append: %w", err)
	}
	if s.length+indexes < s.length {
		return 0, invalidf("append: %d more indexes after %d overflow the local index space", indexes, s.length)
	}
	g := s.active()
	if g.size >= s.opts.SegmentBytesMax && len(g.offsets) > 0 {
		if g, err = s.rollLocked(); err != nil {
			return 0, fmt.Errorf("append: %w", err)
		}
	}

	buf, offs, noops := s.buf[:0], s.offBuf[:0], s.noopBuf[:0]
	next := s.length // the local index of the next frame
	for i := 0; i < len(entries); {
		offs = append(offs, uint32(g.size+int64(len(buf))))
		if !entries[i].isNoop() {
			buf = appendRecordFrame(buf, &entries[i], recordBodyLen(&entries[i]))
			next++
			i++
			continue
		}
		count := uint64(0)
		for ; i < len(entries) && entries[i].isNoop(); i++ {
			count += entries[i].Noops
		}
		buf = appendNoopFrame(buf, count)
		noops = append(noops, noopFrame{frame: uint32(len(g.offsets) + len(offs) - 1), first: next, end: next + count})
		next += count
	}
	if len(buf) != total || next-s.length != indexes {
		invariantf("encoded batch is %d bytes covering %d indexes, sized as %d bytes and %d indexes", len(buf), next-s.length, total, indexes)
	}
	if g.size+int64(len(buf)) > segmentFileBytesMax {
		invariantf("segment %d would grow to %d bytes", g.base, g.size+int64(len(buf)))
	}
	if cap(buf) <= appendBufRetainBytesMax {
		s.buf, s.offBuf, s.noopBuf = buf, offs, noops
	}

	if _, err := g.f.WriteAt(buf, g.size); err != nil {
		return 0, fmt.Errorf("append: write %s: %w", s.segmentPath(g.base), s.failLocked(g, err))
	}
	if s.opts.Sync == SyncAlways {
		if err := fsync(g.f); err != nil {
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
	g.noops = append(g.noops, noops...)
	g.indexes += indexes
	g.size += int64(len(buf))
	s.length += indexes
	s.mu.Unlock()
	if s.opts.Sync == SyncAlways {
		s.noteSynced(s.length)
	}
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
// corruption, which is only sound if no crash can tear one. It is done
// even when nothing is dirty: a Sync that took the dirty segment may still
// be fsyncing it, and noteSynced below must not count those records first.
func (s *Store) rollLocked() (*segment, error) {
	old := s.active()
	if err := fsync(old.f); err != nil {
		s.failed = err
		return nil, fmt.Errorf("sync %s before rollover: %w", s.segmentPath(old.base), err)
	}
	s.activeDirty = false
	s.noteSynced(s.length)
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
