package raftnode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A snapshot file is named %016x.snap after its raft index and holds
//
//	magic   "augsnp01"
//	length  uint64 LE  payload bytes
//	crc     uint32 LE  CRC-32C (Castagnoli) of payload
//	payload []byte     a marshalled raftpb.Snapshot: FSM data and metadata
//	                   (index, term, ConfState)
//
// Only the newest snapshot is kept: once it is durable the WAL is rotated
// past it, so an older one could not be combined with the WAL anyway.
const (
	snapMagic       = "augsnp01"
	snapHeaderBytes = len(snapMagic) + 8 + 4
	snapExt         = ".snap"
)

func snapshotName(index uint64) string { return fmt.Sprintf("%016x%s", index, snapExt) }

func listSnapshots(dir string) ([]uint64, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*"+snapExt))
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var idxs []uint64
	for _, name := range names {
		base := strings.TrimSuffix(filepath.Base(name), snapExt)
		idx, err := strconv.ParseUint(base, 16, 64)
		if err != nil || len(base) != 16 {
			return nil, fmt.Errorf("unexpected file %s in snapshot directory", name)
		}
		idxs = append(idxs, idx)
	}
	slices.Sort(idxs)
	return idxs, nil
}

// writeSnapshotFile makes snap durable under its index and then removes the
// older snapshot files.
func writeSnapshotFile(dir string, snap *pb.Snapshot) error {
	index := snap.GetMetadata().GetIndex()
	payload, err := proto.Marshal(snap)
	if err != nil {
		return fmt.Errorf("encode snapshot %d: %w", index, err)
	}
	data := make([]byte, snapHeaderBytes, snapHeaderBytes+len(payload))
	copy(data, snapMagic)
	binary.LittleEndian.PutUint64(data[len(snapMagic):], uint64(len(payload)))
	binary.LittleEndian.PutUint32(data[len(snapMagic)+8:], crc32.Checksum(payload, crcTable))
	data = append(data, payload...)
	if err := writeFileAtomic(filepath.Join(dir, snapshotName(index)), data); err != nil {
		return fmt.Errorf("write snapshot %d: %w", index, err)
	}
	idxs, err := listSnapshots(dir)
	if err != nil {
		return err
	}
	for _, old := range idxs {
		if old < index {
			if err := os.Remove(filepath.Join(dir, snapshotName(old))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove old snapshot %d: %w", old, err)
			}
		}
	}
	return nil
}

// loadNewestSnapshot returns the newest snapshot in dir, or nil if there is
// none. A damaged newest snapshot is an error, not a reason to fall back: the
// WAL before it may already be gone.
func loadNewestSnapshot(dir string) (*pb.Snapshot, error) {
	idxs, err := listSnapshots(dir)
	if err != nil || len(idxs) == 0 {
		return nil, err
	}
	index := idxs[len(idxs)-1]
	path := filepath.Join(dir, snapshotName(index))
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	if len(data) < snapHeaderBytes || !bytes.HasPrefix(data, []byte(snapMagic)) {
		return nil, fmt.Errorf("snapshot %s: bad header", path)
	}
	n := binary.LittleEndian.Uint64(data[len(snapMagic):])
	payload := data[snapHeaderBytes:]
	if uint64(len(payload)) != n {
		return nil, fmt.Errorf("snapshot %s: %d payload bytes, header says %d", path, len(payload), n)
	}
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(data[len(snapMagic)+8:]) {
		return nil, fmt.Errorf("snapshot %s: checksum mismatch", path)
	}
	snap := new(pb.Snapshot)
	if err := proto.Unmarshal(payload, snap); err != nil {
		return nil, fmt.Errorf("snapshot %s: decode: %w", path, err)
	}
	if got := snap.GetMetadata().GetIndex(); got != index {
		return nil, fmt.Errorf("snapshot %s: holds index %d", path, got)
	}
	return snap, nil
}
