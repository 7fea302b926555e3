package storage

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/metrics"
	"github.com/augur-log/augur/internal/segment"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// # Damaged records
//
// A store lists the records it found damaged when it was opened (see
// segment's damage.go). Until its catch-up (catchup.go) copies them back
// from a live replica, this server refuses to serve them: a read that
// reaches one fails with codes.Unavailable and a message naming the shard,
// the range and "damaged on this replica", which clients take as "ask
// another replica" (client.followShard tries the next replica on any
// error but OutOfRange; Resolve answers PENDING for what it cannot see,
// and the client asks the next replica). Everything else the replica
// holds is served as usual, and the count of damaged records is exported
// per shard as augur_damaged_records. Records no live replica holds stay
// refused, and Ping's health lists them as lost.
//
// A copy that missed records the shard ordered (the core marks it Lost)
// serves none of the shard, with the same kind of refusal (lostStatus),
// and augur_replica_lost says so. Ping carries both states (health), and
// `augur status` asks every replica for them: the storage servers know
// them, the ordering layer does not.

// damagedStatus turns an error that reached a damaged record of r's store
// into the status a reader gets, and returns other errors unchanged.
func (r *replica) damagedStatus(err error) error {
	var de *segment.DamagedError
	if !errors.As(err, &de) {
		return err
	}
	where := ""
	if g, ok := r.store.GlobalOf(de.Range.First); ok {
		where = fmt.Sprintf(" (global positions from %d)", g)
	}
	return status.Errorf(codes.Unavailable, "shard %d: local records [%d, %d)%s damaged on this replica (%s); read another replica",
		r.id, de.Range.First, de.Range.End, where, r.srv.cfg.ID)
}

// lostStatus is the status a reader of r gets once r's copy is lost: it
// missed records the shard ordered (a torn tail dropped records a cut had
// ordered, or a snapshot skipped cuts it needed), so none of it is served.
func (r *replica) lostStatus() error {
	return status.Errorf(codes.Unavailable, "shard %d: the copy on this replica (%s) missed records the shard ordered, so none of it is served; read another replica",
		r.id, r.srv.cfg.ID)
}

// damagedCount is how many local indexes of st's damaged ranges are still
// stored (not trimmed).
func damagedCount(st *segment.Store) uint64 {
	var n uint64
	for _, d := range st.Damaged() {
		n += d.End - max(d.First, st.Start())
	}
	return n
}

// reportDamage exports the damaged count of shard id's store st (and
// that its copy is not lost yet), and logs each damaged range once, when
// the store is opened.
func (s *Server) reportDamage(id cut.ShardID, st *segment.Store) {
	ds := st.Damaged()
	for _, d := range ds {
		s.log.Warn("records damaged on this replica; reads of them are refused until repaired",
			"shard", id, "first", d.First, "end", d.End, "file", d.File, "offset", d.Offset, "bytes", d.Bytes, "reason", d.Reason)
	}
	shard := strconv.FormatUint(uint64(id), 10)
	metrics.DamagedRecords.WithLabelValues(s.cfg.ID, shard).Set(float64(damagedCount(st)))
	// A copy just opened has missed nothing yet: cuts applied later say.
	metrics.ReplicaLost.WithLabelValues(s.cfg.ID, shard).Set(0)
}

// health says, for each shard held here, what of its copy this server
// cannot serve; Ping carries it to `augur status`.
func (s *Server) health() []*pb.ReplicaHealth {
	s.mu.Lock()
	rs := make([]*replica, 0, len(s.replicas))
	lazyRejoin := map[cut.ShardID]*pb.CatchUpProgress{}
	for _, r := range s.replicas {
		// A lazy shard's copy is its lazy shell, once open: the replica
		// its primary formed the shard with, or found on disk at a
		// restart, takes no part in lazy order.
		if s.lazy[r.id] != nil {
			continue
		}
		rs = append(rs, r)
		if p := s.lazyRejoinHealthLocked(r.id); p != nil {
			lazyRejoin[r.id] = proto.Clone(p).(*pb.CatchUpProgress)
		}
	}
	lazies := make([]*lazyShard, 0, len(s.lazy))
	for id, ls := range s.lazy {
		lazies = append(lazies, ls)
		if p := s.lazyRejoinHealthLocked(id); p != nil {
			lazyRejoin[id] = proto.Clone(p).(*pb.CatchUpProgress)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(rs, func(a, b *replica) int { return cmp.Compare(a.id, b.id) })
	out := make([]*pb.ReplicaHealth, 0, len(rs))
	for _, r := range rs {
		h := &pb.ReplicaHealth{Shard: r.id, Lost: r.core.Lost(), Role: r.role().String(), CatchUp: r.catchUp.get(r.store)}
		if role := r.role(); r.rejoining.Load() && (role == roleRecovered || role == roleFenced) {
			h.Role = "catching-up"
			if h.CatchUp == nil || h.CatchUp.Done {
				// A repair under way says more.
				h.CatchUp = r.rejoinShow.get(r.store)
			}
		}
		if p := lazyRejoin[r.id]; p != nil {
			// Lazy order: its copy rejoins (lazyrejoin.go).
			h.Role, h.CatchUp = "catching-up", p
		}
		for _, d := range r.store.Damaged() {
			h.Damaged = append(h.Damaged, &pb.LocalRange{First: d.First, End: d.End})
		}
		out = append(out, h)
	}
	for _, ls := range lazies {
		if h := ls.health(); h != nil {
			if p := lazyRejoin[ls.id]; p != nil {
				h.Role, h.CatchUp = "catching-up", p
			}
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b *pb.ReplicaHealth) int { return cmp.Compare(a.Shard, b.Shard) })
	return out
}

// health is the state of this lazy copy, as a storage server's Ping
// tells it; nil once closed.
func (ls *lazyShard) health() *pb.ReplicaHealth {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return nil
	}
	h := &pb.ReplicaHealth{Shard: ls.id, Role: roleBackup.String()}
	switch {
	case ls.core.Primary():
		h.Role = rolePrimary.String()
	case ls.core.Out():
		h.Role = roleFenced.String()
	}
	for _, d := range ls.store.Damaged() {
		h.Damaged = append(h.Damaged, &pb.LocalRange{First: d.First, End: d.End})
	}
	return h
}
