// Package target is the SDK for writing a target of augur's player: a
// downstream system that receives the log's entries meant for it, in log
// order, each exactly once, across crashes of the target and of the player.
//
// The user writes a Store: Apply applies a batch of entries and records the
// batch's last index in the same atomic step (one database transaction), and
// LastApplied reads that index back. The SDK serves augur's Target gRPC
// service on top of it:
//
//	srv := grpc.NewServer()
//	target.Register(srv, myStore)
//	srv.Serve(lis)
//
// The SDK applies the batches of all the player's streams one at a time, and
// applies a batch only when it continues exactly where the store stands: a
// batch that a dead or stale player connection sends after a newer one moved
// on is refused, never applied twice.
package target

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
)

// Entry is one log entry for the target. Index is the entry's log position
// plus one, so that 0 means "nothing applied yet".
type Entry struct {
	Index   uint64
	Key     string
	Payload []byte
}

// Batch is what the target applies in one atomic step.
type Batch struct {
	// Entries are the batch's entries in increasing index order; it may be
	// empty when the batch only advances the target's index past entries
	// that were not the target's. The slice is reused after Apply returns:
	// copy what must outlive the call.
	Entries []Entry
	// Last is the index the store must record as last applied, in the same
	// transaction that applies Entries. It is at least the last entry's
	// index.
	Last uint64
}

// Store is the user's part of a target.
type Store interface {
	// Apply applies b.Entries and records b.Last as the last applied index,
	// atomically: after a crash, either both happened or neither did. An
	// error means neither happened.
	Apply(ctx context.Context, b Batch) error
	// LastApplied returns the last applied index Apply recorded, 0 when it
	// never ran.
	LastApplied(ctx context.Context) (uint64, error)
}

// Server serves the Target service for one Store.
type Server struct {
	pb.UnimplementedTargetServer
	store Store
	// mu serializes every call into the store, across all streams: the
	// first-index check and the apply that follows it must see no other
	// apply in between.
	mu sync.Mutex
	// last caches the store's last applied index while known is set; an
	// Apply error clears known, since the store's state is then read back
	// rather than guessed.
	last  uint64
	known bool
}

// New returns a Server for store.
func New(store Store) *Server { return &Server{store: store} }

// Register serves store's Target service on g.
func Register(g *grpc.Server, store Store) *Server {
	s := New(store)
	pb.RegisterTargetServer(g, s)
	return s
}

// LastApplied answers the player's question after a (re)connect.
func (s *Server) LastApplied(ctx context.Context, _ *pb.LastAppliedRequest) (*pb.LastAppliedResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last, err := s.lastLocked(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "last applied: %v", err)
	}
	return &pb.LastAppliedResponse{Index: last}, nil
}

func (s *Server) lastLocked(ctx context.Context) (uint64, error) {
	if s.known {
		return s.last, nil
	}
	last, err := s.store.LastApplied(ctx)
	if err != nil {
		return 0, err
	}
	s.last, s.known = last, true
	return last, nil
}

// Apply applies the batches of one player connection in order and
// acknowledges each once applied.
func (s *Server) Apply(stream pb.Target_ApplyServer) error {
	ctx := stream.Context()
	var entries []Entry
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		entries, err = convert(req, entries[:0])
		if err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		last := req.Entries[len(req.Entries)-1].Index
		if err := s.apply(ctx, req.PrevIndex, Batch{Entries: entries, Last: last}); err != nil {
			return err
		}
		if err := stream.Send(&pb.ApplyAck{Index: last}); err != nil {
			return err
		}
	}
}

// ErrNotNext is the cause of the refusal of a batch that does not continue
// where the store stands.
var ErrNotNext = errors.New("batch does not follow the last applied index")

func (s *Server) apply(ctx context.Context, prev uint64, b Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		// The player closed this stream while the batch waited for the
		// lock: it has given up on this connection.
		return status.FromContextError(err).Err()
	}
	last, err := s.lastLocked(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "last applied: %v", err)
	}
	if prev != last {
		return status.Errorf(codes.FailedPrecondition, "%v: batch follows %d, last applied is %d", ErrNotNext, prev, last)
	}
	if err := s.store.Apply(ctx, b); err != nil {
		s.known = false
		return status.Errorf(codes.Unavailable, "apply %d..%d: %v", prev+1, b.Last, err)
	}
	s.last = b.Last
	return nil
}

// convert checks a batch's shape and appends its non-empty entries to dst.
func convert(req *pb.ApplyBatch, dst []Entry) ([]Entry, error) {
	if len(req.Entries) == 0 {
		return dst, errors.New("empty batch")
	}
	prev := req.PrevIndex
	for _, e := range req.Entries {
		if e.Index <= prev {
			return dst, fmt.Errorf("entry index %d after %d: indices must increase", e.Index, prev)
		}
		prev = e.Index
		if !e.Empty {
			dst = append(dst, Entry{Index: e.Index, Key: e.Key, Payload: e.Payload})
		}
	}
	return dst, nil
}
