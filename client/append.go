package client

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
)

// op is one append until it is acknowledged or failed. Its sequence number
// never changes, so however often it is re-sent it is stored once.
type op struct {
	seq      uint64
	rec      *pb.Record
	shard    uint32
	explicit bool
	// ctx is the caller's: the client looks for a shard for o, and settles
	// o after a broken connection, only while it has not ended.
	ctx  context.Context
	done func(Ack, error)
	once sync.Once
	// sent is set once an append stream took o: from then on a server may
	// have stored it.
	sent atomic.Bool
	// unwatch stops the watch of ctx that settles o once its caller gives
	// up while o waits on a shard connection (guarded by that
	// connection's mu).
	unwatch func() bool
	// placement says whether o waits in place for a live shard. Whoever
	// moves it on from placeWaiting owns o's fate: place, to send o; or
	// abandon, to fail o, which was certainly not stored.
	placement atomic.Int32
}

// The placements of an op.
const (
	// placeNone: o went to a shard without waiting.
	placeNone int32 = iota
	// placeWaiting: o waits in place for a live shard.
	placeWaiting
	// placeSent: place found a shard and sent o there.
	placeSent
	// placeFailed: o failed without a shard; its answer is given at once.
	placeFailed
)

func (o *op) finish(a Ack, err error) { o.once.Do(func() { o.done(a, err) }) }

// abandon fails o with err if o still waits for a live shard.
func (o *op) abandon(err error) {
	if o.placement.CompareAndSwap(placeWaiting, placeFailed) {
		o.finish(Ack{}, err)
	}
}

// Append appends rec to a shard chosen by the placement policy and returns
// once the record holds a global position.
func (c *Client) Append(ctx context.Context, rec Record) (Ack, error) {
	return c.appendWait(ctx, rec, 0, false)
}

// AppendToShard appends rec to the given shard. If that shard is finalized
// before the record is ordered, the append fails rather than moving.
func (c *Client) AppendToShard(ctx context.Context, rec Record, shard uint32) (Ack, error) {
	return c.appendWait(ctx, rec, shard, true)
}

func (c *Client) appendWait(ctx context.Context, rec Record, shard uint32, explicit bool) (Ack, error) {
	return c.appendWaitPos(ctx, rec, shard, explicit, false)
}

func (c *Client) appendWaitPos(ctx context.Context, rec Record, shard uint32, explicit, wantPos bool) (Ack, error) {
	type result struct {
		a   Ack
		err error
	}
	ch := make(chan result, 1)
	o := c.appendAsyncPos(ctx, rec, shard, explicit, wantPos, func(a Ack, err error) { ch <- result{a, err} })
	select {
	case r := <-ch:
		return r.a, r.err
	case <-ctx.Done():
		if o != nil {
			o.abandon(fmt.Errorf("augur: append not placed: %w: %w", ErrNoLiveShard, ctx.Err()))
			if o.placement.Load() == placeFailed {
				// o never found a live shard, so it was certainly not
				// stored; whoever failed it is answering through ch.
				r := <-ch
				return r.a, r.err
			}
		}
		// The append may still be ordered later; the caller gave up waiting.
		return Ack{}, ctx.Err()
	}
}

// AppendAsync queues rec and calls done once it is acknowledged or failed;
// it blocks only while InflightMax appends are in flight. done runs on one
// of the client's goroutines and must not block. An append not acknowledged
// when ctx ends fails with ctx's error; one that was sent may still be
// ordered, as with Append.
func (c *Client) AppendAsync(ctx context.Context, rec Record, done func(Ack, error)) {
	c.appendAsync(ctx, rec, 0, false, done)
}

// appendAsync returns the op it queued, or nil when it failed at once (or
// went the lazy way).
func (c *Client) appendAsync(ctx context.Context, rec Record, shard uint32, explicit bool, done func(Ack, error)) *op {
	return c.appendAsyncPos(ctx, rec, shard, explicit, false, done)
}

func (c *Client) appendAsyncPos(ctx context.Context, rec Record, shard uint32, explicit, wantPos bool, done func(Ack, error)) *op {
	if err := c.checkRecord(rec); err != nil {
		done(Ack{}, err)
		return nil
	}
	select {
	case c.inflight <- struct{}{}:
	case <-ctx.Done():
		done(Ack{}, ctx.Err())
		return nil
	case <-c.closedCh:
		done(Ack{}, ErrClosed)
		return nil
	}
	o := &op{
		seq:      c.seq.Add(1),
		rec:      &pb.Record{Key: rec.Key, Tags: rec.Tags, Payload: rec.Payload},
		shard:    shard,
		explicit: explicit,
		ctx:      ctx,
	}
	o.done = func(a Ack, err error) {
		<-c.inflight
		done(a, err)
	}
	if c.lazyState() != nil {
		if !explicit {
			id, err := c.pickShard(o.rec, 0, false)
			if err != nil {
				o.finish(Ack{}, err)
				return nil
			}
			o.shard = id
		}
		c.appendLazyAsync(ctx, o.seq, o.rec, o.shard, wantPos, o.finish)
		return nil
	}
	if !explicit {
		id, err := c.pickShard(o.rec, 0, false)
		if err != nil {
			// The shard table may be stale (a replica that lags, a group
			// re-forming): wait for a live shard, as long as ctx lets.
			o.placement.Store(placeWaiting)
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				c.place(o, false, err)
			}()
			return o
		}
		o.shard = id
	}
	c.send(o)
	return o
}

func (c *Client) checkRecord(rec Record) error {
	n := len(rec.Payload) + len(rec.Key)
	for _, t := range rec.Tags {
		// Each tag counts with its length prefix, as the server counts it.
		n += (bits.Len64(uint64(len(t))|1)+6)/7 + len(t)
	}
	switch {
	case len(rec.Payload) == 0:
		return fmt.Errorf("%w: empty payload", ErrInvalidRecord)
	case n > c.cfg.RecordBytesMax:
		return fmt.Errorf("%w: %d bytes exceeds the limit of %d", ErrInvalidRecord, n, c.cfg.RecordBytesMax)
	}
	return nil
}

// send hands o to the connection of its shard's primary.
func (c *Client) send(o *op) {
	for {
		sc, err := c.shardConn(o.ctx, o.shard)
		if errors.Is(err, ErrClosed) {
			o.finish(Ack{}, err)
			return
		}
		if err != nil {
			// The primary is unreachable: settle o like an append whose
			// connection broke.
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				c.recover(o.shard, map[uint64]*op{o.seq: o})
			}()
			return
		}
		if sc.enqueue(o) {
			return
		}
		// The connection failed between lookup and enqueue; its recovery
		// does not know o, so look again.
	}
}

// shardConn returns the append connection of shard, opening it if needed;
// ctx bounds the look-up of a shard the client does not know yet. A
// connection to a server that is no longer the shard's primary (the
// shard failed over) is retired: its unanswered appends are re-sent, under
// their sequence numbers, to the new primary, which stores each once.
func (c *Client) shardConn(ctx context.Context, shard uint32) (*shardConn, error) {
	info := c.shardInfo(shard)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if sc, ok := c.shards[shard]; ok {
		c.mu.Unlock()
		if info == nil || len(info.Replicas) == 0 || info.Replicas[0].Addr == sc.addr {
			return sc, nil
		}
		sc.fail()
	} else {
		c.mu.Unlock()
	}
	if info == nil {
		if _, err := c.refresh(ctx); err != nil {
			return nil, err
		}
		if info = c.shardInfo(shard); info == nil {
			return nil, fmt.Errorf("%w: %d", ErrUnknownShard, shard)
		}
	}
	if len(info.Replicas) == 0 {
		return nil, fmt.Errorf("%w: shard %d has no replicas", ErrUnknownShard, shard)
	}
	cc, err := c.conn(info.Replicas[0].Addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if sc, ok := c.shards[shard]; ok {
		return sc, nil
	}
	// The stream carries every caller's appends to the shard, so it lives
	// as long as the client, not as any one caller's ctx.
	sctx, cancel := context.WithCancel(c.ctx)
	stream, err := pb.NewLogClient(cc).Append(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	sc := &shardConn{c: c, shard: shard, addr: info.Replicas[0].Addr, stream: stream, cancel: cancel, ops: map[uint64]*op{}, wake: make(chan struct{}, 1)}
	c.shards[shard] = sc
	c.wg.Add(2)
	go sc.sendLoop()
	go sc.recvLoop()
	return sc, nil
}

// shardConn is one Append stream to a shard's primary.
type shardConn struct {
	c     *Client
	shard uint32
	// addr is the primary the stream goes to.
	addr   string
	stream pb.Log_AppendClient
	cancel context.CancelFunc

	mu     sync.Mutex
	queue  []*op
	ops    map[uint64]*op // sent or queued, not yet answered
	failed bool
	wake   chan struct{}
}

func (sc *shardConn) enqueue(o *op) bool {
	sc.mu.Lock()
	if sc.failed {
		sc.mu.Unlock()
		return false
	}
	sc.ops[o.seq] = o
	sc.queue = append(sc.queue, o)
	o.unwatch = context.AfterFunc(o.ctx, func() { sc.giveUp(o) })
	sc.mu.Unlock()
	select {
	case sc.wake <- struct{}{}:
	default:
	}
	return true
}

func (sc *shardConn) sendLoop() {
	defer sc.c.wg.Done()
	ctx := sc.stream.Context()
	for {
		select {
		case <-sc.wake:
		case <-ctx.Done():
			sc.fail()
			return
		}
		for {
			sc.mu.Lock()
			if len(sc.queue) == 0 {
				sc.mu.Unlock()
				break
			}
			batch := make([]*op, 0, min(len(sc.queue), appendBatchMax))
			taken, size := 0, 0
			for ; taken < len(sc.queue) && len(batch) < appendBatchMax && size < appendBatchBytesMax; taken++ {
				o := sc.queue[taken]
				if sc.ops[o.seq] != o {
					continue // its caller gave up before it went out
				}
				// Marked before it goes: once the stream took it, a
				// server may have stored it whatever Send says.
				o.sent.Store(true)
				size += len(o.rec.Payload) + len(o.rec.Key)
				batch = append(batch, o)
			}
			sc.queue = sc.queue[taken:]
			sc.mu.Unlock()
			if len(batch) == 0 {
				continue
			}
			req := &pb.AppendRequest{ClusterId: sc.c.cfg.ClusterID, ClientId: sc.c.clientID, Shard: sc.shard,
				Entries: make([]*pb.AppendEntry, len(batch))}
			for i, o := range batch {
				req.Entries[i] = &pb.AppendEntry{Seq: o.seq, Record: o.rec}
			}
			if err := sc.stream.Send(req); err != nil {
				sc.fail()
				return
			}
		}
	}
}

func (sc *shardConn) recvLoop() {
	defer sc.c.wg.Done()
	for {
		resp, err := sc.stream.Recv()
		if err != nil {
			if refused(err) {
				// The server refused the stream before taking any of
				// it, so every append on it failed for sure.
				sc.failWith(translate(err))
			} else {
				sc.fail()
			}
			return
		}
		sc.c.noteMembership(resp.MembershipVersion)
		for _, a := range resp.Acks {
			sc.handleAck(a)
		}
	}
}

func (sc *shardConn) handleAck(a *pb.AppendAck) {
	if a.Code == pb.Code_PENDING {
		return
	}
	sc.mu.Lock()
	o := sc.ops[a.Seq]
	if o != nil {
		delete(sc.ops, a.Seq)
		o.unwatch()
	}
	sc.mu.Unlock()
	if o == nil {
		return
	}
	switch a.Code {
	case pb.Code_OK:
		o.finish(Ack{Position: a.Position, Shard: a.Shard}, nil)
	case pb.Code_FINALIZED:
		// The shard's primary says it was not ordered and never will be:
		// send it elsewhere.
		sc.c.wg.Add(1)
		go func() {
			defer sc.c.wg.Done()
			sc.c.reroute(o, fmt.Errorf("%w: shard %d: %s", ErrShardFinalized, sc.shard, a.Message))
		}()
	case pb.Code_NOT_PRIMARY, pb.Code_UNKNOWN_SHARD, pb.Code_UNAVAILABLE:
		// This server does not hold the shard's append state (it restarted
		// or lost its disk) or is stopping with o perhaps already in a cut,
		// so nobody can tell yet whether o was ordered: settle o like an
		// append whose connection broke, which asks the replicas once the
		// shard is finalized.
		sc.c.wg.Add(1)
		go func() {
			defer sc.c.wg.Done()
			sc.c.recover(sc.shard, map[uint64]*op{o.seq: o})
		}()
	case pb.Code_INVALID:
		o.finish(Ack{}, fmt.Errorf("%w: %s", ErrInvalidRecord, a.Message))
	case pb.Code_WRONG_CLUSTER:
		o.finish(Ack{}, fmt.Errorf("%w: %s", ErrWrongCluster, a.Message))
	default:
		o.finish(Ack{}, &ServerError{Code: a.Code.String(), Message: a.Message})
	}
}

func (sc *shardConn) shutdown() {
	sc.cancel()
}

// giveUp fails o, whose caller's ctx ended, if it still waits on sc for
// its answer: an answer or a broken connection may have settled it first.
func (sc *shardConn) giveUp(o *op) {
	sc.mu.Lock()
	waiting := sc.ops[o.seq] == o
	if waiting {
		delete(sc.ops, o.seq)
	}
	sc.mu.Unlock()
	if waiting {
		o.finish(Ack{}, abandoned(sc.shard, o))
	}
}

// fail retires the connection and recovers the appends it left unanswered.
func (sc *shardConn) fail() { sc.failWith(nil) }

// failWith ends the stream; its appends fail with refusal when it is set
// (none of them was taken), else they are recovered.
func (sc *shardConn) failWith(refusal error) {
	sc.mu.Lock()
	if sc.failed {
		sc.mu.Unlock()
		return
	}
	sc.failed = true
	ops := sc.ops
	sc.ops = nil
	sc.queue = nil
	for _, o := range ops {
		// recover watches them from here.
		o.unwatch()
	}
	sc.mu.Unlock()
	sc.cancel()
	c := sc.c
	c.mu.Lock()
	if c.shards[sc.shard] == sc {
		delete(c.shards, sc.shard)
	}
	closed := c.closed
	c.mu.Unlock()
	if closed {
		for _, o := range ops {
			o.finish(Ack{}, ErrClosed)
		}
		return
	}
	if len(ops) == 0 {
		return
	}
	if refusal != nil {
		for _, o := range ops {
			o.finish(Ack{}, refusal)
		}
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.recover(sc.shard, ops)
	}()
}

// recover settles appends whose connection broke before they were answered.
// While the shard is live they are re-sent to it (its primary drops the
// duplicates); once it is finalized, the surviving replicas say which were
// ordered, and the rest go to another shard. It works only for appends
// whose callers still wait: one whose ctx ended fails with its ctx's error.
func (c *Client) recover(shard uint32, ops map[uint64]*op) {
	ctx, cancel := c.untilAbandoned(ops)
	defer cancel()
	var unanswered time.Time // since when no replica of the finalized shard answers
	for len(ops) > 0 {
		dropAbandoned(shard, ops)
		if len(ops) == 0 {
			return
		}
		if err := c.pause(ctx); err != nil {
			if c.ctx.Err() != nil {
				for _, o := range ops {
					o.finish(Ack{}, ErrClosed)
				}
				return
			}
			// Every caller gave up: the loop drops their appends.
			continue
		}
		st, err := c.refresh(ctx)
		if err != nil {
			continue
		}
		var info *pb.ShardInfo
		for _, sh := range st.Shards {
			if sh.Id == shard {
				info = sh
			}
		}
		if info == nil {
			for seq, o := range ops {
				delete(ops, seq)
				c.reroute(o, fmt.Errorf("%w: %d", ErrUnknownShard, shard))
			}
			return
		}
		if info.State != pb.ShardState_SHARD_FINALIZED {
			sc, err := c.shardConn(ctx, shard)
			if err != nil {
				continue
			}
			resent := true
			for seq, o := range ops {
				if !sc.enqueue(o) {
					resent = false
					break
				}
				delete(ops, seq)
			}
			if resent {
				return
			}
			continue
		}
		for seq, o := range ops {
			if !o.sent.Load() {
				// No server ever got it: certainly not stored.
				delete(ops, seq)
				c.reroute(o, fmt.Errorf("%w: shard %d", ErrShardFinalized, shard))
			}
		}
		if len(ops) == 0 {
			return
		}
		if c.resolve(ctx, info, ops) {
			unanswered = time.Time{}
			continue
		}
		if unanswered.IsZero() {
			unanswered = time.Now()
		}
		if time.Since(unanswered) >= resolveGiveUpAfter {
			// Every copy of the shard is gone (a whole-shard failure):
			// nobody can say whether these were ordered, and re-sending
			// them could store them twice.
			for seq, o := range ops {
				delete(ops, seq)
				o.finish(Ack{}, fmt.Errorf("%w: shard %d failed and none of its replicas answers", ErrOutcomeUnknown, shard))
			}
		}
	}
}

// untilAbandoned returns a context that ends once the caller of every op in
// ops has given up (its ctx ended) or the client closes: how long recover
// may keep working for them.
func (c *Client) untilAbandoned(ops map[uint64]*op) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(c.ctx)
	// One watch per op, not per distinct ctx: a caller's ctx need not be
	// comparable.
	var waiting atomic.Int64
	waiting.Store(int64(len(ops)))
	stops := make([]func() bool, 0, len(ops))
	for _, o := range ops {
		stops = append(stops, context.AfterFunc(o.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// dropAbandoned fails the ops of shard whose callers gave up waiting.
func dropAbandoned(shard uint32, ops map[uint64]*op) {
	for seq, o := range ops {
		if o.ctx.Err() != nil {
			delete(ops, seq)
			o.finish(Ack{}, abandoned(shard, o))
		}
	}
}

// abandoned is the error of an append to shard that its caller gave up
// on (its ctx ended) before an answer.
func abandoned(shard uint32, o *op) error {
	if o.sent.Load() {
		return fmt.Errorf("augur: append to shard %d unanswered when the caller gave up; it may still be ordered: %w", shard, o.ctx.Err())
	}
	return fmt.Errorf("augur: append to shard %d not sent before the caller gave up: %w", shard, o.ctx.Err())
}

// resolve asks a finalized shard's replicas about ops and settles every op
// they answer for. It reports whether any replica answered.
func (c *Client) resolve(ctx context.Context, info *pb.ShardInfo, ops map[uint64]*op) bool {
	if info.FinalLength == 0 {
		// Nothing of the shard was ever ordered; a replica may not even
		// have a copy to ask.
		for seq, o := range ops {
			delete(ops, seq)
			c.reroute(o, fmt.Errorf("%w: shard %d, with nothing ordered", ErrShardFinalized, info.Id))
		}
		return true
	}
	answered := false
	seqs := make([]uint64, 0, len(ops))
	for s := range ops {
		seqs = append(seqs, s)
	}
	for _, rep := range holders(info) {
		cc, err := c.conn(rep.Addr)
		if err != nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		resp, err := pb.NewLogClient(cc).Resolve(rctx, &pb.ResolveRequest{ClusterId: c.cfg.ClusterID, Shard: info.Id, ClientId: c.clientID, Seqs: seqs})
		cancel()
		if err != nil {
			continue
		}
		answered = true
		for _, r := range resp.Results {
			o := ops[r.Seq]
			if o == nil {
				continue
			}
			switch r.Code {
			case pb.Code_OK:
				delete(ops, r.Seq)
				o.finish(Ack{Position: r.Position, Shard: r.Shard}, nil)
			case pb.Code_NOT_ORDERED:
				delete(ops, r.Seq)
				c.reroute(o, fmt.Errorf("%w: shard %d", ErrShardFinalized, info.Id))
			}
		}
		if len(ops) == 0 {
			return true
		}
		// This replica cannot answer for the rest yet (it lags or lost
		// records): ask the next one.
	}
	return answered
}

// reroute sends an op that was certainly not ordered to another live shard.
func (c *Client) reroute(o *op, why error) {
	if o.explicit {
		o.finish(Ack{}, fmt.Errorf("augur: append to shard %d not ordered: %w", o.shard, why))
		return
	}
	o.placement.Store(placeWaiting)
	c.place(o, true, why)
}

// place sends o, which waits with placeWaiting, to a live shard (other than
// its current one, with skip); why says why o needs one. It waits until one
// exists, o's caller gives up or the client closes; then o fails with what
// the last look found (ErrNoLiveShard, or why the shard table could not be
// read).
func (c *Client) place(o *op, skip bool, why error) {
	old := o.shard
	// reason is why o has no shard yet: why, until a look that o's
	// caller's deadline did not cut short tells more.
	reason := why
	for {
		_, err := c.refresh(o.ctx)
		if err == nil {
			var id uint32
			if id, err = c.pickShard(o.rec, old, skip); err == nil {
				if !o.placement.CompareAndSwap(placeWaiting, placeSent) {
					return // abandoned: its caller gave up
				}
				o.shard = id
				c.send(o)
				return
			}
		}
		if o.ctx.Err() == nil {
			reason = err
		}
		if perr := c.pause(o.ctx); perr != nil {
			o.abandon(fmt.Errorf("augur: append not placed: %w: %w", reason, perr))
			return
		}
	}
}
