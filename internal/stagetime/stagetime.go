// Package stagetime times the stages of the append path inside an
// embedded cluster, so that `augur bench` can say where an append's time
// goes (the durable default against its opt-outs, for one). It is off
// unless the bench turns it on (Start); off, every hook is one atomic
// load. The servers of an embedded cluster share the process and so the
// package's histograms; a stage is timed where it happens, by the server
// that sees both of its ends.
package stagetime

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Stage names one timed stage.
type Stage int

// The stages of an eager append, in the order they happen. A batch is
// what a primary's loop writes at once, or a backup's store receives.
const (
	// IssueLag: an open-loop append was due until the load generator
	// issued it (the generator's own delay, on a busy machine).
	IssueLag Stage = iota
	// AppendQueue: a primary received an append request until its loop
	// took it.
	AppendQueue
	// PrimaryWrite: a primary's write of a batch to its store.
	PrimaryWrite
	// PrimaryFsync: a primary wrote a batch until its own fsync covered it.
	PrimaryFsync
	// BackupWait: the primary's own fsync covered a batch until every
	// copy held it (the backups' fsyncs and acknowledgements).
	BackupWait
	// Ordered: every copy held a batch until the cut that orders it was
	// applied at the primary, which acknowledges it then (the report to
	// the ordering leader, the cut's wait, Raft, the cut's delivery).
	Ordered
	// BackupFsync: a backup received a batch until its fsync covered it.
	BackupFsync
	// SegmentSync: one fsync of a shard's records (group commit).
	SegmentSync
	// RaftProposeWait: a proposal was queued until the leader's Raft
	// driver took it (it waits while the driver writes and fsyncs).
	RaftProposeWait
	// RaftCommit: an entry appeared in the ordering leader's Ready until
	// the leader applied it (its fsync and a follower's, the round trip).
	RaftCommit
	// RaftSaveLeader and RaftSaveFollower: one WAL write (and fsync, when
	// raft asks for one) of a Ready that holds entries.
	RaftSaveLeader
	RaftSaveFollower
	// CutDelivery: the ordering leader applied a cut until a primary
	// applied it.
	CutDelivery
	// AckSend: a primary's loop acknowledged an append until the
	// acknowledgement was handed to the client's stream.
	AckSend

	// The stages of a lazy append, and then of its order (stable-gp's
	// lag behind the acknowledgement), in the order they happen.
	//
	// LazyAppendData and LazyAppendMeta: the SDK started a lazy append
	// until every shard replica acknowledged its data, and every
	// sequencing replica its metadata (the append returns at the later).
	LazyAppendData
	LazyAppendMeta
	// LazyStore: a shard replica received a batch of data until it
	// answered it (under fsync group, its group commit included);
	// LazySeqTake: a sequencing replica received metadata until it
	// answered.
	LazyStore
	LazySeqTake
	// LazyRingWait: the oldest record waiting in the leader's ring
	// arrived until a batch took it.
	LazyRingWait
	// LazyMapRound: the leader sent a batch's mapping until every shard
	// primary answered that all its replicas hold the placement. Inside
	// it, at each primary: LazyPlacePrimary (the mapping arrived until
	// its placement was written, synced per the fsync policy, and handed
	// to the backups) and LazyPlaceBackups (then until every backup
	// applied it); at each backup, LazyBackupPlace (a placement arrived
	// until it was applied and answered, fetches of missing data
	// included).
	LazyMapRound
	LazyPlacePrimary
	LazyPlaceBackups
	LazyBackupPlace
	// LazyGCRound: every shard held a batch until every sequencing
	// replica collected it.
	LazyGCRound
	// LazyStableSend: stable-gp advanced at the leader until a shard
	// server answered that it learned it (one pass per server).
	LazyStableSend
	// LazyOrderToStable: a batch was taken from the ring until a shard
	// server learned the stable-gp that covers it (the map and GC rounds
	// and the stable send, with the waits between them).
	LazyOrderToStable
	stageCount
)

var stageNames = [stageCount]string{
	IssueLag:         "issue_lag",
	AppendQueue:      "append_queue",
	PrimaryWrite:     "primary_write",
	PrimaryFsync:     "primary_fsync",
	BackupWait:       "backup_wait",
	Ordered:          "durable_to_ordered",
	BackupFsync:      "backup_fsync",
	SegmentSync:      "segment_fsync_call",
	RaftProposeWait:  "raft_propose_wait",
	RaftCommit:       "raft_append_to_apply",
	RaftSaveLeader:   "raft_save_leader",
	RaftSaveFollower: "raft_save_follower",
	CutDelivery:      "cut_delivery",
	AckSend:          "ack_send",

	LazyAppendData:    "lazy_append_data",
	LazyAppendMeta:    "lazy_append_meta",
	LazyStore:         "lazy_store",
	LazySeqTake:       "lazy_seq_take",
	LazyRingWait:      "lazy_ring_wait",
	LazyMapRound:      "lazy_map_round",
	LazyPlacePrimary:  "lazy_place_primary",
	LazyPlaceBackups:  "lazy_place_backups",
	LazyBackupPlace:   "lazy_backup_place",
	LazyGCRound:       "lazy_gc_round",
	LazyStableSend:    "lazy_stable_send",
	LazyOrderToStable: "lazy_order_to_stable",
}

func (s Stage) String() string { return stageNames[s] }

var (
	on atomic.Bool
	// hists has one histogram per stage, each with its own lock, so that
	// servers timing different stages do not wait for each other.
	hists [stageCount]struct {
		mu sync.Mutex
		h  *hdrhistogram.Histogram
	}
)

// Start empties every histogram and starts timing.
func Start() {
	for i := range hists {
		hists[i].mu.Lock()
		hists[i].h = hdrhistogram.New(1, int64(time.Minute), 2)
		hists[i].mu.Unlock()
	}
	on.Store(true)
}

// Stop stops timing.
func Stop() { on.Store(false) }

// On says whether stages are being timed.
func On() bool { return on.Load() }

// Now is the time when stages are timed, else the zero time.
func Now() time.Time {
	if !on.Load() {
		return time.Time{}
	}
	return time.Now()
}

// Observe records that one pass through stage s took d.
func Observe(s Stage, d time.Duration) {
	if !on.Load() {
		return
	}
	x := &hists[s]
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.h != nil {
		_ = x.h.RecordValue(min(max(int64(d), 1), int64(time.Minute)))
	}
}

// Summary is one stage's timings in microseconds.
type Summary struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
}

// Summaries returns every stage that was timed since Start, by name.
func Summaries() map[string]Summary {
	out := map[string]Summary{}
	us := func(ns float64) float64 { return float64(int64(ns/10)) / 100 }
	for i := range hists {
		x := &hists[i]
		x.mu.Lock()
		if h := x.h; h != nil && h.TotalCount() > 0 {
			out[Stage(i).String()] = Summary{
				Count: h.TotalCount(),
				Mean:  us(h.Mean()),
				P50:   us(float64(h.ValueAtQuantile(50))),
				P90:   us(float64(h.ValueAtQuantile(90))),
				P99:   us(float64(h.ValueAtQuantile(99))),
			}
		}
		x.mu.Unlock()
	}
	return out
}

// Since records that one pass through stage s took from at until now;
// a zero at (taken from Now while timing was off) records nothing.
func Since(s Stage, at time.Time) {
	if at.IsZero() {
		return
	}
	Observe(s, time.Since(at))
}

// Marks follows the batches of one copy of a shard through a chain of
// stages: each stage starts where the one before it ended (the first
// where the batch was marked), and a stage ends for every batch whose end
// a new length reaches. Safe for concurrent use.
type Marks struct {
	chain []Stage
	mu    sync.Mutex
	queue []mark
}

type mark struct {
	end uint64
	// at is when the batch finished the chain's stages so far; passed
	// counts them.
	at     time.Time
	passed int
}

// NewMarks returns marks timing chain.
func NewMarks(chain ...Stage) *Marks { return &Marks{chain: chain} }

// Mark notes that a batch ending at local index end was written now.
func (m *Marks) Mark(end uint64) {
	if !on.Load() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.queue) > 1<<16 { // a stage that never ends: stop growing
		m.queue = m.queue[:0]
	}
	m.queue = append(m.queue, mark{end: end, at: time.Now()})
}

// Reached notes that the chain's stage s ended for everything below n.
func (m *Marks) Reached(s Stage, n uint64) {
	if !on.Load() {
		return
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	done := 0
	for i := range m.queue {
		k := &m.queue[i]
		if k.end > n {
			break
		}
		if k.passed < len(m.chain) && m.chain[k.passed] == s {
			Observe(s, now.Sub(k.at))
			k.at, k.passed = now, k.passed+1
		}
		if k.passed == len(m.chain) && done == i {
			done++
		}
	}
	m.queue = m.queue[:copy(m.queue, m.queue[done:])]
}

// Indexes times entries of a Raft log from one point to another, by index.
type Indexes struct {
	mu sync.Mutex
	at map[uint64]time.Time
}

// Mark notes that entry index passed the first point now.
func (x *Indexes) Mark(index uint64) {
	if !on.Load() {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.at == nil || len(x.at) > 1<<16 {
		x.at = map[uint64]time.Time{}
	}
	if _, ok := x.at[index]; !ok {
		x.at[index] = time.Now()
	}
}

// Reached records stage s for entry index, if it was marked.
func (x *Indexes) Reached(s Stage, index uint64) {
	if !on.Load() {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if t, ok := x.at[index]; ok {
		Observe(s, time.Since(t))
		delete(x.at, index)
	}
}

// Cuts times committed cuts from the ordering leader's apply (Mark) to a
// primary's (CutDelivery), by cut index.
var Cuts Indexes
