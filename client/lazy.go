package client

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/stagetime"
)

// Lazy order (a cluster whose status carries a lazy state): an append
// writes the record's data to every replica of its shard and its metadata
// to every sequencing replica of the current view, all at once, and is
// durable once every one of them acknowledged: one round trip. Its
// position is given later, in the background; AppendSync waits for it.

// lazyFullBackoff paces retries of metadata a full sequencing ring refused.
const lazyFullBackoff = 2 * time.Millisecond

// lazyOp is one lazy append until every destination acknowledged it.
type lazyOp struct {
	seq     uint64
	rec     *pb.Record
	shard   uint32
	wantPos bool
	ctx     context.Context
	done    func(Ack, error)
	once    sync.Once

	mu sync.Mutex
	// dataLeft and metaLeft are the destinations that have not
	// acknowledged yet, by address; metaView is the view the metadata is
	// in. A refusal for the view restarts the metadata in the next one.
	// dataAcked are the shard replicas that acknowledged the data: when
	// the shard's configuration changes, dataLeft becomes its replicas
	// that are not among them.
	dataLeft  map[string]bool
	dataAcked map[string]bool
	// epoch is the shard configuration dataLeft was taken from: the data
	// goes out with it, and a replica in a newer one refuses it (a
	// replica that joined since would lack it).
	epoch    uint64
	metaLeft map[string]bool
	metaView uint64
	// leader is the address of the view's leader, which answers the
	// position; position is set once it did.
	leader   string
	position uint64
	ordered  bool
	// began is when the append started, when the bench times stages;
	// dataTimed and metaTimed say its stages were recorded.
	began                time.Time
	dataTimed, metaTimed bool
}

func (o *lazyOp) finish(a Ack, err error) { o.once.Do(func() { o.done(a, err) }) }

// acked notes that addr acknowledged o and finishes o once nothing is left.
func (o *lazyOp) acked(addr string, meta bool, view uint64) {
	o.mu.Lock()
	if meta {
		if view != o.metaView {
			o.mu.Unlock()
			return
		}
		delete(o.metaLeft, addr)
		if len(o.metaLeft) == 0 && !o.metaTimed {
			o.metaTimed = true
			stagetime.Since(stagetime.LazyAppendMeta, o.began)
		}
	} else {
		delete(o.dataLeft, addr)
		if o.dataAcked == nil {
			o.dataAcked = map[string]bool{}
		}
		o.dataAcked[addr] = true
		if len(o.dataLeft) == 0 && !o.dataTimed {
			o.dataTimed = true
			stagetime.Since(stagetime.LazyAppendData, o.began)
		}
	}
	o.finishIfCompleteLocked()
}

// finishIfCompleteLocked finishes o once nothing is left; it unlocks o.mu.
func (o *lazyOp) finishIfCompleteLocked() {
	complete := len(o.dataLeft) == 0 && len(o.metaLeft) == 0 && (!o.wantPos || o.ordered)
	a := Ack{Shard: o.shard, Position: o.position, Unordered: !o.ordered}
	o.mu.Unlock()
	if complete {
		o.finish(a, nil)
	}
}

// followShard makes o's data wait for the replicas of info, the shard's
// current configuration, that have not acknowledged it: a replica taken
// out is no longer waited for. It returns the replicas to send the data
// to, those not asked yet and still owing it.
func (o *lazyOp) followShard(info *pb.ShardInfo, askedAgain string) (send []string) {
	o.mu.Lock()
	if info.GetEpoch() != o.epoch {
		// Acknowledgements count within one configuration: a replica
		// that took the data in an older one may have been taken out
		// and have rejoined from a copy made before the data came.
		clear(o.dataAcked)
		o.dataLeft = nil
	}
	left := map[string]bool{}
	for _, r := range info.GetReplicas() {
		if o.dataAcked[r.Addr] {
			continue
		}
		left[r.Addr] = true
		if !o.dataLeft[r.Addr] || r.Addr == askedAgain {
			send = append(send, r.Addr)
		}
	}
	o.dataLeft, o.epoch = left, info.GetEpoch()
	o.finishIfCompleteLocked()
	return send
}

func (o *lazyOp) placed(pos uint64) {
	o.mu.Lock()
	o.ordered, o.position = true, pos
	complete := len(o.dataLeft) == 0 && len(o.metaLeft) == 0
	o.mu.Unlock()
	if complete {
		o.finish(Ack{Shard: o.shard, Position: pos}, nil)
	}
}

// lazyState returns the cluster's lazy state, or nil on another mode.
func (c *Client) lazyState() *pb.LazyState { return c.cachedStatus().GetLazy() }

// appendLazy starts a lazy append of an admitted record.
func (c *Client) appendLazy(o *lazyOp) {
	info := c.shardInfo(o.shard)
	if info == nil || len(info.Replicas) == 0 {
		o.finish(Ack{}, fmt.Errorf("%w: %d", ErrUnknownShard, o.shard))
		return
	}
	st := c.lazyState()
	o.mu.Lock()
	o.dataLeft, o.dataAcked, o.epoch = map[string]bool{}, nil, info.GetEpoch()
	for _, r := range info.Replicas {
		o.dataLeft[r.Addr] = true
	}
	o.mu.Unlock()
	if st.GetSealed() || len(st.GetReplicas()) == 0 {
		// No open view (the first is not recorded yet, or a view change
		// is under way): the metadata waits for one.
		o.mu.Lock()
		o.metaView = st.GetView()
		o.metaLeft = map[string]bool{"": true}
		o.mu.Unlock()
		c.wg.Go(func() { c.retryMeta(o) })
	} else {
		c.sendMeta(o, st)
	}
	for _, r := range info.Replicas {
		c.lazyStream(r.Addr, false).enqueue(o)
	}
}

// sendMeta sends o's metadata to every replica of view st.
func (c *Client) sendMeta(o *lazyOp, st *pb.LazyState) {
	o.mu.Lock()
	o.metaView = st.GetView()
	o.metaLeft = map[string]bool{}
	for _, r := range st.GetReplicas() {
		o.metaLeft[r.Addr] = true
	}
	if len(st.GetReplicas()) > 0 {
		o.leader = st.GetReplicas()[0].Addr
	}
	o.mu.Unlock()
	for _, r := range st.GetReplicas() {
		c.lazyStream(r.Addr, true).enqueue(o)
	}
}

// redoInView sends o again in view st, data and metadata both: a shard
// that moved to a newer view refuses data of an older one, and a record's
// data must carry the view that orders its metadata. Every destination
// acknowledges again.
func (c *Client) redoInView(o *lazyOp, st *pb.LazyState) {
	info := c.shardInfo(o.shard)
	if info == nil || len(info.Replicas) == 0 {
		o.finish(Ack{}, fmt.Errorf("%w: %d", ErrUnknownShard, o.shard))
		return
	}
	o.mu.Lock()
	o.dataLeft, o.dataAcked, o.epoch = map[string]bool{}, nil, info.GetEpoch()
	for _, r := range info.Replicas {
		o.dataLeft[r.Addr] = true
	}
	o.mu.Unlock()
	c.sendMeta(o, st)
	for _, r := range info.Replicas {
		c.lazyStream(r.Addr, false).enqueue(o)
	}
}

// lazyStream returns the pipelined stream to addr, opening it if needed:
// metadata to a sequencing replica (meta) or data to a shard replica; nil
// once the client is closed.
func (c *Client) lazyStream(addr string, meta bool) *lazyConn {
	key := lazyKey{addr, meta}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if lc, ok := c.lazyConns[key]; ok && !lc.isFailed() {
		return lc
	}
	lc := &lazyConn{c: c, addr: addr, meta: meta, ops: map[uint64]*lazyOp{}, queued: map[uint64]int{}, sentViews: map[uint64][]uint64{}, broken: make(chan struct{})}
	if c.lazyConns == nil {
		c.lazyConns = map[lazyKey]*lazyConn{}
	}
	c.lazyConns[key] = lc
	c.wg.Add(1)
	go lc.run()
	return lc
}

type lazyKey struct {
	addr string
	meta bool
}

// lazyConn is one pipelined stream of lazy appends to one server. A broken
// stream is replaced and its unanswered appends are sent again: every
// server drops duplicates by record id.
type lazyConn struct {
	c    *Client
	addr string
	meta bool

	mu    sync.Mutex
	queue []*lazyOp
	// queued counts each op's entries in queue, by sequence number, so
	// an answer need not scan the queue.
	queued map[uint64]int
	ops    map[uint64]*lazyOp
	// sentViews are the views of each op's unanswered sends, oldest
	// first: answers of one stream come in order, so an answer about a
	// view the op has left since (it was sent again in a newer one) is
	// told apart from the answer the resend awaits.
	sentViews map[uint64][]uint64
	failed    bool
	// send sends one batch on the open stream (nil until it is open);
	// sending is set while a goroutine sends: whoever enqueues while
	// nobody sends sends itself, so an append costs no wake-up of a
	// sender goroutine, and appends that queue meanwhile go out together.
	send    func(batch []*lazyOp, view uint64) error
	sending bool
	// broken is closed when a send fails, ending the stream.
	broken     chan struct{}
	brokenOnce sync.Once
}

func (lc *lazyConn) isFailed() bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.failed
}

// enqueue queues o on lc; a nil lc (a closed client) fails o.
func (lc *lazyConn) enqueue(o *lazyOp) {
	if lc == nil {
		o.finish(Ack{}, ErrClosed)
		return
	}
	lc.mu.Lock()
	if lc.failed {
		lc.mu.Unlock()
		// Raced with the stream's end: its replacement takes o.
		lc.c.lazyStream(lc.addr, lc.meta).enqueue(o)
		return
	}
	lc.ops[o.seq] = o
	lc.queue = append(lc.queue, o)
	lc.queued[o.seq]++
	lc.flushLocked()
}

// flushLocked sends the queue unless the stream is not open yet or
// another goroutine sends; it unlocks lc.mu.
func (lc *lazyConn) flushLocked() {
	if lc.sending || lc.send == nil {
		lc.mu.Unlock()
		return
	}
	lc.sending = true
	for {
		batch := lc.nextBatchLocked()
		if len(batch) == 0 {
			lc.sending = false
			lc.mu.Unlock()
			return
		}
		view := batch[0].metaViewOf()
		for _, o := range batch {
			lc.sentViews[o.seq] = append(lc.sentViews[o.seq], view)
		}
		send := lc.send
		lc.mu.Unlock()
		err := send(batch, view)
		lc.mu.Lock()
		if err != nil {
			lc.sending = false
			lc.mu.Unlock()
			lc.brokenOnce.Do(func() { close(lc.broken) })
			return
		}
	}
}

// run opens the stream and sends batches until it breaks; then it hands
// the unanswered appends to a new stream, after a pause.
func (lc *lazyConn) run() {
	defer lc.c.wg.Done()
	err := lc.serve()
	lc.mu.Lock()
	lc.failed = true
	ops := lc.ops
	lc.ops, lc.queue, lc.queued = nil, nil, nil
	lc.mu.Unlock()
	c := lc.c
	select {
	case <-c.closedCh:
		for _, o := range ops {
			o.finish(Ack{}, ErrClosed)
		}
		return
	default:
	}
	if len(ops) == 0 {
		return
	}
	_ = err
	t := time.NewTimer(c.cfg.RetryInterval)
	select {
	case <-t.C:
	case <-c.closedCh:
		t.Stop()
		for _, o := range ops {
			o.finish(Ack{}, ErrClosed)
		}
		return
	}
	for seq, o := range ops {
		if o.ctx.Err() != nil {
			o.finish(Ack{}, fmt.Errorf("augur: lazy append to %s unanswered: %w", lc.addr, o.ctx.Err()))
			delete(ops, seq)
			continue
		}
		if lc.meta {
			// Ask the replica again, or, if the cluster moved to a newer
			// view meanwhile, append again in that view.
			lc.c.wg.Go(func() { lc.c.resendAfterPause(o, lc.addr, true) })
		}
	}
	if !lc.meta {
		// Ask the replica again if it is still one of the shard's; the
		// control plane may have taken it out meanwhile.
		lc.c.followShards(ops, lc.addr)
	}
}

// followShards sends the data of ops again to the replicas of their
// shards' current configurations that owe it (addr among them if it is
// still one), after asking the cluster for its configuration once; ops
// whose data every replica left holds are done.
func (c *Client) followShards(ops map[uint64]*lazyOp, addr string) {
	ctx, cancel := context.WithTimeout(c.ctx, rpcTimeout)
	_, err := c.refresh(ctx)
	cancel()
	if err != nil {
		// Nothing newer known: ask the same replicas again.
		for _, o := range ops {
			c.lazyStream(addr, false).enqueue(o)
		}
		return
	}
	for _, o := range ops {
		info := c.shardInfo(o.shard)
		if info == nil || len(info.Replicas) == 0 {
			o.finish(Ack{}, fmt.Errorf("%w: %d", ErrUnknownShard, o.shard))
			continue
		}
		for _, to := range o.followShard(info, addr) {
			c.lazyStream(to, false).enqueue(o)
		}
	}
}

func (lc *lazyConn) serve() error {
	c := lc.c
	cc, err := c.conn(lc.addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	var send func([]*lazyOp, uint64) error
	var recv func() error
	if lc.meta {
		stream, err := pb.NewSequencingClient(cc).Append(ctx)
		if err != nil {
			return err
		}
		send = func(batch []*lazyOp, view uint64) error {
			req := &pb.SeqAppendRequest{ClusterId: c.cfg.ClusterID, View: view, Metas: make([]*pb.RecordMeta, len(batch))}
			for i, o := range batch {
				o.mu.Lock()
				req.WantPosition = req.WantPosition || (o.wantPos && o.leader == lc.addr)
				o.mu.Unlock()
				req.Metas[i] = &pb.RecordMeta{ClientId: c.clientID, Seq: o.seq, Shard: o.shard, Floor: c.lazyFloor()}
			}
			return stream.Send(req)
		}
		recv = func() error {
			resp, err := stream.Recv()
			if err != nil {
				return err
			}
			for _, a := range resp.Acks {
				lc.metaAck(a, resp.View)
			}
			return nil
		}
	} else {
		stream, err := pb.NewLazyShardClient(cc).Store(ctx)
		if err != nil {
			return err
		}
		send = func(batch []*lazyOp, view uint64) error {
			req := &pb.LazyStoreRequest{ClusterId: c.cfg.ClusterID, ClientId: c.clientID, Shard: batch[0].shard, View: view,
				Entries: make([]*pb.AppendEntry, len(batch))}
			for i, o := range batch {
				req.Entries[i] = &pb.AppendEntry{Seq: o.seq, Record: o.rec}
				// The oldest configuration any of them was sent to: a
				// replica of a newer one refuses the batch, and each
				// follows the shard's configuration.
				o.mu.Lock()
				if i == 0 || o.epoch < req.Epoch {
					req.Epoch = o.epoch
				}
				o.mu.Unlock()
			}
			return stream.Send(req)
		}
		recv = func() error {
			resp, err := stream.Recv()
			if err != nil {
				return err
			}
			for _, a := range resp.Acks {
				lc.dataAck(a)
			}
			return nil
		}
	}
	recvErr := make(chan error, 1)
	go func() {
		for {
			if err := recv(); err != nil {
				recvErr <- err
				cancel()
				return
			}
		}
	}()
	lc.mu.Lock()
	lc.send = send
	lc.flushLocked()
	select {
	case <-lc.broken:
		cancel()
	case <-ctx.Done():
	}
	lc.mu.Lock()
	lc.send = nil
	lc.mu.Unlock()
	return <-recvErr
}

// nextBatchLocked takes queued appends for one message: of one shard
// (data) or one view (metadata), at most appendBatchMax and about
// appendBatchBytesMax.
func (lc *lazyConn) nextBatchLocked() []*lazyOp {
	n, size := 0, 0
	for n < len(lc.queue) && n < appendBatchMax && size < appendBatchBytesMax {
		o := lc.queue[n]
		if n > 0 && (o.shard != lc.queue[0].shard && !lc.meta || lc.meta && o.metaViewOf() != lc.queue[0].metaViewOf()) {
			break
		}
		if !lc.meta {
			size += len(o.rec.Payload) + len(o.rec.Key)
		}
		n++
	}
	batch := lc.queue[:n:n]
	lc.queue = lc.queue[n:]
	for _, o := range batch {
		if lc.queued[o.seq]--; lc.queued[o.seq] <= 0 {
			delete(lc.queued, o.seq)
		}
	}
	return batch
}

func (o *lazyOp) metaViewOf() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.metaView
}

// answered notes the answer to the oldest unanswered send of seq and
// returns its op and the view that send was in; the stream forgets the op
// once nothing of it is left unanswered or queued, unless keep. Caller
// holds lc.mu.
func (lc *lazyConn) answeredLocked(seq uint64, keep bool) (*lazyOp, uint64) {
	o := lc.ops[seq]
	if o == nil {
		return nil, 0
	}
	views := lc.sentViews[seq]
	if len(views) == 0 {
		return nil, 0
	}
	view := views[0]
	if len(views) == 1 {
		delete(lc.sentViews, seq)
		if !keep && !lc.queuedLocked(o) {
			delete(lc.ops, seq)
		}
	} else {
		lc.sentViews[seq] = views[1:]
	}
	return o, view
}

func (lc *lazyConn) queuedLocked(o *lazyOp) bool {
	return lc.queued[o.seq] > 0
}

// stale says an answer about view is for a send o has since left: o went
// to a newer view, whose sends' answers decide it.
func (o *lazyOp) stale(view uint64) bool { return view != o.metaViewOf() }

func (lc *lazyConn) dataAck(a *pb.AppendAck) {
	lc.mu.Lock()
	o, view := lc.answeredLocked(a.Seq, false)
	lc.mu.Unlock()
	if o == nil || o.stale(view) {
		return
	}
	switch a.Code {
	case pb.Code_OK:
		o.acked(lc.addr, false, 0)
	case pb.Code_INVALID:
		o.finish(Ack{}, fmt.Errorf("%w: %s", ErrInvalidRecord, a.Message))
	case pb.Code_WRONG_CLUSTER:
		o.finish(Ack{}, fmt.Errorf("%w: %s", ErrWrongCluster, a.Message))
	case pb.Code_UNKNOWN_SHARD, pb.Code_STALE_EPOCH:
		// The server is not (or no longer) a replica of the shard, or the
		// shard's configuration changed (a replica joined): follow
		// the shard's current configuration (which fails o if the shard
		// is gone), after a pause in case the server has not heard of it
		// yet.
		lc.c.wg.Go(func() {
			t := time.NewTimer(lc.c.cfg.RetryInterval)
			defer t.Stop()
			select {
			case <-t.C:
				lc.c.followShards(map[uint64]*lazyOp{o.seq: o}, lc.addr)
			case <-o.ctx.Done():
				o.finish(Ack{}, fmt.Errorf("augur: lazy append to %s: %s: %w", lc.addr, a.Message, o.ctx.Err()))
			case <-lc.c.closedCh:
				o.finish(Ack{}, ErrClosed)
			}
		})
	case pb.Code_WRONG_VIEW:
		// The shard moved to a newer sequencing view than o's: append
		// again in it.
		lc.c.wg.Go(func() { lc.c.retryMeta(o) })
	default:
		o.finish(Ack{}, &ServerError{Code: a.Code.String(), Message: a.Message})
	}
}

func (lc *lazyConn) metaAck(a *pb.SeqAck, view uint64) {
	if a.Ordered {
		// The leader's second answer: the record's position.
		lc.mu.Lock()
		o := lc.ops[a.Seq]
		delete(lc.ops, a.Seq)
		delete(lc.sentViews, a.Seq)
		lc.mu.Unlock()
		if o != nil && a.Code != pb.Code_OK {
			// The orderer took the record without a position: its shard
			// was finalized before placing it.
			o.finish(Ack{}, &ServerError{Code: a.Code.String(), Message: a.Message})
			return
		}
		if o != nil {
			// The position implies the leader holds the record, even if
			// this answer overtook its first one.
			o.acked(lc.addr, true, o.metaViewOf())
			o.placed(a.Position)
		}
		return
	}
	lc.mu.Lock()
	o := lc.ops[a.Seq]
	// The leader keeps an op that waits for its position.
	keep := o != nil && a.Code == pb.Code_OK && o.wantPos && o.leader == lc.addr
	o, sentView := lc.answeredLocked(a.Seq, keep)
	lc.mu.Unlock()
	if o == nil || o.stale(sentView) {
		return
	}
	switch a.Code {
	case pb.Code_OK:
		o.acked(lc.addr, true, sentView)
	case pb.Code_WRONG_VIEW, pb.Code_SEALED:
		if view < o.metaViewOf() {
			// The replica has not started o's view yet: ask it again.
			lc.c.wg.Go(func() { lc.c.resendAfterPause(o, lc.addr, true) })
			return
		}
		lc.c.wg.Go(func() { lc.c.retryMeta(o) })
	case pb.Code_FULL, pb.Code_UNAVAILABLE:
		// The ring is full, or the replica cannot check the record's
		// shard now: back off, then ask again.
		lc.c.wg.Go(func() { lc.c.resendAfterPause(o, lc.addr, true) })
	case pb.Code_WRONG_CLUSTER:
		o.finish(Ack{}, fmt.Errorf("%w: %s", ErrWrongCluster, a.Message))
	case pb.Code_INVALID:
		o.finish(Ack{}, fmt.Errorf("%w: %s", ErrInvalidRecord, a.Message))
	default:
		o.finish(Ack{}, &ServerError{Code: a.Code.String(), Message: a.Message})
	}
}

// resendAfterPause sends o to addr again after a pause (a full ring, or a
// replica that has not started o's view yet), while o's caller waits.
func (c *Client) resendAfterPause(o *lazyOp, addr string, meta bool) {
	t := time.NewTimer(max(lazyFullBackoff, c.cfg.RetryInterval/10))
	defer t.Stop()
	select {
	case <-t.C:
		// The replica may never start o's view (it restarted and the
		// control plane moved on without it): follow a newer view.
		ctx, cancel := context.WithTimeout(o.ctx, rpcTimeout)
		st, err := c.refresh(ctx)
		cancel()
		if lz := st.GetLazy(); err == nil && lz.GetView() > o.metaViewOf() && !lz.GetSealed() && len(lz.GetReplicas()) > 0 {
			c.redoInView(o, lz)
			return
		}
		c.lazyStream(addr, meta).enqueue(o)
	case <-o.ctx.Done():
		o.finish(Ack{}, fmt.Errorf("augur: lazy append to %s: %w", addr, o.ctx.Err()))
	case <-c.closedCh:
		o.finish(Ack{}, ErrClosed)
	}
}

// retryMeta sends o's metadata again in the cluster's current view, once
// the control plane has started a view after o's (bounded by o's ctx).
func (c *Client) retryMeta(o *lazyOp) {
	old := o.metaViewOf()
	for {
		ctx, cancel := context.WithTimeout(o.ctx, rpcTimeout)
		st, err := c.refresh(ctx)
		cancel()
		if lz := st.GetLazy(); err == nil && lz.GetView() > old && !lz.GetSealed() && len(lz.GetReplicas()) > 0 {
			c.redoInView(o, st.GetLazy())
			return
		}
		t := time.NewTimer(c.cfg.RetryInterval)
		select {
		case <-t.C:
		case <-o.ctx.Done():
			t.Stop()
			o.finish(Ack{}, fmt.Errorf("augur: lazy append: no open sequencing view after view %d: %w", old, o.ctx.Err()))
			return
		case <-c.closedCh:
			t.Stop()
			o.finish(Ack{}, ErrClosed)
			return
		}
	}
}

// lazyFloor is the lowest sequence number this client may still send:
// that of its oldest unfinished lazy append (or the next one). Replicas
// forget the ids of older records.
func (c *Client) lazyFloor() uint64 {
	c.floorMu.Lock()
	defer c.floorMu.Unlock()
	for c.unfinished.Len() > 0 && c.finishedSeqs[c.unfinished[0]] {
		delete(c.finishedSeqs, c.unfinished[0])
		heap.Pop(&c.unfinished)
	}
	if c.unfinished.Len() > 0 {
		return c.unfinished[0]
	}
	return c.seq.Load() + 1
}

func (c *Client) startedLazy(seq uint64) {
	c.floorMu.Lock()
	defer c.floorMu.Unlock()
	heap.Push(&c.unfinished, seq)
}

func (c *Client) finishedLazy(seq uint64) {
	c.floorMu.Lock()
	defer c.floorMu.Unlock()
	if c.finishedSeqs == nil {
		c.finishedSeqs = map[uint64]bool{}
	}
	c.finishedSeqs[seq] = true
}

// seqHeap is a min-heap of sequence numbers.
type seqHeap []uint64

func (h seqHeap) Len() int           { return len(h) }
func (h seqHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h seqHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *seqHeap) Push(x any)        { *h = append(*h, x.(uint64)) }
func (h *seqHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// appendLazyAsync starts a lazy append; o's shard is chosen.
func (c *Client) appendLazyAsync(ctx context.Context, seq uint64, rec *pb.Record, shard uint32, wantPos bool, done func(Ack, error)) {
	c.startedLazy(seq)
	o := &lazyOp{seq: seq, rec: rec, shard: shard, wantPos: wantPos, ctx: ctx, began: stagetime.Now()}
	// A caller that stops waiting frees its in-flight slot; the streams
	// drop the op when its answers come.
	stop := context.AfterFunc(ctx, func() {
		o.finish(Ack{}, fmt.Errorf("augur: lazy append unacknowledged: %w", ctx.Err()))
	})
	o.done = func(a Ack, err error) {
		stop()
		c.finishedLazy(seq)
		done(a, err)
	}
	c.appendLazy(o)
}

// AppendSync appends rec and returns once it holds its position. On a
// lazy cluster that takes longer than Append, which returns as soon as the
// record is durable, before it is ordered; on other clusters the two are
// the same.
func (c *Client) AppendSync(ctx context.Context, rec Record) (Ack, error) {
	return c.appendWaitPos(ctx, rec, 0, false, true)
}
