package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/metrics"
	"github.com/augur-log/augur/internal/ptimer"
	"github.com/augur-log/augur/internal/segment"
	"github.com/augur-log/augur/internal/shard"
	"github.com/augur-log/augur/internal/stagetime"
)

// Bounds.
const (
	// appendQueueMax bounds append batches waiting for a shard's loop.
	appendQueueMax = 256
	// appendDrainMax is how many queued batches one write coalesces.
	appendDrainMax = 64
)

// A server holds each of its shards in one of the core's roles.
const (
	rolePrimary = shard.RolePrimary
	roleBackup  = shard.RoleBackup
	// roleRecovered holds a shard found on disk at start-up: this server
	// restarted, so it is out of the shard's configuration (or the shard
	// is finalized); it only serves reads.
	roleRecovered = shard.RoleRecovered
	// roleFenced holds a shard a newer configuration left out.
	roleFenced = shard.RoleFenced
)

// lagQueueMax bounds the lag-fixes waiting for a primary's loop; the
// leader repeats unanswered ones.
const lagQueueMax = 16

type appendReq struct {
	stream   *appendStream
	clientID uint64
	entries  []*pb.AppendEntry
	// at is when the request arrived, when stages are timed.
	at time.Time
}

// cutMsg carries one committed cut's consequence for one shard.
type cutMsg struct {
	cutIndex uint64
	cutStart uint64
	cutEnd   uint64
	slice    cut.Slice
	// final is set once the shard is finalized at finalLen.
	final    bool
	finalLen uint64
	trim     uint64
	// orderedAtLeast, from a snapshot, is how many of the shard's records
	// are ordered; a copy that assigned fewer missed cuts for good.
	orderedAtLeast uint64
	// spec is the new speculative state, when it changed.
	spec *control.Spec
	// member is this copy's place in a new configuration of the shard,
	// peers a primary's backups in it.
	member *shard.Membership
	peers  []Peer
}

// joinMsg is a backup's answer to the primary's join of a configuration.
type joinMsg struct {
	backup              string
	epoch, length, held uint64
	tailFrom            uint64
	tail                []segment.Entry
}

// replica is this server's copy of one shard: a shell that feeds the
// shard.Replica core and carries out its output (store writes through
// the core, backup sends, acknowledgements, reports). Its loop goroutine
// owns the core, except that on a backup the Replicate stream's goroutine
// stores the primary's batches itself (see appendReplicated) and backup
// links' goroutines pass acknowledgements straight to the core
// (backupAcked); the core allows both.
type replica struct {
	id    cut.ShardID
	store *segment.Store
	core  *shard.Replica[*appendStream]
	// windows is a primary's ordering when it follows the announced lease
	// windows, which the shell hands it; nil otherwise.
	windows shard.WindowFollower
	srv     *Server
	log     *slog.Logger

	appendCh chan appendReq
	cutCh    chan cutMsg
	joinCh   chan joinMsg
	// do runs a function on the loop: a rejoin's steps, which belong to
	// the core's owner.
	do chan func()
	// kick wakes the loop when durable moved outside it and the ordering
	// mode acts on durable entries, so Tick sees the new length.
	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	// durableCh wakes whoever forwards durable (backup acks).
	durableCh chan struct{}
	// syncWake wakes syncLoop, under SyncGroup, when the store holds
	// unsynced writes; nil under the other policies.
	syncWake chan struct{}
	// replMu serializes the batches a backup stores (appendReplicated);
	// replBuf is their reused entry buffer.
	replMu  sync.Mutex
	replBuf []segment.Entry
	// failed is set once replication to a backup or a store write broke.
	failed atomic.Bool
	// catchUp shows the copy's catch-up (repair), if one ran.
	catchUp catchUpShow
	// rejoinWake starts a rejoin (rejoin.go); rejoining says one runs,
	// and rejoinShow how far it is.
	rejoinWake chan struct{}
	rejoining  atomic.Bool
	rejoinShow catchUpShow
	// repairing says the repair of damaged ranges runs: a rejoin, which
	// may drop some of them with the tail, waits for it.
	repairing atomic.Bool

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when runs or finality change

	// loop state
	// spec is the latest speculative state, for subscription streams.
	spec  atomic.Pointer[control.Spec]
	lagCh chan uint64
	// out and batch are reused by every step of the loop.
	out   shard.Output[*appendStream]
	batch []shard.Append[*appendStream]
	// fillTimer wakes the loop when the core asks to be woken (a
	// speculative primary's next fill); it is made at the first such
	// request. Fills are due a little over an ordering interval after a
	// report, and a Go timer of an idle process can fire up to a
	// millisecond late; every late fill holds up speculative delivery on
	// every shard.
	fillTimer *ptimer.Timer
	fillDue   time.Time // the deadline fillTimer is armed for

	// primaryMarks and backupMarks time this copy's batches through the
	// append path's stages, when the bench asks (internal/stagetime).
	primaryMarks, backupMarks *stagetime.Marks
}

func newReplica(srv *Server, id cut.ShardID, r shard.Role, store *segment.Store, backups []Peer, epoch uint64) *replica {
	return newReplicaOrdered(srv, id, r, store, backups, epoch, 0)
}

// newReplicaOrdered is newReplica for a copy made to join a live shard
// whose cuts ordered orderedAtLeast of its entries already.
func newReplicaOrdered(srv *Server, id cut.ShardID, r shard.Role, store *segment.Store, backups []Peer, epoch, orderedAtLeast uint64) *replica {
	rp := &replica{
		id:         id,
		store:      store,
		srv:        srv,
		log:        srv.log.With("shard", id),
		appendCh:   make(chan appendReq, appendQueueMax),
		cutCh:      make(chan cutMsg, 64),
		joinCh:     make(chan joinMsg, 8),
		do:         make(chan func()),
		rejoinWake: make(chan struct{}, 1),
		lagCh:      make(chan uint64, lagQueueMax),
		kick:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		durableCh:  make(chan struct{}, 1),
		changed:    make(chan struct{}),
	}
	// Under SyncAlways every write is synced before it returns, so a copy
	// holds what it synced either way.
	held := srv.cfg.Sync == segment.SyncGroup || srv.cfg.Sync == segment.SyncAlways
	cfg := shard.Config{ID: id, Role: r, Epoch: epoch, HeldWhenSynced: held, OrderedAtLeast: orderedAtLeast}
	for _, b := range backups {
		cfg.Backups = append(cfg.Backups, b.ID)
	}
	if srv.cfg.Sync == segment.SyncGroup {
		rp.syncWake = make(chan struct{}, 1)
		rp.primaryMarks = stagetime.NewMarks(stagetime.PrimaryFsync, stagetime.BackupWait, stagetime.Ordered)
	} else {
		rp.primaryMarks = stagetime.NewMarks(stagetime.BackupWait, stagetime.Ordered)
	}
	rp.backupMarks = stagetime.NewMarks(stagetime.BackupFsync)
	if runs := store.Runs(0); len(runs) > 0 {
		cfg.LastCut = runs[len(runs)-1].Cut
	}
	if r == rolePrimary {
		cfg.Ordering = srv.cfg.Mode.NewShardOrdering(id, store.Len(), time.Now())
		rp.windows, _ = cfg.Ordering.(shard.WindowFollower)
	}
	rp.core = shard.NewReplica[*appendStream](cfg, store)
	return rp
}

// role is what this copy does now.
func (r *replica) role() shard.Role { return r.core.Role() }

// changedCh returns a channel closed at the next change of runs or finality.
func (r *replica) changedCh() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

func (r *replica) broadcast() {
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

func (r *replica) notifyDurable() {
	select {
	case r.durableCh <- struct{}{}:
	default:
	}
}

// finalized says whether the shard is finalized.
func (r *replica) finalized() bool {
	_, ok := r.core.Final()
	return ok
}

func (r *replica) run() {
	defer close(r.done)
	defer func() {
		if r.fillTimer != nil {
			r.fillTimer.Close()
		}
	}()
	var fillC <-chan time.Time
	for {
		r.step()
		if r.fillTimer != nil {
			fillC = r.fillTimer.C
		}
		select {
		case <-fillC:
		case <-r.kick:
		case target := <-r.lagCh:
			out := r.resetOut()
			r.core.LagFix(time.Now(), target, out)
			r.carry(out)
		case <-r.stop:
			r.failPending(pb.Code_UNAVAILABLE, "server stopping")
			return
		case req := <-r.appendCh:
			batch := []appendReq{req}
		drain:
			for len(batch) < appendDrainMax {
				select {
				case more := <-r.appendCh:
					batch = append(batch, more)
				default:
					break drain
				}
			}
			r.appendLoop(batch)
		case m := <-r.cutCh:
			r.applyCut(m)
		case fn := <-r.do:
			fn()
		case j := <-r.joinCh:
			out := r.resetOut()
			r.core.BackupJoined(j.backup, j.epoch, j.length, j.held, j.tailFrom, j.tail, time.Now(), out)
			r.carry(out)
		}
	}
}

// onLoop runs fn on the loop and waits for it; false if the replica or
// ctx stopped first.
func (r *replica) onLoop(ctx context.Context, fn func()) bool {
	done := make(chan struct{})
	select {
	case r.do <- func() { fn(); close(done) }:
	case <-r.done:
		return false
	case <-ctx.Done():
		return false
	}
	select {
	case <-done:
		return true
	case <-r.done:
		return false
	}
}

// resetOut returns the loop's output, emptied.
func (r *replica) resetOut() *shard.Output[*appendStream] {
	r.out.Reset()
	return &r.out
}

// step lets the core's ordering mode act now: on a speculative primary,
// fill no-ops when it sat between quota boundaries too long, report when
// the durable length crossed a boundary, and arm the timer of the next
// fill.
func (r *replica) step() {
	out := r.resetOut()
	r.core.Tick(time.Now(), out)
	r.carry(out)
}

// appendLoop stores a batch of client appends and sends it to the backups.
func (r *replica) appendLoop(reqs []appendReq) {
	out := r.resetOut()
	batch := r.batch[:0]
	for _, req := range reqs {
		if !req.at.IsZero() {
			stagetime.Observe(stagetime.AppendQueue, time.Since(req.at))
		}
		var invalid []*pb.AppendAck
		for _, e := range req.entries {
			if msg := checkRecord(e.GetRecord(), r.srv.cfg.RecordBytesMax); msg != "" {
				metrics.AppendsRejected.WithLabelValues(r.srv.cfg.ID, pb.Code_INVALID.String()).Inc()
				invalid = append(invalid, &pb.AppendAck{Seq: e.Seq, Code: pb.Code_INVALID, Shard: r.id, Message: msg})
				continue
			}
			rec := e.GetRecord()
			batch = append(batch, shard.Append[*appendStream]{Waiter: req.stream, Entry: segment.Entry{
				ClientID: req.clientID, Seq: e.Seq, Key: rec.GetKey(), Tags: rec.GetTags(), Payload: rec.GetPayload(),
			}})
		}
		if len(invalid) > 0 {
			req.stream.push(invalid)
		}
	}
	r.core.Propose(batch, out)
	clear(batch)
	r.batch = batch[:0]
	if cap(batch) > shard.BufferRetainMax {
		r.batch = nil
	}
	if len(out.Answers) > 0 {
		// Retries and appends to a finalized shard, answered at once.
		r.answer(out.Answers, nil, true)
		out.Answers = out.Answers[:0]
	}
	// The backups get the batch before this copy writes it, so their writes
	// overlap this one: a record is durable only once every copy holds it.
	for _, b := range out.Replicate {
		r.replicate(b)
	}
	out.Replicate = out.Replicate[:0]
	before, began := r.store.Len(), time.Now()
	r.core.Store(out)
	if n := r.store.Len(); n > before {
		stagetime.Observe(stagetime.PrimaryWrite, time.Since(began))
		r.primaryMarks.Mark(n)
	}
	r.carry(out)
}

// replicate sends one batch of the core's to every backup.
func (r *replica) replicate(b shard.Batch) {
	recs := make([]*pb.StoredRecord, len(b.Entries))
	for i, e := range b.Entries {
		recs[i] = storedRecord(e)
	}
	for _, l := range r.srv.backupLinks(r) {
		l.send(b.First, recs)
	}
}

// carry carries out what the core asked for, in the order of Output's
// fields.
func (r *replica) carry(out *shard.Output[*appendStream]) {
	for _, rs := range out.Resend {
		r.resend(rs)
	}
	for _, b := range out.Replicate {
		r.replicate(b)
	}
	if out.Unsynced {
		r.markUnsynced()
	}
	if out.UnsyncedRuns {
		r.srv.markDirty()
	}
	if out.Stored > 0 {
		r.srv.stored.Add(float64(out.Stored))
	}
	if out.Ordered > 0 {
		r.srv.ordered.Add(float64(out.Ordered))
	}
	if out.Noops > 0 {
		metrics.Noops.WithLabelValues(r.srv.cfg.ID).Add(float64(out.Noops))
	}
	if out.Failed != nil {
		// A store that cannot write loses nothing acknowledged, but this
		// shard can take no more: let the shard be finalized.
		r.log.Error("append to store", "err", out.Failed)
		r.failed.Store(true)
		r.srv.signalHeartbeat()
	}
	for _, p := range out.Problems {
		r.log.Error("replica", "err", p)
	}
	if len(out.Problems) > 0 && r.core.Lost() {
		// Only a problem marks a copy lost, so the hot path never looks.
		metrics.ReplicaLost.WithLabelValues(r.srv.cfg.ID, strconv.FormatUint(uint64(r.id), 10)).Set(1)
	}
	if len(out.Answers) > 0 {
		r.answer(out.Answers, out.StoreErr, false)
	}
	if out.Durable || out.Report {
		r.srv.signalHeartbeat()
	}
	if out.Changed {
		r.broadcast()
	}
	// Re-arm only for a new deadline: the core asks on every turn of the
	// loop, and arming the timer is a system call.
	if at := out.WakeAt; !at.IsZero() && !at.Equal(r.fillDue) {
		if r.fillTimer == nil {
			r.fillTimer = ptimer.New()
		}
		r.fillDue = at
		r.fillTimer.Reset(time.Until(at))
	}
}

// resend sends one backup the entries the core asked for, read from the
// store, in batches of at most appendEntriesMax.
func (r *replica) resend(rs shard.Resend) {
	var link *backupLink
	for _, l := range r.srv.backupLinks(r) {
		if l.peer.ID == rs.Backup {
			link = l
		}
	}
	if link == nil {
		return
	}
	first := rs.From
	var recs []*pb.StoredRecord
	flush := func(next uint64) {
		if len(recs) > 0 {
			link.send(first, recs)
		}
		first, recs = next, nil
	}
	err := r.store.Scan(rs.From, func(local uint64, e segment.Entry) bool {
		if local >= rs.To {
			return false
		}
		recs = append(recs, storedRecord(e))
		if len(recs) >= appendEntriesMax {
			flush(local + max(e.Noops, 1))
		}
		return true
	})
	flush(0)
	if err != nil {
		link.fail(fmt.Errorf("resend [%d, %d): %w", rs.From, rs.To, err))
	}
}

// storedRecord is the wire form of a log entry.
func storedRecord(e segment.Entry) *pb.StoredRecord {
	if e.Noops > 0 {
		return &pb.StoredRecord{Noops: e.Noops}
	}
	return &pb.StoredRecord{ClientId: e.ClientID, Seq: e.Seq, Record: &pb.Record{Key: e.Key, Tags: e.Tags, Payload: e.Payload}}
}

// entryOf is the log entry of a wire record.
func entryOf(rec *pb.StoredRecord) segment.Entry {
	if rec.Noops > 0 {
		return segment.Entry{Noops: rec.Noops}
	}
	return segment.Entry{ClientID: rec.ClientId, Seq: rec.Seq, Key: rec.GetRecord().GetKey(),
		Tags: rec.GetRecord().GetTags(), Payload: rec.GetRecord().GetPayload()}
}

// checkRecord says why rec must not be stored, or "" if it may be. Each
// tag counts with its length prefix, as it is stored: otherwise a record
// of millions of empty tags would pass any limit, and past the segment's
// record bound its append would fail the shard.
func checkRecord(rec *pb.Record, limit int) string {
	if rec == nil {
		return "missing record"
	}
	n := len(rec.Payload) + len(rec.Key)
	for _, t := range rec.Tags {
		n += uvarintBytes(len(t)) + len(t)
	}
	switch {
	case len(rec.Payload) == 0:
		return "empty record payload"
	case n > limit:
		return fmt.Sprintf("record of %d bytes exceeds the limit of %d", n, limit)
	}
	return ""
}

// uvarintBytes is the length of the uvarint encoding of n.
func uvarintBytes(n int) int { return (bits.Len64(uint64(n)|1) + 6) / 7 }

// appendReplicated stores a batch from the primary on a backup. The
// Replicate stream's goroutine calls it directly rather than through the
// loop: handing each batch to the loop and waiting for its answer cost two
// goroutine switches on the path of every append, and the store serializes
// its writers anyway. Nothing else writes records to a backup's store; the
// loop only assigns positions and trims, and a cut never orders records
// before this backup acknowledged them.
func (r *replica) appendReplicated(epoch, first uint64, records []*pb.StoredRecord) error {
	r.replMu.Lock()
	defer r.replMu.Unlock()
	entries := r.replBuf[:0]
	for _, rec := range records {
		entries = append(entries, entryOf(rec))
	}
	advanced, err := r.core.Replicated(epoch, first, entries)
	clear(entries)
	r.replBuf = entries[:0]
	if cap(entries) > shard.BufferRetainMax {
		r.replBuf = nil
	}
	if err != nil {
		return err
	}
	r.srv.stored.Add(float64(len(records)))
	r.backupMarks.Mark(r.store.Len())
	r.markUnsynced()
	if r.core.PendingCuts() {
		// A rejoined copy keeps cuts for the entries its primary resends.
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	if advanced {
		// Without SyncGroup the batch is held once written. Under it a
		// sync that ran meanwhile (syncLoop's, or a rollover's) may have
		// covered the batch, and syncLoop then finds nothing new.
		r.notifyDurable()
	}
	return nil
}

// markUnsynced asks for a sync of the store's records: under SyncGroup at
// once, from this replica's syncLoop; otherwise from the server's interval
// syncLoop.
func (r *replica) markUnsynced() {
	if r.syncWake == nil {
		r.srv.markDirty()
		return
	}
	select {
	case r.syncWake <- struct{}{}:
	default:
	}
}

// syncLoop is the group commit of one store under SyncGroup: it fsyncs
// back to back while writes keep coming, so one fsync covers everything
// written while the previous one ran, and never one fsync per record. It
// runs beside the loop and the replication stream, so a primary's fsync
// overlaps its backups' (they got the batch before the primary wrote it),
// and a write never waits for the disk. After each fsync the core learns
// what is now held; a backup acknowledges it, a primary reports it.
func (r *replica) syncLoop() {
	for {
		select {
		case <-r.syncWake:
		case <-r.stop:
			return
		}
		began := time.Now()
		if err := r.store.SyncRecords(); err != nil {
			if r.srv.ctx.Err() == nil && !errors.Is(err, segment.ErrClosed) {
				// The store refuses writes from now on; nothing written
				// since the last good fsync was counted as held.
				r.log.Error("fsync", "err", err)
				r.failed.Store(true)
				r.srv.signalHeartbeat()
			}
			return
		}
		if stagetime.On() {
			stagetime.Observe(stagetime.SegmentSync, time.Since(began))
			if r.role() == rolePrimary {
				r.primaryMarks.Reached(stagetime.PrimaryFsync, r.store.SyncedLen())
			} else {
				r.backupMarks.Reached(stagetime.BackupFsync, r.store.SyncedLen())
			}
		}
		if advanced, step := r.core.Synced(); advanced {
			r.durableMoved(step)
		}
	}
}

// backupAcked records that backup holds d records, acknowledged in
// configuration epoch. The backup link's receiving goroutine calls it, so
// a backup's acknowledgement reaches the heartbeat without a detour
// through the loop, which may be busy storing the next batch.
func (r *replica) backupAcked(backup string, epoch, d uint64) {
	if advanced, step := r.core.BackupAcked(backup, epoch, d); advanced {
		r.durableMoved(step)
	}
}

// durableMoved passes on that what every replica holds grew: a backup
// acknowledges it to its primary, a primary reports it. step is the
// core's: the ordering mode acts on durable entries.
func (r *replica) durableMoved(step bool) {
	if r.role() == roleBackup {
		r.notifyDurable()
		return
	}
	r.primaryMarks.Reached(stagetime.BackupWait, r.core.Durable())
	r.srv.signalHeartbeat()
	if step {
		// Speculative subscribers get records as soon as they are
		// durable, and the loop reports at quota boundaries.
		r.broadcast()
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// applyCut assigns positions from one committed cut and acknowledges the
// appends it orders.
func (r *replica) applyCut(m cutMsg) {
	out := r.resetOut()
	if m.spec != nil {
		r.spec.Store(m.spec)
		if r.windows != nil {
			r.windows.SetWindows(m.spec.Windows, m.spec.Eager())
		}
	}
	if m.trim > 0 {
		if err := r.core.Trim(m.trim); err != nil {
			r.log.Warn("trim", "err", err)
		}
	}
	r.core.ApplyCut(shard.Cut{Index: m.cutIndex, Start: m.cutStart, End: m.cutEnd, Slice: m.slice, OrderedAtLeast: m.orderedAtLeast}, out)
	if stagetime.On() && r.role() == rolePrimary {
		r.primaryMarks.Reached(stagetime.Ordered, r.store.Ordered())
		if m.cutIndex > 0 {
			stagetime.Cuts.Reached(stagetime.CutDelivery, m.cutIndex)
		}
	}
	if m.final {
		r.core.Finalize(m.finalLen, out)
	}
	r.carry(out)
	if m.member != nil && !m.final {
		r.reconfigure(*m.member, m.peers)
	}
}

// reconfigure takes this copy's place in a new configuration of the
// shard: a backup that becomes primary gets its ordering mode and the
// windows; a primary joins its backups on new replication streams; a copy
// left out closes its streams.
func (r *replica) reconfigure(m shard.Membership, peers []Peer) {
	was := r.role()
	if m.Role == rolePrimary && was == roleBackup {
		m.Ordering = r.srv.cfg.Mode.NewShardOrdering(r.id, r.store.Ordered(), time.Now())
	}
	out := r.resetOut()
	applied := r.core.Reconfigure(m, time.Now(), out)
	r.wakeRejoin()
	if !applied {
		r.carry(out)
		return
	}
	r.log.Info("shard reconfigured", "epoch", m.Epoch, "was", was, "now", r.role())
	if r.role() == rolePrimary && was == roleBackup {
		r.windows, _ = m.Ordering.(shard.WindowFollower)
		if sp := r.spec.Load(); sp != nil && r.windows != nil {
			r.windows.SetWindows(sp.Windows, sp.Eager())
		}
	}
	if r.role() == rolePrimary {
		r.srv.relink(r, peers, m.Epoch)
	} else {
		r.srv.relink(r, nil, m.Epoch)
	}
	r.carry(out)
}

// answer sends the core's answers, one message per stream. rejected says
// they refuse appends just offered, which the rejection metric counts.
func (r *replica) answer(answers []shard.Answer[*appendStream], storeErr error, rejected bool) {
	byStream := map[*appendStream][]*pb.AppendAck{}
	for _, a := range answers {
		ack := r.ack(a, storeErr)
		if rejected && ack.Code != pb.Code_OK && ack.Code != pb.Code_PENDING {
			metrics.AppendsRejected.WithLabelValues(r.srv.cfg.ID, ack.Code.String()).Inc()
		}
		byStream[a.Waiter] = append(byStream[a.Waiter], ack)
	}
	for st, acks := range byStream {
		st.push(acks)
	}
}

// ack is the wire form of one answer.
func (r *replica) ack(a shard.Answer[*appendStream], storeErr error) *pb.AppendAck {
	switch a.Verdict {
	case shard.Ordered:
		return &pb.AppendAck{Seq: a.Seq, Code: pb.Code_OK, Shard: r.id, Position: a.Position}
	case shard.Waiting:
		return &pb.AppendAck{Seq: a.Seq, Code: pb.Code_PENDING}
	case shard.Expired:
		return &pb.AppendAck{Seq: a.Seq, Code: pb.Code_DEDUP_EXPIRED, Shard: r.id,
			Message: fmt.Sprintf("sequence %d is older than the retry window", a.Seq)}
	case shard.Finalized:
		return &pb.AppendAck{Seq: a.Seq, Code: pb.Code_FINALIZED, Shard: r.id, Message: fmt.Sprintf("shard %d is finalized", r.id)}
	case shard.Abandoned:
		return &pb.AppendAck{Seq: a.Seq, Code: pb.Code_FINALIZED, Shard: r.id,
			Message: fmt.Sprintf("shard %d was finalized before this record was ordered", r.id)}
	}
	msg := "the shard's store failed"
	if storeErr != nil {
		msg = storeErr.Error()
	}
	return &pb.AppendAck{Seq: a.Seq, Code: pb.Code_UNAVAILABLE, Message: msg}
}

func (r *replica) failPending(code pb.Code, msg string) {
	for _, a := range r.core.Waiting() {
		a.Waiter.push([]*pb.AppendAck{{Seq: a.Seq, Code: code, Shard: r.id, Message: msg}})
	}
}
