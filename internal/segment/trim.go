package segment

import (
	"errors"
	"fmt"
	"os"
)

// Trim deletes, oldest first, the segment files all of whose local indexes
// (records and no-op runs) are ordered with global positions below global,
// except the active segment, which is never deleted. Start advances to the
// first remaining index; entries of a segment that is only partly below
// global stay readable (a no-op run is never split: it goes with its
// segment).
// Runs wholly below the new Start are dropped, except the last run, which
// is kept so that Ordered and the checks of Assign survive restarts.
//
// Trim fsyncs everything first: a run that reaches into records lost in a
// crash is dropped by Open, and that must never uncover records that were
// already deleted.
func (s *Store) Trim(global uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writableLocked(); err != nil {
		return fmt.Errorf("segment: trim: %w", err)
	}
	if err := s.syncLocked(); err != nil {
		return fmt.Errorf("segment: trim: %w", err)
	}

	k := 0 // segs[:k] go
	for ; k < len(s.segs)-1; k++ {
		g := s.segs[k]
		if len(g.offsets) == 0 {
			invariantf("non-final segment %d is empty", g.base)
		}
		if g.end() > s.ordered {
			break
		}
		last, ok := s.globalOfRLocked(g.end() - 1)
		if !ok {
			invariantf("ordered record %d has no global position", g.end()-1)
		}
		if last >= global {
			break
		}
	}
	start := s.segs[k].base
	keep := 0 // runs[keep:] stay
	for keep < len(s.runs)-1 && s.runs[keep].LocalStart+s.runs[keep].Count <= start {
		keep++
	}
	if k == 0 && keep == 0 && s.posFileRuns == len(s.runs) {
		return nil
	}

	gone := s.segs[:k]
	s.mu.Lock()
	s.segs = append([]*segment(nil), s.segs[k:]...)
	s.runs = append([]Run(nil), s.runs[keep:]...)
	s.start = start
	s.mu.Unlock()
	// Readers hold mu while they pread, and the new segs hides these files,
	// so nobody reads them any more.
	var errs []error
	for _, g := range gone {
		path := s.segmentPath(g.base)
		if err := g.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", path, err))
		}
		// Oldest first, so a crash midway leaves a contiguous suffix.
		if err := os.Remove(path); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", path, err))
		}
	}
	if len(gone) > 0 {
		errs = append(errs, syncDir(s.opts.Dir))
	}
	if err := errors.Join(errs...); err != nil {
		// A segment left behind reappears on reopen, and then the positions
		// file must still describe it: stop here, before the rewrite, and
		// refuse writes until a reopen has brought disk and memory together.
		s.failed = err
		return fmt.Errorf("segment: trim: %w", err)
	}
	// Only after the deletions are durable may the runs describing them go:
	// Open needs runs for every record still on disk below Ordered.
	if s.posFileRuns > len(s.runs) {
		if err := s.rewritePositionsLocked(s.runs); err != nil {
			return fmt.Errorf("segment: trim: %w", err)
		}
	}
	return nil
}
