package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/spec"
)

// EventKind tells what a speculative subscription Event says.
type EventKind = spec.EventKind

// The kinds of Event.
const (
	// EventDeliver hands over Entry, at a position that is final unless
	// Speculative is set.
	EventDeliver = spec.EventDeliver
	// EventConfirm (confirm_spec) says every position below Position is
	// final.
	EventConfirm = spec.EventConfirm
	// EventFail (fail_spec) says every position at or after Position
	// delivered so far is void: undo what was computed from them. The
	// following deliveries give the correct records from Position on.
	EventFail = spec.EventFail
)

// Event is one step of a speculative subscription.
type Event struct {
	Kind EventKind
	// Entry is the delivered record (EventDeliver).
	Entry Entry
	// Speculative is set on a delivery whose position is not final yet.
	Speculative bool
	// Position is the delivered record's position, the end of the final
	// prefix (EventConfirm), or the first void position (EventFail).
	Position uint64
	// View counts whole-shard failures; a Fail starts a new view.
	View uint64
}

// statusRefreshEvery paces a speculative subscription's look for new shards.
const statusRefreshEvery = 200 * time.Millisecond

// SpecSubscription is a subscription to a cluster in speculative mode: it
// delivers records as soon as they are durable, at their predicted
// positions, then confirms or fails them.
type SpecSubscription struct {
	c      *Client
	filter *pb.Filter
	ctx    context.Context
	cancel context.CancelFunc
	msgs   chan shardMsg
	out    chan Event
	done   chan struct{}
	errMu  sync.Mutex
	err    error

	// only, when set, is the one shard followed (Filter.Shard).
	only *uint32

	mu       sync.Mutex
	position uint64 // where a reconnecting stream restarts
	followed map[uint32]bool
	wg       sync.WaitGroup
}

// SubscribeSpec subscribes from position from on with speculative
// delivery. With confirmedOnly it delivers only final positions, exactly
// like an eager subscription. It fails on a cluster in eager mode.
func (c *Client) SubscribeSpec(ctx context.Context, from uint64, f Filter, confirmedOnly bool) (*SpecSubscription, error) {
	st, err := c.refresh(ctx)
	if err != nil {
		return nil, err
	}
	if st.Spec == nil {
		return nil, errors.New("augur: speculative subscription: the cluster runs in eager mode")
	}
	if from < st.Trim {
		return nil, errTrimmedBelow(from, st.Trim)
	}
	m := spec.NewMerger[Entry](from, confirmedOnly)
	if f.Shard != nil {
		if err := c.checkShard(*f.Shard); err != nil {
			return nil, err
		}
		m = spec.NewShardMerger[Entry](from, confirmedOnly)
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &SpecSubscription{
		c:        c,
		filter:   &pb.Filter{Keys: f.Keys, Tags: f.Tags},
		ctx:      sctx,
		cancel:   cancel,
		msgs:     make(chan shardMsg, 64),
		out:      make(chan Event, subscriptionBufferMax),
		done:     make(chan struct{}),
		position: from,
		followed: map[uint32]bool{},
		only:     f.Shard,
	}
	s.follow(st)
	go s.merge(m)
	return s, nil
}

// checkShard tells whether a subscription may follow shard id alone, by
// the status just refreshed.
func (c *Client) checkShard(id uint32) error {
	if c.shardInfo(id) == nil {
		return fmt.Errorf("%w: %d", ErrUnknownShard, id)
	}
	return nil
}

func (s *SpecSubscription) follow(st *pb.StatusResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sh := range st.Shards {
		if s.only != nil && sh.Id != *s.only {
			continue
		}
		if !s.followed[sh.Id] {
			s.followed[sh.Id] = true
			s.wg.Add(1)
			go s.stream(sh)
		}
	}
}

// stream follows one shard, moving to another replica when one fails.
func (s *SpecSubscription) stream(sh *pb.ShardInfo) {
	defer s.wg.Done()
	s.c.followShard(s.ctx, sh, s.streamFrom, func(err error) { s.send(shardMsg{shard: sh.Id, err: err}) })
}

func (s *SpecSubscription) send(m shardMsg) bool {
	select {
	case s.msgs <- m:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// streamFrom follows shard on the replica at addr until the subscription
// closes or the shard, finalized, has sent everything.
func (s *SpecSubscription) streamFrom(shard uint32, addr string) (bool, error) {
	cc, err := s.c.conn(addr)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	from := s.position
	s.mu.Unlock()
	stream, err := pb.NewLogClient(cc).Subscribe(s.ctx, &pb.SubscribeRequest{
		ClusterId: s.c.cfg.ClusterID, Shard: shard, From: from, Filter: s.filter, Speculative: true})
	if err != nil {
		return false, err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return false, err
		}
		if !s.send(shardMsg{shard: shard, resp: resp}) || resp.Done {
			return true, nil
		}
	}
}

// merge feeds the streams' messages through m and hands its events out.
func (s *SpecSubscription) merge(m *spec.Merger[Entry]) {
	defer close(s.done)
	defer close(s.out)
	defer s.wg.Wait()
	defer s.cancel()
	refresh := time.NewTicker(statusRefreshEvery)
	defer refresh.Stop()
	var knownMV uint64
	for {
		// shardDone is set when the one shard followed is finalized and
		// sent its last entries: the subscription ends after them.
		shardDone := false
		select {
		case msg := <-s.msgs:
			if msg.err != nil {
				s.setErr(msg.err)
				return
			}
			r := msg.resp
			shardDone = s.only != nil && r.Done
			if r.MembershipVersion > knownMV {
				// Follow a new shard at once: its first slots hold up
				// every position after them.
				knownMV = r.MembershipVersion
				if st, err := s.c.refresh(s.ctx); err == nil {
					s.follow(st)
				}
			}
			// A view change goes before anything the stream sent with it.
			if vc := r.ViewChange; vc != nil {
				m.ViewChange(vc.View, vc.ConfirmedGp, vc.FailedShard)
			}
			if r.View > m.View() {
				// Every stream carries a view change before anything of
				// the new view; anything else is a broken server.
				s.setErr(fmt.Errorf("augur: shard %d streamed view %d before its view change", msg.shard, r.View))
				return
			}
			// The confirmed end was a fact when the server sent the
			// entries: those below it are final, not predictions.
			if r.Confirmed > 0 {
				m.Confirm(r.Confirmed)
			}
			for _, e := range r.Entries {
				it := spec.Item[Entry]{Pos: e.Position, Shard: e.Shard, Skip: e.Skip}
				if e.Record != nil {
					rec := e.Record
					it.Rec = Entry{Position: e.Position, Shard: e.Shard, Record: Record{Key: rec.Key, Tags: rec.Tags, Payload: rec.Payload}}
				}
				m.Add(it)
			}
		case <-refresh.C:
			st, err := s.c.refresh(s.ctx)
			if err != nil {
				continue
			}
			s.follow(st)
			if s.only == nil || st.Spec == nil {
				continue
			}
			// A dead or finalized shard's stream announces neither its
			// own failure nor later cuts: a one-shard subscription learns
			// both here too. The view changes go first, so that what they
			// void is not confirmed.
			for _, vc := range st.Spec.Void {
				m.ViewChange(vc.View, vc.ConfirmedGp, vc.FailedShard)
			}
			m.Confirm(st.Tail)
		case <-s.ctx.Done():
			s.setErr(ErrClosed)
			return
		}
		for {
			ev, ok := m.Next()
			if !ok {
				break
			}
			out := Event{Kind: ev.Kind, Position: ev.Pos, Speculative: ev.Speculative, View: ev.View}
			if ev.Kind == EventDeliver {
				out.Entry = ev.Rec
			}
			select {
			case s.out <- out:
			case <-s.ctx.Done():
				s.setErr(ErrClosed)
				return
			}
		}
		s.mu.Lock()
		s.position = m.Position()
		s.mu.Unlock()
		if shardDone {
			s.setErr(fmt.Errorf("%w: shard %d has no more records", ErrShardFinalized, *s.only))
			return
		}
	}
}

func (s *SpecSubscription) setErr(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// Next returns the next event, blocking until there is one or ctx ends.
func (s *SpecSubscription) Next(ctx context.Context) (Event, error) {
	select {
	case e, ok := <-s.out:
		if ok {
			return e, nil
		}
		s.errMu.Lock()
		defer s.errMu.Unlock()
		return Event{}, s.err
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// Close ends the subscription.
func (s *SpecSubscription) Close() {
	s.cancel()
	for range s.out {
	}
	<-s.done
}
