package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// # Rebase
//
// A store normally starts at local index 0. A copy of a shard whose other
// replicas trimmed their logs cannot get the trimmed entries back from
// anyone, so it starts where its source's log starts: Rebase empties the
// store and makes its next entry take local index base. Every index below
// base then counts as ordered and trimmed, as on a store Trim reached:
// Start and Ordered are base, reads below it fail with ErrTrimmed, and the
// first run Assign takes starts at base.
//
// The base survives restarts in a small file, "base" (one frame whose body
// is the base as a uvarint), written before anything of the old store goes:
// a crash midway leaves the base file beside what remains of the old store,
// which Open recognises (segments below the base, runs that end at or below
// it) and finishes removing.

const (
	baseName    = "base"
	baseTmpName = baseName + ".tmp" // see writeFileDurably
)

// Rebase drops every entry and position of the store and starts it empty
// at local index base, which must be at least Len (a store never takes an
// index back). Once it returns the rebase survives a crash. Other input
// changes nothing and fails with ErrInvalid.
func (s *Store) Rebase(base uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writableLocked(); err != nil {
		return fmt.Errorf("segment: rebase: %w", err)
	}
	if base < s.length {
		return invalidf("rebase at local index %d: below the length %d", base, s.length)
	}
	fail := func(err error) error {
		// What is on disk is unknown: refuse writes until a reopen
		// finishes the rebase.
		s.failed = err
		return fmt.Errorf("segment: rebase at %d: %w", base, err)
	}
	if err := writeBase(s.opts.Dir, base); err != nil {
		return fail(err)
	}
	// Hide every entry from readers before the files go, as Trim would
	// (they hold mu while they pread); the segments stay listed so that
	// the store keeps its shape should what follows fail.
	s.mu.Lock()
	s.start = s.length
	s.mu.Unlock()
	var errs []error
	for _, g := range s.segs {
		path := s.segmentPath(g.base)
		if err := g.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", path, err))
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s: %w", path, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	if err := truncateFile(s.pos, 0); err != nil {
		return fail(fmt.Errorf("truncate positions: %w", err))
	}
	g, err := s.createSegment(base)
	if err != nil {
		return fail(err)
	}
	s.posSize, s.posFileRuns, s.posDirty, s.activeDirty = 0, 0, false, false
	s.mu.Lock()
	s.segs = []*segment{g}
	s.start, s.length, s.ordered = base, base, base
	s.runs = nil
	s.damaged = nil
	s.base = base
	s.mu.Unlock()
	s.noteSynced(base)
	return nil
}

// writeBase makes base the store's base in dir, durably.
func writeBase(dir string, base uint64) error {
	frame := append([]byte(nil), emptyHeader[:]...)
	frame = binary.AppendUvarint(frame, base)
	sealFrame(frame)
	if err := writeFileDurably(dir, baseName, frame); err != nil {
		return fmt.Errorf("write base: %w", err)
	}
	return nil
}

// writeFileDurably makes data the contents of dir/name: written to a
// temporary file name.tmp, fsynced, renamed into place, and the directory
// fsynced, so a crash leaves the old file or the new one.
func writeFileDurably(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, filePerm)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = fsync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// readBase returns the base recorded in dir, 0 if none is.
func readBase(dir string) (uint64, error) {
	if err := os.Remove(filepath.Join(dir, baseTmpName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("remove stale %s: %w", baseTmpName, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, baseName))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read base: %w", err)
	}
	if len(b) < frameHeaderBytes {
		return 0, corruptf("base file holds %d bytes", len(b))
	}
	n, sum, err := frameHeader(b, 1, binary.MaxVarintLen64)
	if err == nil && n != len(b)-frameHeaderBytes {
		err = corruptf("base file holds a %d-byte body, its frame says %d", len(b)-frameHeaderBytes, n)
	}
	if err == nil {
		err = checkBody(b[frameHeaderBytes:], sum)
	}
	if err != nil {
		return 0, fmt.Errorf("base file: %w", err)
	}
	r := bodyReader{b: b[frameHeaderBytes:]}
	base := r.uvarint("base")
	if r.err == nil && len(r.b) != 0 {
		r.err = corruptf("%d trailing bytes after the base", len(r.b))
	}
	if r.err != nil {
		return 0, fmt.Errorf("base file: %w", r.err)
	}
	return base, nil
}

// finishRebase removes, on Open, what an interrupted Rebase left of the
// store before it: segment files below the base (bases, ascending) and
// runs that end at or below it. It returns the segment bases that stay.
func (s *Store) finishRebase(bases []uint64) ([]uint64, error) {
	k := 0
	for k < len(bases) && bases[k] < s.base {
		path := s.segmentPath(bases[k])
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove %s, left by an interrupted rebase: %w", path, err)
		}
		k++
	}
	if k > 0 {
		s.logger().Warn("segment: finished an interrupted rebase", "dir", s.opts.Dir, "base", s.base, "removed_segments", k)
		if err := syncDir(s.opts.Dir); err != nil {
			return nil, err
		}
	}
	return bases[k:], nil
}
