package raftnode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/augur-log/augur/internal/synctrace"
)

// The WAL is a sequence of segment files in Dir named %016x.wal after an
// ascending sequence number. A segment is created complete (tmp + fsync +
// rename) and then only appended to; a rotation writes the next segment and
// deletes the older ones. Each segment is walMagic followed by records:
//
//	length  uint32 LE  payload bytes
//	crc     uint32 LE  CRC-32C (Castagnoli) of type and payload
//	type    uint8      walRecord*
//	payload []byte     a marshalled raftpb message
//
// Replay semantics: an entry at index i replaces every entry at i and above
// (raft's log truncation); the last hard state wins; a snapshot marker
// restarts the log after its (index, term), whose entries live in the
// snapshot file.
const (
	walMagic            = "augwal01"
	walFrameHeaderBytes = 9
	walSegmentExt       = ".wal"
	tmpExt              = ".tmp"

	walRecordEntry     byte = 1
	walRecordHardState byte = 2
	walRecordSnapshot  byte = 3

	// walBufferBytesMax caps the encode buffer kept between writes so one
	// large Ready does not pin its memory forever.
	walBufferBytesMax = 4 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// walState is what replaying the WAL yields.
type walState struct {
	hardState *pb.HardState // nil if none was written
	baseIndex uint64        // ents[0] is at baseIndex+1
	baseTerm  uint64
	ents      []*pb.Entry
}

func (st *walState) lastIndex() uint64 { return st.baseIndex + uint64(len(st.ents)) }

// termAt reports the term of index i if the replayed log holds it.
func (st *walState) termAt(i uint64) (uint64, bool) {
	switch {
	case i == st.baseIndex:
		return st.baseTerm, true
	case i > st.baseIndex && i <= st.lastIndex():
		return st.ents[i-st.baseIndex-1].GetTerm(), true
	}
	return 0, false
}

func (st *walState) apply(typ byte, payload []byte) error {
	switch typ {
	case walRecordEntry:
		e := new(pb.Entry)
		if err := proto.Unmarshal(payload, e); err != nil {
			return fmt.Errorf("decode entry: %w", err)
		}
		i := e.GetIndex()
		if i <= st.baseIndex || i > st.lastIndex()+1 {
			return fmt.Errorf("entry %d outside (%d, %d]", i, st.baseIndex, st.lastIndex()+1)
		}
		st.ents = append(st.ents[:i-st.baseIndex-1], e)
	case walRecordHardState:
		hs := new(pb.HardState)
		if err := proto.Unmarshal(payload, hs); err != nil {
			return fmt.Errorf("decode hard state: %w", err)
		}
		st.hardState = hs
	case walRecordSnapshot:
		md := new(pb.SnapshotMetadata)
		if err := proto.Unmarshal(payload, md); err != nil {
			return fmt.Errorf("decode snapshot marker: %w", err)
		}
		st.baseIndex, st.baseTerm, st.ents = md.GetIndex(), md.GetTerm(), nil
	default:
		return fmt.Errorf("unknown record type %d", typ)
	}
	return nil
}

// wal appends records to the newest segment. It is used by the driver
// goroutine only.
type wal struct {
	dir   string
	seq   uint64
	f     *os.File
	buf   []byte
	log   *slog.Logger
	fsync bool
}

func segmentName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, walSegmentExt) }

// listSegments returns the sequence numbers of the segments in dir, ascending.
func listSegments(dir string) ([]uint64, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*"+walSegmentExt))
	if err != nil {
		return nil, fmt.Errorf("list wal segments: %w", err)
	}
	var seqs []uint64
	for _, name := range names {
		base := strings.TrimSuffix(filepath.Base(name), walSegmentExt)
		seq, err := strconv.ParseUint(base, 16, 64)
		if err != nil || len(base) != 16 {
			return nil, fmt.Errorf("unexpected file %s in wal directory", name)
		}
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	return seqs, nil
}

// openWAL replays every segment in dir and opens the newest for appending.
// A torn tail of the newest segment, as left by a crash mid-write, is cut off;
// damage anywhere else is an error, because acknowledged records would be lost.
func openWAL(dir string, fsync bool, log *slog.Logger) (*wal, *walState, error) {
	if err := removeTmpFiles(dir); err != nil {
		return nil, nil, err
	}
	seqs, err := listSegments(dir)
	if err != nil {
		return nil, nil, err
	}
	w := &wal{dir: dir, log: log, fsync: fsync}
	st := &walState{}
	if len(seqs) == 0 {
		if err := w.createSegment(1, nil); err != nil {
			return nil, nil, err
		}
		return w, st, nil
	}
	// A rotated segment starts with a snapshot marker and supersedes every
	// older one; those are only left over when a crash interrupted the
	// rotation, and may be damaged if they were never synced.
	first := 0
	for i := len(seqs) - 1; i > 0; i-- {
		rotated, err := startsWithMarker(filepath.Join(dir, segmentName(seqs[i])))
		if err != nil {
			return nil, nil, err
		}
		if rotated {
			first = i
			break
		}
	}
	for i, seq := range seqs[first:] {
		last := first+i == len(seqs)-1
		if err := replaySegment(filepath.Join(dir, segmentName(seq)), last, st, log); err != nil {
			return nil, nil, err
		}
	}
	for _, seq := range seqs[:first] {
		if err := os.Remove(filepath.Join(dir, segmentName(seq))); err != nil {
			return nil, nil, fmt.Errorf("remove superseded wal segment: %w", err)
		}
	}
	w.seq = seqs[len(seqs)-1]
	f, err := os.OpenFile(filepath.Join(dir, segmentName(w.seq)), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open wal segment: %w", err)
	}
	w.f = f
	return w, st, nil
}

// startsWithMarker reports whether the first record of a segment is a
// snapshot marker; replay verifies the record itself.
func startsWithMarker(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("open wal segment: %w", err)
	}
	defer f.Close()
	head := make([]byte, len(walMagic)+walFrameHeaderBytes)
	if _, err := io.ReadFull(f, head); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return false, nil
		}
		return false, fmt.Errorf("read wal segment: %w", err)
	}
	return head[len(head)-1] == walRecordSnapshot, nil
}

func replaySegment(path string, last bool, st *walState, log *slog.Logger) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read wal segment: %w", err)
	}
	if !bytes.HasPrefix(data, []byte(walMagic)) {
		return fmt.Errorf("wal segment %s: bad header", path)
	}
	off := len(walMagic)
	for off < len(data) {
		typ, payload, next, damage := readFrame(data, off)
		if damage != "" {
			if !last || !isTornTail(data, off, next) {
				return fmt.Errorf("wal segment %s: corrupt record at offset %d: %s", path, off, damage)
			}
			log.Warn("raft wal: truncating torn tail", "segment", path, "offset", off,
				"dropped_bytes", len(data)-off, "reason", damage)
			return truncateFile(path, int64(off))
		}
		if err := st.apply(typ, payload); err != nil {
			return fmt.Errorf("wal segment %s: record at offset %d: %w", path, off, err)
		}
		off = next
	}
	return nil
}

// readFrame decodes the record at off. next is where the record claims to
// end (possibly past the data); damage is empty for a sound record.
func readFrame(data []byte, off int) (typ byte, payload []byte, next int, damage string) {
	if len(data)-off < walFrameHeaderBytes {
		return 0, nil, len(data), "incomplete header"
	}
	n := int(binary.LittleEndian.Uint32(data[off:]))
	crc := binary.LittleEndian.Uint32(data[off+4:])
	next = off + walFrameHeaderBytes + n
	if n > walRecordBytesMax {
		return 0, nil, next, fmt.Sprintf("length %d exceeds %d", n, walRecordBytesMax)
	}
	if next > len(data) {
		return 0, nil, next, "incomplete payload"
	}
	body := data[off+8 : next]
	if crc32.Checksum(body, crcTable) != crc {
		return 0, nil, next, "checksum mismatch"
	}
	return body[0], body[1:], next, ""
}

// isTornTail tells a crash mid-write from damage in the middle: an
// interrupted write leaves a record that runs to or past the end of the
// file, or zeroes where the file system extended it before the data landed.
func isTornTail(data []byte, off, next int) bool {
	if next >= len(data) {
		return true
	}
	for _, b := range data[off:] {
		if b != 0 {
			return false
		}
	}
	return true
}

func truncateFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("truncate wal segment: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("truncate wal segment: %w", err)
	}
	if err := synctrace.Sync(f); err != nil {
		return fmt.Errorf("sync truncated wal segment: %w", err)
	}
	return nil
}

// encode appends the records for one Ready to buf: the snapshot marker first
// (it resets the log), then entries, then the hard state, whose commit index
// may refer to those entries. A torn write therefore loses a suffix only.
func encodeRecords(buf []byte, snap *pb.SnapshotMetadata, ents []*pb.Entry, hs *pb.HardState) ([]byte, error) {
	var err error
	if snap != nil {
		if buf, err = appendRecord(buf, walRecordSnapshot, snap); err != nil {
			return nil, err
		}
	}
	for i, e := range ents {
		if i > 0 && e.GetIndex() != ents[i-1].GetIndex()+1 {
			return nil, fmt.Errorf("entries not contiguous: %d after %d", e.GetIndex(), ents[i-1].GetIndex())
		}
		if buf, err = appendRecord(buf, walRecordEntry, e); err != nil {
			return nil, err
		}
	}
	if hs != nil {
		if buf, err = appendRecord(buf, walRecordHardState, hs); err != nil {
			return nil, err
		}
	}
	return buf, nil
}

func appendRecord(buf []byte, typ byte, m proto.Message) ([]byte, error) {
	start := len(buf)
	buf = append(buf, make([]byte, walFrameHeaderBytes)...)
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, m)
	if err != nil {
		return nil, fmt.Errorf("encode wal record: %w", err)
	}
	n := len(buf) - start - walFrameHeaderBytes
	if n > walRecordBytesMax {
		return nil, fmt.Errorf("wal record of %d bytes exceeds %d", n, walRecordBytesMax)
	}
	binary.LittleEndian.PutUint32(buf[start:], uint32(n))
	buf[start+8] = typ
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(buf[start+8:], crcTable))
	return buf, nil
}

// append writes one Ready's records with a single write, and syncs when
// raft requires durability.
func (w *wal) append(snap *pb.SnapshotMetadata, ents []*pb.Entry, hs *pb.HardState, mustSync bool) error {
	buf, err := encodeRecords(w.buf[:0], snap, ents, hs)
	if err != nil {
		return err
	}
	if len(buf) == 0 {
		return nil
	}
	if _, err := w.f.Write(buf); err != nil {
		return fmt.Errorf("write wal: %w", err)
	}
	if mustSync && w.fsync {
		if err := synctrace.Sync(w.f); err != nil {
			return fmt.Errorf("sync wal: %w", err)
		}
	}
	if cap(buf) <= walBufferBytesMax {
		w.buf = buf[:0]
	} else {
		w.buf = nil
	}
	return nil
}

// rotate starts a new segment holding the given state and deletes the older
// segments. The new segment is complete and durable before anything is
// deleted, so a crash at any point replays to the same log.
func (w *wal) rotate(snap *pb.SnapshotMetadata, ents []*pb.Entry, hs *pb.HardState) error {
	records, err := encodeRecords(nil, snap, ents, hs)
	if err != nil {
		return err
	}
	old := w.f
	if err := w.createSegment(w.seq+1, records); err != nil {
		return err
	}
	if err := old.Close(); err != nil {
		w.log.Warn("raft wal: close old segment", "err", err)
	}
	seqs, err := listSegments(w.dir)
	if err != nil {
		return err
	}
	for _, seq := range seqs {
		if seq < w.seq {
			if err := os.Remove(filepath.Join(w.dir, segmentName(seq))); err != nil {
				return fmt.Errorf("remove old wal segment: %w", err)
			}
		}
	}
	return nil
}

// createSegment writes a segment atomically and opens it for appending.
func (w *wal) createSegment(seq uint64, records []byte) error {
	path := filepath.Join(w.dir, segmentName(seq))
	data := append([]byte(walMagic), records...)
	if err := writeFileAtomic(path, data); err != nil {
		return fmt.Errorf("create wal segment: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("open wal segment: %w", err)
	}
	w.f, w.seq = f, seq
	return nil
}

// close syncs regardless of Fsync: a graceful stop should not lose data to a
// later power failure.
func (w *wal) close() error {
	if w.f == nil {
		return nil
	}
	err := errors.Join(synctrace.Sync(w.f), w.f.Close())
	w.f = nil
	if err != nil {
		return fmt.Errorf("close wal: %w", err)
	}
	return nil
}

// writeFileAtomic leaves either the old file or the complete new one at path,
// durable once it returns.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + tmpExt
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = synctrace.Sync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// removeTmpFiles deletes leftovers of writes interrupted by a crash; they were
// never renamed into place, so nothing refers to them.
func removeTmpFiles(dir string) error {
	names, err := filepath.Glob(filepath.Join(dir, "*"+tmpExt))
	if err != nil {
		return fmt.Errorf("list temporary files: %w", err)
	}
	for _, name := range names {
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove temporary file: %w", err)
		}
	}
	return nil
}
