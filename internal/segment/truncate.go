package segment

import (
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/augur-log/augur/internal/synctrace"
)

// Truncate drops the local indexes from from on. It serves a copy whose
// tail its shard may have replaced with other entries: such a tail is
// never ordered here, so from lies in [Ordered, Len] and the runs stay as
// they are. A no-op run that from cuts keeps its indexes below from (its
// frame is rewritten shorter). Later segment files are removed newest
// first and the cut segment is truncated and fsynced, so a crash midway
// leaves a prefix of the old store and never a hole. Once it returns the
// truncation survives a crash, and SyncedLen is from. Other input changes
// nothing and fails with ErrInvalid.
func (s *Store) Truncate(from uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writableLocked(); err != nil {
		return fmt.Errorf("segment: truncate: %w", err)
	}
	if from < s.ordered || from < s.start || from > s.length {
		return invalidf("truncate at local index %d: outside [%d, %d]", from, max(s.ordered, s.start), s.length)
	}
	if from == s.length {
		return nil
	}
	if err := s.syncLocked(); err != nil {
		return fmt.Errorf("segment: truncate: %w", err)
	}
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].end() > from })
	g := s.segs[i]
	k, first, _ := g.locate(from)
	cut := int64(g.offsets[k])
	gone := s.segs[i+1:]

	// Hide the dropped frames from readers before their bytes go.
	s.mu.Lock()
	s.segs = s.segs[: i+1 : i+1]
	g.offsets = g.offsets[:k]
	g.noops = g.noops[:g.firstNoopFrom(k)]
	g.indexes = first - g.base
	g.size = cut
	s.length = first
	s.mu.Unlock()

	var errs []error
	for j := len(gone) - 1; j >= 0; j-- {
		path := s.segmentPath(gone[j].base)
		if err := gone[j].f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", path, err))
		}
		if err := os.Remove(path); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", path, err))
		}
	}
	if len(gone) > 0 {
		errs = append(errs, syncDir(s.opts.Dir))
	}
	var fill []byte
	if first < from {
		fill = appendNoopFrame(nil, from-first)
	}
	if err := errors.Join(errs...); err == nil {
		if err := g.f.Truncate(cut); err != nil {
			errs = append(errs, fmt.Errorf("truncate %s: %w", s.segmentPath(g.base), err))
		} else if _, err := g.f.WriteAt(fill, cut); len(fill) > 0 && err != nil {
			errs = append(errs, fmt.Errorf("write %s: %w", s.segmentPath(g.base), err))
		} else if err := synctrace.Sync(g.f); err != nil {
			errs = append(errs, fmt.Errorf("sync %s: %w", s.segmentPath(g.base), err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		// What is on disk is unknown: refuse writes until a reopen
		// brings disk and memory together.
		s.failed = err
		return fmt.Errorf("segment: truncate: %w", err)
	}
	s.activeDirty = false

	s.mu.Lock()
	if len(fill) > 0 {
		g.offsets = append(g.offsets, uint32(cut))
		g.noops = append(g.noops, noopFrame{frame: uint32(k), first: first, end: from})
		g.indexes = from - g.base
		g.size = cut + int64(len(fill))
	}
	s.length = from
	for j, d := range s.damaged {
		if d.End > from {
			s.damaged = s.damaged[:j]
			if d.First < from {
				d.End = from
				s.damaged = append(s.damaged, d)
			}
			break
		}
	}
	s.mu.Unlock()
	s.synced.Store(from)
	return nil
}
