package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
)

// Reads on a lazy cluster: a position's shard comes from the position
// table every shard holds, fetched in chunks and cached; the shard serves
// the position once stable-gp covers it. A position past the table (not
// stable yet) is asked of any shard, which holds the read until stable-gp
// passes it and then names the shard that has it.

// lazyMapChunkRuns is how many runs of the position table one fetch asks.
const lazyMapChunkRuns = 1024

// lazyMapRunsMax bounds the cached position table.
const lazyMapRunsMax = 1 << 16

// positionRun says positions [from, end) live on shard.
type positionRun struct {
	from, end uint64
	shard     uint32
}

// lazyReads counts the reads of a lazy cluster by the path they took.
type lazyReads struct {
	fast, slow atomic.Uint64
}

// LazyReadPaths returns how many lazy reads the shards served at once
// (fast: stable-gp covered them) and how many waited for stable-gp.
func (c *Client) LazyReadPaths() (fast, slow uint64) {
	return c.lazyReadStats.fast.Load(), c.lazyReadStats.slow.Load()
}

// lazyShardOf returns the cached shard of pos.
func (c *Client) lazyShardOf(pos uint64) (uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	runs := c.lazyMap
	i := sort.Search(len(runs), func(i int) bool { return runs[i].end > pos })
	if i < len(runs) && runs[i].from <= pos {
		return runs[i].shard, true
	}
	return 0, false
}

// locateLazy returns the shard of pos from the cache, fetching the chunk
// of the table from pos on if needed; ok is false when pos is not stable
// yet.
func (c *Client) locateLazy(ctx context.Context, pos uint64) (shard uint32, ok bool, err error) {
	if sh, ok := c.lazyShardOf(pos); ok {
		return sh, true, nil
	}
	var last error
	for _, sh := range growingFirst(c.cachedStatus().GetShards()) {
		for _, r := range sh.GetReplicas() {
			cc, err := c.conn(r.Addr)
			if err != nil {
				last = err
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
			resp, err := pb.NewLazyShardClient(cc).Mapping(cctx, &pb.MappingRequest{ClusterId: c.cfg.ClusterID, From: pos, Max: lazyMapChunkRuns})
			cancel()
			if err != nil {
				last = err
				if ctx.Err() != nil {
					return 0, false, ctx.Err()
				}
				continue
			}
			c.cacheRuns(resp.GetRuns())
			sh, ok := c.lazyShardOf(pos)
			return sh, ok, nil
		}
	}
	return 0, false, fmt.Errorf("augur: no shard replica answered for the position table: %w", last)
}

// growingFirst orders shards for a position table lookup: the shards that
// may still grow first, since a finalized shard's table ends where it was
// finalized (and its replicas may all be gone).
func growingFirst(shards []*pb.ShardInfo) []*pb.ShardInfo {
	out := make([]*pb.ShardInfo, 0, len(shards))
	for _, sh := range shards {
		if sh.GetState() != pb.ShardState_SHARD_FINALIZED {
			out = append(out, sh)
		}
	}
	for _, sh := range shards {
		if sh.GetState() == pb.ShardState_SHARD_FINALIZED {
			out = append(out, sh)
		}
	}
	return out
}

// cacheRuns adds fetched runs to the cached table, keeping it sorted and
// bounded (the oldest runs go first).
func (c *Client) cacheRuns(runs []*pb.PositionRun) {
	if len(runs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range runs {
		if r.GetEnd() <= r.GetFrom() {
			continue
		}
		pr := positionRun{from: r.GetFrom(), end: r.GetEnd(), shard: r.GetShard()}
		i := sort.Search(len(c.lazyMap), func(i int) bool { return c.lazyMap[i].end > pr.from })
		if i < len(c.lazyMap) && c.lazyMap[i].from <= pr.from {
			continue // known already (the table never changes below stable-gp)
		}
		c.lazyMap = append(c.lazyMap, positionRun{})
		copy(c.lazyMap[i+1:], c.lazyMap[i:])
		c.lazyMap[i] = pr
	}
	if over := len(c.lazyMap) - lazyMapRunsMax; over > 0 {
		c.lazyMap = append(c.lazyMap[:0], c.lazyMap[over:]...)
	}
}

// readLazy returns the records at the n positions from from on, skipping
// no-ops, once every position of the range is stable (bounded by ctx).
func (c *Client) readLazy(ctx context.Context, from uint64, n int) ([]Entry, error) {
	end := from + uint64(n)
	var out []Entry
	pos := from
	var hint uint32
	haveHint := false
	for pos < end {
		shard, ok := hint, haveHint
		if !ok {
			var err error
			if shard, ok, err = c.locateLazy(ctx, pos); err != nil {
				return out, err
			}
		}
		haveHint = false
		var resp *pb.LazyReadResponse
		var err error
		if ok {
			resp, err = c.lazyReadAt(ctx, shard, pos, end-pos)
		} else {
			// Not stable yet: a shard that may still grow holds the read
			// until it is, then names the shard that has it.
			resp, shard, err = c.lazyReadGrowing(ctx, pos, end-pos)
		}
		if err != nil {
			return out, fmt.Errorf("augur: read %d..%d: %d records read before: %w", from, end, len(out), err)
		}
		for _, e := range resp.GetEntries() {
			switch {
			case e.GetRecord() != nil:
				out = append(out, Entry{Position: e.GetPosition(), Shard: e.GetShard(),
					Record: Record{Key: e.GetRecord().GetKey(), Tags: e.GetRecord().GetTags(), Payload: e.GetRecord().GetPayload()}})
				pos = e.GetPosition() + 1
			case e.GetShard() == shard:
				pos = e.GetPosition() + e.GetSkip()
			default:
				// Another shard's position: read it there.
				pos, hint, haveHint = e.GetPosition(), e.GetShard(), true
			}
			if haveHint {
				break
			}
		}
	}
	return out, nil
}

// lazyReadGrowing reads from from on at a shard that may still grow (a
// finalized shard's table ends where it was finalized, so it would hold
// the read for good); when none answers, it reads the shard table again
// (the cached one may not know a shard was finalized) and tries once more.
func (c *Client) lazyReadGrowing(ctx context.Context, from, n uint64) (*pb.LazyReadResponse, uint32, error) {
	last := ErrNoLiveShard
	for attempt := range 2 {
		if attempt > 0 {
			if _, err := c.refresh(ctx); err != nil {
				return nil, 0, errors.Join(last, err)
			}
		}
		for _, sh := range c.cachedStatus().GetShards() {
			if sh.GetState() == pb.ShardState_SHARD_FINALIZED {
				continue
			}
			resp, err := c.lazyReadAt(ctx, sh.GetId(), from, n)
			if err == nil {
				return resp, sh.GetId(), nil
			}
			if ctx.Err() != nil {
				return nil, 0, err
			}
			last = err
		}
	}
	return nil, 0, last
}

// lazyReadAt reads positions from from on at a replica of shard.
func (c *Client) lazyReadAt(ctx context.Context, shard uint32, from, n uint64) (*pb.LazyReadResponse, error) {
	info := c.shardInfo(shard)
	if info == nil {
		if _, err := c.refresh(ctx); err != nil {
			return nil, err
		}
		if info = c.shardInfo(shard); info == nil {
			return nil, fmt.Errorf("%w: %d", ErrUnknownShard, shard)
		}
	}
	n = min(n, lazyReadChunk)
	var last error
	// Spread reads over the replicas; each serves what stable-gp covers.
	start := int(c.rr.Add(1))
	for k := range info.GetReplicas() {
		r := info.GetReplicas()[(start+k)%len(info.GetReplicas())]
		cc, err := c.conn(r.Addr)
		if err != nil {
			last = err
			continue
		}
		resp, err := pb.NewLazyShardClient(cc).Read(ctx, &pb.LazyReadRequest{ClusterId: c.cfg.ClusterID, Shard: shard, From: from, Max: uint32(n)})
		if err == nil {
			if resp.GetSlow() {
				c.lazyReadStats.slow.Add(1)
			} else {
				c.lazyReadStats.fast.Add(1)
			}
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		switch status.Code(err) {
		case codes.OutOfRange:
			return nil, fmt.Errorf("%w: %s", ErrTrimmed, status.Convert(err).Message())
		case codes.FailedPrecondition:
			return nil, translate(err)
		}
		last = err
	}
	return nil, errors.Join(fmt.Errorf("augur: no replica of shard %d answered", shard), last)
}

// lazyReadChunk bounds the positions one read asks.
const lazyReadChunk = 1024

// checkTailLazy asks the sequencing leader for the durable tail.
func (c *Client) checkTailLazy(ctx context.Context, st *pb.LazyState) (uint64, error) {
	var last error
	for _, r := range st.GetReplicas() {
		cc, err := c.conn(r.Addr)
		if err != nil {
			last = err
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		resp, err := pb.NewSequencingClient(cc).CheckTail(cctx, &pb.CheckTailRequest{ClusterId: c.cfg.ClusterID})
		cancel()
		if err != nil {
			last = err
			continue
		}
		if resp.GetNotLeader() {
			last = fmt.Errorf("sequencing replica %s does not lead view %d", r.Id, resp.GetView())
			continue
		}
		return resp.GetTail(), nil
	}
	return 0, fmt.Errorf("augur: no sequencing leader answered: %w", last)
}

// SequencingStatus asks each sequencing replica of a lazy cluster how it
// stands (view, role, ordered and stable ends); a replica that does not
// answer has a nil entry and its error.
func (c *Client) SequencingStatus(ctx context.Context) ([]*pb.SequencingStatusResponse, []error) {
	st := c.lazyState()
	out := make([]*pb.SequencingStatusResponse, len(st.GetReplicas()))
	errs := make([]error, len(st.GetReplicas()))
	for i, r := range st.GetReplicas() {
		cc, err := c.conn(r.Addr)
		if err != nil {
			errs[i] = err
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		out[i], errs[i] = pb.NewSequencingClient(cc).SequencingStatus(cctx, &pb.SequencingStatusRequest{ClusterId: c.cfg.ClusterID})
		cancel()
	}
	return out, errs
}
