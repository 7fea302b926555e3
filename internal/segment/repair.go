package segment

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// repairTmpSuffix names the file a repair writes before renaming it over
// the segment it replaces; Open removes leftovers of repairs a crash cut
// short (the segment they were meant to replace is still whole).
const repairTmpSuffix = ".repair"

// Checksum is the CRC-32C the store writes in the frame of e (for a no-op
// run, the frame of a run of e.Noops indexes). Catch-up sends it beside
// each entry it copies, so the receiver checks that what it stores is what
// the source read, and the source only reads frames whose own checksum
// verified.
func Checksum(e Entry) uint32 {
	if e.isNoop() {
		f := appendNoopFrame(nil, e.Noops)
		return noopChecksum(f[0:4], f[frameHeaderBytes:])
	}
	f := appendRecordFrame(nil, &e, recordBodyLen(&e))
	return crc32.Checksum(f[frameHeaderBytes:], castagnoli)
}

// Repair puts back the entries of the damaged range that starts at local
// index first (see Damaged): entries must cover exactly its indexes,
// records and no-op runs as a live replica of the shard stores them. The
// segment holding the range is rewritten into a new file (its bytes before
// and after the range unchanged, the range's frames in place of the
// damaged bytes), fsynced and renamed over the old one, so a crash leaves
// either the damaged segment or the repaired one, both whole; then the
// range leaves Damaged and its indexes read as usual. Local indexes never
// move, so runs and global positions stay valid. Bad input (no damaged
// range at first, entries that cover another count, an oversized record)
// fails with ErrInvalid and changes nothing.
func (s *Store) Repair(first uint64, entries []Entry) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writableLocked(); err != nil {
		return fmt.Errorf("segment: repair: %w", err)
	}
	di := sort.Search(len(s.damaged), func(i int) bool { return s.damaged[i].First >= first })
	if di == len(s.damaged) || s.damaged[di].First != first {
		return invalidf("repair: no damaged range starts at local index %d", first)
	}
	d := s.damaged[di]
	if d.First < s.start {
		return invalidf("repair: damaged range [%d, %d) is trimmed", d.First, d.End)
	}
	buf, frames, noops, err := encodeRepair(entries, d.First, d.End)
	if err != nil {
		return err
	}
	gi := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base > d.First }) - 1
	g := s.segs[gi]
	k := sort.Search(len(g.offsets), func(i int) bool { return int64(g.offsets[i]) >= d.Offset })
	if k == len(g.offsets) || int64(g.offsets[k]) != d.Offset || g.frameEnd(k) != d.Offset+d.Bytes {
		invariantf("damaged range [%d, %d) at offset %d (%d bytes) is not one frame of segment %d", d.First, d.End, d.Offset, d.Bytes, g.base)
	}
	delta := int64(len(buf)) - d.Bytes
	if g.size+delta > segmentFileBytesMax {
		return invalidf("repair: segment %d would grow to %d bytes", g.base, g.size+delta)
	}

	path := s.segmentPath(g.base)
	f, err := s.writeRepaired(g, path, d, buf)
	if err != nil {
		return fmt.Errorf("segment: repair [%d, %d) of %s: %w", d.First, d.End, path, err)
	}
	// The new index: frames before k keep their offsets, the range's frames
	// take frame k's place, the frames after shift by delta bytes and by
	// len(frames)-1 frame numbers.
	ng := &segment{base: g.base, f: f, indexes: g.indexes, size: g.size + delta}
	ng.offsets = make([]uint32, 0, len(g.offsets)-1+len(frames))
	ng.offsets = append(ng.offsets, g.offsets[:k]...)
	for _, off := range frames {
		ng.offsets = append(ng.offsets, uint32(d.Offset+off))
	}
	for _, off := range g.offsets[k+1:] {
		ng.offsets = append(ng.offsets, uint32(int64(off)+delta))
	}
	shift := uint32(len(frames) - 1)
	for i := range noops {
		noops[i].frame += uint32(k)
	}
	for _, nf := range g.noops {
		switch {
		case int(nf.frame) < k:
			ng.noops = append(ng.noops, nf)
		case int(nf.frame) == k:
			// The damaged span itself, listed when it covered other than
			// one index: the range's own no-op frames replace it.
		default:
			if len(noops) > 0 {
				ng.noops = append(ng.noops, noops...)
				noops = nil
			}
			nf.frame += shift
			ng.noops = append(ng.noops, nf)
		}
	}
	ng.noops = append(ng.noops, noops...)
	for i := range ng.noops {
		if i > 0 && ng.noops[i].frame <= ng.noops[i-1].frame {
			invariantf("repaired segment %d lists no-op frame %d after %d", g.base, ng.noops[i].frame, ng.noops[i-1].frame)
		}
	}

	s.mu.Lock()
	s.segs[gi] = ng
	s.damaged = append(s.damaged[:di:di], s.damaged[di+1:]...)
	s.mu.Unlock()
	if gi == len(s.segs)-1 {
		// The new file holds every byte the active segment had, synced.
		s.activeDirty = false
		s.noteSynced(s.length)
	}
	// Readers hold mu while they pread, so none reads the old file now.
	if err := g.f.Close(); err != nil {
		return fmt.Errorf("segment: repair: close the replaced %s: %w", path, err)
	}
	s.logger().Info("segment: damaged records repaired", "file", path, "first", d.First, "end", d.End)
	return nil
}

// encodeRepair encodes entries as the frames of local indexes [first,
// end), coalescing consecutive no-op runs as Append does, and returns the
// bytes, the offset of each frame in them, and the no-op frames numbered
// from 0 (the caller renumbers them).
func encodeRepair(entries []Entry, first, end uint64) (buf []byte, frames []int64, noops []noopFrame, err error) {
	next := first
	for i := 0; i < len(entries); {
		frames = append(frames, int64(len(buf)))
		e := &entries[i]
		if !e.isNoop() {
			if next == end {
				return nil, nil, nil, invalidf("repair: entries cover more than the %d indexes of [%d, %d)", end-first, first, end)
			}
			n := recordBodyLen(e)
			if n > recordBytesMax {
				return nil, nil, nil, invalidf("repair: record %d is %d bytes, more than %d", next, n, recordBytesMax)
			}
			buf = appendRecordFrame(buf, e, n)
			next++
			i++
			continue
		}
		count := uint64(0)
		for ; i < len(entries) && entries[i].isNoop(); i++ {
			if entries[i].carriesData() {
				return nil, nil, nil, invalidf("repair: a run of %d no-ops carries data", entries[i].Noops)
			}
			count += entries[i].Noops
			if count > end-next {
				return nil, nil, nil, invalidf("repair: entries cover more than the %d indexes of [%d, %d)", end-first, first, end)
			}
		}
		buf = appendNoopFrame(buf, count)
		noops = append(noops, noopFrame{frame: uint32(len(frames) - 1), first: next, end: next + count})
		next += count
	}
	if next != end {
		return nil, nil, nil, invalidf("repair: entries cover local indexes [%d, %d), the damaged range is [%d, %d)", first, next, first, end)
	}
	return buf, frames, noops, nil
}

// writeRepaired writes g's bytes with d's damaged bytes replaced by
// frames into a new file, fsyncs it, renames it over path and syncs the
// directory. It returns the new file, open for reads and appends.
func (s *Store) writeRepaired(g *segment, path string, d DamagedRange, frames []byte) (*os.File, error) {
	tmp := path + repairTmpSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, filePerm)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	if _, err := io.Copy(f, io.NewSectionReader(g.f, 0, d.Offset)); err != nil {
		return fail(err)
	}
	if _, err := f.Write(frames); err != nil {
		return fail(err)
	}
	after := d.Offset + d.Bytes
	if _, err := io.Copy(f, io.NewSectionReader(g.f, after, g.size-after)); err != nil {
		return fail(err)
	}
	if err := fsync(f); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if err := syncDir(s.opts.Dir); err != nil {
		// The rename happened: f is the segment now, only its directory
		// entry may not be durable yet, and a crash would bring back the
		// damaged file, which Open handles.
		s.logger().Warn("segment: repair: sync dir", "dir", s.opts.Dir, "err", err)
	}
	return f, nil
}

// removeRepairLeftovers removes the files of repairs a crash interrupted
// before their rename.
func removeRepairLeftovers(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, ent := range ents {
		if strings.HasSuffix(ent.Name(), segmentSuffix+repairTmpSuffix) {
			p := filepath.Join(dir, ent.Name())
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove stale %s: %w", p, err)
			}
		}
	}
	return nil
}
