package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"sort"
)

// # Damage
//
// Open tells two kinds of bad frame apart:
//
//   - A torn tail: a bad frame of the last segment, or of the positions
//     file, with no whole frame anywhere after it. That is what a crash in
//     the middle of a write leaves, so Open truncates it and logs a warning
//     naming the file, the offset and the bytes dropped.
//   - Damage: a bad frame with a whole frame after it, or a bad frame of a
//     segment that has a successor (segments are fsynced before the next one
//     is created, so no crash tears them). A crash cannot leave that, and
//     the frames after it hold acknowledged records, so nothing is
//     truncated: the store opens, keeps every record at its local index,
//     and lists the local indexes the bad bytes held in Damaged. Reading
//     them fails with ErrDamaged; everything else is served as usual.
//
// The local indexes a damaged region held must be known exactly, or every
// record after it would be served at the wrong index. A frame's header
// carries a checksum of its length word (see frame.go), so the count is
// known when that verifies: only the body or its checksum was hit, the
// frame ends where the word says, and a record held one index (a no-op
// run's count is in its body, so it is lost with it). It is known too when
// the word does not verify but the frame's bytes still do: the first offset
// at which the bytes after the header verify under the body checksum it
// holds, and a whole frame or the end of the file follows, is where the
// frame ends (only the word or its checksum was hit). Otherwise the bad
// bytes run to the next whole frame, which cannot be trusted to start where
// a record did (a payload may hold bytes that form a whole frame, and a hit
// length word may lead exactly to one). In a segment with a successor, the
// region then runs to the end of the segment and its count follows from the
// successor's first local index; in the last segment, Open refuses with
// ErrCorrupt rather than guess or truncate. Damage in the middle of the
// positions file is refused the same way: a damaged run cannot be rebuilt
// from the store's own bytes.
//
// Frames are found again after a bad one by trying every offset after it
// (after its end, if its length word verifies), keeping only whole frames
// (both checksums verify, the body decodes). The body bytes checksummed
// while searching one file are bounded by resyncCheckBytesMax, so a file of
// random bytes cannot stall Open; a search that runs out counts as "cannot
// tell", never as a torn tail.
//
// # Repair
//
// Damaged ranges are what a repair fetches back from a live replica of the
// shard, verified by checksum (see Checksum), with the same catch-up a
// restarted replica uses (internal/shard's CatchUp). Replicas of a shard
// hold the same entries at the same local indexes (a backup appends
// exactly what its primary stored, at the same index), so a range is
// asked for by local index. Until the repair, the storage server refuses
// reads of Damaged ranges and reports them in status and metrics; local
// indexes never move, so runs and global positions stay valid throughout;
// Repair rewrites the segment holding the range into a new file renamed
// over the old, as the positions file is rewritten, then drops the range
// from Damaged. A store that Open refuses (damage of unknown count in the
// last segment, or mid-file damage of the positions file) needs the same
// catch-up for the whole shard.

// ErrDamaged: the record's bytes were found damaged when the store was
// opened; see Damaged. Errors wrapping it are *DamagedError.
var ErrDamaged = errors.New("segment: record damaged on disk")

// DamagedRange is a run of local indexes [First, End) whose stored frames
// were found damaged by Open: the bytes [Offset, Offset+Bytes) of segment
// file File held them. Reason says what check failed first.
type DamagedRange struct {
	First, End uint64
	File       string
	Offset     int64
	Bytes      int64
	Reason     string
}

// DamagedError is the error of a read that reaches a damaged range; it
// matches ErrDamaged with errors.Is.
type DamagedError struct {
	Local uint64 // the index asked for
	Range DamagedRange
}

func (e *DamagedError) Error() string {
	r := &e.Range
	return fmt.Sprintf("segment: record %d: damaged on disk (local indexes [%d, %d), %d bytes at offset %d of %s: %s)",
		e.Local, r.First, r.End, r.Bytes, r.Offset, r.File, r.Reason)
}

func (e *DamagedError) Unwrap() error { return ErrDamaged }

// Damaged returns the damaged ranges at or after Start, ascending. The
// caller owns the slice. The notes at the top of damage.go say how ranges
// are found and what the storage server does with them.
func (s *Store) Damaged() []DamagedRange {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := s.damagedFromRLocked(s.start)
	if i == len(s.damaged) {
		return nil
	}
	return append([]DamagedRange(nil), s.damaged[i:]...)
}

// damagedFromRLocked returns the position in s.damaged of the first range
// that ends after local.
func (s *Store) damagedFromRLocked(local uint64) int {
	return sort.Search(len(s.damaged), func(i int) bool { return s.damaged[i].End > local })
}

// checkDamagedRLocked returns a *DamagedError if local is damaged.
func (s *Store) checkDamagedRLocked(local uint64) error {
	if i := s.damagedFromRLocked(local); i < len(s.damaged) && s.damaged[i].First <= local {
		return &DamagedError{Local: local, Range: s.damaged[i]}
	}
	return nil
}

// logger returns the logger recovery reports to.
func (s *Store) logger() *slog.Logger {
	if s.opts.Logger != nil {
		return s.opts.Logger
	}
	return slog.Default()
}

// span is one frame of a segment from its first bad frame on, or a
// stretch of damaged bytes; it ends where the next span starts, or at the
// end of the file. Spans are kept small because a damaged segment may
// hold millions of whole frames after the bad one.
type span struct {
	off int64
	// count is the local indexes the span holds; 0 for damaged bytes whose
	// count is unknown.
	count uint64
}

// damage describes the damaged span spans[span].
type damage struct {
	span   int
	reason string
	// gaveUp marks damaged bytes running to the end of the file because
	// the search for a whole frame after them ran out of budget.
	gaveUp bool
}

// walkDamaged splits the bytes of a segment from p, its first bad frame,
// to the end of the file into whole frames and damaged spans.
func walkDamaged(w *fileWindow, p int64) ([]span, []damage, error) {
	var (
		spans   []span
		damages []damage
	)
	for p < w.size {
		count, end, lengthOK, err := segmentFrameAt(w, p)
		if err == nil {
			spans = append(spans, span{off: p, count: count})
			p = end
			continue
		}
		if !errors.Is(err, ErrCorrupt) {
			return nil, nil, err
		}
		d := damage{span: len(spans), reason: err.Error()}
		sp := span{off: p, count: count}
		if lengthOK {
			// Only the body or its checksum was hit: the frame ends
			// where its length word says.
			spans, damages = append(spans, sp), append(damages, d)
			p = end
			continue
		}
		if end, count, ok, err := bodyEnd(w, p); err != nil {
			return nil, nil, err
		} else if ok {
			// Only the length word or its checksum was hit.
			sp.count = count
			spans, damages = append(spans, sp), append(damages, d)
			p = end
			continue
		}
		// The count is lost: the bytes up to the next whole frame are one
		// damaged span.
		q, res, rerr := resync(w, segmentFormat, p)
		if rerr != nil {
			return nil, nil, rerr
		}
		stop := w.size
		if res == resyncFound {
			stop = q
		}
		if res == resyncGaveUp {
			d.gaveUp = true
			d.reason += fmt.Sprintf("; no whole frame found again within %d checksummed bytes", resyncCheckBytesMax)
		}
		spans, damages = append(spans, sp), append(damages, d)
		p = stop
	}
	return spans, damages, nil
}

// segmentFrameAt checks the segment frame at p: it returns the local
// indexes it covers, where it ends, and nil, or an ErrCorrupt saying what
// is wrong with it. lengthOK says that its length word verified and its
// body lies inside the file, so that end is as written even when the body
// does not verify; count is then still known for a record (one index) but
// not for a no-op run, whose count is in its body (0).
func segmentFrameAt(w *fileWindow, p int64) (count uint64, end int64, lengthOK bool, err error) {
	if p+frameHeaderBytes > w.size {
		return 0, 0, false, corruptf("torn frame header at offset %d", p)
	}
	b, err := w.view(p, frameHeaderBytes, true)
	if err != nil {
		return 0, 0, false, err
	}
	var h [frameHeaderBytes]byte
	copy(h[:], b)
	kind, n, err := segmentFrameHeader(h[:])
	if err != nil {
		return 0, 0, false, err
	}
	end = p + frameHeaderBytes + int64(n)
	if end > w.size {
		return 0, 0, false, corruptf("torn frame at offset %d: file ends inside its %d-byte body", p, n)
	}
	body, err := w.view(p+frameHeaderBytes, n, true)
	if err != nil {
		return 0, 0, false, err
	}
	if count, err = checkSegmentFrame(h[:], body); err != nil && kind == kindRecord {
		count = 1
	}
	return count, end, true, err
}

// bodyEnd looks for the end of the frame at p when its length word does
// not verify: the first offset at which the bytes after the header verify,
// as a no-op run or a record, under the body checksum the header holds,
// and the file ends or a whole frame starts. Found, only the length word
// or its checksum was hit, and the frame covers count local indexes. The
// bytes checksummed count against the search budget; once it runs out,
// nothing is found.
func bodyEnd(w *fileWindow, p int64) (end int64, count uint64, ok bool, err error) {
	body := p + frameHeaderBytes
	if body > w.size {
		return 0, 0, false, nil
	}
	h, err := w.view(p, frameHeaderBytes, true)
	if err != nil {
		return 0, 0, false, err
	}
	sum := binary.LittleEndian.Uint32(h[4:8])
	// endsAt says whether the frame may end at q.
	endsAt := func(q int64) (bool, error) {
		if q == w.size {
			return true, nil
		}
		_, ok, err := wholeFrameAt(w, segmentFormat, q)
		return ok, err
	}
	for n := int64(noopBodyBytesMin); n <= noopBodyBytesMax && body+n <= w.size; n++ {
		b, err := w.view(body, int(n), true)
		if err != nil {
			return 0, 0, false, err
		}
		if noopChecksum(binary.LittleEndian.AppendUint32(nil, noopFlag|uint32(n)), b) != sum {
			continue
		}
		if count, perr := parseNoopBody(b); perr == nil {
			if ok, err := endsAt(body + n); err != nil || ok {
				return body + n, count, ok, err
			}
		}
	}
	limit := min(w.size, body+recordBytesMax)
	crc := uint32(0)
	for q := body; q < limit; {
		n := min(limit-q, resyncWindowBytes)
		if w.checkBudget < n {
			return 0, 0, false, nil
		}
		w.checkBudget -= n
		b, err := w.view(q, int(n), true)
		if err != nil {
			return 0, 0, false, err
		}
		next, verifies := q+n, false
		for i := range b {
			crc = crc32.Update(crc, castagnoli, b[i:i+1])
			if at := q + int64(i) + 1; at-body >= recordBodyBytesMin && crc == sum {
				next, verifies = at, true
				break
			}
		}
		if verifies {
			// The bytes [body, next) verify: a record, if they decode
			// and a frame may end there.
			rec, err := w.view(body, int(next-body), false)
			if err != nil {
				return 0, 0, false, err
			}
			if parseRecordBody(rec, nil) == nil {
				if ok, err := endsAt(next); err != nil || ok {
					return next, 1, ok, err
				}
			}
		}
		q = next
	}
	return 0, 0, false, nil
}

// recoverDamagedSegment finishes the recovery of g, whose frames are whole
// up to g.size but not beyond, and which is size bytes long. successor is
// the first local index of the next segment, nil for the last one. The
// notes at the top of this file give the rules it applies.
func (s *Store) recoverDamagedSegment(g *segment, path string, size int64, successor *uint64) error {
	w := &fileWindow{f: g.f, size: size, checkBudget: resyncCheckBytesMax}
	spans, damages, err := walkDamaged(w, g.size)
	if err != nil {
		return fmt.Errorf("scan damaged segment %s: %w", path, err)
	}
	// spanEnd is where spans[i] ends.
	spanEnd := func(i int) int64 {
		if i+1 < len(spans) {
			return spans[i+1].off
		}
		return size
	}
	if successor == nil {
		// A torn tail: damaged bytes at the end with nothing whole after
		// them, however many bad frames they hold (a frame whose length
		// word verified but whose body did not may be followed by the
		// torn rest of a write). A search that gave up cannot say that
		// there is nothing.
		var torn *damage
		n := len(damages)
		for n > 0 && damages[n-1].span == len(spans)-len(damages)+n-1 && !damages[n-1].gaveUp {
			n--
		}
		if n < len(damages) {
			torn = &damages[n]
			damages = damages[:n]
		}
		// Refuse before truncating anything.
		for _, d := range damages {
			if sp := spans[d.span]; sp.count == 0 {
				return corruptf("segment %s: damaged bytes [%d, %d) hold an unknown number of records and are not a torn tail (%s); refusing to guess or to truncate the records after them",
					path, sp.off, spanEnd(d.span), d.reason)
			}
		}
		if torn != nil {
			off := spans[torn.span].off
			spans = spans[:torn.span]
			size = off
			s.logger().Warn("segment: truncating torn tail",
				"file", path, "offset", off, "dropped_bytes", w.size-off, "reason", torn.reason)
			if err := truncateFile(g.f, off); err != nil {
				return fmt.Errorf("truncate torn tail of %s to %d bytes: %w", path, off, err)
			}
		}
	} else if spans, damages, err = mergeUnknown(spans, damages, g.end(), *successor); err != nil {
		return fmt.Errorf("segment %s: %w", path, err)
	}
	next := 0 // damages[next] is the next damaged span
	for i, sp := range spans {
		first := g.end()
		if first+sp.count < first {
			return corruptf("segment %s: frame at offset %d covers %d indexes, overflowing the local index space", path, sp.off, sp.count)
		}
		k := len(g.offsets)
		g.offsets = append(g.offsets, uint32(sp.off))
		if sp.count != 1 {
			// A frame covering other than one index is listed with the
			// no-op frames, which is all locate needs; reads tell damaged
			// frames apart by s.damaged.
			g.noops = append(g.noops, noopFrame{frame: uint32(k), first: first, end: first + sp.count})
		}
		g.indexes += sp.count
		if next < len(damages) && damages[next].span == i {
			d := DamagedRange{First: first, End: g.end(), File: path, Offset: sp.off, Bytes: spanEnd(i) - sp.off, Reason: damages[next].reason}
			next++
			s.damaged = append(s.damaged, d)
			s.logger().Error("segment: damaged records kept out of service until repaired",
				"file", path, "offset", d.Offset, "bytes", d.Bytes, "first", d.First, "end", d.End, "reason", d.Reason)
		}
	}
	g.size = size
	return nil
}

// mergeUnknown resolves damage of unknown count in a segment with a
// successor, which holds successor-before local indexes from its first bad
// frame on (before are the indexes ahead of it). From the first damaged
// span of unknown count to the end of the segment becomes one damaged
// span: the whole frames the search found after it cannot be trusted to
// start where records did, since a payload may hold bytes that form a
// whole frame, and one taken for a record would be served at the index
// of another.
func mergeUnknown(spans []span, damages []damage, before, successor uint64) ([]span, []damage, error) {
	first := -1 // position in damages
	for i, d := range damages {
		if spans[d.span].count == 0 {
			first = i
			break
		}
	}
	if first < 0 {
		return spans, damages, nil
	}
	fs := damages[first].span
	known := before
	for _, sp := range spans[:fs] {
		known += sp.count // cannot overflow: these are at most the segment's indexes
		if known > successor {
			break
		}
	}
	if successor <= known {
		return nil, nil, corruptf("damaged bytes from offset %d to the end of the segment must hold at least one record, but the frames before them already reach local index %d, where the next segment starts at %d",
			spans[fs].off, known, successor)
	}
	spans[fs].count = successor - known
	return spans[:fs+1], damages[:first+1], nil
}

// positionsTornTail handles a bad frame at offset bad of the positions
// file f, size bytes long: nil if it is a torn tail (logged; the caller
// truncates it), an ErrCorrupt if whole runs follow it or that cannot be
// told.
func (s *Store) positionsTornTail(f *os.File, size, bad int64, problem error) error {
	w := &fileWindow{f: f, size: size, checkBudget: resyncCheckBytesMax}
	q, res, err := resync(w, positionsFormat, bad)
	if err != nil {
		return fmt.Errorf("scan positions: %w", err)
	}
	switch res {
	case resyncFound:
		return corruptf("positions: bad run frame at offset %d (%v), but a whole run frame follows at %d; a damaged run cannot be rebuilt from the store's own bytes, and truncating would drop ordered runs",
			bad, problem, q)
	case resyncGaveUp:
		return corruptf("positions: bad run frame at offset %d (%v), and no whole frame could be found again within %d checksummed bytes; not truncating",
			bad, problem, resyncCheckBytesMax)
	}
	s.logger().Warn("segment: truncating torn tail",
		"file", f.Name(), "offset", bad, "dropped_bytes", size-bad, "reason", problem.Error())
	return nil
}
