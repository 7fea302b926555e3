package storage

// Rejoin of a lazy shard's copy (the rules are the core's: see
// lazy/rejoin.go). A copy of a shard of this server's group that the
// shard's configuration leaves out (this server restarted and was taken
// out, or it is new to the group, or it lost its data dir) copies the
// primary's log from a cursor (Copy: ordered and unordered records
// alike), paced by catchup_bytes_per_second; once it copied what the
// primary held, it asks the ordering leader to join (RejoinShard). The
// configuration that takes it in holds it pending: the primary restates
// its whole order for it (a base placement, whose data it fetches), and
// it copies on until it holds what the primary's catch-up mark names;
// then it asks the leader to count it (RejoinShard, caught_up). Every
// call has a deadline; the loop ends with the server, or once the copy
// counts.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
	"github.com/augur-log/augur/internal/segment"
)

const (
	// lazyCopyBytesMax bounds the records one Copy answer carries.
	lazyCopyBytesMax = 1 << 20
	// lazyCopyTimeout bounds one Copy call.
	lazyCopyTimeout = 5 * time.Second
)

// lazyRejoinState is where this server's rejoin of one lazy shard is, for
// status.
type lazyRejoinState struct {
	progress *pb.CatchUpProgress
}

// startLazyRejoins starts a rejoin for each live lazy shard of this
// server's group whose configuration leaves this server out or holds it
// pending, unless one runs.
func (s *Server) startLazyRejoins() {
	if !s.cfg.Mode.Sequenced() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return
	}
	if s.lazyRejoins == nil {
		s.lazyRejoins = map[cut.ShardID]*lazyRejoinState{}
	}
	for id, sh := range s.view.shards {
		if sh.GetGroup() != s.cfg.GroupName || sh.GetState() == pb.ShardState_SHARD_FINALIZED || s.lazyRejoins[id] != nil {
			continue
		}
		if member, pending, _ := s.lazyPlaceLocked(id); member && !pending {
			continue
		}
		st := &lazyRejoinState{}
		s.lazyRejoins[id] = st
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.lazyRejoins, id)
				s.mu.Unlock()
			}()
			s.lazyRejoin(id, st)
		})
	}
}

// lazyPlaceLocked says whether this server is in shard id's configuration
// (in this run: a configuration that still lists an earlier run waits for
// the detector to take it out, stale), and whether it is pending there.
func (s *Server) lazyPlaceLocked(id cut.ShardID) (member, pending, stale bool) {
	sh := s.view.shards[id]
	i := slices.IndexFunc(sh.GetReplicas(), func(r *pb.ReplicaAddr) bool { return r.GetId() == s.cfg.ID })
	if i < 0 {
		return false, false, false
	}
	r := sh.GetReplicas()[i]
	if r.GetIncarnation() != s.incarnation {
		return false, false, true
	}
	return true, r.GetPending(), false
}

// lazyRejoin runs the rejoin of shard id until the copy counts, the shard
// is final, or the server stops.
func (s *Server) lazyRejoin(id cut.ShardID, st *lazyRejoinState) {
	var ls *lazyShard
	var src string
	// target is the source's length when this copy of its log began: a
	// copy that reached it asks to join (pending, it copies the rest
	// under the primary), so appends faster than the paced copy cannot
	// keep it out.
	var cursor, target uint64
	for s.ctx.Err() == nil {
		s.mu.Lock()
		sh := s.view.shards[id]
		member, pending, stale := s.lazyPlaceLocked(id)
		s.mu.Unlock()
		switch {
		case sh == nil || sh.GetState() == pb.ShardState_SHARD_FINALIZED:
			return
		case member && !pending:
			s.log.Info("lazy rejoin: the copy counts in its shard's configuration", "shard", id, "epoch", sh.GetEpoch())
			s.setLazyProgress(st, nil)
			return
		case stale || len(sh.GetReplicas()) == 0:
			// The configuration still lists this server's earlier run:
			// the detector takes it out first.
			if !s.sleep(retryInterval) {
				return
			}
			continue
		}
		if ls == nil {
			var err error
			if ls, err = s.openLazy(id, true); err != nil {
				s.log.Error("lazy rejoin: open the copy", "shard", id, "err", err)
				if !s.sleep(retryInterval) {
					return
				}
				continue
			}
		}
		primary := sh.GetReplicas()[0]
		fresh := primary.GetId() != src
		if fresh {
			// Another primary's log: its local indexes are its own.
			src, cursor = primary.GetId(), 0
		}
		resp, err := s.copyFrom(primary.GetAddr(), id, cursor)
		if err != nil {
			s.log.Info("lazy rejoin: copy", "shard", id, "source", src, "from", cursor, "err", err)
			s.setLazyProgress(st, &pb.CatchUpProgress{Fetched: cursor, Source: src, Stalled: true, Rejoin: true})
			if !s.sleep(retryInterval) {
				return
			}
			continue
		}
		n, err := ls.copyRecords(resp.GetRecords())
		if err != nil {
			s.log.Error("lazy rejoin: store copied records", "shard", id, "err", err)
			return
		}
		cursor = max(cursor, resp.GetNext())
		if fresh {
			target = resp.GetLen()
		}
		s.setLazyProgress(st, &pb.CatchUpProgress{Fetched: cursor, Total: resp.GetLen(), Source: src, Rejoin: true, Done: cursor >= resp.GetLen()})
		if n > 0 && !s.sleep(time.Duration(float64(n)/float64(s.cfg.catchUpBytesPerSecond())*float64(time.Second))) {
			return
		}
		// A pending copy counts once it holds the log up to its
		// primary's mark, however far the primary has grown since.
		mark := lazy.CatchUpMark{Epoch: resp.GetMarkEpoch(), Term: resp.GetMarkTerm(), Len: resp.GetMarkLen(), Seq: resp.GetMarkSeq()}
		ready := cursor >= target
		if member {
			ready = resp.GetMarked() && ls.caughtUp(mark, cursor)
		}
		if !ready {
			if cursor < resp.GetLen() {
				continue
			}
			// Pending: the primary's base placement, or the log up to its
			// mark, is still coming.
			if !s.sleep(retryInterval) {
				return
			}
			continue
		}
		// What the copy counts on is durable before it asks.
		if err := ls.store.SyncRecords(); err != nil {
			s.log.Error("lazy rejoin: sync", "shard", id, "err", err)
			return
		}
		if member {
			err = s.askRejoin(s.ctx, uint32(id), mark.Epoch, 0, true)
		} else {
			err = s.askRejoin(s.ctx, uint32(id), sh.GetEpoch(), 0, false)
		}
		if status.Code(err) == codes.Unimplemented {
			s.log.Warn("lazy rejoin: the ordering layer does not rejoin lazy replicas; the copy stays out", "shard", id, "err", err)
			return
		}
		if err != nil {
			s.log.Info("lazy rejoin: not taken yet", "shard", id, "member", member, "err", err)
		}
		// The shard table's next event says where the copy is.
		if !s.sleep(retryInterval) {
			return
		}
	}
}

// copyFrom asks the replica at addr for its log of shard id from local
// index from.
func (s *Server) copyFrom(addr string, id cut.ShardID, from uint64) (*pb.LazyCopyResponse, error) {
	cc, err := s.conn(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(s.ctx, lazyCopyTimeout)
	defer cancel()
	return pb.NewLazyShardClient(cc).Copy(ctx, &pb.LazyCopyRequest{ClusterId: s.cfg.ClusterID, Shard: uint32(id), From: from, MaxBytes: lazyCopyBytesMax})
}

// copyRecords stores the records copied that the copy lacks; it returns
// how many bytes they hold.
func (ls *lazyShard) copyRecords(records []*pb.StoredRecord) (int, error) {
	ls.mu.Lock()
	var fresh []segment.Entry
	var outs []lazy.ShardOutput[*lazyRead]
	var copyErr error
	bytes := 0
	for _, r := range records {
		var out lazy.ShardOutput[*lazyRead]
		id := lazy.RecordID{Client: r.GetClientId(), Seq: r.GetSeq()}
		local, isNew, err := ls.core.CopyRecord(id, &out)
		if err != nil {
			copyErr = err
			break
		}
		if isNew {
			if local != ls.store.Len()+uint64(len(fresh)) {
				panic(fmt.Sprintf("storage: lazy shard %d: core copied a record at %d, log ends at %d", ls.id, local, ls.store.Len()+uint64(len(fresh))))
			}
			rec := r.GetRecord()
			fresh = append(fresh, segment.Entry{ClientID: id.Client, Seq: id.Seq, Key: rec.GetKey(), Tags: rec.GetTags(), Payload: rec.GetPayload()})
			bytes += len(rec.GetKey()) + len(rec.GetPayload())
		}
		outs = append(outs, out)
	}
	// The log takes every record the core counted before anything acts
	// on the core's outputs: a failure below leaves the two in step.
	if len(fresh) > 0 {
		if _, err := ls.store.Append(fresh); err != nil {
			panic(fmt.Sprintf("storage: lazy shard %d: append: %v", ls.id, err))
		}
	}
	for i := range outs {
		if err := ls.handleLocked(&outs[i]); err != nil {
			ls.mu.Unlock()
			return 0, err
		}
	}
	ls.mu.Unlock()
	if copyErr != nil {
		return 0, copyErr
	}
	return bytes, ls.flush()
}

// caughtUp asks the core whether the copy holds what mark names.
func (ls *lazyShard) caughtUp(mark lazy.CatchUpMark, copied uint64) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.core.CaughtUp(mark, copied)
}

func (s *Server) setLazyProgress(st *lazyRejoinState, p *pb.CatchUpProgress) {
	s.mu.Lock()
	st.progress = p
	s.mu.Unlock()
}

// lazyRejoinHealthLocked is the progress of this server's rejoin of shard
// id, nil if none runs.
func (s *Server) lazyRejoinHealthLocked(id cut.ShardID) *pb.CatchUpProgress {
	if st := s.lazyRejoins[id]; st != nil && st.progress != nil {
		return st.progress
	}
	return nil
}

// Copy returns a chunk of this replica's log of a shard from a local
// index, for a copy that rejoins: the records the core still holds
// (trimmed and scrubbed ones are left out), with the primary's catch-up
// mark.
func (l *lazyServer) Copy(ctx context.Context, req *pb.LazyCopyRequest) (*pb.LazyCopyResponse, error) {
	s := l.s
	if err := s.checkCluster(req.GetClusterId()); err != nil {
		return nil, err
	}
	ls, err := s.lazyShard(cut.ShardID(req.GetShard()))
	if err != nil {
		return nil, err
	}
	maxBytes := min(max(req.GetMaxBytes(), 1), lazyCopyBytesMax)
	ls.mu.Lock()
	end, start := ls.store.Len(), ls.store.Start()
	mark, marked := ls.core.CatchUpMark()
	ls.mu.Unlock()
	resp := &pb.LazyCopyResponse{Len: end, Marked: marked, MarkEpoch: mark.Epoch, MarkTerm: mark.Term, MarkLen: mark.Len, MarkSeq: mark.Seq}
	local, bytes := max(req.GetFrom(), start), uint64(0)
	for ; local < end && bytes < maxBytes; local++ {
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		e, err := ls.store.Read(local)
		if err != nil {
			return nil, status.Errorf(codes.DataLoss, "shard %d: record at %d: %v", ls.id, local, err)
		}
		id := lazy.RecordID{Client: e.ClientID, Seq: e.Seq}
		ls.mu.Lock()
		at, ok := ls.core.LocalOf(id)
		ls.mu.Unlock()
		if !ok || at != local {
			continue
		}
		resp.Records = append(resp.Records, &pb.StoredRecord{ClientId: e.ClientID, Seq: e.Seq, Record: &pb.Record{Key: e.Key, Tags: e.Tags, Payload: e.Payload}})
		bytes += uint64(len(e.Key) + len(e.Payload))
	}
	resp.Next = local
	return resp, nil
}
