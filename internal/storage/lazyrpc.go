package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
	"github.com/augur-log/augur/internal/segment"
	"github.com/augur-log/augur/internal/stagetime"
)

// lazyStoreInflightMax bounds the batches of one Store stream stored and
// waiting for their fsync.
const lazyStoreInflightMax = 256

// lazyServer is the LazyShard service of a storage server.
type lazyServer struct {
	pb.UnimplementedLazyShardServer
	s *Server
}

// lazyShardFor returns the replica of shard id, waiting (bounded by ctx)
// for a shard the server has not seen in its copy of the shard table yet.
func (s *Server) lazyShardFor(ctx context.Context, id uint32) (*lazyShard, error) {
	for {
		ls, err := s.lazyShard(cut.ShardID(id))
		if err == nil || status.Code(err) != codes.NotFound {
			return ls, err
		}
		s.mu.Lock()
		changed := s.viewChanged
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, err
		}
	}
}

// Store takes a client's stream of unordered records. Records are stored
// as they arrive; their answers go out, in order, once durable, from a
// second goroutine, so the stream keeps many batches in flight.
func (l *lazyServer) Store(stream pb.LazyShard_StoreServer) error {
	s := l.s
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	if s.cfg.Sync != segment.SyncGroup {
		// Records are acknowledged once written: answer each batch at
		// once, from this goroutine.
		for {
			req, err := stream.Recv()
			if err != nil {
				return nil
			}
			at := stagetime.Now()
			resp, _ := l.store(req)
			if err := stream.Send(resp.resp); err != nil {
				return err
			}
			stagetime.Since(stagetime.LazyStore, at)
		}
	}
	queue := make(chan lazyPending, lazyStoreInflightMax)
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case p := <-queue:
				if p.ls != nil {
					if err := p.ls.awaitDurable(ctx, p.need); err != nil {
						for _, a := range p.resp.Acks {
							if a.Code == pb.Code_OK {
								a.Code, a.Message = pb.Code_UNAVAILABLE, err.Error()
							}
						}
					}
				}
				if err := stream.Send(p.resp); err != nil {
					sendErr <- err
					cancel()
					return
				}
				stagetime.Since(stagetime.LazyStore, p.at)
			case <-ctx.Done():
				sendErr <- nil
				return
			}
		}
	}()
	for {
		req, err := stream.Recv()
		if err != nil {
			cancel()
			return <-sendErr
		}
		at := stagetime.Now()
		p, _ := l.store(req)
		p.at = at
		select {
		case queue <- p:
		case <-ctx.Done():
			return <-sendErr
		}
	}
}

// lazyPending is a Store batch stored and waiting for its fsync.
type lazyPending struct {
	ls   *lazyShard
	need uint64
	resp *pb.LazyStoreResponse
	// at is when the batch arrived, when stages are timed.
	at time.Time
}

// store stores one Store batch and returns its answer, to send once the
// shard's log holds need entries durably.
func (l *lazyServer) store(req *pb.LazyStoreRequest) (lazyPending, error) {
	s := l.s
	resp := &pb.LazyStoreResponse{}
	code, msg := pb.Code_OK, ""
	var ls *lazyShard
	var err error
	if err = s.checkCluster(req.GetClusterId()); err != nil {
		code, msg = pb.Code_WRONG_CLUSTER, err.Error()
	} else if ls, err = s.lazyShard(cut.ShardID(req.GetShard())); err != nil {
		code, msg = pb.Code_UNKNOWN_SHARD, err.Error()
	}
	p := lazyPending{resp: resp}
	if code != pb.Code_OK {
		for _, e := range req.GetEntries() {
			resp.Acks = append(resp.Acks, &pb.AppendAck{Seq: e.GetSeq(), Shard: req.GetShard(), Code: code, Message: msg})
		}
		return p, err
	}
	p.ls = ls
	resp.Acks, p.need = ls.accept(req)
	return p, nil
}

// Order takes the sequencing leader's mapping for one shard (primary) and
// answers once every replica holds its placement.
func (l *lazyServer) Order(ctx context.Context, req *pb.OrderRequest) (*pb.OrderResponse, error) {
	s := l.s
	if err := s.checkCluster(req.GetClusterId()); err != nil {
		return nil, err
	}
	ls, err := s.lazyShardFor(ctx, req.GetShard())
	if err != nil {
		return &pb.OrderResponse{Code: pb.Code_UNKNOWN_SHARD, Message: err.Error()}, nil
	}
	at := stagetime.Now()
	m := lazy.Mapping{View: req.GetView(), From: req.GetFirst()}
	for _, r := range req.GetIds() {
		m.Records = append(m.Records, lazy.Meta{ID: lazy.RecordID{Client: r.GetClientId(), Seq: r.GetSeq()}, Shard: cut.ShardID(r.GetShard())})
	}
	ls.mu.Lock()
	var out lazy.ShardOutput[*lazyRead]
	if err := ls.core.Map(m, time.Now(), &out); err != nil {
		ls.mu.Unlock()
		return &pb.OrderResponse{Code: lazyCode(err), Message: err.Error()}, nil
	}
	err = ls.handleLocked(&out)
	ls.mu.Unlock()
	if err == nil {
		err = ls.flush()
	}
	if err != nil {
		return &pb.OrderResponse{Code: pb.Code_UNAVAILABLE, Message: err.Error()}, nil
	}
	stagetime.Since(stagetime.LazyPlacePrimary, at)
	placed := stagetime.Now()
	ls.mu.Lock()
	for ls.acked < m.End() {
		ch := ls.ackedCh
		ls.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		ls.mu.Lock()
	}
	end := ls.acked
	ls.mu.Unlock()
	stagetime.Since(stagetime.LazyPlaceBackups, placed)
	return &pb.OrderResponse{End: end, View: req.GetView()}, nil
}

// Place takes the primary's placement (backup): it fetches the data it
// lacks from the primary, persists the placement and answers.
func (l *lazyServer) Place(ctx context.Context, req *pb.Placement) (*pb.PlaceResponse, error) {
	s := l.s
	if err := s.checkCluster(req.GetClusterId()); err != nil {
		return nil, err
	}
	ls, err := s.lazyShardFor(ctx, req.GetShard())
	if err != nil {
		return &pb.PlaceResponse{Code: pb.Code_UNKNOWN_SHARD, Message: err.Error()}, nil
	}
	at := stagetime.Now()
	p := placementFromProto(req)
	ls.mu.Lock()
	var out lazy.ShardOutput[*lazyRead]
	err = ls.core.Place(p, &out)
	fetch := out.Fetch
	if err == nil {
		err = ls.handleLocked(&out)
	}
	ls.mu.Unlock()
	if err == nil {
		err = ls.flush()
	}
	if err != nil {
		return &pb.PlaceResponse{Code: lazyCode(err), Message: err.Error()}, nil
	}
	if len(fetch) > 0 {
		if out, err = ls.fetchFromPrimary(ctx, fetch); err != nil {
			return &pb.PlaceResponse{Code: pb.Code_UNAVAILABLE, Message: err.Error()}, nil
		}
	}
	if !out.Applied {
		return &pb.PlaceResponse{Code: pb.Code_PENDING, Message: "placement not applied"}, nil
	}
	stagetime.Since(stagetime.LazyBackupPlace, at)
	return &pb.PlaceResponse{AppliedEnd: out.AppliedEnd, AppliedSeq: out.AppliedSeq, AppliedTerm: out.AppliedTerm}, nil
}

// fetchFromPrimary copies the records ids from the primary and hands them
// to the core; the output is the last Copy's (which applies the waiting
// placement once nothing is missing).
func (ls *lazyShard) fetchFromPrimary(ctx context.Context, ids []lazy.RecordID) (lazy.ShardOutput[*lazyRead], error) {
	var last lazy.ShardOutput[*lazyRead]
	ls.mu.Lock()
	addr := ls.primaryAddr
	ls.mu.Unlock()
	cc, err := ls.s.conn(addr)
	if err != nil {
		return last, err
	}
	req := &pb.LazyFetchRequest{ClusterId: ls.s.cfg.ClusterID, Shard: uint32(ls.id)}
	for _, id := range ids {
		req.Ids = append(req.Ids, &pb.RecordMeta{ClientId: id.Client, Seq: id.Seq})
	}
	resp, err := pb.NewLazyShardClient(cc).Fetch(ctx, req)
	if err != nil {
		return last, fmt.Errorf("fetch %d records from primary: %w", len(ids), err)
	}
	last, err = ls.copyFetched(resp.GetRecords())
	if err != nil {
		return last, err
	}
	if !last.Applied {
		return last, errors.New("the primary did not return every record the placement binds")
	}
	// The copies and the placement must be durable before the backup
	// says it holds them.
	if syncs(ls.s.cfg.Sync) {
		if err := ls.store.SyncRecords(); err != nil {
			return last, err
		}
	}
	return last, ls.flush()
}

// copyFetched stores the records fetched from the primary and hands them
// to the core; it returns the output that applied the waiting placement.
func (ls *lazyShard) copyFetched(records []*pb.StoredRecord) (lazy.ShardOutput[*lazyRead], error) {
	var last lazy.ShardOutput[*lazyRead]
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, r := range records {
		var out lazy.ShardOutput[*lazyRead]
		id := lazy.RecordID{Client: r.GetClientId(), Seq: r.GetSeq()}
		local, fresh, err := ls.core.Copy(id, &out)
		if err != nil {
			return last, err
		}
		if fresh {
			if local != ls.store.Len() {
				panic(fmt.Sprintf("storage: lazy shard %d: core copied a record at %d, log ends at %d", ls.id, local, ls.store.Len()))
			}
			rec := r.GetRecord()
			if _, err := ls.store.Append([]segment.Entry{{ClientID: id.Client, Seq: id.Seq, Key: rec.GetKey(), Tags: rec.GetTags(), Payload: rec.GetPayload()}}); err != nil {
				panic(fmt.Sprintf("storage: lazy shard %d: append: %v", ls.id, err))
			}
		}
		if err := ls.handleLocked(&out); err != nil {
			return last, err
		}
		if out.Applied {
			last = out
		}
	}
	return last, nil
}

// Fetch returns the data of the records a backup asks for (primary).
func (l *lazyServer) Fetch(ctx context.Context, req *pb.LazyFetchRequest) (*pb.LazyFetchResponse, error) {
	s := l.s
	if err := s.checkCluster(req.GetClusterId()); err != nil {
		return nil, err
	}
	ls, err := s.lazyShard(cut.ShardID(req.GetShard()))
	if err != nil {
		return nil, err
	}
	resp := &pb.LazyFetchResponse{}
	for _, m := range req.GetIds() {
		id := lazy.RecordID{Client: m.GetClientId(), Seq: m.GetSeq()}
		ls.mu.Lock()
		local, ok := ls.core.LocalOf(id)
		ls.mu.Unlock()
		if !ok {
			continue
		}
		e, err := ls.store.Read(local)
		if err != nil {
			return nil, status.Errorf(codes.DataLoss, "shard %d: record %v at %d: %v", ls.id, id, local, err)
		}
		resp.Records = append(resp.Records, &pb.StoredRecord{ClientId: e.ClientID, Seq: e.Seq, Record: &pb.Record{Key: e.Key, Tags: e.Tags, Payload: e.Payload}})
	}
	return resp, nil
}

// Stable takes stable-gp for every lazy shard this server holds.
func (l *lazyServer) Stable(ctx context.Context, req *pb.StableRequest) (*pb.StableResponse, error) {
	s := l.s
	if err := s.checkCluster(req.GetClusterId()); err != nil {
		return nil, err
	}
	s.mu.Lock()
	trim := s.view.trim
	var ids []cut.ShardID
	for id, info := range s.view.shards {
		for _, r := range info.GetReplicas() {
			if r.GetId() == s.cfg.ID {
				ids = append(ids, id)
			}
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		ls, err := s.lazyShard(id)
		if err != nil {
			continue
		}
		ls.mu.Lock()
		var out lazy.ShardOutput[*lazyRead]
		ls.core.Stable(lazy.StableGP{View: req.GetView(), Stable: req.GetStableGp()}, &out)
		// A trim point above what the replica could read when it came
		// takes effect as stable-gp reaches it.
		ls.core.Trim(trim)
		err = ls.handleLocked(&out)
		ls.mu.Unlock()
		if err == nil {
			err = ls.flush()
		}
		if err != nil {
			return nil, status.Errorf(codes.Internal, "shard %d: %v", id, err)
		}
	}
	return &pb.StableResponse{}, nil
}

// Mapping returns the position table from req.From on, up to stable-gp.
func (l *lazyServer) Mapping(ctx context.Context, req *pb.MappingRequest) (*pb.MappingResponse, error) {
	s := l.s
	if err := s.checkCluster(req.GetClusterId()); err != nil {
		return nil, err
	}
	ls, err := s.anyLazyShard()
	if err != nil {
		return nil, err
	}
	max := int(req.GetMax())
	if max <= 0 || max > lazyMappingRunsMax {
		max = lazyMappingRunsMax
	}
	ls.mu.Lock()
	runs := ls.core.Locate(req.GetFrom(), max)
	resp := &pb.MappingResponse{StableGp: ls.core.Readable()}
	ls.mu.Unlock()
	for _, r := range runs {
		resp.Runs = append(resp.Runs, &pb.PositionRun{From: r.From, End: r.End, Shard: uint32(r.Shard)})
	}
	return resp, nil
}

// anyLazyShard returns a lazy shard this server holds: each holds the
// whole position table.
func (s *Server) anyLazyShard() (*lazyShard, error) {
	s.mu.Lock()
	var id cut.ShardID
	found := false
	for sid, info := range s.view.shards {
		for _, r := range info.GetReplicas() {
			if r.GetId() == s.cfg.ID && (!found || sid < id) {
				id, found = sid, true
			}
		}
	}
	s.mu.Unlock()
	if !found {
		return nil, status.Errorf(codes.Unavailable, "%s holds no shard yet", s.cfg.ID)
	}
	return s.lazyShard(id)
}

// Read answers positions from req.From on: the first waits for stable-gp
// (the slow path) as long as the caller's deadline allows; the rest are
// those readable at once.
func (l *lazyServer) Read(ctx context.Context, req *pb.LazyReadRequest) (*pb.LazyReadResponse, error) {
	s := l.s
	if err := s.checkCluster(req.GetClusterId()); err != nil {
		return nil, err
	}
	ls, err := s.lazyShardFor(ctx, req.GetShard())
	if err != nil {
		return nil, err
	}
	n := uint64(req.GetMax())
	if n == 0 || n > lazyReadMax {
		n = lazyReadMax
	}
	w := &lazyRead{answer: make(chan lazy.ReadAnswer[*lazyRead], 1)}
	ls.mu.Lock()
	var out lazy.ShardOutput[*lazyRead]
	err = ls.core.Read(w, req.GetFrom(), &out)
	if err == nil {
		err = ls.handleLocked(&out)
	}
	ls.mu.Unlock()
	if err != nil {
		return nil, lazyReadStatus(err)
	}
	resp := &pb.LazyReadResponse{}
	var first lazy.ReadAnswer[*lazyRead]
	select {
	case first = <-w.answer:
	default:
		resp.Slow = true
		select {
		case first = <-w.answer:
		case <-ctx.Done():
			ls.mu.Lock()
			ls.core.Cancel(w)
			ls.mu.Unlock()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	answers := []lazy.ReadAnswer[*lazyRead]{first}
	ls.mu.Lock()
	readable := ls.core.Readable()
	for pos := req.GetFrom() + 1; pos < req.GetFrom()+n && pos < readable; pos++ {
		var out lazy.ShardOutput[*lazyRead]
		if err := ls.core.Read(w, pos, &out); err != nil || len(out.Reads) == 0 {
			break
		}
		answers = append(answers, out.Reads...)
	}
	resp.StableGp = ls.core.StableEnd()
	ls.mu.Unlock()
	for _, a := range answers {
		e, err := ls.entryOf(a)
		if err != nil {
			return nil, err
		}
		resp.Entries = appendSpecEntry(resp.Entries, e)
	}
	return resp, nil
}

// entryOf turns a read answer into a subscription entry: the record, or a
// one-position skip (a no-op, or another shard's position).
func (ls *lazyShard) entryOf(a lazy.ReadAnswer[*lazyRead]) (*pb.SpecEntry, error) {
	if a.Shard != ls.id || a.Noop {
		return &pb.SpecEntry{Position: a.Pos, Shard: uint32(a.Shard), Skip: 1}, nil
	}
	e, err := ls.store.Read(a.Local)
	if err != nil {
		return nil, status.Errorf(codes.DataLoss, "shard %d: position %d at local %d: %v", ls.id, a.Pos, a.Local, err)
	}
	return &pb.SpecEntry{Position: a.Pos, Shard: uint32(ls.id), Record: &pb.Record{Key: e.Key, Tags: e.Tags, Payload: e.Payload}}, nil
}

// appendSpecEntry appends e, merging consecutive skips of one shard into
// one run.
func appendSpecEntry(es []*pb.SpecEntry, e *pb.SpecEntry) []*pb.SpecEntry {
	if e.Record == nil && len(es) > 0 {
		last := es[len(es)-1]
		if last.Record == nil && last.Shard == e.Shard && last.Position+last.Skip == e.Position {
			last.Skip += e.Skip
			return es
		}
	}
	return append(es, e)
}

func lazyReadStatus(err error) error {
	switch {
	case errors.Is(err, lazy.ErrTrimmed):
		return status.Error(codes.OutOfRange, err.Error())
	case errors.Is(err, lazy.ErrBusy):
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

// subscribeLazy streams shard id's view of the order from req.From on:
// every stable position, as its record (if the shard holds it and the
// filter keeps it) or a skip naming the position's shard, with confirmed
// set to the end of the positions sent. Subscribers merge the shards'
// streams by position (the lazy merger).
func (s *Server) subscribeLazy(req *pb.SubscribeRequest, stream pb.Log_SubscribeServer) error {
	ctx := stream.Context()
	ls, err := s.lazyShardFor(ctx, req.GetShard())
	if err != nil {
		return err
	}
	f := newFilter(req.GetFilter())
	next := req.GetFrom()
	w := &lazyRead{answer: make(chan lazy.ReadAnswer[*lazyRead], 1)}
	for {
		ls.mu.Lock()
		changed := ls.readableCh
		readable := ls.core.Readable()
		var answers []lazy.ReadAnswer[*lazyRead]
		var skipRuns []lazy.Run
		if next < readable {
			for _, run := range ls.core.Locate(next, lazySubscribeBatchMax) {
				if len(answers) >= lazySubscribeBatchMax {
					break
				}
				if run.Shard != ls.id {
					skipRuns = append(skipRuns, run)
					answers = append(answers, lazy.ReadAnswer[*lazyRead]{Pos: run.From, Shard: run.Shard})
					continue
				}
				for p := run.From; p < run.End && len(answers) < lazySubscribeBatchMax; p++ {
					var out lazy.ShardOutput[*lazyRead]
					if err := ls.core.Read(w, p, &out); err != nil {
						ls.mu.Unlock()
						return lazyReadStatus(err)
					}
					answers = append(answers, out.Reads...)
				}
			}
		}
		ls.mu.Unlock()
		if len(answers) > 0 {
			resp := &pb.SubscribeResponse{}
			k := 0
			for _, a := range answers {
				var e *pb.SpecEntry
				if a.Shard != ls.id {
					run := skipRuns[k]
					k++
					e = &pb.SpecEntry{Position: run.From, Shard: uint32(run.Shard), Skip: run.End - run.From}
				} else if e, err = ls.entryOf(a); err != nil {
					return err
				} else if e.Record != nil && !f.match(segment.Entry{Key: e.Record.Key, Tags: e.Record.Tags}) {
					e = &pb.SpecEntry{Position: a.Pos, Shard: uint32(ls.id), Skip: 1}
				}
				resp.Entries = appendSpecEntry(resp.Entries, e)
			}
			last := resp.Entries[len(resp.Entries)-1]
			next = last.Position + max(last.Skip, 1)
			resp.Confirmed = next
			if err := stream.Send(resp); err != nil {
				return err
			}
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}
