package shard

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/segment"
)

// Role is what a copy does for its shard.
type Role int

const (
	// RolePrimary takes appends, replicates them to the backups, reports
	// and answers.
	RolePrimary Role = iota
	// RoleBackup stores what its primary sends.
	RoleBackup
	// RoleRecovered is a copy found on disk at start-up: its server
	// restarted, so the shard is (or is about to be) finalized; it takes
	// neither appends nor replication, and only applies cuts for readers.
	RoleRecovered
)

func (r Role) String() string {
	switch r {
	case RolePrimary:
		return "primary"
	case RoleBackup:
		return "backup"
	case RoleRecovered:
		return "recovered"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// Config says what a Replica is.
type Config struct {
	ID   cut.ShardID
	Role Role
	// Backups is how many backups a primary replicates to.
	Backups int
	// LastCut is the last cut that gave the log's entries positions (the
	// Cut of its last run), 0 for none: cuts up to it are applied.
	LastCut uint64
	// Ordering is a primary's ordering mode; nil means Eager.
	Ordering Ordering
	// HeldWhenSynced says a copy holds an entry only once its log synced
	// it (Log.SyncedLen), not as soon as it is written: then what every
	// replica holds, and so every report and every acknowledgement,
	// survives a power loss of all of them at once. Without it an entry
	// counts once written, and survives only the crash of processes.
	HeldWhenSynced bool
}

// Append is one client append offered to a primary. Entry holds the
// record (ClientID, Seq, Key, Tags, Payload), already checked for size.
type Append[W comparable] struct {
	Waiter W
	Entry  segment.Entry
}

// Batch is a run of entries for a backup to store at local index First.
// The entries of a batch Propose staged are the core's buffer: they are
// valid until Store returns, so the owner encodes or copies them before.
type Batch struct {
	First   uint64
	Entries []segment.Entry
}

// Cut is one committed cut's consequence for this shard.
type Cut struct {
	// Index, Start and End identify the cut and the global positions
	// [Start, End) it covers.
	Index, Start, End uint64
	// Slice is this shard's part of the cut.
	Slice cut.Slice
	// OrderedAtLeast, from a snapshot, is how many of the shard's entries
	// are ordered; a copy that assigned fewer missed cuts for good.
	OrderedAtLeast uint64
}

// Output is what one call asks its owner to carry out, in the order of
// the fields.
type Output[W comparable] struct {
	// Replicate lists batches to send to every backup, in order. A batch
	// of records goes out before Store writes it, so the backups' writes
	// overlap the primary's (a record counts only once every copy holds
	// it); a batch of no-ops goes out after the primary wrote it.
	Replicate []Batch
	// Unsynced says the log holds entries not synced yet: sync them, and
	// then call Synced. With HeldWhenSynced none of them counts before
	// that sync, so sync at once (group commit: one sync covers whatever
	// was written while the previous one ran); otherwise within the sync
	// interval.
	Unsynced bool
	// UnsyncedRuns says the log holds positions (runs) not synced yet:
	// sync them within the sync interval. Nothing waits for it: the
	// committed cuts that gave the positions survive in the ordering
	// layer.
	UnsyncedRuns bool
	// Failed is set when the log failed a write: the shard can take no
	// more and must be reported broken.
	Failed error
	// Problems are things gone wrong that the owner should log.
	Problems []error
	// Answers are the appends to answer now. An append is answered
	// Ordered only after it is durable on every replica AND a committed
	// cut gave it a position (a cut orders only what was reported, and a
	// report covers only what every replica holds).
	Answers []Answer[W]
	// StoreErr is why Unavailable answers failed.
	StoreErr error
	// Durable says what every replica holds moved: tell the ordering
	// leader (Replica.Report; in eager order it is the new report, in
	// speculative order it brings news of the records and backlog).
	Durable bool
	// Report says the ordering mode reached a report point: Replica.Report
	// has a new length, to send now. Reports never exceed what every
	// replica holds.
	Report bool
	// Changed says what subscribers may read changed (positions,
	// finality, or, in a mode that acts on durable entries, the durable
	// length): wake them.
	Changed bool
	// Stored, Noops and Ordered count the records, no-op indexes and
	// entries this call stored or ordered, for metrics.
	Stored, Noops, Ordered uint64
	// WakeAt is when to call Tick next, if the mode needs a timer; zero
	// means no timer.
	WakeAt time.Time
}

// BufferRetainMax bounds the entries a reused buffer (an Output's answers,
// a Replica's staged batch, an owner's batch of appends) keeps between
// uses, so that one huge batch does not pin its memory for good.
const BufferRetainMax = 4096

// Reset empties o, keeping its slices' capacity up to BufferRetainMax. It
// drops what every old element points to, up to the capacity (an owner may
// have shortened a slice it carried out): a batch's entries, once staged
// for a huge batch, would otherwise stay pinned after the Replica let go.
func (o *Output[W]) Reset() {
	answers := o.Answers
	if cap(answers) > BufferRetainMax {
		answers = nil
	}
	clear(answers[:cap(answers)])
	clear(o.Replicate[:cap(o.Replicate)])
	clear(o.Problems[:cap(o.Problems)])
	*o = Output[W]{Replicate: o.Replicate[:0], Answers: answers[:0], Problems: o.Problems[:0]}
}

// Replica is one copy of one shard as a pure state machine: the storage
// server's shard loop, the benchmark emulator and the simulator drive it.
// It stores through its Log and decides everything else; its owner sends,
// answers, reports and syncs as its Output says.
//
// An owner drives a primary like this: Propose a batch of appends, send
// out.Replicate to every backup, Store, carry out the output; pass each
// backup's acknowledgement to BackupAcked; call Tick on every turn and at
// out.WakeAt, LagFix for the leader's lag-fixes; and for every committed
// event Trim, ApplyCut, then Finalize once the shard is final; after every
// sync of the log that out.Unsynced asked for, Synced. A backup only takes
// Replicated, Synced, ApplyCut, Trim and Finalize. Report says what to
// tell the ordering leader whenever an output asks (Durable or Report) and
// on every heartbeat.
//
// One goroutine (the owner) calls the methods, except: Replicated, on a
// backup, may run concurrently with the owner's calls (it alone writes a
// backup's entries; the owner only assigns positions and trims);
// BackupAcked, Synced, Durable, Report, Final, Lost, ID and Role are safe
// for concurrent use.
type Replica[W comparable] struct {
	id      cut.ShardID
	role    Role
	log     Log
	ord     Ordering
	primary *Primary[W] // on a primary only

	// durable is how many entries every replica holds: on a primary the
	// least of what its log holds and what each backup acknowledged, on a
	// backup what its own log holds (see held). It only grows.
	durable atomic.Uint64
	// heldWhenSynced: see Config.HeldWhenSynced.
	heldWhenSynced bool
	// backupHeld[i] is what backup i acknowledged holding.
	backupHeld []atomic.Uint64
	// records counts the real records a primary stored.
	records atomic.Uint64

	finalized atomic.Bool
	finalLen  atomic.Uint64
	// lost is set once this copy missed entries or cuts it can never get
	// back; it then serves neither subscriptions nor resolutions.
	lost    atomic.Bool
	lastCut uint64

	// staged is the batch Propose admitted and Store writes; stagedWaiters
	// are its appends' waiters. Both are reused from batch to batch.
	staged        []segment.Entry
	stagedWaiters []W
	// stagedAt finds a staged append by client and sequence number, so a
	// retry staged with its original is not stored twice (see restaged).
	stagedAt map[clientSeq]int
	// lastSeqs is mayRepeat's scratch space: each client's latest sequence
	// number in the batch.
	lastSeqs []clientSeq
}

// clientSeq names one client append: what a retry repeats.
type clientSeq struct{ client, seq uint64 }

// NewReplica returns the copy cfg describes over log, which may hold
// entries already.
func NewReplica[W comparable](cfg Config, log Log) *Replica[W] {
	r := &Replica[W]{id: cfg.ID, role: cfg.Role, log: log, ord: cfg.Ordering, lastCut: cfg.LastCut,
		heldWhenSynced: cfg.HeldWhenSynced}
	if r.ord == nil {
		r.ord = Eager{}
	}
	switch cfg.Role {
	case RolePrimary:
		r.primary = NewPrimary[W](log.Len(), log.GlobalOf)
		r.backupHeld = make([]atomic.Uint64, cfg.Backups)
		if cfg.Backups == 0 {
			r.durable.Store(r.held())
		}
	case RoleBackup:
		r.durable.Store(r.held())
	default:
		// A recovered copy holds what it found on disk, as much as it
		// ever will.
		r.durable.Store(log.Len())
	}
	return r
}

// held is how many entries this copy's own log holds.
func (r *Replica[W]) held() uint64 {
	if r.heldWhenSynced {
		return r.log.SyncedLen()
	}
	return r.log.Len()
}

// ID is the shard's id.
func (r *Replica[W]) ID() cut.ShardID { return r.id }

// Role is what this copy does.
func (r *Replica[W]) Role() Role { return r.role }

// Durable is how many entries every replica holds (on a backup: this one).
func (r *Replica[W]) Durable() uint64 { return r.durable.Load() }

// Final returns the final length once the shard is finalized.
func (r *Replica[W]) Final() (length uint64, ok bool) {
	if !r.finalized.Load() {
		return 0, false
	}
	return r.finalLen.Load(), true
}

// Lost says this copy can never serve everything the cuts order.
func (r *Replica[W]) Lost() bool { return r.lost.Load() }

// Records is how many real records a primary stored.
func (r *Replica[W]) Records() uint64 { return r.records.Load() }

// Report is what to tell the ordering leader about a live primary now.
func (r *Replica[W]) Report() (Report, bool) {
	return r.ord.Report(r.durable.Load(), r.log.Len(), r.records.Load())
}

// ActsOnDurable says whether the ordering mode acts on durable entries
// before they are ordered (see Ordering).
func (r *Replica[W]) ActsOnDurable() bool { return r.ord.ActsOnDurable() }

// Propose admits client appends on a primary. Retries of stored records
// and appends to a finalized shard are answered at once (Ordered, Waiting,
// Expired, Finalized); the rest are staged and listed in out.Replicate for
// the backups, and the owner then calls Store to write them.
func (r *Replica[W]) Propose(batch []Append[W], out *Output[W]) {
	if r.primary == nil {
		for _, a := range batch {
			out.Answers = append(out.Answers, Answer[W]{Waiter: a.Waiter, Seq: a.Entry.Seq, Verdict: Unavailable})
		}
		out.StoreErr = fmt.Errorf("shard %d: this copy is a %v, not the primary", r.id, r.role)
		return
	}
	repeats := r.mayRepeat(batch)
	for _, a := range batch {
		verdict, pos := r.primary.Admit(a.Entry.ClientID, a.Entry.Seq, a.Waiter)
		if verdict == Store && repeats && r.restaged(a) {
			verdict = Waiting
		}
		if verdict != Store {
			out.Answers = append(out.Answers, Answer[W]{Waiter: a.Waiter, Seq: a.Entry.Seq, Verdict: verdict, Position: pos})
			continue
		}
		r.staged = append(r.staged, a.Entry)
		r.stagedWaiters = append(r.stagedWaiters, a.Waiter)
	}
	if len(r.staged) > 0 {
		// The owner writes nothing else in between, so the batch starts
		// at the log's length.
		out.Replicate = append(out.Replicate, Batch{First: r.log.Len(), Entries: r.staged})
	}
}

// mayRepeat says whether batch may hold two copies of one append: Admit
// knows only what Store wrote, and a client that re-sent an append on a new
// stream can have both copies queued for one batch. A copy repeats its
// client's sequence number, so a batch in which every client's sequence
// numbers increase holds none; and they usually do increase, as a client
// numbers its appends as it takes them and its stream sends them in about
// that order. Checking costs a comparison or two per append, where
// restaged costs a map lookup; a false alarm only costs the lookups.
func (r *Replica[W]) mayRepeat(batch []Append[W]) bool {
	last := r.lastSeqs[:0]
	defer func() {
		clear(last)
		r.lastSeqs = last[:0]
		if cap(last) > BufferRetainMax {
			r.lastSeqs = nil
		}
	}()
	cur := -1 // last[cur] is the client of the previous append
	for _, a := range batch {
		client, seq := a.Entry.ClientID, a.Entry.Seq
		if cur < 0 || last[cur].client != client {
			cur = -1
			for i := range last {
				if last[i].client == client {
					cur = i
					break
				}
			}
			if cur < 0 {
				last = append(last, clientSeq{client, seq})
				cur = len(last) - 1
				continue
			}
		}
		if seq <= last[cur].seq {
			return true
		}
		last[cur].seq = seq
	}
	return false
}

// restaged says whether a repeats an append staged earlier in this batch
// (see mayRepeat). Like a retry Admit finds waiting, a's waiter then takes
// over the answer.
func (r *Replica[W]) restaged(a Append[W]) bool {
	if r.stagedAt == nil {
		r.stagedAt = map[clientSeq]int{}
	}
	k := clientSeq{a.Entry.ClientID, a.Entry.Seq}
	if i, ok := r.stagedAt[k]; ok {
		r.stagedWaiters[i] = a.Waiter
		return true
	}
	r.stagedAt[k] = len(r.staged)
	return false
}

// Store writes the batch Propose staged, after the owner sent it to the
// backups. If the log fails, the staged appends are answered Unavailable
// (nothing acknowledged is lost) and out.Failed is set.
func (r *Replica[W]) Store(out *Output[W]) {
	if len(r.staged) == 0 {
		return
	}
	defer func() {
		if len(r.stagedAt) > BufferRetainMax {
			r.stagedAt = nil
		}
		clear(r.stagedAt)
		if cap(r.staged) > BufferRetainMax {
			r.staged, r.stagedWaiters = nil, nil
			return
		}
		clear(r.staged)
		clear(r.stagedWaiters)
		r.staged, r.stagedWaiters = r.staged[:0], r.stagedWaiters[:0]
	}()
	first, err := r.log.Append(r.staged)
	if err != nil {
		out.Failed = fmt.Errorf("shard %d: append: %w", r.id, err)
		out.StoreErr = err
		for i, e := range r.staged {
			out.Answers = append(out.Answers, Answer[W]{Waiter: r.stagedWaiters[i], Seq: e.Seq, Verdict: Unavailable})
		}
		return
	}
	if first != r.primary.Next() {
		panic(fmt.Sprintf("shard %d: a primary's batch was stored at %d, not at %d where it was staged", r.id, first, r.primary.Next()))
	}
	for i, e := range r.staged {
		r.primary.Stored(e.ClientID, e.Seq, first+uint64(i), r.stagedWaiters[i])
	}
	n := uint64(len(r.staged))
	r.records.Add(n)
	out.Stored += n
	out.Unsynced = true
	r.updateDurable(out)
}

// Ingest stores records on a primary that nobody waits for and nobody
// retries (an emulated workload): they take no dedup memory and get no
// answers, but count as records for the ordering mode.
func (r *Replica[W]) Ingest(entries []segment.Entry, out *Output[W]) {
	if r.primary == nil || len(entries) == 0 {
		return
	}
	first, err := r.log.Append(entries)
	if err != nil {
		out.Failed = fmt.Errorf("shard %d: append: %w", r.id, err)
		return
	}
	if first != r.primary.Next() {
		panic(fmt.Sprintf("shard %d: ingested records were stored at %d, not at %d", r.id, first, r.primary.Next()))
	}
	n := uint64(len(entries))
	r.primary.Noops(n) // slots that answer nobody
	r.records.Add(n)
	out.Stored += n
	out.Unsynced = true
	r.updateDurable(out)
}

// Tick lets a live primary's ordering mode act at time now: fill no-ops it
// owes, report at a point it reached, and say when to wake next.
func (r *Replica[W]) Tick(now time.Time, out *Output[W]) {
	if r.primary == nil || r.finalized.Load() {
		return
	}
	r.observe(now)
	if n := r.ord.Fill(now); n > 0 {
		r.appendNoops(now, n, out)
	}
	if r.ord.ReportDue(now) {
		out.Report = true
	}
	if at, ok := r.ord.WakeAt(); ok {
		out.WakeAt = at
	}
}

// LagFix appends the no-ops that bring a live primary's log to the
// leader's target, as far as its mode allows.
func (r *Replica[W]) LagFix(now time.Time, target uint64, out *Output[W]) {
	if r.primary == nil || r.finalized.Load() {
		return
	}
	r.observe(now)
	r.appendNoops(now, r.ord.LagFix(target), out)
}

// observe tells the ordering mode where a primary stands. The primary's
// bookkeeping knows the log's length without asking the log (the owner is
// its only writer).
func (r *Replica[W]) observe(now time.Time) {
	r.ord.Observe(now, r.primary.Next(), r.records.Load(), r.durable.Load(), r.log.Ordered())
}

// appendNoops stores a run of n no-ops as one entry and replicates it as
// one batch.
func (r *Replica[W]) appendNoops(now time.Time, n uint64, out *Output[W]) {
	if n == 0 {
		return
	}
	run := []segment.Entry{{Noops: n}}
	first, err := r.log.Append(run)
	if err != nil {
		out.Failed = fmt.Errorf("shard %d: append no-ops: %w", r.id, err)
		return
	}
	r.primary.Noops(n)
	out.Noops += n
	out.Unsynced = true
	out.Replicate = append(out.Replicate, Batch{First: first, Entries: run})
	// Durable first: without backups the fill is durable at once, and the
	// mode may report the boundary it reaches in this same step.
	r.updateDurable(out)
	r.observe(now)
}

// updateDurable recomputes what every replica holds after this copy
// stored more.
func (r *Replica[W]) updateDurable(out *Output[W]) {
	if r.raiseDurable() {
		out.Durable = true
		if r.ord.ActsOnDurable() {
			out.Changed = true
		}
	}
}

// raiseDurable sets durable to the least length any replica holds, if
// that is more, and says whether it was.
func (r *Replica[W]) raiseDurable() bool {
	d := r.held()
	for i := range r.backupHeld {
		d = min(d, r.backupHeld[i].Load())
	}
	for {
		cur := r.durable.Load()
		if d <= cur {
			return false
		}
		if r.durable.CompareAndSwap(cur, d) {
			return true
		}
	}
}

// BackupAcked records that backup i holds held entries. It is safe for
// concurrent use, so an acknowledgement need not wait for the owner's
// goroutine. advanced says durable moved: report it. step says the
// ordering mode acts on durable entries: the owner must Tick and wake
// subscription feeds.
func (r *Replica[W]) BackupAcked(i int, held uint64) (advanced, step bool) {
	for {
		cur := r.backupHeld[i].Load()
		if held <= cur {
			return false, false
		}
		if r.backupHeld[i].CompareAndSwap(cur, held) {
			break
		}
	}
	if !r.raiseDurable() {
		return false, false
	}
	return true, r.ord.ActsOnDurable()
}

// Synced tells the copy that its log finished a sync (Log.SyncedLen may
// have moved). It is safe for concurrent use, so the goroutine that syncs
// need not go through the owner's. advanced says durable moved: a primary
// reports it, a backup acknowledges it to its primary. step is as for
// BackupAcked. Without HeldWhenSynced a sync changes nothing here.
func (r *Replica[W]) Synced() (advanced, step bool) {
	if !r.heldWhenSynced || r.role == RoleRecovered || !r.raiseDurable() {
		return false, false
	}
	return true, r.ord.ActsOnDurable()
}

// errNotBackup refuses replication to a copy that is not a backup.
var errNotBackup = errors.New("not a backup here")

// Replicated stores a batch from the primary on a backup and returns the
// length this copy now holds, to acknowledge (with HeldWhenSynced, what it
// synced: the batch counts only after a later sync, see Synced). The batch
// must start at the log's length: batches come in order on one stream.
func (r *Replica[W]) Replicated(first uint64, entries []segment.Entry) (held uint64, err error) {
	if r.role != RoleBackup {
		return 0, fmt.Errorf("shard %d: %w", r.id, errNotBackup)
	}
	if n := r.log.Len(); first != n {
		return 0, fmt.Errorf("shard %d: replicated batch starts at %d, have %d", r.id, first, n)
	}
	if _, err := r.log.Append(entries); err != nil {
		return 0, fmt.Errorf("shard %d: %w", r.id, err)
	}
	r.raiseDurable()
	return r.durable.Load(), nil
}

// Trim lets the log drop entries ordered below global.
func (r *Replica[W]) Trim(global uint64) error { return r.log.Trim(global) }

// ApplyCut gives this copy's entries the positions a committed cut
// assigns and answers the appends it orders. A copy that cannot follow
// the cut (it lacks entries the cut orders, or a snapshot says it missed
// cuts) is marked lost: the other replicas serve those entries.
func (r *Replica[W]) ApplyCut(c Cut, out *Output[W]) {
	out.Changed = true
	defer func() { r.lastCut = max(r.lastCut, c.Index) }()
	if c.Index > r.lastCut && c.Slice.Count > 0 && !r.lost.Load() {
		sl := c.Slice
		ordered, length := r.log.Ordered(), r.log.Len()
		switch {
		case sl.LocalStart < ordered:
			// Already assigned before a restart.
		case sl.LocalStart != ordered || sl.LocalStart+sl.Count > length:
			out.Problems = append(out.Problems, fmt.Errorf("shard %d: copy cannot follow cut %d: it orders local [%d, %d), this copy ordered %d of %d",
				r.id, c.Index, sl.LocalStart, sl.LocalStart+sl.Count, ordered, length))
			r.lost.Store(true)
		default:
			run := segment.Run{Cut: c.Index, CutStart: c.Start, CutEnd: c.End,
				LocalStart: sl.LocalStart, GlobalStart: sl.GlobalStart, Count: sl.Count}
			if err := r.log.Assign(run); err != nil {
				out.Problems = append(out.Problems, fmt.Errorf("shard %d: assign positions: %w", r.id, err))
				r.lost.Store(true)
			} else {
				out.UnsyncedRuns = true
				out.Ordered += sl.Count
			}
			// Answer even when this copy could not record the positions
			// (a full disk): the answer rests on the committed cut, as
			// when the write succeeds, and the other copies serve those
			// positions. Not answering left the clients waiting forever.
			if r.primary != nil {
				out.Answers = r.primary.Order(sl, out.Answers)
			}
		}
	} else if c.Index > r.lastCut && c.Slice.Count > 0 && r.lost.Load() && r.primary != nil && c.Slice.LocalStart+c.Slice.Count <= r.primary.Next() {
		// A lost primary records no positions but still answers the
		// appends it stored that a committed cut orders, for the same
		// reason: the other copies serve them.
		out.Answers = r.primary.Order(c.Slice, out.Answers)
	}
	if ordered := r.log.Ordered(); c.OrderedAtLeast > ordered && !r.lost.Load() {
		out.Problems = append(out.Problems, fmt.Errorf("shard %d: copy missed cuts that a snapshot skipped: ordered %d, want %d", r.id, ordered, c.OrderedAtLeast))
		r.lost.Store(true)
	}
}

// Finalize ends the shard at length: a primary answers the appends stored
// past it (Abandoned) and refuses new ones.
func (r *Replica[W]) Finalize(length uint64, out *Output[W]) {
	if r.finalized.Load() {
		return
	}
	r.finalLen.Store(length)
	r.finalized.Store(true)
	out.Changed = true
	if r.primary == nil {
		return
	}
	answers, unanswered := r.primary.Finalize(length)
	if unanswered > 0 {
		out.Problems = append(out.Problems, fmt.Errorf("shard %d finalized at %d before this copy applied the cuts of %d appends: their clients get no answer",
			r.id, length, unanswered))
	}
	out.Answers = append(out.Answers, answers...)
}

// Waiting returns the appends a primary has not answered yet, for failing
// them when its owner stops.
func (r *Replica[W]) Waiting() []Answer[W] {
	if r.primary == nil {
		return nil
	}
	return r.primary.Waiting()
}

// Resolution is what a copy can tell a client about one of its appends
// whose answer it never got (its primary crashed, or its stream broke).
type Resolution int

const (
	// ResolvePending: this copy cannot tell yet; ask again, or ask
	// another copy.
	ResolvePending Resolution = iota
	// ResolveOrdered: the append has a position.
	ResolveOrdered
	// ResolveNotOrdered: the shard is final and never ordered the
	// append; the client may store it elsewhere.
	ResolveNotOrdered
)

// Resolve says what this copy knows of an append: found says its log
// holds it at local index local, and readAll that the copy could read
// every entry it holds while looking. Only a copy that holds, and could
// read, every entry the shard ordered may deny an append it did not find:
// one that lost its tail in a crash, missed cuts, or has damaged records
// would deny records the other replicas serve. An entry at or past a final shard's length was never ordered,
// even where this copy applied cuts that place it: in speculative order
// the cuts after a view change still give a failed shard's void slots to
// its entries past the void point, and those slots are no-ops to readers.
func (r *Replica[W]) Resolve(local uint64, found, readAll bool) (Resolution, uint64) {
	finalLen, final := r.Final()
	if final && found && local >= finalLen {
		return ResolveNotOrdered, 0
	}
	ordered := r.log.Ordered()
	if found && local < ordered {
		if pos, ok := r.log.GlobalOf(local); ok {
			return ResolveOrdered, pos
		}
		return ResolvePending, 0 // trimmed: another copy may still tell
	}
	if final && !found && readAll && ordered >= finalLen {
		return ResolveNotOrdered, 0
	}
	return ResolvePending, 0
}
