package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/merge"
	"github.com/augur-log/augur/internal/mode"
)

// Bounds.
const (
	// subscriptionBufferMax bounds events merged but not yet taken by Next;
	// past it the merge, and then the servers' streams, wait.
	subscriptionBufferMax = 4096
	// shardMsgsMax bounds stream messages received but not yet merged.
	shardMsgsMax = 64
	// stuckRefreshAfter is how long a subscription waits while its merger
	// holds positions that are not final and none becomes final, or with
	// every shard it follows done, before it fetches the status: for
	// shards it does not follow yet, and for what no live stream says.
	// (Counted from the last position that became final: armed whenever
	// the merger held anything, it fetched every 100 ms under steady
	// speculative traffic, the largest cost speculative subscriptions
	// paid at 8 shards.)
	stuckRefreshAfter = 100 * time.Millisecond
)

// engine runs one subscription of either kind: a goroutine per followed
// shard keeps that shard's stream open, and one merge goroutine feeds what
// the streams send through the ordering mode's merger and hands its events
// to Next. Subscription and SpecSubscription are views of it.
type engine struct {
	c      *Client
	filter *pb.Filter
	// speculative asks the servers for speculative streams (any
	// subscription to a cluster whose mode is speculative).
	speculative bool
	// only, when set, is the one shard followed (Filter.Shard).
	only *uint32
	// resume is where a (re)connecting stream starts: the merger's Resume
	// after the last events handed out.
	resume atomic.Uint64
	ctx    context.Context
	cancel context.CancelFunc

	msgs  chan shardMsg
	out   chan Event
	done  chan struct{}
	errMu sync.Mutex
	err   error

	// followed and streaming are owned by the merge goroutine (and by
	// startEngine before it starts): the shards followed, and how many of
	// their streams have not said they are done.
	followed  map[uint32]bool
	streaming int
	wg        sync.WaitGroup

	// refused is the last refusal (codes.Unavailable: a replica whose copy
	// is damaged or lost, or that is stopping) a stream got; a read that
	// runs out of time says it, so "not ordered before the deadline" is
	// not the only story told.
	refused atomic.Pointer[error]
}

type shardMsg struct {
	shard uint32
	resp  *pb.SubscribeResponse
	err   error
}

func errTrimmedBelow(from, trim uint64) error {
	return fmt.Errorf("%w: position %d is below the trim point %d", ErrTrimmed, from, trim)
}

// startEngine starts a subscription from position from on the cluster st
// describes, merging by the cluster's ordering mode.
func (c *Client) startEngine(st *pb.StatusResponse, from uint64, f Filter, confirmedOnly bool) (*engine, error) {
	if from < st.Trim {
		return nil, errTrimmedBelow(from, st.Trim)
	}
	if f.Shard != nil {
		if err := c.checkShard(*f.Shard); err != nil {
			return nil, err
		}
	}
	md := mode.FromStatus(st)
	m := md.NewMerger(from, confirmedOnly, f.Shard != nil)
	// A subscription outlives the call that opens it, not its client.
	ctx, cancel := context.WithCancel(c.ctx)
	e := &engine{
		c:           c,
		filter:      &pb.Filter{Keys: f.Keys, Tags: f.Tags},
		speculative: md.Speculative(),
		only:        f.Shard,
		ctx:         ctx,
		cancel:      cancel,
		msgs:        make(chan shardMsg, shardMsgsMax),
		out:         make(chan Event, subscriptionBufferMax),
		done:        make(chan struct{}),
		followed:    map[uint32]bool{},
	}
	e.resume.Store(from)
	e.follow(st)
	go e.run(m)
	return e, nil
}

// checkShard tells whether a subscription may follow shard id alone, by
// the status just refreshed.
func (c *Client) checkShard(id uint32) error {
	if c.shardInfo(id) == nil {
		return fmt.Errorf("%w: %d", ErrUnknownShard, id)
	}
	return nil
}

// follow starts a stream for every shard in st not followed yet.
func (e *engine) follow(st *pb.StatusResponse) {
	for _, sh := range st.Shards {
		if e.followed[sh.Id] || (e.only != nil && sh.Id != *e.only) {
			continue
		}
		e.followed[sh.Id] = true
		e.streaming++
		e.wg.Add(1)
		go e.stream(sh)
	}
}

// stream follows one shard, moving to another replica when one fails.
func (e *engine) stream(sh *pb.ShardInfo) {
	defer e.wg.Done()
	streamFrom := func(shard uint32, addr string) (bool, error) {
		done, err := e.streamFrom(shard, addr)
		if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
			e.refused.Store(&err)
		}
		return done, err
	}
	e.c.followShard(e.ctx, sh, streamFrom, func(err error) { e.send(shardMsg{shard: sh.Id, err: err}) })
}

// lastRefusal returns what the last replica that refused a stream said,
// as a clause to add to an error, or "".
func (e *engine) lastRefusal() string {
	if err := e.refused.Load(); err != nil {
		return fmt.Sprintf(" (a replica refused: %s)", status.Convert(*err).Message())
	}
	return ""
}

// holders lists the servers that may hold shard info's records: its
// configuration, then the replicas taken out of it (a restarted or fenced
// server still serves what it holds of what the shard ordered, and after a
// whole-shard failure it may be the only one up).
func holders(info *pb.ShardInfo) []*pb.ReplicaAddr {
	return append(slices.Clone(info.Replicas), info.Out...)
}

// followShard keeps a subscription stream of shard sh open until ctx ends
// or streamFrom says the shard is done: it tries the shard's replicas in
// turn, pausing after each full round. A trimmed position or a refusal of
// the client's credentials ends it through onFatal.
func (c *Client) followShard(ctx context.Context, sh *pb.ShardInfo, streamFrom func(shard uint32, addr string) (bool, error), onFatal func(error)) {
	for attempt := 0; ; attempt++ {
		info := c.shardInfo(sh.Id)
		if info == nil {
			info = sh
		}
		reps := holders(info)
		rep := reps[attempt%len(reps)]
		done, err := streamFrom(info.Id, rep.Addr)
		if done || ctx.Err() != nil {
			return
		}
		// Neither a trimmed position nor refused credentials change by
		// retrying.
		if st, ok := status.FromError(err); ok && st.Code() == codes.OutOfRange || refused(err) {
			onFatal(translate(err))
			return
		}
		if attempt%len(reps) == len(reps)-1 {
			if err := c.pause(ctx); err != nil {
				return
			}
			c.refresh(ctx)
		}
	}
}

func (e *engine) send(m shardMsg) bool {
	select {
	case e.msgs <- m:
		return true
	case <-e.ctx.Done():
		return false
	}
}

// streamFrom follows shard on the replica at addr from the merger's
// resume position until the subscription closes or the shard, finalized,
// has sent everything.
func (e *engine) streamFrom(shard uint32, addr string) (bool, error) {
	cc, err := e.c.conn(addr)
	if err != nil {
		return false, err
	}
	stream, err := pb.NewLogClient(cc).Subscribe(e.ctx, &pb.SubscribeRequest{ClusterId: e.c.cfg.ClusterID,
		Shard: shard, From: e.resume.Load(), Filter: e.filter, Speculative: e.speculative})
	if err != nil {
		return false, err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return false, err
		}
		if !e.send(shardMsg{shard: shard, resp: resp}) || resp.Done {
			return true, nil
		}
	}
}

// run feeds the streams' messages through m and hands its events out,
// until the subscription closes or fails.
func (e *engine) run(m merge.Merger) {
	defer close(e.done)
	defer close(e.out)
	defer e.wg.Wait()
	defer e.cancel()
	var knownMV uint64
	stuck := time.NewTimer(time.Hour)
	stuck.Stop()
	stuckArmed := false
	for {
		select {
		case msg := <-e.msgs:
			if msg.err != nil {
				e.setErr(msg.err)
				return
			}
			if mv := membershipVersion(msg.resp); mv > knownMV {
				// Follow a new shard at once: its first positions hold
				// up every position after them.
				knownMV = mv
				e.refresh(m)
			}
			err := m.Step(msg.shard, msg.resp)
			final, ok := e.handOut(m)
			if !ok {
				return
			}
			if final && stuckArmed {
				// Positions flow: the wait starts again.
				stuck.Stop()
				stuckArmed = false
			}
			if err != nil {
				e.setErr(err)
				return
			}
			if msg.resp.Done {
				if e.only != nil {
					// The followed shard is finalized and sent its last
					// entries.
					e.setErr(fmt.Errorf("%w: shard %d has no more records", ErrShardFinalized, *e.only))
					return
				}
				e.streaming--
			}
		case <-stuck.C:
			stuckArmed = false
			// A stale answer finds nothing new: the timer looks again
			// later rather than wait for a message that may never come,
			// or, with every followed shard done, for a stream to
			// announce a new shard.
			e.refresh(m)
			if _, ok := e.handOut(m); !ok {
				return
			}
		case <-e.ctx.Done():
			e.setErr(ErrClosed)
			return
		}
		if (m.Waiting() || e.streaming == 0) && !stuckArmed {
			stuck.Reset(stuckRefreshAfter)
			stuckArmed = true
		}
	}
}

// membershipVersion is the newest shard table a stream message says its
// server has applied.
func membershipVersion(r *pb.SubscribeResponse) uint64 {
	mv := r.MembershipVersion
	for _, b := range r.Batches {
		mv = max(mv, b.MembershipVersion)
	}
	return mv
}

// refresh fetches the status, follows the shards it lists and tells m.
func (e *engine) refresh(m merge.Merger) {
	st, err := e.c.refresh(e.ctx)
	if err != nil {
		return
	}
	e.follow(st)
	m.Observe(st)
}

// handOut moves m's events to Next; final says a position became final
// (a confirmation, or a delivery that is not speculative); ok is false
// once the subscription closes.
func (e *engine) handOut(m merge.Merger) (final, ok bool) {
	for {
		ev, more := m.Next()
		if !more {
			break
		}
		final = final || ev.Kind == EventConfirm || ev.Kind == EventDeliver && !ev.Speculative
		out := Event{Kind: ev.Kind, Position: ev.Pos, Speculative: ev.Speculative, View: ev.View}
		if ev.Kind == EventDeliver {
			r := ev.Rec
			out.Entry = Entry{Position: ev.Pos, Shard: ev.Shard, Record: Record{Key: r.GetKey(), Tags: r.GetTags(), Payload: r.GetPayload()}}
		}
		select {
		case e.out <- out:
		case <-e.ctx.Done():
			e.setErr(ErrClosed)
			return final, false
		}
	}
	e.resume.Store(m.Resume())
	return final, true
}

func (e *engine) setErr(err error) {
	e.errMu.Lock()
	defer e.errMu.Unlock()
	if e.err == nil {
		e.err = err
	}
}

// next returns the next event, blocking until there is one or ctx ends.
func (e *engine) next(ctx context.Context) (Event, error) {
	select {
	case ev, ok := <-e.out:
		if ok {
			return ev, nil
		}
		e.errMu.Lock()
		defer e.errMu.Unlock()
		return Event{}, e.err
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// close ends the subscription.
func (e *engine) close() {
	e.cancel()
	// Drain so the merge goroutine is not stuck handing out.
	for range e.out {
	}
	<-e.done
}
