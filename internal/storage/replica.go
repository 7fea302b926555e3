package storage

import (
	"fmt"
	"log/slog"
	"math/bits"
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
	"github.com/augur-log/augur/internal/spec"
)

// Bounds.
const (
	// appendQueueMax bounds append batches waiting for a shard's loop.
	appendQueueMax = 256
	// appendDrainMax is how many queued batches one write coalesces.
	appendDrainMax = 64
)

// role is what a server does for one shard.
type role int

const (
	rolePrimary role = iota
	roleBackup
	// roleRecovered holds a shard found on disk at start-up: this server
	// restarted, so the shard is (or is about to be) finalized; it only
	// serves reads.
	roleRecovered
)

type appendReq struct {
	stream   *appendStream
	clientID uint64
	entries  []*pb.AppendEntry
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
}

// replica is this server's copy of one shard. Its loop goroutine owns the
// store's writes and every field below "loop state", except that on a
// backup the Replicate stream's goroutine writes the primary's batches
// itself (see appendReplicated).
type replica struct {
	id    cut.ShardID
	role  role
	store *segment.Store
	srv   *Server
	log   *slog.Logger

	appendCh chan appendReq
	cutCh    chan cutMsg
	// kick wakes the loop of a speculative primary when durable moved
	// outside it, so specStep sees the new length.
	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	// durable is how many records every replica holds: what a primary
	// reports. On a backup it is what this server holds durably.
	durable atomic.Uint64
	// durableCh wakes whoever forwards durable (heartbeats, backup acks).
	durableCh chan struct{}
	// backupDurable is what each backup acknowledged holding; each entry
	// is written only by its backup link's receiving goroutine.
	backupDurable []atomic.Uint64
	// replMu serializes the batches a backup stores (appendReplicated).
	replMu sync.Mutex
	// finalized and finalLen are published for readers.
	finalized atomic.Bool
	finalLen  atomic.Uint64
	// failed is set once replication to a backup broke.
	failed atomic.Bool

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when runs or finality change

	// loop state
	backups []Peer
	// primary is the append bookkeeping, on a primary only.
	primary *shard.Primary[*appendStream]
	lastCut uint64
	// lost is set once this copy missed records or cuts it can never
	// get back; it then serves neither subscriptions nor resolutions.
	lost atomic.Bool

	// Speculative mode. spec is the latest speculative state, for
	// subscription streams; on a primary, adh decides reports and no-op
	// fills, reported is the last length reported and records counts the
	// real records stored.
	spec     atomic.Pointer[control.Spec]
	adh      *spec.Shard
	reported atomic.Uint64
	records  atomic.Uint64
	lagCh    chan uint64
	// fillTimer wakes the loop for the next fill. Fills are due a little
	// over an ordering interval after a report, and a Go timer of an idle
	// process can fire up to a millisecond late; every late fill holds up
	// speculative delivery on every shard.
	fillTimer *ptimer.Timer
	fillDue   time.Time // the deadline fillTimer is armed for
}

func newReplica(srv *Server, id cut.ShardID, r role, store *segment.Store, backups []Peer) *replica {
	rp := &replica{
		id:            id,
		role:          r,
		store:         store,
		srv:           srv,
		log:           srv.log.With("shard", id),
		appendCh:      make(chan appendReq, appendQueueMax),
		cutCh:         make(chan cutMsg, 64),
		kick:          make(chan struct{}, 1),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
		durableCh:     make(chan struct{}, 1),
		changed:       make(chan struct{}),
		backups:       backups,
		backupDurable: make([]atomic.Uint64, len(backups)),
	}
	if r == rolePrimary {
		rp.primary = shard.NewPrimary[*appendStream](store.Len(), store.GlobalOf)
		if srv.cfg.Spec {
			rp.adh = spec.NewShard(id, store.Len(), srv.cfg.FillAfter, srv.cfg.FillIdleAfter, time.Now())
			rp.lagCh = make(chan uint64, 16)
			rp.fillTimer = ptimer.New()
		}
	}
	if runs := store.Runs(0); len(runs) > 0 {
		rp.lastCut = runs[len(runs)-1].Cut
	}
	if r != rolePrimary {
		rp.durable.Store(store.Len())
	}
	return rp
}

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

func (r *replica) run() {
	defer close(r.done)
	var fillC <-chan time.Time
	if r.fillTimer != nil {
		defer r.fillTimer.Close()
		fillC = r.fillTimer.C
	}
	for {
		r.specStep()
		select {
		case <-fillC:
		case <-r.kick:
		case target := <-r.lagCh:
			if r.adh != nil && !r.finalized.Load() {
				r.appendNoops(r.adh.LagFix(target))
			}
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
		}
	}
}

// appendLoop stores a batch of client appends and sends it to the backups.
func (r *replica) appendLoop(reqs []appendReq) {
	var entries []segment.Entry
	var waiters []*appendStream
	for _, req := range reqs {
		var acks []*pb.AppendAck
		for _, e := range req.entries {
			if ack := r.admit(req, e); ack != nil {
				if ack.Code != pb.Code_OK && ack.Code != pb.Code_PENDING {
					metrics.AppendsRejected.WithLabelValues(r.srv.cfg.ID, ack.Code.String()).Inc()
				}
				acks = append(acks, ack)
				continue
			}
			rec := e.GetRecord()
			entries = append(entries, segment.Entry{
				ClientID: req.clientID, Seq: e.Seq, Key: rec.GetKey(), Tags: rec.GetTags(), Payload: rec.GetPayload(),
			})
			waiters = append(waiters, req.stream)
		}
		if len(acks) > 0 {
			req.stream.push(acks)
		}
	}
	if len(entries) == 0 {
		return
	}
	// The backups get the batch before this copy writes it, so their writes
	// overlap this one: a record is durable only once every copy holds it.
	// The loop is the store's only writer, so the batch starts at Len.
	first := r.store.Len()
	recs := make([]*pb.StoredRecord, len(entries))
	for i, e := range entries {
		recs[i] = &pb.StoredRecord{ClientId: e.ClientID, Seq: e.Seq, Record: &pb.Record{Key: e.Key, Tags: e.Tags, Payload: e.Payload}}
	}
	for _, b := range r.srv.backupLinks(r) {
		b.send(first, recs)
	}
	stored, err := r.store.Append(entries)
	if err != nil {
		// A store that cannot write loses nothing acknowledged, but this
		// shard can take no more: fail the batch and let the shard be
		// finalized.
		r.log.Error("append to store", "err", err)
		r.failed.Store(true)
		r.srv.signalHeartbeat()
		for i, w := range waiters {
			w.push([]*pb.AppendAck{{Seq: entries[i].Seq, Code: pb.Code_UNAVAILABLE, Message: err.Error()}})
		}
		return
	}
	assert(stored == first, "a primary's batch was stored where the loop did not expect it")
	r.srv.stored.Add(float64(len(entries)))
	r.srv.markDirty()
	for i, e := range entries {
		r.primary.Stored(e.ClientID, e.Seq, first+uint64(i), waiters[i])
	}
	r.records.Add(uint64(len(entries)))
	r.updateDurable()
}

// admit returns an immediate answer for an entry that must not be stored
// (invalid, a retry, or the shard is finalized), or nil to store it.
func (r *replica) admit(req appendReq, e *pb.AppendEntry) *pb.AppendAck {
	if msg := checkRecord(e.GetRecord(), r.srv.cfg.RecordBytesMax); msg != "" {
		return &pb.AppendAck{Seq: e.Seq, Code: pb.Code_INVALID, Shard: r.id, Message: msg}
	}
	verdict, pos := r.primary.Admit(req.clientID, e.Seq, req.stream)
	switch verdict {
	case shard.Ordered:
		return &pb.AppendAck{Seq: e.Seq, Code: pb.Code_OK, Shard: r.id, Position: pos}
	case shard.Waiting:
		return &pb.AppendAck{Seq: e.Seq, Code: pb.Code_PENDING}
	case shard.Expired:
		return &pb.AppendAck{Seq: e.Seq, Code: pb.Code_DEDUP_EXPIRED, Shard: r.id,
			Message: fmt.Sprintf("sequence %d is older than the retry window", e.Seq)}
	case shard.Finalized:
		return &pb.AppendAck{Seq: e.Seq, Code: pb.Code_FINALIZED, Shard: r.id, Message: fmt.Sprintf("shard %d is finalized", r.id)}
	}
	return nil
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
func (r *replica) appendReplicated(first uint64, records []*pb.StoredRecord) error {
	r.replMu.Lock()
	defer r.replMu.Unlock()
	if r.role != roleBackup {
		return fmt.Errorf("shard %d: not a backup here", r.id)
	}
	if first != r.store.Len() {
		return fmt.Errorf("shard %d: replicated batch starts at %d, have %d", r.id, first, r.store.Len())
	}
	entries := make([]segment.Entry, len(records))
	for i, rec := range records {
		if rec.Noops > 0 {
			entries[i] = segment.Entry{Noops: rec.Noops}
			continue
		}
		entries[i] = segment.Entry{ClientID: rec.ClientId, Seq: rec.Seq, Key: rec.GetRecord().GetKey(),
			Tags: rec.GetRecord().GetTags(), Payload: rec.GetRecord().GetPayload()}
	}
	if _, err := r.store.Append(entries); err != nil {
		return fmt.Errorf("shard %d: %w", r.id, err)
	}
	r.srv.stored.Add(float64(len(entries)))
	r.srv.markDirty()
	r.durable.Store(r.store.Len())
	r.notifyDurable()
	return nil
}

// backupAcked records that backup i holds d records. The backup link's
// receiving goroutine calls it, so a backup's acknowledgement reaches the
// heartbeat without a detour through the loop, which may be busy storing
// the next batch.
func (r *replica) backupAcked(i int, d uint64) {
	if d > r.backupDurable[i].Load() {
		r.backupDurable[i].Store(d)
		r.updateDurable()
	}
}

// updateDurable recomputes what every replica holds and publishes it. It
// runs on the loop and on backup links' goroutines; durable only grows.
func (r *replica) updateDurable() {
	d := r.store.Len()
	for i := range r.backupDurable {
		d = min(d, r.backupDurable[i].Load())
	}
	for {
		cur := r.durable.Load()
		if d <= cur {
			return
		}
		if r.durable.CompareAndSwap(cur, d) {
			break
		}
	}
	r.srv.signalHeartbeat()
	if r.adh != nil {
		// Speculative subscribers get records as soon as they are
		// durable, and the loop reports at quota boundaries.
		r.broadcast()
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// specStep lets a speculative primary adhere to its quotas: fill no-ops
// when it sat between boundaries too long, report when the durable length
// crossed a boundary, and arm the timer of the next fill.
func (r *replica) specStep() {
	if r.adh == nil || r.finalized.Load() {
		return
	}
	now := time.Now()
	r.adh.Stored(r.store.Len(), r.records.Load(), now)
	r.adh.Durable(r.durable.Load())
	if n := r.adh.Fill(now); n > 0 {
		r.appendNoops(n)
	}
	if l, ok := r.adh.Report(now); ok {
		r.reported.Store(l)
		r.srv.signalHeartbeat()
	}
	// Re-arm only for a new deadline: specStep runs on every turn of the
	// loop, and arming the timer is a system call.
	if at, ok := r.adh.FillAt(); ok && !at.Equal(r.fillDue) {
		r.fillDue = at
		r.fillTimer.Reset(time.Until(at))
	}
}

// appendNoops stores a run of n no-ops as one entry and replicates it as
// one message.
func (r *replica) appendNoops(n uint64) {
	if n == 0 {
		return
	}
	first, err := r.store.Append([]segment.Entry{{Noops: n}})
	if err != nil {
		r.log.Error("append no-ops", "err", err)
		r.failed.Store(true)
		r.srv.signalHeartbeat()
		return
	}
	r.primary.Noops(n)
	metrics.Noops.WithLabelValues(r.srv.cfg.ID).Add(float64(n))
	r.srv.markDirty()
	for _, b := range r.srv.backupLinks(r) {
		b.send(first, []*pb.StoredRecord{{Noops: n}})
	}
	r.adh.Stored(r.store.Len(), r.records.Load(), time.Now())
	r.updateDurable()
}

// applyCut assigns positions from one committed cut and acknowledges the
// appends it orders.
func (r *replica) applyCut(m cutMsg) {
	if m.spec != nil {
		r.spec.Store(m.spec)
		if r.adh != nil {
			r.adh.SetWindows(m.spec.Windows)
		}
	}
	if m.trim > 0 {
		if err := r.store.Trim(m.trim); err != nil {
			r.log.Warn("trim", "err", err)
		}
	}
	if m.cutIndex > r.lastCut && m.slice.Count > 0 && !r.lost.Load() {
		sl := m.slice
		switch {
		case sl.LocalStart < r.store.Ordered():
			// Already assigned before a restart.
		case sl.LocalStart != r.store.Ordered() || sl.LocalStart+sl.Count > r.store.Len():
			// This copy lacks records the cut orders (it missed cuts or
			// lost writes); the other replica serves them.
			r.log.Error("replica cannot follow cut", "cut", m.cutIndex, "slice", sl, "ordered", r.store.Ordered(), "len", r.store.Len())
			r.lost.Store(true)
		default:
			run := segment.Run{Cut: m.cutIndex, CutStart: m.cutStart, CutEnd: m.cutEnd,
				LocalStart: sl.LocalStart, GlobalStart: sl.GlobalStart, Count: sl.Count}
			if err := r.store.Assign(run); err != nil {
				r.log.Error("assign positions", "err", err)
				r.lost.Store(true)
			} else {
				r.srv.markDirty()
				r.srv.ordered.Add(float64(sl.Count))
				if r.primary != nil {
					r.answer(r.primary.Order(sl))
				}
			}
		}
	}
	if m.orderedAtLeast > r.store.Ordered() && !r.lost.Load() {
		r.log.Error("replica missed cuts that a snapshot skipped", "ordered", r.store.Ordered(), "want", m.orderedAtLeast)
		r.lost.Store(true)
	}
	if m.cutIndex > r.lastCut {
		r.lastCut = m.cutIndex
	}
	if m.final && !r.finalized.Load() {
		r.finalLen.Store(m.finalLen)
		r.finalized.Store(true)
		if r.primary != nil {
			answers, unanswered := r.primary.Finalize(m.finalLen)
			if unanswered > 0 {
				r.log.Error("shard finalized before this copy applied the cuts of some appends: their clients get no answer",
					"final_length", m.finalLen, "unanswered", unanswered)
			}
			r.answer(answers)
		}
	}
	r.broadcast()
}

// answer sends the primary's answers, one message per stream.
func (r *replica) answer(answers []shard.Answer[*appendStream]) {
	byStream := map[*appendStream][]*pb.AppendAck{}
	for _, a := range answers {
		ack := &pb.AppendAck{Seq: a.Seq, Code: pb.Code_OK, Position: a.Position, Shard: r.id}
		if a.Final {
			ack = &pb.AppendAck{Seq: a.Seq, Code: pb.Code_FINALIZED, Shard: r.id,
				Message: fmt.Sprintf("shard %d was finalized before this record was ordered", r.id)}
		}
		byStream[a.Waiter] = append(byStream[a.Waiter], ack)
	}
	for st, acks := range byStream {
		st.push(acks)
	}
}

func (r *replica) failPending(code pb.Code, msg string) {
	if r.primary == nil {
		return
	}
	for _, a := range r.primary.Waiting() {
		a.Waiter.push([]*pb.AppendAck{{Seq: a.Seq, Code: code, Shard: r.id, Message: msg}})
	}
}

func assert(ok bool, msg string) {
	if !ok {
		panic("storage: invariant violated: " + msg)
	}
}
