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
	local  uint64 // next own entry to send
	placed bool   // local has been placed at from
	// sentView is what the subscriber was last told; confirm decides
	// which cut ends it is told; filled marks voids whose slots went out.
	confirm  spec.Confirmer
	sentView uint64
	sentMV   uint64
	filled   map[uint64]bool
}

// position returns the global position of the entry at local, final if a
// cut assigned it, else predicted from the announced windows.
func (fd *specFeed) position(local uint64, sp *control.Spec) (uint64, bool) {
	if pos, ok := fd.r.store.GlobalOf(local); ok {
		return pos, true
	}
	if sp == nil {
		return 0, false
	}
	return spec.Predict(sp.Windows, fd.r.id, local)
}

// limit is how far this copy may serve: what every replica holds on a
// primary, only what cuts ordered elsewhere (a backup cannot know what the
// primary's other backups hold).
func (fd *specFeed) limit() uint64 {
	r := fd.r
	finalLen, final := r.core.Final()
	if r.role() == rolePrimary && !final {
		// What a cut ordered is durable, even where the primary's count
		// of what every replica holds lags (a backup that rejoined): an
		// eager cut between windows places entries no prediction
		// streamed.
		return max(r.core.Durable(), r.store.Ordered())
	}
	n := r.store.Ordered()
	if final {
		n = min(n, finalLen)
	}
	return n
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
			fd.local = run.LocalStart + (max(fd.from, run.GlobalStart) - run.GlobalStart)
			return
		}
	}
	// Everything assigned lies before from; later entries are checked one
	// by one against from.
	fd.local = max(fd.r.store.Ordered(), fd.r.store.Start())
}

// fill adds to resp what is new; it returns an error the stream must end
// with.
func (fd *specFeed) fill(resp *pb.SubscribeResponse, confirmed, mv uint64, sp *control.Spec) error {
	r := fd.r
	fd.place()
	size := 0
	limit := fd.limit()
	for fd.local < limit && size < subscribeBatchBytesMax {
		// An entry's position does not depend on what it holds: one
		// not ordered and outside every window (as between windows) has
		// none yet and is not read, so that the wake-ups of a feed that
		// waits for a cut cost no reads. (An ordered one is read even
		// without a position: trimmed, the read says so.)
		if fd.local >= r.store.Ordered() {
			if _, ok := fd.position(fd.local, sp); !ok {
				break
			}
		}
		stop, trimmed := false, false
		err := r.store.Scan(fd.local, func(l uint64, e segment.Entry) bool {
			if l != fd.local {
				// Scan starts at the log's start: the entries from
				// fd.local on were trimmed while this stream lagged.
				trimmed = true
				return false
			}
			n := max(e.Noops, 1)
			n = min(n, limit-l)
			for k := uint64(0); k < n; k++ {
				pos, ok := fd.position(l+k, sp)
				if !ok {
					stop = true
					return false
				}
				fd.local++
				if pos < fd.from {
					continue
				}
				if e.Noops > 0 || !fd.f.match(e) {
					addSkip(resp, r.id, pos)
					continue
				}
				resp.Entries = append(resp.Entries, &pb.SpecEntry{Position: pos, Shard: r.id,
					Record: &pb.Record{Key: e.Key, Tags: e.Tags, Payload: e.Payload}})
				size += len(e.Payload) + len(e.Key) + 32
			}
			return fd.local < limit && size < subscribeBatchBytesMax
		})
		if trimmed || errors.Is(err, segment.ErrTrimmed) {
			return status.Errorf(codes.OutOfRange, "records of shard %d from local index %d on are trimmed", r.id, fd.local)
		}
		if errors.Is(err, segment.ErrDamaged) {
			return r.damagedStatus(err)
		}
		if err != nil {
			return status.Errorf(codes.Internal, "read shard %d: %v", r.id, err)
		}
		if stop {
			break
		}
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
		resp.Done = final && fd.local >= finalLen && fd.sentView >= latestView(sp)
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
