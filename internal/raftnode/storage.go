package raftnode

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// diskStorage is raft's MemoryStorage made durable by the WAL and the
// snapshot file. It is used by the driver goroutine only (raft reads ms from
// the same goroutine).
//
// Invariant: ms holds nothing that is not yet written: entries, hard states
// and snapshots reach ms only after the WAL (and snapshot file) write
// returned. Rotation copies the log tail from ms, so it never persists
// anything raft has not seen persisted.
type diskStorage struct {
	dir       string
	ms        *raft.MemoryStorage
	wal       *wal
	hardState *pb.HardState // last written; carried into each new segment
	lock      *os.File
	log       *slog.Logger
}

// openStorage loads the newest snapshot and replays the WAL into a
// MemoryStorage. A new directory starts from a log-less state whose ConfState
// is bootstrap, so every replica of a fresh cluster starts identical without
// conf-change entries. The returned snapshot is nil if there is none.
func openStorage(dir string, fsync bool, bootstrap *pb.ConfState, log *slog.Logger) (_ *diskStorage, _ *pb.Snapshot, err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, nil, fmt.Errorf("create data directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	snap, err := loadNewestSnapshot(dir)
	if err != nil {
		return nil, nil, err
	}
	w, st, err := openWAL(dir, fsync, log)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			_ = w.close()
		}
	}()

	base := snap
	if base == nil {
		base = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{ConfState: bootstrap}}
	}
	snapIndex, snapTerm := base.GetMetadata().GetIndex(), base.GetMetadata().GetTerm()
	ents, err := reconcile(snapIndex, snapTerm, st)
	if err != nil {
		return nil, nil, err
	}
	hs := &pb.HardState{}
	if st.hardState != nil {
		hs = proto.Clone(st.hardState).(*pb.HardState)
	}
	last := snapIndex + uint64(len(ents))
	// The snapshot is committed; a crash between writing it and the WAL
	// marker can leave an older hard state behind. Raising the term without
	// a vote is safe: a vote in that term would have been persisted.
	if hs.GetCommit() < snapIndex {
		hs.Commit = new(snapIndex)
	}
	if hs.GetTerm() < snapTerm {
		hs.Term, hs.Vote = new(snapTerm), new(uint64(0))
	}
	if hs.GetCommit() > last {
		if fsync {
			return nil, nil, fmt.Errorf("wal: commit index %d beyond last entry %d", hs.GetCommit(), last)
		}
		// Without fsync a machine crash may lose the tail; the entries are
		// fetched from the leader again.
		log.Warn("raft wal: commit index beyond the log, lowered", "commit", hs.GetCommit(), "last", last)
		hs.Commit = new(last)
	}

	ms := raft.NewMemoryStorage()
	if err := ms.ApplySnapshot(base); err != nil {
		return nil, nil, fmt.Errorf("load snapshot %d: %w", snapIndex, err)
	}
	if err := ms.Append(ents); err != nil {
		return nil, nil, fmt.Errorf("load wal entries: %w", err)
	}
	if err := ms.SetHardState(hs); err != nil {
		return nil, nil, fmt.Errorf("load hard state: %w", err)
	}
	s := &diskStorage{dir: dir, ms: ms, wal: w, hardState: hs, lock: lock, log: log}
	return s, snap, nil
}

// reconcile returns the replayed entries after the snapshot at (index,
// term). The WAL normally starts exactly at the snapshot; it starts earlier
// when a crash came between writing a snapshot file and rotating the WAL.
func reconcile(index, term uint64, st *walState) ([]*pb.Entry, error) {
	switch {
	case index < st.baseIndex:
		return nil, fmt.Errorf("wal starts after index %d but the newest snapshot is at %d: snapshot missing", st.baseIndex, index)
	case index == st.baseIndex:
		if term != st.baseTerm {
			return nil, fmt.Errorf("wal starts at term %d, snapshot %d has term %d", st.baseTerm, index, term)
		}
		return st.ents, nil
	}
	if t, ok := st.termAt(index); ok && t == term {
		return st.ents[index-st.baseIndex:], nil
	}
	// The log ended before the snapshot or diverged from it; raft discards
	// such a log when it installs the snapshot, and so do we.
	return nil, nil
}

// saveReady persists one Ready's snapshot, entries and hard state: one WAL
// write and at most one WAL fsync.
func (s *diskStorage) saveReady(rd *raft.Ready) error {
	if !raft.IsEmptySnap(rd.Snapshot) {
		return s.installSnapshot(rd.Snapshot, rd.Entries, rd.HardState)
	}
	if err := s.wal.append(nil, rd.Entries, rd.HardState, rd.MustSync); err != nil {
		return err
	}
	if rd.HardState != nil {
		s.hardState = rd.HardState
		_ = s.ms.SetHardState(rd.HardState)
	}
	if err := s.ms.Append(rd.Entries); err != nil {
		return fmt.Errorf("append to memory storage: %w", err)
	}
	return nil
}

// installSnapshot persists a snapshot received from the leader. raft
// discards the whole log when it installs one, so the WAL is rotated to hold
// just the snapshot marker and what follows.
func (s *diskStorage) installSnapshot(snap *pb.Snapshot, ents []*pb.Entry, hs *pb.HardState) error {
	if err := writeSnapshotFile(s.dir, snap); err != nil {
		return err
	}
	if hs == nil {
		hs = s.hardState
	}
	if err := s.wal.rotate(snap.GetMetadata(), ents, hs); err != nil {
		return fmt.Errorf("rotate wal after snapshot %d: %w", snap.GetMetadata().GetIndex(), err)
	}
	s.hardState = hs
	_ = s.ms.SetHardState(hs)
	if err := s.ms.ApplySnapshot(snap); err != nil {
		return fmt.Errorf("apply snapshot %d to memory storage: %w", snap.GetMetadata().GetIndex(), err)
	}
	if err := s.ms.Append(ents); err != nil {
		return fmt.Errorf("append to memory storage: %w", err)
	}
	return nil
}

// snapshot records the FSM state at applied index, rotates the WAL past it
// and compacts the in-memory log, keeping catchUp entries for followers that
// lag a little.
func (s *diskStorage) snapshot(applied uint64, cs *pb.ConfState, data []byte, catchUp uint64) error {
	snap, err := s.ms.CreateSnapshot(applied, cs, data)
	if err != nil {
		return fmt.Errorf("create snapshot %d: %w", applied, err)
	}
	if err := writeSnapshotFile(s.dir, snap); err != nil {
		return err
	}
	last, _ := s.ms.LastIndex()
	var tail []*pb.Entry
	if last > applied {
		if tail, err = s.ms.Entries(applied+1, last+1, math.MaxUint64); err != nil {
			return fmt.Errorf("read log tail after %d: %w", applied, err)
		}
	}
	if err := s.wal.rotate(snap.GetMetadata(), tail, s.hardState); err != nil {
		return fmt.Errorf("rotate wal after snapshot %d: %w", applied, err)
	}
	compact := applied - min(catchUp, applied)
	if first, _ := s.ms.FirstIndex(); compact >= first {
		if err := s.ms.Compact(compact); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return fmt.Errorf("compact log to %d: %w", compact, err)
		}
	}
	return nil
}

func (s *diskStorage) close() error {
	err := s.wal.close()
	if cerr := s.lock.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("release lock: %w", cerr)
	}
	return err
}
