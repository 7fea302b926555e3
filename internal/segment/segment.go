// Package segment is the append-only, crash-recoverable record store of one
// shard on one storage server.
//
// # On-disk layout
//
// A store owns one directory:
//
//	00000000000000000000.seg   segment files, named by the local index of
//	00000000000000004096.seg   their first record (20 zero-padded digits)
//	positions                  the global positions assigned to records (runs)
//	positions.tmp              only while Trim rewrites positions; removed by Open
//	base                       only in a store that Rebase started past 0 (see rebase.go)
//
// Every record and every run is one frame: a 4-byte little-endian body
// length, a 4-byte little-endian CRC-32C (Castagnoli) of the body, then the
// body. A record body is uvarint(ClientID) uvarint(Seq) uvarint(len(Key)) Key
// uvarint(len(Tags)) { uvarint(len(tag)) tag } Payload — the payload is the
// rest of the body, so it needs no length of its own. A run body is six
// uvarints: Cut CutStart CutEnd LocalStart GlobalStart Count.
//
// A run of consecutive no-op indexes is one no-op frame in a segment,
// however many indexes it covers. Its length word has bit 31 set (record
// bodies are at most 64 MiB, so record frames never do), its body is the
// count as one minimal uvarint (>= 1), and its checksum is the CRC-32C of
// the length word followed by the body, so a flipped kind bit fails the
// checksum. A record frame covers one local index and a no-op frame covers
// count of them, in file order.
//
// Segments have no header: a frame is self-describing and a segment's first
// local index is its name, so a segment is valid exactly when all of its
// frames are. Every retained segment keeps an open file descriptor for
// reads, and in memory the offset of every frame (4 bytes per record or
// no-op run) plus 24 bytes per no-op run; no memory is spent per no-op
// index.
//
// # Durability
//
// Open truncates a torn tail of the last segment and of the positions file
// (a bad final frame with no whole frame after it), because that is what a
// crash in the middle of a write leaves behind, and logs a warning. Damage
// anywhere else cannot come from a crash (a segment is fsynced before the
// next one is created, whatever the SyncPolicy) and never drops the records
// after it: they keep their local indexes, and the damaged ones are listed
// by Damaged and fail reads with ErrDamaged (see damage.go).
//
// # Concurrency
//
// A Store is safe for concurrent use. Mutators (Append, Assign, Trim, Sync,
// Close) are serialized by one mutex and are expected to come from a single
// owner goroutine; readers (Read, Scan, Len, Start, Ordered, Runs, Locate,
// GlobalOf) may run concurrently with them. Appends write to the file
// without blocking readers and take the read/write lock only to publish the
// new index entries; readers hold the read lock only while they pread, never
// while a Scan callback runs.
//
// Lock order: wmu, then mu. Functions that need wmu held end in Locked.
//
// The package starts no goroutines.
package segment

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/augur-log/augur/internal/synctrace"
)

// Named bounds. Offsets inside a segment are kept as uint32 to make the
// in-memory index 4 bytes per record, so a segment must stay below 4 GiB:
// it is rolled before an append once it reaches SegmentBytesMax, so it can
// reach at most segmentBytesMaxLimit + appendBytesMax bytes.
const (
	// DefaultSegmentBytes is used when Options.SegmentBytesMax is 0.
	DefaultSegmentBytes = 64 << 20

	// segmentBytesMaxLimit is the largest SegmentBytesMax accepted.
	segmentBytesMaxLimit = 1 << 30
	// segmentFileBytesMax is the largest segment file Open accepts.
	segmentFileBytesMax = math.MaxUint32

	// recordBytesMax bounds the body of one record; a larger length read
	// from disk can only be corruption.
	recordBytesMax = 64 << 20
	// appendBytesMax bounds the encoded frames of one Append call.
	appendBytesMax = 256 << 20
	// appendBufRetainBytesMax bounds the encode buffer kept between appends,
	// so one huge batch does not pin its buffer forever.
	appendBufRetainBytesMax = 4 << 20

	// scanChunkBytesMax bounds one pread of Scan (at least one record is
	// always read, however large).
	scanChunkBytesMax = 1 << 20
	// recoverReadBufBytes is the read-ahead buffer of recovery scans.
	recoverReadBufBytes = 1 << 20
)

const (
	segmentSuffix    = ".seg"
	positionsName    = "positions"
	positionsTmpName = "positions.tmp"
	dirPerm          = 0o755
	filePerm         = 0o644
)

// Sentinel errors; returned errors wrap them with context.
var (
	// ErrTrimmed: the local index is below Start.
	ErrTrimmed = errors.New("segment: record trimmed")
	// ErrOutOfRange: the local index is at or after Len.
	ErrOutOfRange = errors.New("segment: record out of range")
	// ErrCorrupt: stored bytes fail their checksum or do not decode.
	ErrCorrupt = errors.New("segment: corrupt data")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("segment: store closed")
	// ErrInvalid: bad input to Append or Assign (empty batch, oversized
	// record, run that does not extend the ordered prefix); nothing changed.
	ErrInvalid = errors.New("segment: invalid argument")
)

// SyncPolicy says when records and runs are fsynced.
type SyncPolicy int

const (
	// SyncNever: never fsync on Append or Assign; only Sync, Trim and
	// segment rollover fsync.
	SyncNever SyncPolicy = iota
	// SyncInterval: like SyncNever; the owner calls Sync on its own ticker.
	SyncInterval
	// SyncAlways: Append and Assign fsync before returning (and before the
	// new records or runs become visible to readers).
	SyncAlways
	// SyncGroup: like SyncNever for Append and Assign; the owner calls
	// Sync back to back (group commit: one fsync covers everything written
	// while the previous one ran) and counts a record as held only once
	// SyncedLen covers it.
	SyncGroup
)

// ParseSyncPolicy parses "group", "never", "interval" or "always".
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	switch s {
	case "group":
		return SyncGroup, nil
	case "never":
		return SyncNever, nil
	case "interval":
		return SyncInterval, nil
	case "always":
		return SyncAlways, nil
	}
	return 0, fmt.Errorf("segment: unknown sync policy %q (want group, never, interval or always)", s)
}

func (p SyncPolicy) String() string {
	switch p {
	case SyncNever:
		return "never"
	case SyncInterval:
		return "interval"
	case SyncAlways:
		return "always"
	case SyncGroup:
		return "group"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// Options configure Open.
type Options struct {
	Dir             string     // created if missing; one store per directory (not locked: the caller must not open it twice)
	SegmentBytesMax int64      // roll over once the active segment reaches this size; 0 means DefaultSegmentBytes
	Sync            SyncPolicy // see SyncPolicy
	// Logger gets recovery's warnings (torn tails cut off) and damage
	// reports; nil means slog.Default().
	Logger *slog.Logger
}

func (o Options) validate() (Options, error) {
	if o.Dir == "" {
		return o, fmt.Errorf("segment: options: empty Dir")
	}
	if o.SegmentBytesMax == 0 {
		o.SegmentBytesMax = DefaultSegmentBytes
	}
	if o.SegmentBytesMax < 0 || o.SegmentBytesMax > segmentBytesMaxLimit {
		return o, fmt.Errorf("segment: options: SegmentBytesMax %d outside [1, %d]", o.SegmentBytesMax, segmentBytesMaxLimit)
	}
	if o.Sync < SyncNever || o.Sync > SyncGroup {
		return o, fmt.Errorf("segment: options: unknown sync policy %v", o.Sync)
	}
	return o, nil
}

// Entry is one stored record, or a run of no-op indexes. Local indexes are
// dense from 0 in append order; a record takes one, a no-op run takes
// Noops of them. Entries returned by Read and Scan are owned by the caller;
// empty Tags and Payload come back as nil.
type Entry struct {
	ClientID uint64
	Seq      uint64
	Key      string
	Tags     []string
	Payload  []byte
	// Noops, when > 0, makes the entry a run of that many no-op indexes
	// (fillers that take local indexes and global positions but hold no
	// data); every other field is then zero or empty. Read and Scan return
	// a run as the no-op indexes from the index asked for to the end of the
	// stored run.
	Noops uint64
}

// isNoop says whether e is a run of no-op indexes.
func (e *Entry) isNoop() bool { return e.Noops > 0 }

// carriesData says whether any field other than Noops is set.
func (e *Entry) carriesData() bool {
	return e.ClientID != 0 || e.Seq != 0 || e.Key != "" || len(e.Tags) != 0 || len(e.Payload) != 0
}

// Run says that local indexes [LocalStart, LocalStart+Count) (records and
// no-ops alike) hold global positions [GlobalStart, GlobalStart+Count),
// assigned by cut number Cut, which as a whole covers global positions
// [CutStart, CutEnd).
type Run struct {
	Cut, CutStart, CutEnd, LocalStart, GlobalStart, Count uint64
}

// segment is one segment file. base and f never change. offsets, noops,
// indexes and size grow only under Store.mu held for writing; readers read
// them under Store.mu held for reading.
type segment struct {
	base uint64
	f    *os.File
	// offsets[k] is the file offset of frame k; frames are packed, so frame
	// k ends where frame k+1 starts, or at size. Without no-op frames,
	// frame k is record base+k.
	offsets []uint32
	// noops lists the no-op frames in ascending order. Every frame not
	// listed is a record covering one index, so the indexes of any frame
	// follow from the nearest no-op frame before it (see locate), and a run
	// of thousands of no-ops costs one entry here and one offset rather
	// than a slot per index.
	noops []noopFrame
	// indexes is the number of local indexes the published frames cover.
	indexes uint64
	// size is the number of bytes holding published frames. Bytes past it
	// are being written by an Append and must not be read.
	size int64
}

// noopFrame describes one no-op frame of a segment: frame number (an index
// into offsets) and the local indexes [first, end) it covers. A segment is
// below 4 GiB and a frame at least 9 bytes, so frame numbers fit a uint32.
type noopFrame struct {
	frame      uint32
	first, end uint64
}

func (g *segment) end() uint64 { return g.base + g.indexes }

// locate returns the frame holding local, which must be in [base, end()),
// and the local indexes [first, end) that frame covers.
func (g *segment) locate(local uint64) (k int, first, end uint64) {
	j := sort.Search(len(g.noops), func(j int) bool { return g.noops[j].first > local }) - 1
	if j < 0 {
		return int(local - g.base), local, local + 1
	}
	nf := &g.noops[j]
	if local < nf.end {
		return int(nf.frame), nf.first, nf.end
	}
	// Records only between that no-op frame and local.
	return int(nf.frame) + 1 + int(local-nf.end), local, local + 1
}

// firstNoopFrom returns the position in noops of the first no-op frame
// numbered k or later.
func (g *segment) firstNoopFrom(k int) int {
	return sort.Search(len(g.noops), func(j int) bool { return int(g.noops[j].frame) >= k })
}

// frameEnd returns where frame k ends in the file.
func (g *segment) frameEnd(k int) int64 {
	if k+1 < len(g.offsets) {
		return int64(g.offsets[k+1])
	}
	return g.size
}

// Store is the record store of one shard. See the package comment for its
// concurrency contract.
type Store struct {
	opts Options

	// wmu serializes mutators. Fields below it up to mu are touched only
	// with wmu held.
	wmu sync.Mutex
	// failed is sticky: after an I/O error whose effect on disk is unknown
	// (a failed write or fsync) the store refuses further writes; reopening
	// recovers from whatever reached the disk.
	failed      error
	activeDirty bool // the active segment holds written but unsynced bytes
	pos         *os.File
	posSize     int64 // bytes of whole run frames in the positions file
	posFileRuns int   // run frames in the positions file, >= len(runs)
	posDirty    bool  // the positions file holds unsynced bytes
	buf         []byte
	offBuf      []uint32
	noopBuf     []noopFrame
	// base is the local index the store started at: 0, or what Rebase
	// set (see rebase.go).
	base uint64

	// mu guards the fields below. Mutators write them with wmu and mu held,
	// so a wmu holder may read them without mu.
	mu     sync.RWMutex
	closed bool
	// segs is ascending and contiguous: segs[i].end() == segs[i+1].base.
	// The last one is the active segment. Never empty while open.
	segs   []*segment
	start  uint64 // == segs[0].base
	length uint64 // == segs[len(segs)-1].end()
	// runs is contiguous in local indexes and strictly increasing in Cut
	// and GlobalStart; it covers [runs[0].LocalStart, ordered) and
	// runs[0].LocalStart <= start. The last run is never dropped by Trim so
	// that ordered and the monotonicity checks survive trims and restarts.
	runs    []Run
	ordered uint64 // == end of the last run, or 0; start <= ordered <= length once anything is trimmed

	// synced is a lower bound of the local indexes that survive a crash:
	// raised after each fsync of the segments, never lowered. It starts at
	// 0 on Open: recovery cannot tell which of the bytes it found reached
	// the disk rather than the page cache.
	synced atomic.Uint64
	// damaged lists the ranges Open found damaged, ascending; ranges below
	// start stay until reopen but are hidden by Damaged.
	damaged []DamagedRange
}

// Len returns the next local index: the number of local indexes ever
// appended, each record counting one and each no-op run its Noops.
func (s *Store) Len() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.length
}

// Start returns the first local index still stored.
func (s *Store) Start() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.start
}

// Ordered returns the number of local indexes (records and no-ops) that
// have a global position.
func (s *Store) Ordered() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ordered
}

// SyncedLen returns how many local indexes survive a crash now, at least:
// everything appended before the last fsync of the segments.
func (s *Store) SyncedLen() uint64 { return s.synced.Load() }

// noteSynced raises synced to n.
func (s *Store) noteSynced(n uint64) {
	for {
		cur := s.synced.Load()
		if n <= cur || s.synced.CompareAndSwap(cur, n) {
			return
		}
	}
}

func (s *Store) active() *segment { return s.segs[len(s.segs)-1] }

// writableLocked says why the store cannot take writes, if it cannot.
func (s *Store) writableLocked() error {
	if s.closed {
		return ErrClosed
	}
	if s.failed != nil {
		return fmt.Errorf("segment: store failed earlier, reopen to recover: %w", s.failed)
	}
	return nil
}

// Sync fsyncs whatever is written but not yet synced: the active segment
// first, then the positions file, so that runs rarely outlive the records
// they describe. It is a cheap no-op when nothing is dirty.
func (s *Store) Sync() error { return s.sync(true) }

// SyncRecords fsyncs the records written but not yet synced, and not the
// positions file: the group commit of records need not wait for runs,
// which the ordering layer holds anyway (Sync or Close writes them later).
func (s *Store) SyncRecords() error { return s.sync(false) }

func (s *Store) sync(positions bool) error {
	// fsync runs outside wmu so appends go on while the disk catches up; an
	// *os.File stays valid for a Sync in progress even if a rollover or a
	// trim closes it meanwhile (that path syncs the file itself first).
	s.wmu.Lock()
	if err := s.writableLocked(); err != nil {
		s.wmu.Unlock()
		return err
	}
	var files []*os.File
	if s.activeDirty {
		files = append(files, s.active().f)
		s.activeDirty = false
	}
	if positions && s.posDirty {
		files = append(files, s.pos)
		s.posDirty = false
	}
	// Mutators hold wmu, so the length is that of the bytes written.
	length := s.length
	s.wmu.Unlock()
	for _, f := range files {
		if err := fsync(f); err != nil && !errors.Is(err, os.ErrClosed) {
			s.wmu.Lock()
			s.failed = err
			s.wmu.Unlock()
			return fmt.Errorf("segment: sync %s: %w", f.Name(), err)
		}
	}
	s.noteSynced(length)
	return nil
}

// syncLocked fsyncs the active segment and the positions file. It fsyncs
// the segment even when nothing is dirty: a Sync that took the dirty
// segment may still be fsyncing it, and noteSynced must not count those
// records first.
func (s *Store) syncLocked() error {
	if err := fsync(s.active().f); err != nil {
		s.failed = err
		return fmt.Errorf("segment: sync %s: %w", s.segmentPath(s.active().base), err)
	}
	s.activeDirty = false
	s.noteSynced(s.length)
	if s.posDirty {
		if err := fsync(s.pos); err != nil {
			s.failed = err
			return fmt.Errorf("segment: sync positions: %w", err)
		}
		s.posDirty = false
	}
	return nil
}

// Close syncs (unless the policy is SyncNever) and closes the store.
// Closing a closed store is a no-op.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return nil
	}
	var errs []error
	if s.failed == nil && s.opts.Sync != SyncNever {
		errs = append(errs, s.syncLocked())
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	// Readers hold mu while they pread, so no read is in flight on these
	// files any more.
	errs = append(errs, s.closeFiles())
	return errors.Join(errs...)
}

func (s *Store) closeFiles() error {
	var errs []error
	for _, g := range s.segs {
		if err := g.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("segment: close %s: %w", s.segmentPath(g.base), err))
		}
	}
	if s.pos != nil {
		if err := s.pos.Close(); err != nil {
			errs = append(errs, fmt.Errorf("segment: close positions: %w", err))
		}
	}
	return errors.Join(errs...)
}

// invariantf panics: an internal invariant is broken, which is a bug in
// this package, not an input or disk problem. Callers test the condition
// themselves so the arguments are only boxed on the failure path.
func invariantf(format string, args ...any) {
	panic(fmt.Sprintf("segment: invariant violated: "+format, args...))
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// fsyncHook, when a test sets it, sees every file just before the store
// fsyncs it. Nil outside tests.
var fsyncHook func(f *os.File)

// fsync fsyncs f (through synctrace, which tests of power loss watch).
func fsync(f *os.File) error {
	if fsyncHook != nil {
		fsyncHook(f)
	}
	return synctrace.Sync(f)
}
