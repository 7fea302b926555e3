package storage

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/segment"
	"github.com/augur-log/augur/internal/spec"
	"github.com/augur-log/augur/internal/wire"
)

// specFeed is one speculative subscription to one shard: the shard's own
// entries at their final or predicted positions as soon as they are durable,
// the confirmed end after every cut, view changes, and, when this shard is
// a filler, the no-op slots of failed shards.
type specFeed struct {
	r      *replica
	f      filter
	from   uint64
	feed   spec.Feed // where the shard's own entries stand
	placed bool      // feed has been placed at from
	// sentView is what the subscriber was last told; confirm decides
	// which cut ends it is told; filled marks voids whose slots went out.
	confirm  spec.Confirmer
	sentView uint64
	sentMV   uint64
	filled   map[uint64]bool
}

// limit is how far this copy may serve.
func (fd *specFeed) limit() uint64 {
	r := fd.r
	finalLen, final := r.core.Final()
	return spec.FeedLimit(r.role() == rolePrimary, r.core.Durable(), r.store.Ordered(), final, finalLen)
}

// place starts the feed at the first own entry at or after position from.
// Runs lists the runs of every cut ending after from, so the first of
// them may still end at or before from (the cut's other shards hold the
// rest of it): the feed starts in the first run that reaches past from.
func (fd *specFeed) place() {
	if fd.placed {
		return
	}
	fd.placed = true
	for _, run := range fd.r.store.Runs(fd.from) {
		if run.GlobalStart+run.Count > fd.from {
			fd.feed.Next = run.LocalStart + (max(fd.from, run.GlobalStart) - run.GlobalStart)
			return
		}
	}
	// Everything assigned lies before from; later entries are checked one
	// by one against from.
	fd.feed.Next = max(fd.r.store.Ordered(), fd.r.store.Start())
}

// fill adds to resp what is new; it returns an error the stream must end
// with.
func (fd *specFeed) fill(resp *pb.SubscribeResponse, confirmed, mv uint64, sp *control.Spec) error {
	r := fd.r
	fd.place()
	var predict func(uint64) (uint64, bool)
	if sp != nil {
		predict = func(local uint64) (uint64, bool) { return spec.Predict(sp.Windows, r.id, local) }
	}
	err := fd.feed.Send(r.store, predict, fd.limit(), subscribeBatchBytesMax, func(pos uint64, e segment.Entry) {
		if pos < fd.from {
			return
		}
		if e.Noops > 0 || !fd.f.match(e) {
			addSkip(resp, r.id, pos)
			return
		}
		resp.Entries = append(resp.Entries, &pb.SpecEntry{Position: pos, Shard: r.id,
			Record: &pb.Record{Key: e.Key, Tags: e.Tags, Payload: e.Payload}})
	})
	switch {
	case errors.Is(err, spec.ErrFeedTrimmed) || errors.Is(err, segment.ErrTrimmed):
		return status.Errorf(codes.OutOfRange, "records of shard %d from local index %d on are trimmed", r.id, fd.feed.Next)
	case errors.Is(err, segment.ErrDamaged):
		return r.damagedStatus(err)
	case err != nil:
		return status.Errorf(codes.Internal, "read shard %d: %v", r.id, err)
	}
	if sp != nil {
		for _, v := range sp.Void {
			if v.View > fd.sentView {
				// One view change goes per message, and a void's slots
				// only after it: before it, the subscriber still takes
				// them for the failed shard's. sp.Void is oldest first;
				// the next message goes on from here.
				if resp.ViewChange != nil {
					break
				}
				resp.ViewChange = wire.VoidToProto(v)
				fd.sentView = v.View
			}
			if v.Filler == r.id && !fd.filled[v.View] {
				if fd.filled == nil {
					fd.filled = map[uint64]bool{}
				}
				fd.filled[v.View] = true
				for _, rg := range v.Slots {
					if end := rg.Start + rg.Count; end > fd.from {
						start := max(rg.Start, fd.from)
						resp.Entries = append(resp.Entries, &pb.SpecEntry{Position: start, Shard: r.id, Skip: end - start})
					}
				}
			}
		}
	}
	if mv > fd.sentMV {
		resp.MembershipVersion = mv
		fd.sentMV = mv
	}
	// The view of everything in resp: the last view change this stream
	// has carried, which always goes before what follows it.
	resp.View = fd.sentView
	for _, e := range resp.Entries {
		fd.confirm.Sent(e.Position, e.Skip)
	}
	if fd.confirm.Confirm(confirmed) {
		resp.Confirmed = confirmed
	}
	return nil
}

// addSkip extends the last skip of resp when pos follows it.
func addSkip(resp *pb.SubscribeResponse, shard cut.ShardID, pos uint64) {
	if n := len(resp.Entries); n > 0 {
		last := resp.Entries[n-1]
		if last.Record == nil && last.Shard == shard && last.Position+last.Skip == pos {
			last.Skip++
			return
		}
	}
	resp.Entries = append(resp.Entries, &pb.SpecEntry{Position: pos, Shard: shard, Skip: 1})
}

// latestView is the view of the newest whole-shard failure in sp.
func latestView(sp *control.Spec) uint64 {
	var v uint64
	if sp != nil {
		for _, vd := range sp.Void {
			v = max(v, vd.View)
		}
	}
	return v
}

// subscribeSpec serves a speculative subscription to shard r.
func (s *Server) subscribeSpec(r *replica, req *pb.SubscribeRequest, stream pb.Log_SubscribeServer) error {
	fd := &specFeed{r: r, f: newFilter(req.Filter), from: req.From}
	ctx := stream.Context()
	for {
		changed := r.changedCh()
		if r.core.Lost() {
			return r.lostStatus()
		}
		// Finality is read before the view: a shard is finalized by a cut
		// the view then already holds, so the confirmation sent with the
		// last entries covers them.
		finalLen, final := r.core.Final()
		s.mu.Lock()
		viewChanged, confirmed, mv, sp := s.viewChanged, s.view.lastCut.End, s.view.mv, s.view.spec
		s.mu.Unlock()
		var resp pb.SubscribeResponse
		if err := fd.fill(&resp, confirmed, mv, sp); err != nil {
			return err
		}
		// A finalized shard gets no more entries: once everything below
		// the final length and every view change went out (one goes per
		// message), the stream is done. (A shard fills slots only while
		// it is live: they pass on when it stops, so a finalized one has
		// none left to send.)
		resp.Done = final && fd.feed.Next >= finalLen && fd.sentView >= latestView(sp)
		if resp.Done || len(resp.Entries) > 0 || resp.Confirmed > 0 || resp.ViewChange != nil || resp.MembershipVersion > 0 {
			if err := stream.Send(&resp); err != nil {
				return err
			}
			if resp.Done {
				return nil
			}
			continue
		}
		select {
		case <-changed:
		case <-viewChanged:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.ctx.Done():
			return status.Error(codes.Unavailable, "server stopping")
		}
	}
}
