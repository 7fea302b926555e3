package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"google.golang.org/protobuf/proto"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/lazy"
	"github.com/augur-log/augur/internal/segment"
)

// placementFrameBytesMax bounds one persisted placement (a mapping of
// lazy.BatchMaxDefault positions takes well under a megabyte).
const placementFrameBytesMax = 64 << 20

// placementLog is a lazy shard's placements file: every placement the
// replica applied, in order, each framed as length, CRC-32C and the
// placement's wire form. A torn or damaged tail is cut off on open: the
// placements it held were not acknowledged (persist before send).
type placementLog struct {
	f *os.File
	// written counts the placements written, lastSeq is the number of
	// the last one; synced and syncedSeq are the same as of the last
	// completed sync (or, under the opt-out policies, the last flush).
	written, synced    uint64
	lastSeq, syncedSeq uint64
	// syncFile makes the file durable (f.Sync; tests hold it to see what
	// is published while a sync runs).
	syncFile func() error
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// openPlacementLog opens (or creates) the file at path and returns the
// placements it holds.
func openPlacementLog(path string) (*placementLog, []lazy.Placement, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("placements: %w", err)
	}
	var out []lazy.Placement
	var off int64
	var head [8]byte
	for {
		if _, err := f.ReadAt(head[:], off); err != nil {
			break
		}
		n := binary.LittleEndian.Uint32(head[:4])
		sum := binary.LittleEndian.Uint32(head[4:])
		if n > placementFrameBytesMax {
			break
		}
		body := make([]byte, n)
		if _, err := f.ReadAt(body, off+8); err != nil {
			break
		}
		if crc32.Checksum(body, castagnoli) != sum {
			break
		}
		var p pb.Placement
		if err := proto.Unmarshal(body, &p); err != nil {
			break
		}
		out = append(out, placementFromProto(&p))
		off += 8 + int64(n)
	}
	if err := f.Truncate(off); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("placements: cut the torn tail at %d: %w", off, err)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("placements: %w", err)
	}
	l := &placementLog{f: f, syncFile: f.Sync}
	if len(out) > 0 {
		l.lastSeq, l.syncedSeq = out[len(out)-1].Seq, out[len(out)-1].Seq
	}
	return l, out, nil
}

// append writes p; sync makes it durable.
func (l *placementLog) append(p *lazy.Placement) error {
	if l.f == nil {
		return errors.New("placements: closed")
	}
	body, err := proto.Marshal(placementToProto("", 0, p))
	if err != nil {
		return err
	}
	frame := make([]byte, 8+len(body))
	binary.LittleEndian.PutUint32(frame[:4], uint32(len(body)))
	binary.LittleEndian.PutUint32(frame[4:8], crc32.Checksum(body, castagnoli))
	copy(frame[8:], body)
	if _, err := l.f.Write(frame); err != nil {
		return err
	}
	l.written++
	l.lastSeq = p.Seq
	return nil
}

// syncs says whether a sync policy makes placements durable before they
// are sent on: the opt-outs (interval, never) send them from the page
// cache, as they acknowledge records.
func syncs(policy segment.SyncPolicy) bool {
	return policy == segment.SyncGroup || policy == segment.SyncAlways
}

func (l *placementLog) close() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
