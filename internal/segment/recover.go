package segment

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Open opens the store in opts.Dir, creating it if missing, and recovers it:
// every segment is scanned and every frame checked; a torn tail of the last
// segment or of the positions file (a bad final frame with no whole frame
// after it) is truncated away with a warning; runs that describe records
// lost that way are dropped. Damage anywhere else keeps every record at its
// local index and is listed by Damaged, or, where the number of records it
// held cannot be known, fails Open with ErrCorrupt. See damage.go.
func Open(opts Options) (*Store, error) {
	opts, err := opts.validate()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, dirPerm); err != nil {
		return nil, fmt.Errorf("segment: open %s: %w", opts.Dir, err)
	}
	s := &Store{opts: opts}
	if err := s.recover(); err != nil {
		_ = s.closeFiles() // the recovery error is the one worth reporting
		return nil, fmt.Errorf("segment: open %s: %w", opts.Dir, err)
	}
	return s, nil
}

func (s *Store) recover() error {
	if err := checkFormat(s.opts.Dir); err != nil {
		return err
	}
	// A leftover temporary file is a rewrite that never got renamed into
	// place; the positions file it was meant to replace is still whole.
	tmp := filepath.Join(s.opts.Dir, positionsTmpName)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", tmp, err)
	}
	if err := removeRepairLeftovers(s.opts.Dir); err != nil {
		return err
	}
	base, err := readBase(s.opts.Dir)
	if err != nil {
		return err
	}
	s.base = base
	if err := s.recoverSegments(); err != nil {
		return err
	}
	if err := s.recoverPositions(); err != nil {
		return err
	}
	// The positions file may be new, and a file's fsync does not cover its
	// directory entry.
	return syncDir(s.opts.Dir)
}

func (s *Store) segmentPath(base uint64) string {
	return filepath.Join(s.opts.Dir, fmt.Sprintf("%020d%s", base, segmentSuffix))
}

// listSegments returns the bases of the segment files in dir, ascending.
func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var bases []uint64
	for _, ent := range ents {
		name := ent.Name()
		stem, ok := strings.CutSuffix(name, segmentSuffix)
		if !ok {
			continue
		}
		base, err := strconv.ParseUint(stem, 10, 64)
		if err != nil || fmt.Sprintf("%020d", base) != stem {
			return nil, corruptf("unexpected segment file name %q", name)
		}
		// ReadDir sorts by name, and zero padding makes that numeric order.
		bases = append(bases, base)
	}
	return bases, nil
}

func (s *Store) recoverSegments() error {
	bases, err := listSegments(s.opts.Dir)
	if err != nil {
		return err
	}
	if bases, err = s.finishRebase(bases); err != nil {
		return err
	}
	// One scanner serves every segment, so its read-ahead buffer is
	// allocated once rather than per file.
	sc := &frameScanner{}
	for i, base := range bases {
		path := s.segmentPath(base)
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("open segment: %w", err)
		}
		g := &segment{base: base, f: f}
		s.segs = append(s.segs, g)
		info, err := f.Stat()
		if err != nil {
			return fmt.Errorf("stat segment %s: %w", path, err)
		}
		if info.Size() > segmentFileBytesMax {
			// Offsets are uint32 and Append never grows a segment past this.
			return corruptf("segment %s is %d bytes, more than %d", path, info.Size(), int64(segmentFileBytesMax))
		}
		good, problem, err := scanSegment(sc, g, info.Size())
		if err != nil {
			return fmt.Errorf("scan segment %s: %w", path, err)
		}
		g.size = good
		if problem != nil {
			// A successor's first local index says how many this segment
			// holds; the last segment has none.
			var successor *uint64
			if i+1 < len(bases) {
				successor = &bases[i+1]
			}
			if err := s.recoverDamagedSegment(g, path, info.Size(), successor); err != nil {
				return err
			}
		}
		if i > 0 {
			if prev := s.segs[i-1]; prev.end() != base {
				return corruptf("segment %s starts at local index %d but its predecessor ends at %d", path, base, prev.end())
			}
		}
	}
	if len(s.segs) == 0 {
		g, err := s.createSegment(s.base)
		if err != nil {
			return err
		}
		s.segs = append(s.segs, g)
	}
	s.start = s.segs[0].base
	s.length = s.active().end()
	return nil
}

// scanSegment reads the frames of g, size bytes long, and records the
// offset of each and, for a no-op frame, the indexes it covers, up to the
// first bad frame. problem (an ErrCorrupt) describes that frame, good is
// its offset, or the size if every frame is whole; err is an I/O error,
// which must not be mistaken for damage.
func scanSegment(sc *frameScanner, g *segment, size int64) (good int64, problem, err error) {
	sc.reset(g.f, size)
	for {
		kind, body, err := sc.nextSegmentFrame()
		if err == io.EOF {
			return sc.frameOff, nil, nil
		}
		count := uint64(1)
		if err == nil {
			if kind == kindNoop {
				count, err = parseNoopBody(body)
				if err == nil && g.end()+count < g.end() {
					err = corruptf("no-op run of %d indexes overflows the local index space", count)
				}
			} else {
				err = parseRecordBody(body, nil)
			}
		}
		if errors.Is(err, ErrCorrupt) {
			return sc.frameOff, fmt.Errorf("record %d at offset %d: %w", g.end(), sc.frameOff, err), nil
		}
		if err != nil {
			return 0, nil, err
		}
		if kind == kindNoop {
			g.noops = append(g.noops, noopFrame{frame: uint32(len(g.offsets)), first: g.end(), end: g.end() + count})
		}
		g.offsets = append(g.offsets, uint32(sc.frameOff))
		g.indexes += count
	}
}

func (s *Store) recoverPositions() error {
	path := filepath.Join(s.opts.Dir, positionsName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		return fmt.Errorf("open positions: %w", err)
	}
	s.pos = f
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat positions: %w", err)
	}
	var (
		runs    []Run
		frameAt []int64 // frameAt[i] is the offset of runs[i]'s frame
		good    int64
	)
	sc := &frameScanner{}
	sc.reset(f, info.Size())
	for {
		body, err := sc.next(runBodyBytesMin, runBodyBytesMax)
		good = sc.frameOff
		if err == io.EOF {
			break
		}
		var r Run
		if err == nil {
			r, err = parseRunBody(body)
		}
		if errors.Is(err, ErrCorrupt) {
			// A torn tail is cut off below; a bad run with whole runs
			// after it cannot be rebuilt from the store's own bytes.
			if err := s.positionsTornTail(f, info.Size(), good, err); err != nil {
				return err
			}
			break
		}
		if err != nil {
			return fmt.Errorf("scan positions: %w", err)
		}
		// A run that checksums fine but breaks the sequence was written
		// wrong, not torn, so it is an error rather than a tail to cut.
		var prev *Run
		if len(runs) > 0 {
			prev = &runs[len(runs)-1]
			if r.LocalStart != prev.LocalStart+prev.Count {
				return corruptf("positions: run %+v at offset %d does not follow %+v", r, sc.frameOff, *prev)
			}
		}
		if err := checkRun(&r, prev); err != nil {
			return corruptf("positions: run at offset %d: %v", sc.frameOff, err)
		}
		runs = append(runs, r)
		frameAt = append(frameAt, sc.frameOff)
	}
	// Runs over records lost with a torn segment tail are dropped too: the
	// owner assigns those positions again once the records are re-appended.
	for i, r := range runs {
		if r.LocalStart+r.Count > s.length {
			s.logger().Warn("segment: dropping runs over records lost with a torn tail",
				"file", path, "offset", frameAt[i], "dropped_bytes", good-frameAt[i],
				"runs", len(runs)-i, "local_end", s.length)
			runs, good = runs[:i], frameAt[i]
			break
		}
	}
	if len(runs) > 0 && runs[0].LocalStart+runs[0].Count <= s.base {
		// Runs of the store before an interrupted Rebase: it truncates
		// the positions file before it writes any run of its own.
		if last := runs[len(runs)-1]; last.LocalStart+last.Count > s.base {
			return corruptf("positions: runs end below the base %d and past it", s.base)
		}
		runs, good = nil, 0
	}
	if good != info.Size() {
		if err := truncateFile(f, good); err != nil {
			return fmt.Errorf("truncate positions to %d bytes: %w", good, err)
		}
	}
	s.posSize = good
	s.posFileRuns = len(runs)
	s.ordered = s.base

	if len(runs) > 0 {
		last := runs[len(runs)-1]
		s.ordered = last.LocalStart + last.Count
		if runs[0].LocalStart > s.start {
			return corruptf("positions start at local index %d, after the first stored record %d", runs[0].LocalStart, s.start)
		}
	}
	if s.start > 0 && s.ordered < s.start {
		// Trim deletes only ordered records and syncs the runs first.
		return corruptf("records below %d were trimmed but only %d are ordered", s.start, s.ordered)
	}
	// Runs wholly below start are left over from a Trim interrupted between
	// deleting segments and rewriting the positions file. Drop them here;
	// the next Trim compacts the file.
	keep := 0
	for keep < len(runs)-1 && runs[keep].LocalStart+runs[keep].Count <= s.start {
		keep++
	}
	s.runs = append([]Run(nil), runs[keep:]...)
	return nil
}

// frameScanner reads consecutive frames of a file from offset 0.
type frameScanner struct {
	r        *bufio.Reader
	frameOff int64 // offset of the frame last returned, or of the end
	nextOff  int64
	hdr      [frameHeaderBytes]byte
	body     []byte
}

// reset points sc at the start of f, which is size bytes long.
func (sc *frameScanner) reset(f *os.File, size int64) {
	src := io.NewSectionReader(f, 0, size)
	if sc.r == nil {
		// Small files (the positions file, tests) need no big buffer.
		sc.r = bufio.NewReaderSize(src, int(min(recoverReadBufBytes, max(size, 4096))))
	} else {
		sc.r.Reset(src)
	}
	sc.frameOff, sc.nextOff = 0, 0
}

// next returns the body of the next positions-file frame, whose body is
// [bodyMin, bodyMax] bytes long, valid until the next call; io.EOF at a
// clean end; an ErrCorrupt for a torn or bad frame; or an I/O error.
func (sc *frameScanner) next(bodyMin, bodyMax int) ([]byte, error) {
	if err := sc.readHeader(); err != nil {
		return nil, err
	}
	n, sum, err := frameHeader(sc.hdr[:], bodyMin, bodyMax)
	if err != nil {
		return nil, err
	}
	body, err := sc.readBody(n)
	if err != nil {
		return nil, err
	}
	if err := checkBody(body, sum); err != nil {
		return nil, err
	}
	sc.nextOff = sc.frameOff + int64(frameHeaderBytes+n)
	return body, nil
}

// nextSegmentFrame is next for segment files, whose frames are records or
// no-op runs.
func (sc *frameScanner) nextSegmentFrame() (frameKind, []byte, error) {
	if err := sc.readHeader(); err != nil {
		return 0, nil, err
	}
	kind, n, err := segmentFrameHeader(sc.hdr[:])
	if err != nil {
		return 0, nil, err
	}
	body, err := sc.readBody(n)
	if err != nil {
		return 0, nil, err
	}
	if err := checkSegmentBody(kind, sc.hdr[:], body); err != nil {
		return 0, nil, err
	}
	sc.nextOff = sc.frameOff + int64(frameHeaderBytes+n)
	return kind, body, nil
}

// readHeader starts the next frame: it reads its header into sc.hdr.
func (sc *frameScanner) readHeader() error {
	sc.frameOff = sc.nextOff
	if _, err := io.ReadFull(sc.r, sc.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return corruptf("torn frame header at offset %d", sc.frameOff)
		}
		return err
	}
	return nil
}

// readBody reads the n-byte body of the frame whose header was just read.
func (sc *frameScanner) readBody(n int) ([]byte, error) {
	if cap(sc.body) < n {
		sc.body = make([]byte, n)
	}
	body := sc.body[:n]
	if _, err := io.ReadFull(sc.r, body); err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return nil, corruptf("torn frame at offset %d: file ends inside its %d-byte body", sc.frameOff, n)
		}
		return nil, err
	}
	return body, nil
}

func truncateFile(f *os.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return err
	}
	return fsync(f)
}

// createSegment creates the empty segment file for base and makes its
// directory entry durable, so records fsynced into it cannot vanish with it.
func (s *Store) createSegment(base uint64) (*segment, error) {
	path := s.segmentPath(base)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return nil, fmt.Errorf("create segment: %w", err)
	}
	if err := syncDir(s.opts.Dir); err != nil {
		_ = f.Close()
		return nil, err
	}
	return &segment{base: base, f: f}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir for sync: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
