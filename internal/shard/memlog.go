package shard

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/augur-log/augur/internal/segment"
)

// MemLog is a Log in memory, the twin of segment.Store for simulations
// and emulated shards. Like a store on disk it keeps every write as whole
// frames (a record, or a run of no-ops coalesced within one Append), and
// it can crash: Crash loses everything not synced, CrashTorn keeps a
// prefix of the unsynced frames, as the recovery of a torn write would
// find them. It is safe for concurrent use.
type MemLog struct {
	mu sync.Mutex
	// frames are the retained frames, oldest first; frame i covers local
	// indexes [frames[i].first, frames[i].first+covers).
	frames []memFrame
	start  uint64 // first retained local index
	// base is where Rebase started the log (0 if it never did): the
	// ordered length while no run is retained.
	base   uint64
	length uint64
	runs   []segment.Run
	// synced is how many local indexes survive a crash; unsyncedRuns how
	// many of the last runs do not.
	synced       uint64
	unsyncedRuns int
	// failErr, once set, fails every write, as a disk that broke would.
	failErr error
	// damaged lists the ranges Damage marked, ascending; their frames
	// hold garbage, and Scan stops before them, as a store's reads fail.
	damaged []segment.DamagedRange
}

type memFrame struct {
	first uint64
	e     segment.Entry
}

func (f *memFrame) covers() uint64 { return max(f.e.Noops, 1) }

// NewMemLog returns an empty log.
func NewMemLog() *MemLog { return &MemLog{} }

var errMemLogEmptyAppend = errors.New("memlog: append: empty batch")

// Append stores entries as new frames. It copies the records' bytes, as
// a write to disk would.
func (m *MemLog) Append(entries []segment.Entry) (uint64, error) {
	if len(entries) == 0 {
		return 0, errMemLogEmptyAppend
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failErr != nil {
		return 0, fmt.Errorf("memlog: append: %w", m.failErr)
	}
	first := m.length
	for i := 0; i < len(entries); i++ {
		e := entries[i]
		if e.Noops > 0 {
			// Consecutive no-op runs of one batch make one frame.
			for i+1 < len(entries) && entries[i+1].Noops > 0 {
				i++
				e.Noops += entries[i].Noops
			}
		} else {
			e.Tags = append([]string(nil), e.Tags...)
			e.Payload = append([]byte(nil), e.Payload...)
		}
		m.frames = append(m.frames, memFrame{first: m.length, e: e})
		m.length += max(e.Noops, 1)
	}
	return first, nil
}

// Len is the number of local indexes appended.
func (m *MemLog) Len() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.length
}

// Start is the first local index retained.
func (m *MemLog) Start() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.start
}

// Ordered is the number of local indexes with a global position.
func (m *MemLog) Ordered() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.orderedLocked()
}

func (m *MemLog) orderedLocked() uint64 {
	if len(m.runs) == 0 {
		return m.base
	}
	r := m.runs[len(m.runs)-1]
	return r.LocalStart + r.Count
}

// Assign records run, checked as segment.Store checks it.
func (m *MemLog) Assign(run segment.Run) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failErr != nil {
		return fmt.Errorf("memlog: assign: %w", m.failErr)
	}
	ordered := m.orderedLocked()
	switch {
	case run.Count == 0:
		return fmt.Errorf("memlog: assign: run %+v is empty", run)
	case run.LocalStart != ordered:
		return fmt.Errorf("memlog: assign: run %+v does not start at the first unordered index %d", run, ordered)
	case run.LocalStart+run.Count > m.length:
		return fmt.Errorf("memlog: assign: run %+v reaches past the last index %d", run, m.length)
	case run.CutStart > run.GlobalStart || run.GlobalStart+run.Count > run.CutEnd:
		return fmt.Errorf("memlog: assign: run %+v lies outside its cut's range", run)
	}
	if n := len(m.runs); n > 0 {
		prev := m.runs[n-1]
		if run.Cut <= prev.Cut || run.CutStart < prev.CutEnd || run.GlobalStart < prev.GlobalStart+prev.Count {
			return fmt.Errorf("memlog: assign: run %+v does not follow run %+v", run, prev)
		}
	}
	m.runs = append(m.runs, run)
	m.unsyncedRuns++
	return nil
}

// GlobalOf returns the global position of local index local.
func (m *MemLog) GlobalOf(local uint64) (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.runs), func(i int) bool { return m.runs[i].LocalStart > local }) - 1
	if i < 0 {
		return 0, false
	}
	r := m.runs[i]
	if d := local - r.LocalStart; d < r.Count {
		return r.GlobalStart + d, true
	}
	return 0, false
}

// Runs returns the retained runs with CutEnd > fromGlobal.
func (m *MemLog) Runs(fromGlobal uint64) []segment.Run {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.runs), func(i int) bool { return m.runs[i].CutEnd > fromGlobal })
	return append([]segment.Run(nil), m.runs[i:]...)
}

// Scan calls fn with each retained entry from local index from on (a
// no-op run from the index asked for to its end) until fn returns false.
// fn must not call the log.
func (m *MemLog) Scan(from uint64, fn func(local uint64, e segment.Entry) bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	from = max(from, m.start)
	k := sort.Search(len(m.frames), func(k int) bool { return m.frames[k].first+m.frames[k].covers() > from })
	for ; k < len(m.frames); k++ {
		f := m.frames[k]
		e := f.e
		at := max(from, f.first)
		if m.damagedAtLocked(at) {
			return fmt.Errorf("memlog: scan at %d: %w", at, segment.ErrDamaged)
		}
		if e.Noops > 0 {
			e.Noops = f.first + f.e.Noops - at
		}
		if !fn(at, e) {
			return nil
		}
	}
	return nil
}

// Trim drops, oldest first, whole frames that are ordered at global
// positions below global, keeping the last frame and the last run. Like
// segment.Store, it syncs first.
func (m *MemLog) Trim(global uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failErr != nil {
		return fmt.Errorf("memlog: trim: %w", m.failErr)
	}
	m.syncLocked()
	ordered := m.orderedLocked()
	k := 0
	for ; k < len(m.frames)-1; k++ {
		f := m.frames[k]
		end := f.first + f.covers()
		if end > ordered {
			break
		}
		if pos, ok := m.globalOfLocked(end - 1); !ok || pos >= global {
			break
		}
	}
	if k == 0 {
		return nil
	}
	// In place: an emulated shard trims after every cut.
	m.start = m.frames[k].first
	n := copy(m.frames, m.frames[k:])
	clear(m.frames[n:])
	m.frames = m.frames[:n]
	keep := 0
	for keep < len(m.runs)-1 && m.runs[keep].LocalStart+m.runs[keep].Count <= m.start {
		keep++
	}
	m.runs = m.runs[:copy(m.runs, m.runs[keep:])]
	return nil
}

func (m *MemLog) globalOfLocked(local uint64) (uint64, bool) {
	i := sort.Search(len(m.runs), func(i int) bool { return m.runs[i].LocalStart > local }) - 1
	if i < 0 {
		return 0, false
	}
	if d := local - m.runs[i].LocalStart; d < m.runs[i].Count {
		return m.runs[i].GlobalStart + d, true
	}
	return 0, false
}

// Sync makes everything written so far survive a crash.
func (m *MemLog) Sync() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failErr != nil {
		return fmt.Errorf("memlog: sync: %w", m.failErr)
	}
	m.syncLocked()
	return nil
}

func (m *MemLog) syncLocked() {
	m.synced = m.length
	m.unsyncedRuns = 0
}

// SyncedLen is how many local indexes survive a crash.
func (m *MemLog) SyncedLen() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.synced
}

// Fail makes every later write fail with err, as a broken disk would.
func (m *MemLog) Fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failErr = err
}

// Crash loses everything not synced, as a machine that loses power does:
// what recovery finds is the synced prefix.
func (m *MemLog) Crash() { m.CrashTorn(0) }

// CrashTorn is a crash in the middle of writing out the unsynced tail: of
// the frames past the synced length, the first keep reached the disk
// whole, and the next one was torn, so recovery drops it and everything
// after it. Runs not synced are lost; runs over lost entries are dropped,
// as segment.Store's recovery drops them. A later write succeeds again.
func (m *MemLog) CrashTorn(keep int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := sort.Search(len(m.frames), func(k int) bool { return m.frames[k].first >= m.synced })
	k = min(k+keep, len(m.frames))
	if k < len(m.frames) {
		m.length = m.frames[k].first
		clear(m.frames[k:])
		m.frames = m.frames[:k]
	}
	m.runs = m.runs[:len(m.runs)-m.unsyncedRuns]
	for i, r := range m.runs {
		if r.LocalStart+r.Count > m.length {
			m.runs = m.runs[:i]
			break
		}
	}
	m.synced = m.length
	m.unsyncedRuns = 0
	m.failErr = nil
	for i, d := range m.damaged {
		if d.End > m.length {
			m.damaged = m.damaged[:i]
			break
		}
	}
}

// damagedAtLocked says whether local lies in a damaged range.
func (m *MemLog) damagedAtLocked(local uint64) bool {
	i := sort.Search(len(m.damaged), func(i int) bool { return m.damaged[i].End > local })
	return i < len(m.damaged) && m.damaged[i].First <= local
}

// Damage damages the frames holding local indexes [first, end), as bytes
// flipped on disk that a restart finds: the range (widened to whole
// frames) is listed by Damaged, and its records hold garbage that Scan
// never returns. Only a log no Replica runs over yet (a restart) should be
// damaged. It returns the range damaged; ok is false if there was nothing
// to damage there (trimmed, past the end, or damaged already).
func (m *MemLog) Damage(first, end uint64) (d segment.DamagedRange, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	first, end = max(first, m.start), min(end, m.length)
	if first >= end {
		return d, false
	}
	k := sort.Search(len(m.frames), func(k int) bool { return m.frames[k].first+m.frames[k].covers() > first })
	j := sort.Search(len(m.frames), func(j int) bool { return m.frames[j].first >= end })
	d = segment.DamagedRange{First: m.frames[k].first, End: m.frames[j-1].first + m.frames[j-1].covers(), File: "memlog", Reason: "damaged by the simulator"}
	i := sort.Search(len(m.damaged), func(i int) bool { return m.damaged[i].End > d.First })
	if i < len(m.damaged) && m.damaged[i].First < d.End {
		return d, false
	}
	for x := k; x < j; x++ {
		if m.frames[x].e.Noops == 0 {
			m.frames[x].e.Seq ^= 1 << 40 // garbage a reader must never see
		}
	}
	m.damaged = append(m.damaged, segment.DamagedRange{})
	copy(m.damaged[i+1:], m.damaged[i:])
	m.damaged[i] = d
	return d, true
}

// Damaged lists the damaged ranges at or after the first retained index.
func (m *MemLog) Damaged() []segment.DamagedRange {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.damaged), func(i int) bool { return m.damaged[i].End > m.start })
	return append([]segment.DamagedRange(nil), m.damaged[i:]...)
}

// Repair replaces the frames of the damaged range at first with entries'
// frames (consecutive no-op runs coalesced, as Append does), checked as
// segment.Store checks them.
func (m *MemLog) Repair(first uint64, entries []segment.Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failErr != nil {
		return fmt.Errorf("memlog: repair: %w", m.failErr)
	}
	i := sort.Search(len(m.damaged), func(i int) bool { return m.damaged[i].First >= first })
	if i == len(m.damaged) || m.damaged[i].First != first || first < m.start {
		return fmt.Errorf("memlog: repair: no damaged range starts at %d", first)
	}
	d := m.damaged[i]
	var frames []memFrame
	at := d.First
	for x := 0; x < len(entries); x++ {
		e := entries[x]
		if e.Noops > 0 {
			for x+1 < len(entries) && entries[x+1].Noops > 0 {
				x++
				e.Noops += entries[x].Noops
			}
		} else {
			e.Tags = append([]string(nil), e.Tags...)
			e.Payload = append([]byte(nil), e.Payload...)
		}
		frames = append(frames, memFrame{first: at, e: e})
		at += max(e.Noops, 1)
		if at > d.End {
			break
		}
	}
	if at != d.End {
		return fmt.Errorf("memlog: repair: entries cover [%d, %d), the damaged range is [%d, %d)", d.First, at, d.First, d.End)
	}
	k := sort.Search(len(m.frames), func(k int) bool { return m.frames[k].first >= d.First })
	j := sort.Search(len(m.frames), func(j int) bool { return m.frames[j].first >= d.End })
	m.frames = append(m.frames[:k], append(frames, m.frames[j:]...)...)
	m.damaged = append(m.damaged[:i], m.damaged[i+1:]...)
	return nil
}

// Truncate drops the local indexes from from on, checked as
// segment.Store checks it: from lies in [Ordered, Len]; a no-op frame it
// cuts keeps its indexes below from. What is left counts as synced.
func (m *MemLog) Truncate(from uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failErr != nil {
		return fmt.Errorf("memlog: truncate: %w", m.failErr)
	}
	if from < m.orderedLocked() || from > m.length || from < m.start {
		return fmt.Errorf("memlog: truncate at %d: outside [%d, %d]", from, max(m.orderedLocked(), m.start), m.length)
	}
	if from == m.length {
		return nil
	}
	k := sort.Search(len(m.frames), func(k int) bool { return m.frames[k].first+m.frames[k].covers() > from })
	if k < len(m.frames) && m.frames[k].first < from {
		m.frames[k].e.Noops = from - m.frames[k].first
		k++
	}
	clear(m.frames[k:])
	m.frames = m.frames[:k]
	m.length = from
	m.synced = min(m.synced, from)
	m.syncLocked()
	for i, d := range m.damaged {
		if d.End > from {
			m.damaged = m.damaged[:i]
			if d.First < from {
				d.End = from
				m.damaged = append(m.damaged, d)
			}
			break
		}
	}
	return nil
}

// Rebase starts the log empty at base, checked as segment.Store checks
// it. The base survives crashes; nothing else of the old log does.
func (m *MemLog) Rebase(base uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failErr != nil {
		return fmt.Errorf("memlog: rebase: %w", m.failErr)
	}
	if base < m.length {
		return fmt.Errorf("memlog: rebase at %d: below the length %d", base, m.length)
	}
	clear(m.frames)
	m.frames = m.frames[:0]
	m.runs = nil
	m.damaged = nil
	m.base, m.start, m.length, m.synced, m.unsyncedRuns = base, base, base, base, 0
	return nil
}
