package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
)

// Bounds.
const (
	// subscriptionBufferMax bounds entries merged but not yet taken by Next;
	// past it the merge, and then the servers' streams, wait.
	subscriptionBufferMax = 4096
	// stuckRefreshAfter is how long a subscription waits on an incomplete
	// cut, or with every shard it follows done, before it looks for shards
	// it does not follow yet.
	stuckRefreshAfter = 100 * time.Millisecond
)

// Subscription is an ordered stream of entries, identical for every
// subscriber that starts at the same position with the same filter.
type Subscription struct {
	c      *Client
	filter *pb.Filter
	// next is the first position not yet merged.
	next   atomic.Uint64
	ctx    context.Context
	cancel context.CancelFunc

	batches chan shardMsg
	out     chan Entry
	errMu   sync.Mutex
	err     error
	done    chan struct{}

	// followed and streaming are owned by the merge goroutine: the shards
	// followed, and how many of their streams have not said they are done.
	followed  map[uint32]bool
	streaming int
	// only, when set, is the one shard followed (Filter.Shard): each of
	// its batches is delivered as it comes, without the other shards'.
	only *uint32
	wg   sync.WaitGroup
	// spec, when set, carries the subscription on a speculative cluster.
	spec *SpecSubscription
}

func errTrimmedBelow(from, trim uint64) error {
	return fmt.Errorf("%w: position %d is below the trim point %d", ErrTrimmed, from, trim)
}

type shardMsg struct {
	shard uint32
	resp  *pb.SubscribeResponse
	err   error
}

// Subscribe returns the records from position from on, in position order.
func (c *Client) Subscribe(ctx context.Context, from uint64, f Filter) (*Subscription, error) {
	st, err := c.refresh(ctx)
	if err != nil {
		return nil, err
	}
	if from < st.Trim {
		return nil, errTrimmedBelow(from, st.Trim)
	}
	if st.Spec != nil {
		// In speculative mode the confirmed-only view of the speculative
		// streams is the eager order; it also knows the no-op slots.
		ss, err := c.SubscribeSpec(ctx, from, f, true)
		if err != nil {
			return nil, err
		}
		return &Subscription{spec: ss}, nil
	}
	if f.Shard != nil {
		if err := c.checkShard(*f.Shard); err != nil {
			return nil, err
		}
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Subscription{
		c:        c,
		filter:   &pb.Filter{Keys: f.Keys, Tags: f.Tags},
		ctx:      sctx,
		cancel:   cancel,
		batches:  make(chan shardMsg, 64),
		out:      make(chan Entry, subscriptionBufferMax),
		done:     make(chan struct{}),
		followed: map[uint32]bool{},
		only:     f.Shard,
	}
	s.next.Store(from)
	s.follow(st)
	go s.merge()
	return s, nil
}

// follow starts a stream for every shard in st not followed yet.
func (s *Subscription) follow(st *pb.StatusResponse) {
	for _, sh := range st.Shards {
		if s.followed[sh.Id] || (s.only != nil && sh.Id != *s.only) {
			continue
		}
		s.followed[sh.Id] = true
		s.streaming++
		s.wg.Add(1)
		go s.stream(sh)
	}
}

// stream follows one shard, moving to another replica when one fails.
func (s *Subscription) stream(sh *pb.ShardInfo) {
	defer s.wg.Done()
	s.c.followShard(s.ctx, sh, s.streamFrom, func(err error) { s.send(shardMsg{shard: sh.Id, err: err}) })
}

// followShard keeps a subscription stream of shard sh open until ctx ends
// or streamFrom says the shard is done: it tries the shard's replicas in
// turn, pausing after each full round. A trimmed position ends it through
// onTrimmed.
func (c *Client) followShard(ctx context.Context, sh *pb.ShardInfo, streamFrom func(shard uint32, addr string) (bool, error), onTrimmed func(error)) {
	for attempt := 0; ; attempt++ {
		info := c.shardInfo(sh.Id)
		if info == nil {
			info = sh
		}
		rep := info.Replicas[attempt%len(info.Replicas)]
		done, err := streamFrom(info.Id, rep.Addr)
		if done || ctx.Err() != nil {
			return
		}
		if st, ok := status.FromError(err); ok && st.Code() == codes.OutOfRange {
			onTrimmed(translate(err))
			return
		}
		if attempt%len(info.Replicas) == len(info.Replicas)-1 {
			if err := c.pause(ctx); err != nil {
				return
			}
			c.refresh(ctx)
		}
	}
}

func (s *Subscription) send(m shardMsg) bool {
	select {
	case s.batches <- m:
		return true
	case <-s.ctx.Done():
		return false
	}
}

func (s *Subscription) streamFrom(shard uint32, addr string) (bool, error) {
	cc, err := s.c.conn(addr)
	if err != nil {
		return false, err
	}
	stream, err := pb.NewLogClient(cc).Subscribe(s.ctx, &pb.SubscribeRequest{
		ClusterId: s.c.cfg.ClusterID, Shard: shard, From: s.next.Load(), Filter: s.filter})
	if err != nil {
		return false, err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return false, err
		}
		if !s.send(shardMsg{shard: shard, resp: resp}) {
			return true, nil
		}
		if resp.Done {
			return true, nil
		}
	}
}

// pendingCut gathers one cut's batches from the shards that contribute.
type pendingCut struct {
	end     uint64
	batches map[uint32]*pb.CutBatch
}

// merge assembles cuts from the shards' batches and emits them in order. A
// cut is complete when the runs gathered cover all of its positions.
func (s *Subscription) merge() {
	defer close(s.done)
	defer close(s.out)
	defer s.wg.Wait()
	defer s.cancel()
	cuts := map[uint64]*pendingCut{} // by cut index
	var knownMV uint64
	stuck := time.NewTimer(time.Hour)
	stuck.Stop()
	stuckArmed := false
	for {
		var m shardMsg
		select {
		case m = <-s.batches:
		case <-stuck.C:
			stuckArmed = false
			if st, err := s.c.refresh(s.ctx); err == nil {
				s.follow(st)
			}
			// A stale answer finds nothing new: look again later rather
			// than wait for a batch that may never come, or, with every
			// followed shard done, for a stream to announce a new shard.
			if len(cuts) > 0 || s.streaming == 0 {
				stuck.Reset(stuckRefreshAfter)
				stuckArmed = true
			}
			continue
		case <-s.ctx.Done():
			s.setErr(ErrClosed)
			return
		}
		if m.err != nil {
			s.setErr(m.err)
			return
		}
		for _, b := range m.resp.Batches {
			if b.MembershipVersion > knownMV {
				knownMV = b.MembershipVersion
				if st, err := s.c.refresh(s.ctx); err == nil {
					s.follow(st)
				}
			}
			if b.RunCount == 0 || b.CutEnd <= s.next.Load() {
				continue
			}
			pc := cuts[b.Cut]
			if pc == nil {
				pc = &pendingCut{end: b.CutEnd, batches: map[uint32]*pb.CutBatch{}}
				cuts[b.Cut] = pc
			}
			pc.batches[b.Shard] = b
		}
		if !s.emit(cuts) {
			return
		}
		if m.resp.Done {
			if s.only != nil {
				// The followed shard is finalized and sent its last batch.
				s.setErr(fmt.Errorf("%w: shard %d has no more records", ErrShardFinalized, *s.only))
				return
			}
			s.streaming--
		}
		if (len(cuts) > 0 || s.streaming == 0) && !stuckArmed {
			stuck.Reset(stuckRefreshAfter)
			stuckArmed = true
		}
	}
}

// emit delivers every complete cut at the head of the order.
func (s *Subscription) emit(cuts map[uint64]*pendingCut) bool {
	for {
		next := s.next.Load()
		var head uint64
		var pc *pendingCut
		for idx, c := range cuts {
			if c.end <= next {
				delete(cuts, idx)
				continue
			}
			if pc == nil || idx < head {
				head, pc = idx, c
			}
		}
		if pc == nil {
			return true
		}
		var covered uint64
		var entries []*pb.LogEntry
		for _, b := range pc.batches {
			if end := b.RunStart + b.RunCount; end > next {
				covered += end - max(b.RunStart, next)
			}
			for _, e := range b.Records {
				if e.Position >= next {
					entries = append(entries, e)
				}
			}
		}
		if covered < pc.end-next && s.only == nil {
			return true
		}
		if covered > pc.end-next {
			s.setErr(fmt.Errorf("augur: cut %d covers %d positions from %d but ends at %d", head, covered, next, pc.end))
			return false
		}
		slices.SortFunc(entries, func(a, b *pb.LogEntry) int {
			switch {
			case a.Position < b.Position:
				return -1
			case a.Position > b.Position:
				return 1
			}
			return 0
		})
		for _, e := range entries {
			r := e.GetRecord()
			select {
			case s.out <- Entry{Position: e.Position, Shard: e.Shard, Record: Record{Key: r.GetKey(), Tags: r.GetTags(), Payload: r.GetPayload()}}:
			case <-s.ctx.Done():
				return false
			}
		}
		s.next.Store(pc.end)
		delete(cuts, head)
	}
}

func (s *Subscription) setErr(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// Next returns the next entry, blocking until one is ordered or ctx ends.
func (s *Subscription) Next(ctx context.Context) (Entry, error) {
	if s.spec != nil {
		for {
			ev, err := s.spec.Next(ctx)
			if err != nil || ev.Kind == EventDeliver {
				return ev.Entry, err
			}
		}
	}
	select {
	case e, ok := <-s.out:
		if ok {
			return e, nil
		}
		s.errMu.Lock()
		defer s.errMu.Unlock()
		return Entry{}, s.err
	case <-ctx.Done():
		return Entry{}, ctx.Err()
	}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	if s.spec != nil {
		s.spec.Close()
		return
	}
	s.cancel()
	// Drain so the merge goroutine is not stuck delivering.
	for range s.out {
	}
	<-s.done
}

// Read returns the record at pos, waiting until it is ordered (bounded by
// ctx). On a speculative cluster a position that holds a no-op answers
// ErrNoop as soon as it is final.
func (c *Client) Read(ctx context.Context, pos uint64) (Entry, error) {
	es, err := c.ReadRange(ctx, pos, 1)
	if err != nil {
		return Entry{}, err
	}
	if len(es) == 0 {
		return Entry{}, fmt.Errorf("%w: position %d", ErrNoop, pos)
	}
	return es[0], nil
}

// ReadRange returns the records at the n positions from position from on,
// waiting for those not yet ordered (bounded by ctx). On a speculative
// cluster the positions that hold no-ops are skipped, so fewer than n
// records may come back; it returns once every position of the range is
// final.
func (c *Client) ReadRange(ctx context.Context, from uint64, n int) ([]Entry, error) {
	if n <= 0 {
		return nil, fmt.Errorf("augur: read range needs a positive count, got %d", n)
	}
	// A cluster's mode never changes, so the table Dial read tells it.
	if c.cachedStatus().GetSpec() != nil {
		return c.readSpec(ctx, from, n)
	}
	sub, err := c.Subscribe(ctx, from, Filter{})
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	out := make([]Entry, 0, n)
	for len(out) < n {
		e, err := sub.Next(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return out, fmt.Errorf("augur: read %d..%d: %d of %d records ordered before the deadline: %w", from, from+uint64(n), len(out), n, err)
			}
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}

// readSpec reads the n positions from position from on of a speculative
// cluster, where a final position may hold a no-op: it returns the records
// among them once the range is final, that is once a confirmation, or a
// record, reaches the range's end. (Counting records instead would wait
// past the tail for records that may never come.)
func (c *Client) readSpec(ctx context.Context, from uint64, n int) ([]Entry, error) {
	end := from + uint64(n)
	if end < from {
		end = math.MaxUint64
	}
	sub, err := c.SubscribeSpec(ctx, from, Filter{}, true)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	var out []Entry
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return out, fmt.Errorf("augur: read %d..%d: not final before the deadline: %w", from, end, err)
			}
			return out, err
		}
		// Confirmed-only delivery goes in position order, and a
		// confirmation follows the deliveries it covers.
		switch {
		case ev.Kind == EventDeliver && ev.Position < end:
			out = append(out, ev.Entry)
		case ev.Kind == EventDeliver, ev.Kind == EventConfirm && ev.Position >= end:
			return out, nil
		}
	}
}
