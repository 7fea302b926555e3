package storage

// The lazy-order shell of a storage server: the LazyShard service around
// one lazy.Shard core per shard. Records arrive from clients unordered and
// go to the shard's lazy log (a segment.Store of its own, in arrival
// order), durable per the fsync policy before they are acknowledged; the
// sequencing leader's mappings reach the primary, whose placements go to
// a placements file and then to the backups; stable-gp gates reads.
//
// Lock order: Server.mu, then lazyShard.mu. lazyShard.mu is held across
// appends to the log and the placements file (writes, never fsyncs), so
// the core's local indexes and the log's stay one.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
	"github.com/augur-log/augur/internal/segment"
)

// Lazy-shell bounds.
const (
	// lazyNoopAfter bounds how long a primary waits for a mapped record's
	// data before it binds a no-op in its place.
	lazyNoopAfter = time.Second
	// lazyReadMax bounds the positions one Read answers.
	lazyReadMax = 1024
	// lazyMappingRunsMax bounds the runs one Mapping answer carries.
	lazyMappingRunsMax = 4096
	// lazyPlaceTimeout bounds one placement's trip to a backup.
	lazyPlaceTimeout = 2 * time.Second
	// lazySubscribeBatchMax bounds the entries of one subscription message.
	lazySubscribeBatchMax = 1024
	// lazyScrubInterval is how often a replica forgets its orphans: data
	// whose metadata no view will order (a client that failed between its
	// data and its metadata). Their log space goes with the next trim.
	lazyScrubInterval = time.Second
)

// lazyRead is one read waiting for stable-gp (the core holds it; no
// goroutine serves it but its caller's).
type lazyRead struct {
	answer chan lazy.ReadAnswer[*lazyRead]
}

// lazyShard is this server's replica of one shard in lazy order.
type lazyShard struct {
	s  *Server
	id cut.ShardID
	// primary, epoch and backups are the shard's configuration this
	// replica started in (the core follows later ones; see followConfig).
	primary bool
	epoch   uint64
	backups []Peer

	mu sync.Mutex
	// primaryAddr is the address of the shard's current primary, which a
	// backup fetches placed records from.
	primaryAddr string
	core        *lazy.Shard[*lazyRead]
	store       *segment.Store
	places      *placementLog
	// acked is the end below which every replica holds the placements
	// (primary), once this replica synced them too; ackedCh is closed and
	// replaced when it grows. ackedPending is the core's word, not synced
	// here yet; unsent are the placements written, not sent to the
	// backups yet.
	acked, ackedPending uint64
	ackedCh             chan struct{}
	unsent              bool
	// backupLoops bring each backup of the current configuration its
	// placements (primary only), by server id.
	backupLoops map[string]*backupLoop
	// readable is the core's readable end as the subscriptions know it;
	// readableCh is closed and replaced when it moves.
	readable   uint64
	readableCh chan struct{}
	wake       *time.Timer
	// syncWant and synced drive the group commit: appenders wait until
	// the log synced their records.
	syncCond  *sync.Cond
	syncedLen uint64
	syncWake  chan struct{}
	closed    bool
}

// lazyShard returns this server's replica of shard id, opening it on first
// use; an error says the server does not hold the shard.
func (s *Server) lazyShard(id cut.ShardID) (*lazyShard, error) { return s.openLazy(id, false) }

// openLazy is lazyShard; with out, it also opens the copy of a shard of
// this server's group whose configuration leaves the server out, for it
// to rejoin (lazyrejoin.go).
func (s *Server) openLazy(id cut.ShardID, out bool) (*lazyShard, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ls, ok := s.lazy[id]; ok {
		return ls, nil
	}
	info := s.view.shards[id]
	if info == nil {
		return nil, status.Errorf(codes.NotFound, "shard %d is unknown here", id)
	}
	self := -1
	for i, r := range info.GetReplicas() {
		if r.GetId() == s.cfg.ID {
			self = i
		}
	}
	if self < 0 && (!out || info.GetGroup() != s.cfg.GroupName) {
		return nil, status.Errorf(codes.NotFound, "shard %d is not stored on %s", id, s.cfg.ID)
	}
	ls := &lazyShard{s: s, id: id, primary: self == 0, ackedCh: make(chan struct{}), readableCh: make(chan struct{}), syncWake: make(chan struct{}, 1)}
	ls.syncCond = sync.NewCond(&ls.mu)
	ls.primaryAddr, ls.epoch = info.GetReplicas()[0].GetAddr(), info.GetEpoch()
	for _, r := range info.GetReplicas()[1:] {
		ls.backups = append(ls.backups, Peer{ID: r.GetId(), Addr: r.GetAddr()})
	}
	if err := ls.open(); err != nil {
		return nil, status.Errorf(codes.Unavailable, "shard %d: %v", id, err)
	}
	s.lazy[id] = ls
	if self < 0 {
		ls.core.Leave(info.GetEpoch())
	}
	ls.core.Trim(s.view.trim)
	s.wg.Go(ls.syncLoop)
	s.wg.Go(ls.scrubLoop)
	if ls.primary {
		ls.mu.Lock()
		ls.startBackupLoopsLocked(ls.backups)
		ls.mu.Unlock()
	}
	return ls, nil
}

// backupLoop is the goroutine that brings one backup its placements.
type backupLoop struct {
	wake chan struct{}
	stop context.CancelFunc
}

// startBackupLoopsLocked runs a backup loop for each of backups that has
// none, and stops those of servers no longer among them.
func (ls *lazyShard) startBackupLoopsLocked(backups []Peer) {
	if ls.backupLoops == nil {
		ls.backupLoops = map[string]*backupLoop{}
	}
	keep := map[string]bool{}
	for _, b := range backups {
		keep[b.ID] = true
		if ls.backupLoops[b.ID] != nil {
			continue
		}
		ctx, stop := context.WithCancel(ls.s.ctx)
		l := &backupLoop{wake: make(chan struct{}, 1), stop: stop}
		ls.backupLoops[b.ID] = l
		ls.s.wg.Go(func() { ls.backupLoop(ctx, b, l.wake) })
	}
	for id, l := range ls.backupLoops {
		if !keep[id] {
			l.stop()
			delete(ls.backupLoops, id)
		}
	}
}

// followConfig follows the shard's configuration info, as the control
// plane changed it (the core's Follow decides what the change means to
// this server); every replica learns who the primary is.
func (ls *lazyShard) followConfig(info *pb.ShardInfo) {
	reps := info.GetReplicas()
	self := slices.IndexFunc(reps, func(r *pb.ReplicaAddr) bool { return r.GetId() == ls.s.cfg.ID })
	var backups []Peer
	var members, ids []string
	for i, r := range reps {
		members = append(members, r.GetId())
		if i > 0 {
			backups = append(backups, Peer{ID: r.GetId(), Addr: r.GetAddr()})
			ids = append(ids, r.GetId())
		}
	}
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return
	}
	was, wasPrimary := ls.core.Epoch(), ls.core.Primary()
	var out lazy.ShardOutput[*lazyRead]
	ls.core.Follow(info.GetEpoch(), members, ls.s.cfg.ID, &out)
	if ls.core.Epoch() == was {
		ls.mu.Unlock()
		return
	}
	if len(reps) > 0 {
		ls.primaryAddr = reps[0].GetAddr()
	}
	primary := ls.core.Primary()
	if primary {
		ls.startBackupLoopsLocked(backups)
	} else {
		ls.startBackupLoopsLocked(nil)
	}
	err := ls.handleLocked(&out)
	ls.mu.Unlock()
	ls.s.log.Info("lazy shard reconfigured", "shard", ls.id, "epoch", info.GetEpoch(), "primary", primary, "promoted", primary && !wasPrimary, "out", self < 0, "backups", ids)
	if err == nil {
		err = ls.flush()
	}
	if err != nil {
		ls.s.log.Error("lazy shard: reconfigure", "shard", ls.id, "err", err)
	}
}

// followLazyConfigs brings every lazy replica here the shard table the
// server holds now.
func (s *Server) followLazyConfigs() {
	s.mu.Lock()
	type follow struct {
		ls   *lazyShard
		info *pb.ShardInfo
	}
	var todo []follow
	for id, ls := range s.lazy {
		if info := s.view.shards[id]; info != nil {
			todo = append(todo, follow{ls, info})
		}
	}
	s.mu.Unlock()
	for _, f := range todo {
		f.ls.followConfig(f.info)
	}
	s.startLazyRejoins()
}

// trimLazy trims every lazy replica here at pos, the cluster's trim point.
func (s *Server) trimLazy(pos uint64) {
	if pos == 0 {
		return
	}
	s.mu.Lock()
	var todo []*lazyShard
	for _, ls := range s.lazy {
		todo = append(todo, ls)
	}
	s.mu.Unlock()
	for _, ls := range todo {
		if err := ls.trim(pos); err != nil {
			s.log.Error("lazy shard: trim", "shard", ls.id, "trim", pos, "err", err)
		}
	}
}

// trim drops the positions below pos (the core keeps at most its
// readable end; reads below get TRIMMED) and reclaims the log's segments
// that hold only records nobody needs any more.
func (ls *lazyShard) trim(pos uint64) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return nil
	}
	ls.core.Trim(pos)
	floor := ls.core.Reclaimable()
	if floor <= ls.store.Start() {
		return nil
	}
	// The lazy log's segments go by the local indexes below floor: they
	// are given themselves as positions (the order lives in the
	// placements), so the store's trim deletes the segments wholly below.
	if o := ls.store.Ordered(); floor > o {
		cut := uint64(1)
		if runs := ls.store.Runs(0); len(runs) > 0 {
			cut = runs[len(runs)-1].Cut + 1
		}
		if err := ls.store.Assign(segment.Run{Cut: cut, CutStart: o, CutEnd: floor, LocalStart: o, GlobalStart: o, Count: floor - o}); err != nil {
			return err
		}
	}
	return ls.store.Trim(floor)
}

// open opens the shard's lazy log and placements and restarts the core
// from them.
func (ls *lazyShard) open() error {
	s := ls.s
	dir := filepath.Join(s.cfg.Dir, fmt.Sprintf("lazy-%d", ls.id))
	st, err := segment.Open(segment.Options{Dir: dir, SegmentBytesMax: s.cfg.SegmentBytes, Sync: s.cfg.Sync, Logger: s.log.With("lazy-shard", ls.id)})
	if err != nil {
		return err
	}
	state := lazy.ShardState{Len: st.Len()}
	if err := st.Scan(st.Start(), func(local uint64, e segment.Entry) bool {
		if e.Noops == 0 {
			state.Records = append(state.Records, lazy.StoredRecord{ID: lazy.RecordID{Client: e.ClientID, Seq: e.Seq}, Local: local})
		}
		return true
	}); err != nil {
		st.Close()
		return fmt.Errorf("scan lazy log: %w", err)
	}
	places, applied, err := openPlacementLog(filepath.Join(dir, "placements"))
	if err != nil {
		st.Close()
		return err
	}
	state.Placements = applied
	ls.store, ls.places, ls.syncedLen = st, places, st.SyncedLen()
	cfg := lazy.ShardConfig{ID: ls.id, Primary: ls.primary, Epoch: ls.epoch, NoopAfter: lazyNoopAfter}
	for _, b := range ls.backups {
		cfg.Backups = append(cfg.Backups, b.ID)
	}
	var out lazy.ShardOutput[*lazyRead]
	ls.core = lazy.OpenShard(cfg, state, &out)
	if out.Place != nil {
		if err := ls.places.append(out.Place); err != nil {
			return fmt.Errorf("persist base placement: %w", err)
		}
		if syncs(s.cfg.Sync) {
			if err := ls.places.syncFile(); err != nil {
				return fmt.Errorf("sync placements: %w", err)
			}
		}
		ls.places.synced, ls.places.syncedSeq = ls.places.written, ls.places.lastSeq
	}
	if out.Ack != nil {
		ls.acked, ls.ackedPending = out.Ack.End, out.Ack.End
	}
	return nil
}

func (ls *lazyShard) close() {
	ls.mu.Lock()
	ls.closed = true
	if ls.wake != nil {
		ls.wake.Stop()
	}
	ls.syncCond.Broadcast()
	ls.mu.Unlock()
	ls.store.Close()
	ls.places.close()
}

// handleLocked carries out what the core asked, in the output's order:
// write a placement (whose sync and sending to the backups wait for
// flush, outside the lock), answer reads, arm the no-op timer, note the
// mapping's acknowledgement. Fetches and Applied are the Place handler's,
// which asks for them.
func (ls *lazyShard) handleLocked(out *lazy.ShardOutput[*lazyRead]) error {
	if out.Place != nil {
		if err := ls.places.append(out.Place); err != nil {
			return fmt.Errorf("persist placement [%d, %d): %w", out.Place.From, out.Place.End, err)
		}
		ls.unsent = true
	}
	for _, a := range out.Reads {
		a.Waiter.answer <- a
	}
	if r := ls.core.Readable(); r != ls.readable {
		ls.readable = r
		close(ls.readableCh)
		ls.readableCh = make(chan struct{})
	}
	if !out.WakeAt.IsZero() {
		ls.armLocked(out.WakeAt)
	}
	if out.Ack != nil && out.Ack.End > ls.ackedPending {
		ls.ackedPending = out.Ack.End
	}
	return nil
}

// flush syncs the placements written (persist before send), then sends
// them to the backups and publishes the acknowledged end. Every caller of
// handleLocked calls it after unlocking. Flushes run concurrently (a Map
// handler's and a backup loop's): one that finds placements written and
// not yet covered by a completed sync syncs them itself, even while
// another's sync of them is still running, so no acknowledgement (and no
// stable-gp after it) covers a placement before it is durable here.
func (ls *lazyShard) flush() error {
	ls.mu.Lock()
	unsent, acked := ls.unsent, ls.ackedPending
	written, last := ls.places.written, ls.places.lastSeq
	behind := ls.places.synced < written
	ls.unsent = false
	ls.mu.Unlock()
	if behind && syncs(ls.s.cfg.Sync) {
		if err := ls.places.syncFile(); err != nil {
			ls.mu.Lock()
			ls.unsent = ls.unsent || unsent
			ls.mu.Unlock()
			return fmt.Errorf("sync placements: %w", err)
		}
	}
	ls.mu.Lock()
	if written > ls.places.synced {
		ls.places.synced, ls.places.syncedSeq = written, last
	}
	if unsent {
		for _, l := range ls.backupLoops {
			select {
			case l.wake <- struct{}{}:
			default:
			}
		}
	}
	if acked > ls.acked {
		ls.acked = acked
		close(ls.ackedCh)
		ls.ackedCh = make(chan struct{})
	}
	ls.mu.Unlock()
	return nil
}

func (ls *lazyShard) armLocked(at time.Time) {
	d := time.Until(at)
	if ls.wake != nil {
		ls.wake.Stop()
	}
	ls.wake = time.AfterFunc(d, func() {
		ls.mu.Lock()
		if ls.closed {
			ls.mu.Unlock()
			return
		}
		var out lazy.ShardOutput[*lazyRead]
		ls.core.Tick(time.Now(), &out)
		err := ls.handleLocked(&out)
		ls.mu.Unlock()
		if err == nil {
			err = ls.flush()
		}
		if err != nil {
			ls.s.log.Error("lazy shard: tick", "shard", ls.id, "err", err)
		}
	})
}

// backupLoop brings backup b every placement it has not applied, in
// order, whenever flush wakes it and again after a pause while some are
// left; it ends with ctx (the server's, or b left the configuration).
func (ls *lazyShard) backupLoop(ctx context.Context, b Peer, wake <-chan struct{}) {
	for {
		ls.mu.Lock()
		// Only placements durable here go out (persist before send): a
		// loop that runs on its own, after a pause, would otherwise send
		// one whose sync is still running.
		todo := ls.core.Resend(b.ID)
		for i, p := range todo {
			if p.Seq > ls.places.syncedSeq {
				todo = todo[:i]
				break
			}
		}
		ls.mu.Unlock()
		var err error
		for _, p := range todo {
			if err = ls.placeOn(ctx, b, placementToProto(ls.s.cfg.ClusterID, ls.id, &p)); err != nil {
				ls.s.log.Debug("lazy shard: place on backup", "shard", ls.id, "backup", b.ID, "err", err)
				break
			}
		}
		pause := make(<-chan time.Time)
		if err != nil {
			pause = time.After(retryInterval)
		}
		select {
		case <-wake:
		case <-pause:
		case <-ctx.Done():
			return
		}
	}
}

func (ls *lazyShard) placeOn(ctx context.Context, b Peer, p *pb.Placement) error {
	cc, err := ls.s.conn(b.Addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, lazyPlaceTimeout)
	defer cancel()
	resp, err := pb.NewLazyShardClient(cc).Place(ctx, p)
	if err != nil {
		return err
	}
	if resp.GetCode() != pb.Code_OK {
		return fmt.Errorf("%s: %s", resp.GetCode(), resp.GetMessage())
	}
	ls.mu.Lock()
	var out lazy.ShardOutput[*lazyRead]
	ls.core.BackupApplied(b.ID, resp.GetAppliedTerm(), resp.GetAppliedSeq(), &out)
	err = ls.handleLocked(&out)
	ls.mu.Unlock()
	if err != nil {
		return err
	}
	return ls.flush()
}

// syncLoop is the shard's group commit: one fsync covers every record
// appended meanwhile; appenders wait for it under SyncGroup. Under
// SyncInterval it syncs every interval and nobody waits.
func (ls *lazyShard) syncLoop() {
	s := ls.s
	for {
		switch s.cfg.Sync {
		case segment.SyncGroup:
			select {
			case <-ls.syncWake:
			case <-s.ctx.Done():
				return
			}
		case segment.SyncInterval:
			if !s.sleep(s.cfg.SyncInterval) {
				return
			}
		default:
			return
		}
		if err := ls.store.SyncRecords(); err != nil {
			s.log.Error("lazy shard: sync", "shard", ls.id, "err", err)
			continue
		}
		ls.mu.Lock()
		ls.syncedLen = ls.store.SyncedLen()
		ls.syncCond.Broadcast()
		ls.mu.Unlock()
	}
}

// scrubLoop runs the core's orphan scrub every lazyScrubInterval.
func (ls *lazyShard) scrubLoop() {
	for ls.s.sleep(lazyScrubInterval) {
		ls.mu.Lock()
		if ls.closed {
			ls.mu.Unlock()
			return
		}
		n := len(ls.core.Scrub())
		ls.mu.Unlock()
		if n > 0 {
			ls.s.log.Info("lazy shard: scrubbed orphans", "shard", ls.id, "records", n)
		}
	}
}

// accept stores a batch of a client's records (or finds them stored) and
// returns one answer per entry, to send once the log holds need entries
// durably (awaitDurable).
func (ls *lazyShard) accept(req *pb.LazyStoreRequest) (acks []*pb.AppendAck, need uint64) {
	acks, need, flush := ls.acceptLocking(req)
	if flush {
		if err := ls.flush(); err != nil {
			ls.s.log.Error("lazy shard: flush", "shard", ls.id, "err", err)
		}
	}
	return acks, need
}

func (ls *lazyShard) acceptLocking(req *pb.LazyStoreRequest) (acks []*pb.AppendAck, need uint64, flush bool) {
	acks = make([]*pb.AppendAck, len(req.GetEntries()))
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var fresh []segment.Entry
	var out lazy.ShardOutput[*lazyRead]
	for i, e := range req.GetEntries() {
		ack := &pb.AppendAck{Seq: e.GetSeq(), Shard: uint32(ls.id)}
		acks[i] = ack
		if msg := checkRecord(e.GetRecord(), ls.s.cfg.RecordBytesMax); msg != "" {
			ack.Code, ack.Message = pb.Code_INVALID, msg
			continue
		}
		id := lazy.RecordID{Client: req.GetClientId(), Seq: e.GetSeq()}
		err := ls.core.FenceData(req.GetEpoch())
		var local uint64
		var isNew bool
		if err == nil {
			local, isNew, err = ls.core.Accept(id, req.GetView(), &out)
		}
		if err != nil {
			ack.Code, ack.Message = lazyCode(err), err.Error()
			continue
		}
		if isNew {
			if local != ls.store.Len()+uint64(len(fresh)) {
				panic(fmt.Sprintf("storage: lazy shard %d: core placed a record at %d, log ends at %d", ls.id, local, ls.store.Len()+uint64(len(fresh))))
			}
			rec := e.GetRecord()
			fresh = append(fresh, segment.Entry{ClientID: id.Client, Seq: id.Seq, Key: rec.GetKey(), Tags: rec.GetTags(), Payload: rec.GetPayload()})
		}
		if local != lazy.Gone {
			need = max(need, local+1)
		}
	}
	if len(fresh) > 0 {
		if _, err := ls.store.Append(fresh); err != nil {
			// The core counted records the log refused: this replica
			// can no longer be trusted to hold what it acknowledges.
			panic(fmt.Sprintf("storage: lazy shard %d: append: %v", ls.id, err))
		}
		ls.s.stored.Add(float64(len(fresh)))
	}
	if err := ls.handleLocked(&out); err != nil {
		for _, a := range acks {
			if a.Code == pb.Code_OK {
				a.Code, a.Message = pb.Code_UNAVAILABLE, err.Error()
			}
		}
		return acks, 0, false
	}
	return acks, need, out.Place != nil || out.Ack != nil
}

// awaitDurable waits until the log holds need entries durably, per the
// fsync policy: under SyncGroup until a group fsync covered them; the
// others acknowledge once written (SyncAlways synced in the write).
func (ls *lazyShard) awaitDurable(ctx context.Context, need uint64) error {
	if ls.s.cfg.Sync != segment.SyncGroup {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for ls.syncedLen < need {
		if ls.closed {
			return errors.New("shard closed")
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		select {
		case ls.syncWake <- struct{}{}:
		default:
		}
		stop := context.AfterFunc(ctx, func() {
			ls.mu.Lock()
			ls.syncCond.Broadcast()
			ls.mu.Unlock()
		})
		ls.syncCond.Wait()
		stop()
	}
	return nil
}

// lazyCode maps a core error to its wire code.
func lazyCode(err error) pb.Code {
	switch {
	case errors.Is(err, lazy.ErrLate):
		return pb.Code_LATE
	case errors.Is(err, lazy.ErrWrongView):
		return pb.Code_WRONG_VIEW
	case errors.Is(err, lazy.ErrTooFarAhead), errors.Is(err, lazy.ErrBusy):
		return pb.Code_FULL
	case errors.Is(err, lazy.ErrTrimmed):
		return pb.Code_TRIMMED
	case errors.Is(err, lazy.ErrStaleConfig):
		return pb.Code_STALE_EPOCH
	}
	return pb.Code_INVALID
}

func placementToProto(clusterID string, shard cut.ShardID, p *lazy.Placement) *pb.Placement {
	out := &pb.Placement{ClusterId: clusterID, Shard: uint32(shard), View: p.View, From: p.From, End: p.End, Seq: p.Seq, Term: p.Term, Base: p.Base, Whole: p.Whole}
	for _, r := range p.Runs {
		out.Runs = append(out.Runs, &pb.PositionRun{From: r.From, End: r.End, Shard: uint32(r.Shard)})
	}
	for _, sl := range p.Slots {
		out.Slots = append(out.Slots, &pb.Slot{Position: sl.Pos, ClientId: sl.ID.Client, Seq: sl.ID.Seq, Noop: sl.Noop})
	}
	return out
}

func placementFromProto(p *pb.Placement) lazy.Placement {
	out := lazy.Placement{View: p.GetView(), From: p.GetFrom(), End: p.GetEnd(), Seq: p.GetSeq(), Term: p.GetTerm(), Base: p.GetBase(), Whole: p.GetWhole()}
	for _, r := range p.GetRuns() {
		out.Runs = append(out.Runs, lazy.Run{From: r.GetFrom(), End: r.GetEnd(), Shard: cut.ShardID(r.GetShard())})
	}
	for _, sl := range p.GetSlots() {
		out.Slots = append(out.Slots, lazy.Slot{Pos: sl.GetPosition(), ID: lazy.RecordID{Client: sl.GetClientId(), Seq: sl.GetSeq()}, Noop: sl.GetNoop()})
	}
	return out
}
