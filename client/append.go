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
	done     func(Ack, error)
	once     sync.Once
	// sent is set once an append stream took o: from then on a server may
	// have stored it.
	sent atomic.Bool
}

func (o *op) finish(a Ack, err error) { o.once.Do(func() { o.done(a, err) }) }

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
	type result struct {
		a   Ack
		err error
	}
	ch := make(chan result, 1)
	c.appendAsync(ctx, rec, shard, explicit, func(a Ack, err error) { ch <- result{a, err} })
	select {
	case r := <-ch:
		return r.a, r.err
	case <-ctx.Done():
		// The append may still be ordered later; the caller gave up waiting.
		return Ack{}, ctx.Err()
	}
}

// AppendAsync queues rec and calls done once it is acknowledged or failed;
// it blocks only while InflightMax appends are in flight. done runs on one
// of the client's goroutines and must not block.
func (c *Client) AppendAsync(ctx context.Context, rec Record, done func(Ack, error)) {
	c.appendAsync(ctx, rec, 0, false, done)
}

func (c *Client) appendAsync(ctx context.Context, rec Record, shard uint32, explicit bool, done func(Ack, error)) {
	if err := c.checkRecord(rec); err != nil {
		done(Ack{}, err)
		return
	}
	select {
	case c.inflight <- struct{}{}:
	case <-ctx.Done():
		done(Ack{}, ctx.Err())
		return
	case <-c.closedCh:
		done(Ack{}, ErrClosed)
		return
	}
	o := &op{
		seq:      c.seq.Add(1),
		rec:      &pb.Record{Key: rec.Key, Tags: rec.Tags, Payload: rec.Payload},
		shard:    shard,
		explicit: explicit,
	}
	o.done = func(a Ack, err error) {
		<-c.inflight
		done(a, err)
	}
	if !explicit {
		id, err := c.pickShard(o.rec, 0, false)
		if err != nil {
			// The shard table may be stale (a replica that lags, a group
			// re-forming): wait for a live shard.
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				c.place(o, false, err)
			}()
			return
		}
		o.shard = id
	}
	c.send(o)
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
		sc, err := c.shardConn(o.shard)
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

// shardConn returns the append connection of shard, opening it if needed.
func (c *Client) shardConn(shard uint32) (*shardConn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if sc, ok := c.shards[shard]; ok {
		c.mu.Unlock()
		return sc, nil
	}
	c.mu.Unlock()
	info := c.shardInfo(shard)
	if info == nil {
		if _, err := c.refresh(context.Background()); err != nil {
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
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := pb.NewLogClient(cc).Append(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	sc := &shardConn{c: c, shard: shard, stream: stream, cancel: cancel, ops: map[uint64]*op{}, wake: make(chan struct{}, 1)}
	c.shards[shard] = sc
	c.wg.Add(2)
	go sc.sendLoop()
	go sc.recvLoop()
	return sc, nil
}

// shardConn is one Append stream to a shard's primary.
type shardConn struct {
	c      *Client
	shard  uint32
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
			n, size := 0, 0
			for n < len(sc.queue) && n < appendBatchMax && size < appendBatchBytesMax {
				size += len(sc.queue[n].rec.Payload) + len(sc.queue[n].rec.Key)
				n++
			}
			batch := sc.queue[:n]
			sc.queue = sc.queue[n:]
			sc.mu.Unlock()
			if n == 0 {
				break
			}
			req := &pb.AppendRequest{ClusterId: sc.c.cfg.ClusterID, ClientId: sc.c.clientID, Shard: sc.shard,
				Entries: make([]*pb.AppendEntry, n)}
			for i, o := range batch {
				req.Entries[i] = &pb.AppendEntry{Seq: o.seq, Record: o.rec}
			}
			if err := sc.stream.Send(req); err != nil {
				sc.fail()
				return
			}
			for _, o := range batch {
				o.sent.Store(true)
			}
		}
	}
}

func (sc *shardConn) recvLoop() {
	defer sc.c.wg.Done()
	for {
		resp, err := sc.stream.Recv()
		if err != nil {
			sc.fail()
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
	delete(sc.ops, a.Seq)
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

// fail retires the connection and recovers the appends it left unanswered.
func (sc *shardConn) fail() {
	sc.mu.Lock()
	if sc.failed {
		sc.mu.Unlock()
		return
	}
	sc.failed = true
	ops := sc.ops
	sc.ops = nil
	sc.queue = nil
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
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.recover(sc.shard, ops)
	}()
}

// recover settles appends whose connection broke before they were answered.
// While the shard is live they are re-sent to it (its primary drops the
// duplicates); once it is finalized, the surviving replicas say which were
// ordered, and the rest go to another shard.
func (c *Client) recover(shard uint32, ops map[uint64]*op) {
	var unanswered time.Time // since when no replica of the finalized shard answers
	for len(ops) > 0 {
		if err := c.pause(context.Background()); err != nil {
			for _, o := range ops {
				o.finish(Ack{}, err)
			}
			return
		}
		st, err := c.refresh(context.Background())
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
			sc, err := c.shardConn(shard)
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
		if c.resolve(info, ops) {
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

// resolve asks a finalized shard's replicas about ops and settles every op
// they answer for. It reports whether any replica answered.
func (c *Client) resolve(info *pb.ShardInfo, ops map[uint64]*op) bool {
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
	for _, rep := range info.Replicas {
		cc, err := c.conn(rep.Addr)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		resp, err := pb.NewLogClient(cc).Resolve(ctx, &pb.ResolveRequest{ClusterId: c.cfg.ClusterID, Shard: info.Id, ClientId: c.clientID, Seqs: seqs})
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
	c.place(o, true, why)
}

// place sends o to a live shard (other than its current one, with skip),
// waiting until one exists or the client closes.
func (c *Client) place(o *op, skip bool, why error) {
	old := o.shard
	for {
		if _, err := c.refresh(context.Background()); err == nil {
			if id, err := c.pickShard(o.rec, old, skip); err == nil {
				o.shard = id
				c.send(o)
				return
			}
		}
		if err := c.pause(context.Background()); err != nil {
			o.finish(Ack{}, errors.Join(err, why))
			return
		}
	}
}
