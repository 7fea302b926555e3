package shard

import (
	"errors"
	"fmt"
	"math"
	"sync"
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
	// restarted, so it is out of the shard's configuration (or the shard
	// is finalized); it takes neither appends nor replication, and only
	// applies cuts for readers. Once it hears of a configuration that
	// leaves it out, it orders nothing past what it ordered by then (see
	// Replica.replacedFrom).
	RoleRecovered
	// RoleFenced is a copy its server still runs but that a newer
	// configuration left out: it takes neither appends nor replication,
	// reports nothing and answers no append. Its log may hold entries the
	// configuration never made durable, which the new primary may have
	// replaced, so it serves nothing (it is Lost) until it rejoins.
	RoleFenced
)

func (r Role) String() string {
	switch r {
	case RolePrimary:
		return "primary"
	case RoleBackup:
		return "backup"
	case RoleRecovered:
		return "recovered"
	case RoleFenced:
		return "fenced"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// Config says what a Replica is.
type Config struct {
	ID   cut.ShardID
	Role Role
	// Epoch is the shard configuration the copy starts in.
	Epoch uint64
	// Backups names the backups a primary replicates to. They start with
	// the primary (an empty shard) and need not join.
	Backups []string
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
	// OrderedAtLeast, for a copy made empty to join a live shard, is how
	// many of the shard's entries are ordered already: it asks to rejoin
	// only once it holds their positions.
	OrderedAtLeast uint64
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
	// Resend asks for entries of the log to be sent to one backup, before
	// any later Replicate batch: a backup that joined the configuration
	// holding less than the primary.
	Resend []Resend
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

// Resend is a range of local indexes [From, To) to send to Backup, as
// batches read from the log.
type Resend struct {
	Backup   string
	From, To uint64
}

// Membership is one copy's place in a committed configuration of its
// shard (control.Shard: Replicas, Epoch).
type Membership struct {
	Epoch uint64
	// Role is RolePrimary, RoleBackup, or RoleFenced for a copy the
	// configuration left out.
	Role Role
	// Backups names a primary's backups.
	Backups []string
	// Ordering is the ordering mode of a backup that becomes primary,
	// started at the log's Ordered length (nil: Eager).
	Ordering Ordering
	// EarlierRun says the configuration names this copy's server as it
	// ran before a restart: a Join decided for that run may commit after
	// this run started, holding less than that run did. It takes this run
	// in in no role (see Reconfigure).
	EarlierRun bool
}

// DedupScanMax is how many entries before the ordered end of its log a
// promoted primary reads back into its retry memory, besides every entry
// not ordered yet: a client retries only appends it has no answer for,
// and it has at most its window of them in flight.
const DedupScanMax = DedupPerClientMax

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
	role    atomic.Int32 // a Role
	log     Log
	ord     Ordering
	primary *Primary[W] // on a primary only

	// epoch is the newest configuration this copy heard of, from its
	// owner (Reconfigure) or from a primary that joined it (Join): what
	// comes from an older one is refused. cfgEpoch is the last one its
	// owner gave it (owner only).
	epoch    atomic.Uint64
	cfgEpoch uint64
	// backups are a primary's backups in its configuration; Reconfigure
	// replaces the slice, BackupAcked reads it concurrently.
	backups atomic.Pointer[[]*backupSlot]
	// syncing says a primary waits for backups of a new configuration to
	// join: until they did, it admits nothing and reports nothing, as a
	// backup may hold entries it lacks. Only the owner sets it.
	syncing atomic.Bool
	// replMu serializes a backup's Join and Replicated, and a rejoining
	// copy's catch-up appends and its move to backup: a join's length
	// must be the log's length until the next batch of its configuration.
	// The positions a rejoining copy assigns (AssignFetched, its kept
	// cuts) hold it too: a catch-up write may start its log over.
	replMu sync.Mutex

	// durable is how many entries every replica holds: on a primary the
	// least of what its log holds and what each backup acknowledged, on a
	// backup what its own log holds (see held). It only grows.
	durable atomic.Uint64
	// acknowledged is the most durable ever was on this copy (setBackups
	// lowers durable until the backups of a new configuration joined). A
	// primary whose ordering mode acts on durable entries has answered
	// or streamed that much, so it reports nothing until every replica of
	// its configuration holds it: a report in a configuration vouches
	// for each of its replicas (see control.ReconfigCommand's Confirm).
	acknowledged atomic.Uint64
	// heldWhenSynced: see Config.HeldWhenSynced.
	heldWhenSynced bool
	// records counts the real records this copy stored, as primary or
	// backup.
	records atomic.Uint64

	finalized atomic.Bool
	finalLen  atomic.Uint64
	// lost is set once this copy missed entries or cuts it can never get
	// back; it then serves neither subscriptions nor resolutions.
	lost    atomic.Bool
	lastCut uint64
	// replacedFrom is the first local index at which the shard may hold
	// other entries than this copy: the copy's ordered end when it heard
	// of a configuration that leaves it out (math.MaxUint64 until then).
	// A report covers only what every replica of its configuration holds,
	// so a cut committed while the copy was a member orders only entries
	// it holds as the shard does; past its ordered end it may hold a tail
	// no report covered, where a newer primary stored other entries. It
	// never assigns positions, nor denies appends, from there on.
	replacedFrom atomic.Uint64

	// Rejoin (see rejoin.go). outEpoch is the last configuration its
	// owner gave that leaves the copy out, rejoinFrom the one it catches
	// up from (owner only); asked is the one it asked to join in (0:
	// none), which the next one's primary may join it from. pending are
	// the cuts it keeps for entries it does not hold yet (owner only;
	// pendingCount mirrors their number), orderWant how many entries the
	// cuts it heard of order.
	outEpoch, rejoinFrom uint64
	asked                atomic.Uint64
	pending              []Cut
	pendingCount         atomic.Int32
	orderWant            uint64

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

// backupSlot is one backup of a primary's configuration.
type backupSlot struct {
	id string
	// held is what the backup acknowledged holding.
	held atomic.Uint64
	// joined says the backup answered the primary's join in this
	// configuration, holding length entries (owner only).
	joined bool
	length uint64
}

// NewReplica returns the copy cfg describes over log, which may hold
// entries already.
func NewReplica[W comparable](cfg Config, log Log) *Replica[W] {
	r := &Replica[W]{id: cfg.ID, log: log, ord: cfg.Ordering, lastCut: cfg.LastCut,
		heldWhenSynced: cfg.HeldWhenSynced, cfgEpoch: cfg.Epoch, orderWant: cfg.OrderedAtLeast}
	r.role.Store(int32(cfg.Role))
	r.epoch.Store(cfg.Epoch)
	r.replacedFrom.Store(math.MaxUint64)
	if r.ord == nil {
		r.ord = Eager{}
	}
	slots := make([]*backupSlot, len(cfg.Backups))
	for i, id := range cfg.Backups {
		slots[i] = &backupSlot{id: id, joined: true}
	}
	r.backups.Store(&slots)
	switch cfg.Role {
	case RolePrimary:
		r.primary = NewPrimary[W](log.Len(), log.GlobalOf)
		if len(cfg.Backups) == 0 {
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
func (r *Replica[W]) Role() Role { return Role(r.role.Load()) }

// Epoch is the newest configuration of the shard this copy heard of.
func (r *Replica[W]) Epoch() uint64 { return r.epoch.Load() }

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

// Report is what to tell the ordering leader about a live primary now, in
// its configuration (Report.Epoch). A primary still waiting for backups to
// join has nothing to report.
func (r *Replica[W]) Report() (Report, bool) {
	if r.Role() != RolePrimary || r.syncing.Load() {
		return Report{}, false
	}
	if r.ord.ActsOnDurable() && r.durable.Load() < r.acknowledged.Load() {
		return Report{}, false
	}
	rep, ok := r.ord.Report(r.durable.Load(), r.log.Len(), r.records.Load())
	rep.Epoch = r.epoch.Load()
	return rep, ok
}

// ActsOnDurable says whether the ordering mode acts on durable entries
// before they are ordered (see Ordering).
func (r *Replica[W]) ActsOnDurable() bool { return r.ord.ActsOnDurable() }

// Propose admits client appends on a primary. Retries of stored records
// and appends to a finalized shard are answered at once (Ordered, Waiting,
// Expired, Finalized); the rest are staged and listed in out.Replicate for
// the backups, and the owner then calls Store to write them.
func (r *Replica[W]) Propose(batch []Append[W], out *Output[W]) {
	if r.Role() != RolePrimary || r.syncing.Load() {
		for _, a := range batch {
			out.Answers = append(out.Answers, Answer[W]{Waiter: a.Waiter, Seq: a.Entry.Seq, Verdict: Unavailable})
		}
		out.StoreErr = fmt.Errorf("shard %d: this copy is a %v, not the primary", r.id, r.Role())
		if r.syncing.Load() {
			out.StoreErr = fmt.Errorf("shard %d: the primary waits for its backups to join configuration %d", r.id, r.epoch.Load())
		}
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
	if r.pendingCount.Load() > 0 && r.primary == nil {
		r.applyPending(out)
	}
	if !r.serving() {
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
	if !r.serving() {
		return
	}
	r.observe(now)
	r.appendNoops(now, r.ord.LagFix(target), out)
}

// serving says this copy is a live primary whose backups all joined.
func (r *Replica[W]) serving() bool {
	return r.Role() == RolePrimary && !r.syncing.Load() && !r.finalized.Load()
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
	for _, b := range *r.backups.Load() {
		d = min(d, b.held.Load())
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

// BackupAcked records that backup holds held entries, acknowledged in
// configuration epoch: an acknowledgement of another configuration, or
// of a server not a backup in it, counts for nothing. It is safe for
// concurrent use, so an acknowledgement need not wait for the owner's
// goroutine. advanced says durable moved: report it. step says the
// ordering mode acts on durable entries: the owner must Tick and wake
// subscription feeds.
func (r *Replica[W]) BackupAcked(backup string, epoch, held uint64) (advanced, step bool) {
	if epoch != r.epoch.Load() {
		return false, false
	}
	var slot *backupSlot
	for _, b := range *r.backups.Load() {
		if b.id == backup {
			slot = b
		}
	}
	if slot == nil {
		return false, false
	}
	for {
		cur := slot.held.Load()
		if held <= cur {
			return false, false
		}
		if slot.held.CompareAndSwap(cur, held) {
			break
		}
	}
	if r.syncing.Load() {
		return false, false
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
	role := r.Role()
	if !r.heldWhenSynced || role == RoleRecovered || role == RoleFenced || r.syncing.Load() || !r.raiseDurable() {
		return false, false
	}
	// A backup's ordering is no mode's (and a promotion replaces it).
	return true, role == RolePrimary && r.ord.ActsOnDurable()
}

// errNotBackup refuses replication to a copy that is not a backup.
var errNotBackup = errors.New("not a backup here")

// ErrFenced refuses what comes from an older configuration than the one
// the copy heard of: its sender was taken out of the shard.
var ErrFenced = errors.New("from an older configuration (fenced)")

// Join is a primary of configuration epoch reaching this backup: from now
// on the backup takes replication of that configuration only, so a
// fenced primary's late batches are refused. It returns how many entries
// the log holds (length; the primary sends what follows, or adopts the
// entries past its own length, which the backup reads from its log) and
// how many it holds (held, as acknowledged). Like Replicated it may run
// concurrently with the owner's calls, on the replication stream.
func (r *Replica[W]) Join(epoch uint64) (length, held uint64, err error) {
	r.replMu.Lock()
	defer r.replMu.Unlock()
	if r.Role() != RoleBackup && !r.becomeBackupLocked(epoch) {
		return 0, 0, fmt.Errorf("shard %d: %w", r.id, errNotBackup)
	}
	for {
		cur := r.epoch.Load()
		if epoch < cur {
			return 0, 0, fmt.Errorf("shard %d: join of configuration %d, this copy is in %d: %w", r.id, epoch, cur, ErrFenced)
		}
		if r.epoch.CompareAndSwap(cur, epoch) {
			break
		}
	}
	r.raiseDurable()
	return r.log.Len(), r.durable.Load(), nil
}

// errNotJoined refuses a batch of a newer configuration whose primary did
// not join this copy first.
var errNotJoined = errors.New("from a configuration that did not join this copy")

// Replicated stores a batch from the primary of configuration epoch on a
// backup. advanced says durable moved: the owner acknowledges Durable to
// the primary. Without HeldWhenSynced the batch counts at once; with it,
// only what the log synced counts, which may grow here too (a rollover
// syncs the segment it closes; the owner's group commit may have synced
// the batch meanwhile), and a later Synced would then find nothing new:
// the call that raises durable is the one that says so. The
// batch must start at the log's length: batches come in order on one
// stream. A batch of an older configuration than the copy heard of is
// refused (ErrFenced).
func (r *Replica[W]) Replicated(epoch, first uint64, entries []segment.Entry) (advanced bool, err error) {
	r.replMu.Lock()
	defer r.replMu.Unlock()
	if r.Role() != RoleBackup {
		return false, fmt.Errorf("shard %d: %w", r.id, errNotBackup)
	}
	if cur := r.epoch.Load(); epoch < cur {
		return false, fmt.Errorf("shard %d: batch of configuration %d, this copy is in %d: %w", r.id, epoch, cur, ErrFenced)
	} else if epoch > cur {
		return false, fmt.Errorf("shard %d: batch of configuration %d, this copy is in %d: %w", r.id, epoch, cur, errNotJoined)
	}
	if n := r.log.Len(); first != n {
		return false, fmt.Errorf("shard %d: replicated batch starts at %d, have %d", r.id, first, n)
	}
	if _, err := r.log.Append(entries); err != nil {
		return false, fmt.Errorf("shard %d: %w", r.id, err)
	}
	var recs uint64
	for _, e := range entries {
		if e.Noops == 0 {
			recs++
		}
	}
	r.records.Add(recs)
	return r.raiseDurable(), nil
}

// Reconfigure takes a committed configuration of the shard (m.Epoch). A
// configuration no newer than the last one its owner gave is ignored, and
// so is any for a recovered or fenced copy, which never rejoins in place:
// except that a recovered copy that m leaves out stops ordering past what
// it ordered (see replacedFrom). The owner must hand it every
// configuration, in order with the cuts (one that leaves it out at once,
// if it knows of no earlier one).
//
// A copy left out is fenced: a primary answers its waiting appends
// Unavailable (their clients retry at the new primary, which stores each
// once) and answers nothing from now on. A backup that becomes primary
// starts a Primary at the log's ordered end, reads back into its retry
// memory the entries its predecessor stored (see DedupScanMax). A primary
// rejoins every backup of the new configuration (see setBackups); until
// each joined, it admits, fills and reports nothing. It reports whether it applied m.
func (r *Replica[W]) Reconfigure(m Membership, now time.Time, out *Output[W]) (applied bool) {
	cur := r.Role()
	if m.Epoch <= r.cfgEpoch {
		return false
	}
	r.cfgEpoch = m.Epoch
	if m.EarlierRun && cur == RoleBackup {
		// A primary of a configuration that took in an earlier run of
		// this server joined this run before it heard of the
		// configuration: it serves in none.
		m.Role = RoleFenced
	}
	if cur == RoleRecovered || cur == RoleFenced {
		if m.Role != RolePrimary && m.Role != RoleBackup {
			r.distrustTail()
			r.outEpoch = m.Epoch
			return false
		}
		// A copy that asked to rejoin is a backup of the configuration
		// that took it in; any other stays out (a recovered copy a
		// configuration still names as an earlier run of its server,
		// whose tail no other copy replaced in it).
		r.replMu.Lock()
		joined := m.Role == RoleBackup && !m.EarlierRun && r.becomeBackupLocked(m.Epoch)
		r.replMu.Unlock()
		if joined {
			out.Changed = true
		}
		return joined
	}
	for {
		e := r.epoch.Load()
		if m.Epoch <= e || r.epoch.CompareAndSwap(e, m.Epoch) {
			break
		}
	}
	out.Changed = true
	switch {
	case m.Role != RolePrimary && m.Role != RoleBackup, cur == RolePrimary && m.Role == RoleBackup:
		r.fence(out)
		r.outEpoch = m.Epoch
	case cur == RoleBackup && m.Role == RoleBackup:
	case cur == RoleBackup:
		r.promote(m, now, out)
	default:
		r.setBackups(m.Backups)
		if !r.syncing.Load() {
			// The last backup left: all this copy holds is durable.
			r.updateDurable(out)
		}
	}
	return true
}

// distrustTail records that the shard may replace what this copy holds
// past its ordered end (see replacedFrom).
func (r *Replica[W]) distrustTail() {
	r.replacedFrom.Store(min(r.replacedFrom.Load(), r.log.Ordered()))
}

// fence takes this copy out of service (see RoleFenced).
func (r *Replica[W]) fence(out *Output[W]) {
	r.replMu.Lock()
	r.role.Store(int32(RoleFenced))
	r.replMu.Unlock()
	r.lost.Store(true)
	r.distrustTail()
	r.syncing.Store(false)
	// A copy that is no primary has no backups: what a fenced primary's
	// backups acknowledged would otherwise bound what it holds (held) once
	// it rejoins as a backup, and so its new primary's durable length.
	r.backups.Store(&[]*backupSlot{})
	if r.primary == nil {
		return
	}
	for _, a := range r.primary.Waiting() {
		out.Answers = append(out.Answers, Answer[W]{Waiter: a.Waiter, Seq: a.Seq, Verdict: Unavailable})
	}
	out.StoreErr = fmt.Errorf("shard %d: this copy was taken out of the shard's configuration %d", r.id, r.epoch.Load())
	r.primary = nil
}

// promote makes a backup the primary of configuration m.
func (r *Replica[W]) promote(m Membership, now time.Time, out *Output[W]) {
	ordered := r.log.Ordered()
	p := NewPrimary[W](ordered, r.log.GlobalOf)
	err := r.log.Scan(ordered-min(ordered, DedupScanMax), func(local uint64, e segment.Entry) bool {
		if e.Noops > 0 {
			if end := local + e.Noops; end > p.Next() {
				p.Noops(end - p.Next())
			}
			return true
		}
		p.Adopt(e.ClientID, e.Seq, local)
		return true
	})
	if err == nil && p.Next() != r.log.Len() {
		err = fmt.Errorf("read %d of %d entries", p.Next(), r.log.Len())
	}
	if err != nil {
		// The entries it could not read stay unordered for good: stop,
		// so the leader takes this copy out as well.
		out.Failed = fmt.Errorf("shard %d: promoted primary cannot read its log: %w", r.id, err)
		r.fence(out)
		return
	}
	r.primary = p
	r.ord = m.Ordering
	if r.ord == nil {
		r.ord = Eager{}
	}
	r.setBackups(m.Backups)
	// The role goes last: concurrent readers (Report) that see it see the
	// primary's ordering too.
	r.replMu.Lock()
	r.role.Store(int32(RolePrimary))
	r.replMu.Unlock()
	if !r.syncing.Load() {
		r.updateDurable(out)
		r.observe(now)
	}
}

// setBackups makes names a primary's backups in a new configuration. Each
// must join it (BackupJoined) before the primary goes on, even one that
// stays: it refuses the batches of the old configuration from the moment
// it hears of the new one, so what it holds is known only once it joined.
func (r *Replica[W]) setBackups(names []string) {
	slots := make([]*backupSlot, len(names))
	for i, id := range names {
		slots[i] = &backupSlot{id: id}
	}
	r.syncing.Store(len(names) > 0)
	r.acknowledged.Store(max(r.acknowledged.Load(), r.durable.Load()))
	r.backups.Store(&slots)
	if r.syncing.Load() {
		// What every replica holds is unknown until they joined: only
		// what the cuts ordered is sure.
		r.durable.Store(min(r.durable.Load(), r.log.Ordered()))
	}
}

// BackupJoined takes a backup's answer to this primary's join in
// configuration epoch: its log holds length entries, held of them as
// acknowledged, and tail holds its entries from local index tailFrom (the
// primary's length when it asked) to length, if it has more (all of them
// written by a fenced primary). The primary adopts those past its own
// length: they were replicated in order by the same predecessor, so the
// logs agree before them. Once every backup joined, the primary resends
// each what it lacks and goes on.
func (r *Replica[W]) BackupJoined(backup string, epoch, length, held, tailFrom uint64, tail []segment.Entry, now time.Time, out *Output[W]) {
	if r.Role() != RolePrimary || epoch != r.epoch.Load() || !r.syncing.Load() {
		return
	}
	var slot *backupSlot
	for _, b := range *r.backups.Load() {
		if b.id == backup && !b.joined {
			slot = b
		}
	}
	if slot == nil {
		return
	}
	if n := r.log.Len(); length > n {
		// Only the entries past this log's length are new here.
		var adopt []segment.Entry
		at := tailFrom
		for _, e := range tail {
			covers := max(e.Noops, 1)
			if at+covers > n {
				if e.Noops > 0 && at < n {
					e.Noops = at + covers - n
				}
				adopt = append(adopt, e)
			}
			at += covers
		}
		if tailFrom > n || at != length {
			out.Problems = append(out.Problems, fmt.Errorf("shard %d: backup %s joined with entries [%d, %d), sent [%d, %d)", r.id, backup, n, length, tailFrom, at))
			return
		}
		tail = adopt
		if _, err := r.log.Append(tail); err != nil {
			out.Failed = fmt.Errorf("shard %d: adopt a backup's tail: %w", r.id, err)
			return
		}
		for _, e := range tail {
			if e.Noops > 0 {
				r.primary.Noops(e.Noops)
				continue
			}
			r.primary.Adopt(e.ClientID, e.Seq, r.primary.Next())
			r.records.Add(1)
		}
		out.Unsynced = true
	}
	slot.joined, slot.length = true, length
	slot.held.Store(held)
	for _, b := range *r.backups.Load() {
		if !b.joined {
			return
		}
	}
	r.syncing.Store(false)
	n := r.log.Len()
	for _, b := range *r.backups.Load() {
		if b.length < n {
			out.Resend = append(out.Resend, Resend{Backup: b.id, From: b.length, To: n})
		}
	}
	r.updateDurable(out)
	r.observe(now)
	if r.ord.ReportDue(now) {
		out.Report = true
	}
}

// Gaps lists what this copy must fetch from a live replica of its shard
// (see CatchUp): the ranges its log holds damaged, each put back in
// place.
func (r *Replica[W]) Gaps() []Gap {
	var gaps []Gap
	for _, d := range r.log.Damaged() {
		gaps = append(gaps, Gap{First: d.First, End: d.End, InPlace: true})
	}
	return gaps
}

// Repair stores a catch-up's write (CatchUp.Received): a damaged range
// put back in place, or, on a copy out of its shard's configuration that
// prepared to rejoin, entries appended at its length. It is safe for
// concurrent use: a repair only touches the log, which serializes it with
// the other writers; an append holds replMu, so a join that makes the
// copy a backup, and the primary's batches after it, come wholly before
// or after it. The owner then wakes subscribers (the range reads again)
// and ticks the copy (cuts may wait for the entries).
func (r *Replica[W]) Repair(w Write) error {
	if !w.InPlace {
		r.replMu.Lock()
		defer r.replMu.Unlock()
		role := r.Role()
		if role != RoleRecovered && role != RoleFenced {
			return fmt.Errorf("shard %d: catch-up write at %d: a %v copy takes its entries from its primary: %w", r.id, w.First, role, ErrRejoined)
		}
		n := r.log.Len()
		if w.Rebase && w.First > n {
			// The source's log starts past all this copy holds: the
			// cluster trimmed it, so nobody reads it, and the copy starts
			// over where the source's log does.
			if err := r.log.Rebase(w.First); err != nil {
				return fmt.Errorf("shard %d: catch-up: start the log at %d: %w", r.id, w.First, err)
			}
			n = w.First
		}
		if w.First != n {
			return fmt.Errorf("shard %d: catch-up write at %d, the log holds %d", r.id, w.First, n)
		}
		if len(w.Entries) == 0 {
			return nil
		}
		if _, err := r.log.Append(w.Entries); err != nil {
			return fmt.Errorf("shard %d: catch-up: %w", r.id, err)
		}
		return nil
	}
	if err := r.log.Repair(w.First, w.Entries); err != nil {
		return fmt.Errorf("shard %d: repair: %w", r.id, err)
	}
	return nil
}

// Trim lets the log drop entries ordered below global.
func (r *Replica[W]) Trim(global uint64) error { return r.log.Trim(global) }

// ApplyCut gives this copy's entries the positions a committed cut
// assigns and answers the appends it orders. A copy that cannot follow
// the cut (it lacks entries the cut orders, it was left out of the
// configuration before the cut reached past what it ordered, or a
// snapshot says it missed cuts) is marked lost: the other replicas serve
// those entries.
func (r *Replica[W]) ApplyCut(c Cut, out *Output[W]) {
	out.Changed = true
	defer func() { r.lastCut = max(r.lastCut, c.Index) }()
	if c.Index > r.lastCut && c.Slice.Count > 0 {
		r.orderWant = max(r.orderWant, c.Slice.LocalStart+c.Slice.Count)
	}
	r.orderWant = max(r.orderWant, c.OrderedAtLeast)
	if r.queueing() && r.primary == nil {
		if c.Index > r.lastCut && c.Slice.Count > 0 && c.Slice.LocalStart+c.Slice.Count > r.log.Ordered() {
			r.queueCut(c)
		}
		r.applyPending(out)
		return
	}
	if c.Index > r.lastCut && c.Slice.Count > 0 && !r.lost.Load() {
		sl := c.Slice
		ordered, length := r.log.Ordered(), r.log.Len()
		switch {
		case sl.LocalStart < ordered:
			// Already assigned before a restart.
		case sl.LocalStart+sl.Count > r.replacedFrom.Load():
			out.Problems = append(out.Problems, fmt.Errorf("shard %d: copy left out of the configuration cannot follow cut %d: it orders local [%d, %d), where the shard may hold other entries than this copy from %d on",
				r.id, c.Index, sl.LocalStart, sl.LocalStart+sl.Count, r.replacedFrom.Load()))
			r.lost.Store(true)
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
// holds it at local index local (among the entries it can read). Only a
// copy that holds, and can read, every entry the shard ordered may deny an
// append it did not find: one that lost its tail in a crash, missed cuts,
// or has damaged records below the final length would deny records the
// other replicas serve. Damage at or past the final length hides only
// entries that were never ordered. An entry at or past a final shard's
// length was never ordered, even where this copy applied cuts that place
// it: in speculative order the cuts after a view change still give a
// failed shard's void slots to its entries past the void point, and those
// slots are no-ops to readers. That holds only where this copy holds every
// entry the shard ordered as the shard does (finalLen <= replacedFrom):
// otherwise a newer primary may have stored the append again (a client's
// retry) at an index the copy holds otherwise, and ordered it there.
func (r *Replica[W]) Resolve(local uint64, found bool) (Resolution, uint64) {
	finalLen, final := r.Final()
	if final && found && local >= finalLen && finalLen <= r.replacedFrom.Load() {
		return ResolveNotOrdered, 0
	}
	ordered := r.log.Ordered()
	if found && local < ordered {
		if pos, ok := r.log.GlobalOf(local); ok {
			return ResolveOrdered, pos
		}
		return ResolvePending, 0 // trimmed: another copy may still tell
	}
	if final && !found && ordered >= finalLen && !r.damagedBelow(finalLen) {
		return ResolveNotOrdered, 0
	}
	return ResolvePending, 0
}

// damagedBelow says some entry below local index end cannot be read.
func (r *Replica[W]) damagedBelow(end uint64) bool {
	for _, d := range r.log.Damaged() {
		if d.First < end {
			return true
		}
	}
	return false
}
