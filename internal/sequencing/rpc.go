package sequencing

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
	"github.com/augur-log/augur/internal/stagetime"
)

// ackStream is the sending side of one client's Append stream. The
// receiving handler answers each request itself, at once; the orderer's
// position answers go through out to a sender goroutine, so the orderer
// never blocks on a client. mu serializes the two senders, as gRPC wants
// one sender at a time.
type ackStream struct {
	mu     sync.Mutex
	stream pb.Sequencing_AppendServer
	out    chan *pb.SeqAppendResponse
	done   <-chan struct{}
}

// queue hands a position answer to the sender; false when the stream
// ended or its queue is full (the client then learns the position by
// retrying).
func (a *ackStream) queue(r *pb.SeqAppendResponse) bool {
	select {
	case a.out <- r:
		return true
	case <-a.done:
		return false
	default:
		return false
	}
}

func (a *ackStream) send(r *pb.SeqAppendResponse) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stream.Send(r)
}

func (s *Server) checkCluster(id string) error {
	if id != s.cfg.ClusterID {
		return status.Errorf(codes.FailedPrecondition, "wrong cluster id %q (this is %q)", id, s.cfg.ClusterID)
	}
	return nil
}

// Append takes a client's metadata stream.
func (s *Server) Append(stream pb.Sequencing_AppendServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	acks := &ackStream{stream: stream, out: make(chan *pb.SeqAppendResponse, ackQueueMax), done: ctx.Done()}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-acks.out:
				if err := acks.send(r); err != nil {
					cancel()
					return
				}
			}
		}
	}()
	defer s.dropWaiters(acks)
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		if err := s.checkCluster(req.GetClusterId()); err != nil {
			return err
		}
		refused := map[uint32]error{}
		for _, m := range req.GetMetas() {
			if _, seen := refused[m.GetShard()]; !seen {
				refused[m.GetShard()] = s.checkShard(ctx, cut.ShardID(m.GetShard()))
			}
		}
		at := stagetime.Now()
		if err := acks.send(s.take(req, acks, refused)); err != nil {
			return err
		}
		stagetime.Since(stagetime.LazySeqTake, at)
	}
}

// take hands one request's metadata to the ring and returns the answers;
// a record of a shard refused names (checkShard) is refused with that
// error.
func (s *Server) take(req *pb.SeqAppendRequest, acks *ackStream, refused map[uint32]error) *pb.SeqAppendResponse {
	resp := &pb.SeqAppendResponse{Acks: make([]*pb.SeqAck, 0, len(req.GetMetas()))}
	s.mu.Lock()
	defer s.mu.Unlock()
	leads := s.leadsLocked()
	for _, m := range req.GetMetas() {
		id := lazy.RecordID{Client: m.GetClientId(), Seq: m.GetSeq()}
		ack := &pb.SeqAck{ClientId: id.Client, Seq: id.Seq}
		var err error
		if !id.Valid() {
			err = fmt.Errorf("record id %v: client id and sequence number must not be 0: %w", id, lazy.ErrBadInput)
		} else if err = refused[m.GetShard()]; err != nil {
			err = fmt.Errorf("record %v: %w", id, err)
		} else {
			_, err = s.seq.Append(lazy.Meta{ID: id, Shard: cut.ShardID(m.GetShard()), View: req.GetView(), Floor: m.GetFloor()})
		}
		ack.Code = codeOf(err)
		if err != nil {
			ack.Message = err.Error()
		} else if req.GetWantPosition() && leads {
			s.waiters[id] = acks
		}
		if err == nil && leads && s.waitingSince.IsZero() {
			s.waitingSince = stagetime.Now()
		}
		if err == nil && leads && s.orderIdle {
			s.orderIdle = false
			select {
			case s.orderKick <- struct{}{}:
			default:
			}
		}
		resp.Acks = append(resp.Acks, ack)
	}
	resp.View, _ = s.seq.View()
	return resp
}

func (s *Server) dropWaiters(acks *ackStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, a := range s.waiters {
		if a == acks {
			delete(s.waiters, id)
		}
	}
}

// answerPositions tells the streams waiting for ids that they sit at
// positions from first on, and those waiting for unplaced that their
// records got no readable position (their shard was finalized). Caller
// holds s.mu.
func (s *Server) answerPositionsLocked(first uint64, ids, unplaced []lazy.RecordID) {
	for i, id := range ids {
		a, ok := s.waiters[id]
		if !ok || slices.Contains(unplaced, id) {
			continue
		}
		delete(s.waiters, id)
		a.queue(&pb.SeqAppendResponse{Acks: []*pb.SeqAck{{ClientId: id.Client, Seq: id.Seq, Ordered: true, Position: first + uint64(i)}}})
	}
	for _, id := range unplaced {
		a, ok := s.waiters[id]
		if !ok {
			continue
		}
		delete(s.waiters, id)
		a.queue(&pb.SeqAppendResponse{Acks: []*pb.SeqAck{{ClientId: id.Client, Seq: id.Seq, Ordered: true,
			Code: pb.Code_UNKNOWN_SHARD, Message: "the record's shard was finalized before it placed the record: not ordered"}}})
	}
}

// CheckTail returns the durable tail, on the leader.
func (s *Server) CheckTail(_ context.Context, req *pb.CheckTailRequest) (*pb.CheckTailResponse, error) {
	if err := s.checkCluster(req.GetClusterId()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	view, _ := s.seq.View()
	resp := &pb.CheckTailResponse{StableGp: s.stable, View: view}
	if !s.leadsLocked() {
		resp.NotLeader = true
		if s.config != nil && len(s.config.Replicas) > 0 {
			resp.LeaderAddr = s.config.Replicas[0].Addr
		}
		return resp, nil
	}
	resp.Tail = s.seq.Ordered() + uint64(s.seq.Len())
	return resp, nil
}

// Collect applies the leader's garbage collection of an ordered batch.
func (s *Server) Collect(_ context.Context, req *pb.CollectRequest) (*pb.CollectResponse, error) {
	if err := s.checkCluster(req.GetClusterId()); err != nil {
		return nil, err
	}
	ids := make([]lazy.RecordID, len(req.GetIds()))
	for i, m := range req.GetIds() {
		ids[i] = lazy.RecordID{Client: m.GetClientId(), Seq: m.GetSeq()}
	}
	var dropped []lazy.RecordID
	for _, m := range req.GetDropped() {
		dropped = append(dropped, lazy.RecordID{Client: m.GetClientId(), Seq: m.GetSeq()})
	}
	end := req.GetLastOrderedGp()
	if uint64(len(ids)) > end {
		return &pb.CollectResponse{Code: pb.Code_INVALID, Message: fmt.Sprintf("%d records end at %d", len(ids), end)}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.seq.Collect(lazy.GC{View: req.GetView(), From: end - uint64(len(ids)), End: end, IDs: ids, Dropped: dropped})
	if err != nil {
		return &pb.CollectResponse{Code: codeOf(err), Message: err.Error()}, nil
	}
	return &pb.CollectResponse{}, nil
}

// Seal seals the replica's view and returns its unordered ring.
func (s *Server) Seal(_ context.Context, req *pb.SealRequest) (*pb.SealResponse, error) {
	if err := s.checkCluster(req.GetClusterId()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.seq.Seal(req.GetView())
	if err != nil {
		return &pb.SealResponse{Code: codeOf(err), Message: err.Error()}, nil
	}
	resp := &pb.SealResponse{LastOrderedGp: r.Ordered, Unordered: uint64(len(r.Entries)), View: r.View, Amnesiac: r.Amnesiac}
	for _, m := range r.Entries {
		resp.Entries = append(resp.Entries, &pb.RecordMeta{ClientId: m.ID.Client, Seq: m.ID.Seq, Shard: uint32(m.Shard)})
	}
	return resp, nil
}

// StartView opens the view the control plane recorded.
func (s *Server) StartView(_ context.Context, req *pb.StartViewRequest) (*pb.StartViewResponse, error) {
	if err := s.checkCluster(req.GetClusterId()); err != nil {
		return nil, err
	}
	if req.GetState() == nil {
		return &pb.StartViewResponse{Code: pb.Code_INVALID, Message: "no state"}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startViewLocked(req); err != nil {
		return &pb.StartViewResponse{Code: codeOf(err), Message: err.Error()}, nil
	}
	return &pb.StartViewResponse{}, nil
}

// startViewLocked opens the view req names on this replica: the flush of
// the sealed view bound every position below req.Ordered.
func (s *Server) startViewLocked(req *pb.StartViewRequest) error {
	st := req.GetState()
	sv := lazy.StartView{View: st.GetView(), Ordered: req.GetOrdered(), From: req.GetFrom()}
	for _, m := range req.GetFlushed() {
		sv.Flushed = append(sv.Flushed, lazy.RecordID{Client: m.GetClientId(), Seq: m.GetSeq()})
	}
	member := false
	for i, r := range st.GetReplicas() {
		id := s.replicaIDLocked(r.GetId())
		if id == 0 {
			return fmt.Errorf("view %d lists replica %q, which the cluster file does not: %w", st.GetView(), r.GetId(), lazy.ErrBadInput)
		}
		if i == 0 {
			sv.Leader = id
		}
		sv.Replicas = append(sv.Replicas, id)
		member = member || r.GetId() == s.cfg.ID
	}
	if !member {
		return fmt.Errorf("view %d does not list replica %s: %w", st.GetView(), s.cfg.ID, lazy.ErrWrongView)
	}
	started, err := s.seq.Start(sv)
	if err != nil || !started {
		// A start repeated for the view the replica runs changes nothing
		// here either: it cleared the appenders waiting for positions,
		// whose AppendSync then waited for good.
		return err
	}
	s.config = st
	s.startShards = cut.ShardID(req.GetShardsNext())
	if req.GetOrdered() > s.stable {
		s.stable = req.GetOrdered()
		// Not the orderer's advance: nothing to time.
		s.stableAt, s.stableBatchAt = time.Time{}, time.Time{}
		close(s.stableChanged)
		s.stableChanged = make(chan struct{})
	}
	clear(s.waiters)
	return nil
}

// SequencingStatus describes the replica.
func (s *Server) SequencingStatus(_ context.Context, req *pb.SequencingStatusRequest) (*pb.SequencingStatusResponse, error) {
	if err := s.checkCluster(req.GetClusterId()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	view, sealed := s.seq.View()
	return &pb.SequencingStatusResponse{
		Id: s.cfg.ID, View: view, Leader: s.leadsLocked(), Sealed: sealed,
		LastOrderedGp: s.seq.Ordered(), StableGp: s.stable, Unordered: uint64(s.seq.Len()), Amnesiac: s.seq.Amnesiac(),
	}, nil
}
