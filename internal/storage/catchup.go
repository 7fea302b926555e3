package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/metrics"
	"github.com/augur-log/augur/internal/segment"
	"github.com/augur-log/augur/internal/shard"
)

// # Catch-up
//
// A replica whose store holds damaged records copies them back from a
// live replica of its shard: the other servers of its group, which hold
// the same entries at the same local indexes. shard.CatchUp decides what
// to fetch from whom, verifies every entry by checksum, and says what is
// lost; this file only runs its fetches over the Fetch RPC, paces them,
// writes what it says through the core, and shows its progress (Ping's
// health, so `augur status`, and augur_catchup_remaining_records).

// Bounds of a catch-up.
const (
	// fetchBatchBytesMax bounds the entries of one FetchResponse.
	fetchBatchBytesMax = 256 << 10
	// DefaultCatchUpBytesPerSecond is the pace of a catch-up when the
	// configuration names none: fast enough to repair a damaged segment
	// in seconds, slow enough to leave a source most of its disk.
	DefaultCatchUpBytesPerSecond = 32 << 20
	// catchUpBurstBytes is how much a catch-up may read at once after a
	// pause: a few batches.
	catchUpBurstBytes = 4 * fetchBatchBytesMax
)

// Fetch serves another replica's catch-up (see the proto).
func (s *Server) Fetch(req *pb.FetchRequest, stream pb.Replica_FetchServer) error {
	if err := s.checkCluster(req.ClusterId); err != nil {
		return err
	}
	if req.End <= req.First {
		return status.Errorf(codes.InvalidArgument, "fetch: empty range [%d, %d)", req.First, req.End)
	}
	r := s.replica(req.Shard)
	if r == nil {
		return status.Errorf(codes.NotFound, "fetch: shard %d is not held on %s", req.Shard, s.cfg.ID)
	}
	if r.core.Lost() {
		return status.Errorf(codes.FailedPrecondition, "fetch: %v", r.lostStatus())
	}
	if role := r.role(); req.WithRuns && role != rolePrimary && role != roleBackup {
		// A copy out of the configuration may hold a tail the shard
		// replaced: a rejoining copy copies only from a member.
		return status.Errorf(codes.FailedPrecondition, "fetch: shard %d on %s is %v, not in the shard's configuration", req.Shard, s.cfg.ID, role)
	}
	// A rejoin's open tail below this copy's start is served from the
	// start: the asker holds only what the cluster trimmed, and starts its
	// log over there (shard.CatchUp's Rebase). A repair needs its range
	// whole.
	start := r.store.Start()
	if req.First < start && !req.WithRuns {
		return status.Errorf(codes.FailedPrecondition, "fetch: shard %d is trimmed below local index %d on %s", req.Shard, start, s.cfg.ID)
	}
	var (
		first   = max(req.First, start) // where the stream starts
		resp    = &pb.FetchResponse{FirstLocal: first}
		bytes   int
		sent    bool
		sendErr error
	)
	flush := func(next uint64) bool {
		// The first batch goes out even when empty if it starts past the
		// range asked for: the asker learns where this log starts.
		if len(resp.Records) > 0 || !sent && resp.FirstLocal > req.First {
			if sendErr = stream.Send(resp); sendErr != nil {
				return false
			}
			sent = true
		}
		resp, bytes = &pb.FetchResponse{FirstLocal: next}, 0
		return true
	}
	err := r.store.Scan(req.First, func(local uint64, e segment.Entry) bool {
		if local >= req.End {
			return false
		}
		if !sent && len(resp.Records) == 0 {
			// A trim may have moved the start since it was read.
			first, resp.FirstLocal = local, local
		}
		if e.Noops > req.End-local {
			e.Noops = req.End - local
		}
		resp.Records = append(resp.Records, storedRecord(e))
		resp.Checksums = append(resp.Checksums, segment.Checksum(e))
		bytes += len(e.Payload) + len(e.Key) + 32
		if bytes >= fetchBatchBytesMax {
			return flush(local + max(e.Noops, 1))
		}
		return true
	})
	if sendErr != nil {
		return sendErr
	}
	if err != nil {
		if errors.Is(err, segment.ErrDamaged) || errors.Is(err, segment.ErrTrimmed) {
			return status.Errorf(codes.FailedPrecondition, "fetch: shard %d on %s: %v", req.Shard, s.cfg.ID, err)
		}
		return status.Errorf(codes.Internal, "fetch: shard %d on %s: %v", req.Shard, s.cfg.ID, err)
	}
	end := resp.FirstLocal
	for _, rec := range resp.Records {
		end += max(rec.Noops, 1)
	}
	if !flush(0) {
		return sendErr
	}
	if req.WithRuns {
		runsFrom := req.RunsFrom
		if first > req.First {
			// Served from this log's start: the asker's positions start
			// there too.
			runsFrom = max(runsFrom, first)
		}
		return sendRuns(stream, r.store, runsFrom, max(end, req.First))
	}
	return nil
}

// runsBatchMax bounds the runs of one FetchResponse.
const runsBatchMax = 4096

// sendRuns sends the runs of st that assign positions to local indexes
// from from on, up to end (the entries the asker holds once it stored
// what the stream sent).
func sendRuns(stream pb.Replica_FetchServer, st *segment.Store, from, end uint64) error {
	if from >= st.Ordered() {
		return nil
	}
	g, ok := st.GlobalOf(from)
	if !ok {
		return status.Errorf(codes.FailedPrecondition, "fetch: positions of local index %d are trimmed", from)
	}
	resp := &pb.FetchResponse{}
	for _, run := range st.Runs(g) {
		if run.LocalStart+run.Count <= from {
			continue
		}
		if run.LocalStart+run.Count > end {
			break
		}
		resp.Runs = append(resp.Runs, &pb.LocalRun{Cut: run.Cut, CutStart: run.CutStart, CutEnd: run.CutEnd,
			LocalStart: run.LocalStart, GlobalStart: run.GlobalStart, Count: run.Count})
		if len(resp.Runs) == runsBatchMax {
			if err := stream.Send(resp); err != nil {
				return err
			}
			resp = &pb.FetchResponse{}
		}
	}
	if len(resp.Runs) > 0 {
		return stream.Send(resp)
	}
	return nil
}

// catchUpShow is what health shows of a replica's catch-up.
type catchUpShow struct {
	mu       sync.Mutex
	progress *pb.CatchUpProgress // nil when none ran
}

func (c *catchUpShow) set(p *pb.CatchUpProgress) {
	c.mu.Lock()
	c.progress = p
	c.mu.Unlock()
}

// get returns the progress last set, with the global positions of its
// lost ranges as store knows them now (cuts may order them after the
// catch-up ended), or nil.
func (c *catchUpShow) get(store *segment.Store) *pb.CatchUpProgress {
	c.mu.Lock()
	p := c.progress
	c.mu.Unlock()
	if p == nil || len(p.Lost) == 0 {
		return p
	}
	p = proto.Clone(p).(*pb.CatchUpProgress)
	for _, lr := range p.Lost {
		lr.GlobalFirst, lr.HasGlobal = store.GlobalOf(lr.First)
	}
	return p
}

// catchUpSources are the servers a replica of this server copies from:
// the rest of its group, which holds every shard the group formed.
func (s *Server) catchUpSources() []Peer {
	var out []Peer
	for _, p := range s.cfg.Group {
		if p.ID != s.cfg.ID {
			out = append(out, p)
		}
	}
	return out
}

// repair runs r's catch-up of its damaged ranges until every one is
// repaired or found lost, or the server stops.
func (r *replica) repair(ctx context.Context) {
	gaps := r.core.Gaps()
	if len(gaps) == 0 {
		return
	}
	srcs := r.srv.catchUpSources()
	cu, err := shard.NewCatchUp(shard.CatchUpConfig{Gaps: gaps, Sources: len(srcs),
		BytesPerSecond: r.srv.cfg.catchUpBytesPerSecond(), BurstBytes: catchUpBurstBytes})
	if err != nil {
		r.log.Error("catch-up", "err", err)
		return
	}
	remaining := metrics.CatchUpRemaining.WithLabelValues(r.srv.cfg.ID, strconv.FormatUint(uint64(r.id), 10))
	show := func() {
		p := cu.Progress()
		out := &pb.CatchUpProgress{Fetched: p.Fetched, Total: p.Total, Stalled: p.Stalled, Done: cu.Done()}
		if p.Source >= 0 {
			out.Source = srcs[p.Source].ID
		}
		for _, g := range p.Lost {
			out.Lost = append(out.Lost, &pb.LostRange{First: g.First, End: g.End})
		}
		r.catchUp.set(out)
		remaining.Set(float64(p.Total - p.Fetched))
	}
	r.log.Info("catch-up: repairing damaged records from a live replica", "ranges", len(gaps), "sources", len(srcs))
	for !cu.Done() {
		f, ok := cu.Next()
		show()
		if !ok {
			// Every source failed since the last progress: ask again in a
			// while, as one may come back.
			if !r.srv.sleep(retryInterval) {
				return
			}
			cu.Retry()
			continue
		}
		if err := r.fetch(ctx, cu, srcs[f.Source], f, nil, show); err != nil {
			if ctx.Err() != nil || errors.Is(err, errStoreFailed) {
				show()
				return
			}
			r.log.Warn("catch-up: fetch failed", "source", srcs[f.Source].ID, "first", f.First, "end", f.End, "err", err)
		}
	}
	show()
	r.srv.setDamaged(r)
	for _, g := range cu.Lost() {
		r.log.Error("catch-up: no live replica holds these records; they stay refused here", "first", g.First, "end", g.End)
	}
	if len(cu.Lost()) == 0 {
		r.log.Info("catch-up: every damaged record repaired")
	}
}

// fetch runs one of cu's fetches on source, and tells cu how it ended.
// With runsFrom, it asks for the source's positions from that local
// index on too, and assigns them through the core (a rejoin).
func (r *replica) fetch(ctx context.Context, cu *shard.CatchUp, src Peer, f shard.Fetch, runsFrom *uint64, show func()) (err error) {
	lacks := false
	defer func() {
		if (err != nil || lacks) && !errors.Is(err, errStoreFailed) {
			cu.Ended(lacks)
		}
	}()
	cc, err := r.srv.conn(src.Addr)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &pb.FetchRequest{ClusterId: r.srv.cfg.ClusterID, Shard: r.id, First: f.First, End: f.End}
	if runsFrom != nil {
		req.WithRuns, req.RunsFrom = true, *runsFrom
	}
	stream, err := pb.NewReplicaClient(cc).Fetch(fctx, req)
	if err != nil {
		return err
	}
	for {
		if at := cu.ReadyAt(); !at.IsZero() {
			if err := sleepUntil(ctx, at); err != nil {
				return err
			}
		}
		resp, err := stream.Recv()
		if err == io.EOF {
			// A source that ends before the range did holds no more (the
			// end of an open gap's range).
			cu.StreamEnded()
			return nil
		}
		if err != nil {
			switch status.Code(err) {
			case codes.FailedPrecondition, codes.NotFound, codes.OutOfRange, codes.InvalidArgument:
				lacks = true
			}
			return err
		}
		if len(resp.Runs) > 0 {
			if err := r.assignFetched(ctx, resp.Runs); err != nil {
				lacks = true
				return err
			}
			continue
		}
		entries := make([]segment.Entry, len(resp.Records))
		size := 0
		for i, rec := range resp.Records {
			entries[i] = entryOf(rec)
			size += len(entries[i].Payload) + len(entries[i].Key) + 32
		}
		w, ok, err := cu.Received(time.Now(), resp.FirstLocal, entries, resp.Checksums, size)
		if err != nil {
			lacks = true
			return err
		}
		if ok {
			if err := r.core.Repair(w); errors.Is(err, shard.ErrRejoined) {
				return err
			} else if err != nil {
				r.log.Error("catch-up: store the repaired records", "err", err)
				return fmt.Errorf("%w: %v", errStoreFailed, err)
			}
			r.srv.setDamaged(r)
			r.broadcast()
		}
		show()
	}
}

// sleepUntil waits until at, or until ctx ends.
func sleepUntil(ctx context.Context, at time.Time) error {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// setDamaged exports r's count of damaged records.
func (s *Server) setDamaged(r *replica) {
	metrics.DamagedRecords.WithLabelValues(s.cfg.ID, strconv.FormatUint(uint64(r.id), 10)).Set(float64(damagedCount(r.store)))
}

// errStoreFailed ends a catch-up: its store failed a write, so the
// records stay refused.
var errStoreFailed = errors.New("catch-up: the store failed a write")
