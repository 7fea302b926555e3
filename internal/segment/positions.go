package segment

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// checkRun checks r on its own and against the run before it, if any.
// Global positions must grow with local indexes for Locate's binary search,
// and cuts are disjoint ranges committed in order.
func checkRun(r, prev *Run) error {
	switch {
	case r.Count == 0:
		return invalidf("run %+v is empty", *r)
	case r.LocalStart+r.Count < r.LocalStart || r.GlobalStart+r.Count < r.GlobalStart:
		return invalidf("run %+v overflows", *r)
	case r.CutStart > r.GlobalStart || r.GlobalStart+r.Count > r.CutEnd:
		return invalidf("run %+v lies outside its cut's range", *r)
	case prev == nil:
		return nil
	case r.Cut <= prev.Cut:
		return invalidf("run %+v: cut %d does not follow cut %d", *r, r.Cut, prev.Cut)
	case r.CutStart < prev.CutEnd:
		return invalidf("run %+v: cut starts before the previous cut's end %d", *r, prev.CutEnd)
	case r.GlobalStart < prev.GlobalStart+prev.Count:
		return invalidf("run %+v: global start is below the previous run's end %d", *r, prev.GlobalStart+prev.Count)
	}
	return nil
}

// Assign records that r's local indexes (records or no-ops alike) hold r's
// global positions. r must start at Ordered(), be non-empty, stay below
// Len(), and follow the last run in Cut and GlobalStart (strictly
// increasing, without overlap); a violation changes nothing and returns an
// ErrInvalid. The run is appended to the positions file and synced like
// records are.
func (s *Store) Assign(r Run) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writableLocked(); err != nil {
		return fmt.Errorf("segment: assign: %w", err)
	}
	var prev *Run
	if len(s.runs) > 0 {
		prev = &s.runs[len(s.runs)-1]
	}
	if r.LocalStart != s.ordered {
		return fmt.Errorf("segment: assign: %w", invalidf("run %+v does not start at the first unordered record %d", r, s.ordered))
	}
	if err := checkRun(&r, prev); err != nil {
		return fmt.Errorf("segment: assign: %w", err)
	}
	if r.LocalStart+r.Count > s.length {
		return fmt.Errorf("segment: assign: %w", invalidf("run %+v reaches past the last record %d", r, s.length))
	}

	frame := appendRunFrame(s.buf[:0], &r)
	s.buf = frame
	if _, err := s.pos.WriteAt(frame, s.posSize); err != nil {
		s.failed = err
		if terr := s.pos.Truncate(s.posSize); terr != nil {
			err = fmt.Errorf("%w (and truncating the partial write failed: %v)", err, terr)
		}
		return fmt.Errorf("segment: assign: write positions: %w", err)
	}
	if s.opts.Sync == SyncAlways {
		if err := fsync(s.pos); err != nil {
			s.failed = err
			return fmt.Errorf("segment: assign: sync positions: %w", err)
		}
	} else {
		s.posDirty = true
	}
	s.posSize += int64(len(frame))
	s.posFileRuns++

	s.mu.Lock()
	s.runs = append(s.runs, r)
	s.ordered = r.LocalStart + r.Count
	s.mu.Unlock()
	return nil
}

// Runs returns a copy of the retained runs with CutEnd > fromGlobal, in
// ascending order. The caller owns the slice.
func (s *Store) Runs(fromGlobal uint64) []Run {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i].CutEnd > fromGlobal })
	if i == len(s.runs) {
		return nil
	}
	return append([]Run(nil), s.runs[i:]...)
}

// Locate returns the local index holding global position global, if a
// retained run covers it. A run that straddles Start still maps its
// trimmed records; reading them gives ErrTrimmed.
func (s *Store) Locate(global uint64) (local uint64, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i].GlobalStart > global }) - 1
	if i < 0 {
		return 0, false
	}
	r := &s.runs[i]
	if d := global - r.GlobalStart; d < r.Count {
		return r.LocalStart + d, true
	}
	return 0, false
}

// GlobalOf returns the global position of local index local (a record or
// a no-op), if a retained run covers it (see Locate about trimmed records).
func (s *Store) GlobalOf(local uint64) (global uint64, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.globalOfRLocked(local)
}

func (s *Store) globalOfRLocked(local uint64) (uint64, bool) {
	i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i].LocalStart > local }) - 1
	if i < 0 {
		return 0, false
	}
	r := &s.runs[i]
	if d := local - r.LocalStart; d < r.Count {
		return r.GlobalStart + d, true
	}
	return 0, false
}

// rewritePositionsLocked replaces the positions file with one holding just
// runs: written to a temporary file, fsynced, then renamed over the old one,
// so a crash leaves either the old file or the new one, both whole.
func (s *Store) rewritePositionsLocked(runs []Run) error {
	tmp := filepath.Join(s.opts.Dir, positionsTmpName)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, filePerm)
	if err != nil {
		return fmt.Errorf("rewrite positions: %w", err)
	}
	var buf []byte
	for i := range runs {
		buf = appendRunFrame(buf, &runs[i])
	}
	fail := func(err error) error {
		_ = f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("rewrite positions: %w", err)
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		return fail(err)
	}
	if err := fsync(f); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.opts.Dir, positionsName)); err != nil {
		return fail(err)
	}
	// From here on f is the positions file.
	old := s.pos
	s.pos, s.posSize, s.posFileRuns, s.posDirty = f, int64(len(buf)), len(runs), false
	if err := old.Close(); err != nil {
		return fmt.Errorf("rewrite positions: close old file: %w", err)
	}
	return syncDir(s.opts.Dir)
}
