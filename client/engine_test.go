package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/augur-log/augur/api/augurpb"
)

// The engine's tests run it against fake servers: an ordering replica that
// answers Status from a table the test edits, and storage replicas that
// stream what the test scripts. No cluster, no protocol: only what the
// engine does with the streams.

type fakeOrdering struct {
	pb.UnimplementedOrderingServer
	mu    sync.Mutex
	st    *pb.StatusResponse
	calls int // Status calls answered
}

func (o *fakeOrdering) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	return proto.Clone(o.st).(*pb.StatusResponse), nil
}

func (o *fakeOrdering) statusCalls() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls
}

func (o *fakeOrdering) set(edit func(st *pb.StatusResponse)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	edit(o.st)
}

// fakeReplica streams msgs, skipping the cut batches that end at or before
// the request's from, then stays open (or, with done, ends the shard).
type fakeReplica struct {
	pb.UnimplementedLogServer
	msgs []*pb.SubscribeResponse
	// breakAfter, when positive, breaks the first stream after that many
	// messages; refuse, when set, refuses every stream after the first.
	breakAfter int
	refuse     error
	done       bool
	// trimmed refuses every stream as below the trim point.
	trimmed bool
	// every paces msgs: it is the time before each one after the first,
	// as a server's messages follow the load.
	every time.Duration

	mu      sync.Mutex
	streams int
}

func (r *fakeReplica) Subscribe(req *pb.SubscribeRequest, stream grpc.ServerStreamingServer[pb.SubscribeResponse]) error {
	if r.trimmed {
		return status.Error(codes.OutOfRange, "below the trim point")
	}
	r.mu.Lock()
	r.streams++
	n := r.streams
	r.mu.Unlock()
	if n > 1 && r.refuse != nil {
		return r.refuse
	}
	sent := 0
	for _, m := range r.msgs {
		if n == 1 && r.breakAfter > 0 && sent == r.breakAfter {
			return status.Error(codes.Unavailable, "replica stopped")
		}
		out := proto.Clone(m).(*pb.SubscribeResponse)
		out.Batches = out.Batches[:0]
		for _, b := range m.Batches {
			if b.CutEnd > req.From {
				out.Batches = append(out.Batches, b)
			}
		}
		if len(m.Batches) > 0 && len(out.Batches) == 0 {
			continue
		}
		if sent > 0 && r.every > 0 {
			time.Sleep(r.every)
		}
		if err := stream.Send(out); err != nil {
			return err
		}
		sent++
	}
	if r.done {
		return stream.Send(&pb.SubscribeResponse{Done: true})
	}
	<-stream.Context().Done()
	return nil
}

// serve starts a gRPC server for register on loopback and returns its address.
func serve(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// fakeCluster serves shards (id to its replicas, the primary first) and
// returns the ordering fake and a client dialled to it.
func fakeCluster(t *testing.T, spec bool, shards map[uint32][]*fakeReplica) (*fakeOrdering, *Client) {
	t.Helper()
	st := &pb.StatusResponse{ClusterId: "fake"}
	if spec {
		st.Spec = &pb.SpecState{}
	}
	for id := uint32(1); int(id) <= len(shards); id++ {
		st.Shards = append(st.Shards, shardOf(t, id, shards[id]))
	}
	o := &fakeOrdering{st: st}
	addr := serve(t, func(s *grpc.Server) { pb.RegisterOrderingServer(s, o) })
	c, err := Dial(testContext(t), Config{ClusterID: "fake", Ordering: []string{addr}, RetryInterval: 10 * time.Millisecond, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return o, c
}

func shardOf(t *testing.T, id uint32, replicas []*fakeReplica) *pb.ShardInfo {
	sh := &pb.ShardInfo{Id: id, State: pb.ShardState_SHARD_LIVE}
	for i, r := range replicas {
		addr := serve(t, func(s *grpc.Server) { pb.RegisterLogServer(s, r) })
		sh.Replicas = append(sh.Replicas, &pb.ReplicaAddr{Id: fmt.Sprintf("s%d-%d", id, i), Addr: addr})
	}
	return sh
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// cuts builds the eager streams of shards that take turns: cut i spans
// [2i, 2i+2) of a two-shard log, shard 1 holding the even position and
// shard 2 the odd one; with one shard, every position is shard 1's.
func cuts(n int, shards int) map[uint32][]*pb.SubscribeResponse {
	out := map[uint32][]*pb.SubscribeResponse{}
	for i := 0; i < n; i++ {
		start := uint64(i * shards)
		for s := 0; s < shards; s++ {
			p := start + uint64(s)
			b := &pb.CutBatch{Cut: uint64(i), CutStart: start, CutEnd: start + uint64(shards), Shard: uint32(s + 1),
				RunStart: p, RunCount: 1,
				Records: []*pb.LogEntry{{Position: p, Shard: uint32(s + 1), Record: &pb.Record{Key: fmt.Sprint("k", p)}}}}
			out[uint32(s+1)] = append(out[uint32(s+1)], &pb.SubscribeResponse{Batches: []*pb.CutBatch{b}})
		}
	}
	return out
}

// readEntries takes n entries and checks they are positions 0..n-1 with
// their own records.
func readEntries(t *testing.T, sub *Subscription, n int) {
	t.Helper()
	ctx := testContext(t)
	for want := uint64(0); want < uint64(n); want++ {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("entry %d: %v", want, err)
		}
		if e.Position != want || e.Record.Key != fmt.Sprint("k", want) {
			t.Fatalf("entry %d is (%d, %q)", want, e.Position, e.Record.Key)
		}
	}
}

func TestEngineFailsOverToAnotherReplicaWithoutLosingOrRepeating(t *testing.T) {
	s := cuts(3, 2)
	primary := &fakeReplica{msgs: s[1], breakAfter: 1, refuse: status.Error(codes.Unavailable, "down")}
	backup := &fakeReplica{msgs: s[1]}
	_, c := fakeCluster(t, false, map[uint32][]*fakeReplica{1: {primary, backup}, 2: {{msgs: s[2]}}})
	sub, err := c.Subscribe(testContext(t), 0, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// The primary breaks after cut 0; the backup streams from wherever
	// the engine resumes, which cut 0 may or may not have reached yet.
	readEntries(t, sub, 6)
	backup.mu.Lock()
	defer backup.mu.Unlock()
	if backup.streams == 0 {
		t.Fatal("shard 1's records after cut 0 came, but not from its backup")
	}
}

func TestEngineOneShardEndsWithShardFinalized(t *testing.T) {
	s := cuts(3, 2)
	_, c := fakeCluster(t, false, map[uint32][]*fakeReplica{1: {{msgs: s[1], done: true}}, 2: {{msgs: s[2]}}})
	sub, err := c.Subscribe(testContext(t), 0, OnShard(1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx := testContext(t)
	// Shard 2 holds the odd positions but is not followed: shard 1's come
	// without them.
	for _, want := range []uint64{0, 2, 4} {
		e, err := sub.Next(ctx)
		if err != nil || e.Position != want || e.Shard != 1 {
			t.Fatalf("got (%d, shard %d, %v), want position %d of shard 1", e.Position, e.Shard, err, want)
		}
	}
	if _, err := sub.Next(ctx); !errors.Is(err, ErrShardFinalized) {
		t.Fatalf("after the shard's last record: %v, want ErrShardFinalized", err)
	}
}

func TestEngineTrimmedStreamEndsTheSubscription(t *testing.T) {
	_, c := fakeCluster(t, false, map[uint32][]*fakeReplica{1: {{trimmed: true}}})
	sub, err := c.Subscribe(testContext(t), 0, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := sub.Next(testContext(t)); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("Next on a trimmed stream: %v, want ErrTrimmed", err)
	}
}

func TestEngineEndsWithABrokenCutAfterWhatCameBefore(t *testing.T) {
	s := cuts(1, 1)
	broken := &pb.CutBatch{Cut: 1, CutStart: 1, CutEnd: 2, Shard: 1, RunStart: 1, RunCount: 2}
	s[1] = append(s[1], &pb.SubscribeResponse{Batches: []*pb.CutBatch{broken}})
	_, c := fakeCluster(t, false, map[uint32][]*fakeReplica{1: {{msgs: s[1]}}})
	sub, err := c.Subscribe(testContext(t), 0, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	readEntries(t, sub, 1)
	if _, err := sub.Next(testContext(t)); err == nil || !strings.Contains(err.Error(), "covers 2 positions") {
		t.Fatalf("Next after a cut covering 2 of its 1 positions: %v", err)
	}
}

func TestEngineFollowsAShardAddedAfterItStarted(t *testing.T) {
	s := cuts(2, 2)
	// Shard 2 is not in the table yet; shard 1's batches say the table
	// changed.
	for _, m := range s[1] {
		m.Batches[0].MembershipVersion = 2
	}
	o, c := fakeCluster(t, false, map[uint32][]*fakeReplica{1: {{msgs: s[1]}}})
	sub, err := c.Subscribe(testContext(t), 0, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	added := shardOf(t, 2, []*fakeReplica{{msgs: s[2]}})
	o.set(func(st *pb.StatusResponse) {
		st.Shards = append(st.Shards, added)
		st.MembershipVersion = 2
	})
	readEntries(t, sub, 4)
}

func TestEngineOneShardSpeculativeLearnsFromTheStatus(t *testing.T) {
	// Shard 1 holds positions 1 and 3, sends them speculatively, and dies
	// whole: its stream says nothing more.
	r := &fakeReplica{msgs: []*pb.SubscribeResponse{{Entries: []*pb.SpecEntry{
		{Position: 1, Shard: 1, Record: &pb.Record{Key: "k1"}}, {Position: 3, Shard: 1, Record: &pb.Record{Key: "k3"}}}}}}
	o, c := fakeCluster(t, true, map[uint32][]*fakeReplica{1: {r}})
	sub, err := c.SubscribeSpec(testContext(t), 0, OnShard(1), false)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx := testContext(t)
	var got []string
	take := func(n int) {
		for range n {
			ev, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			got = append(got, fmt.Sprintf("%v%d", ev.Kind, ev.Position))
		}
	}
	take(2)
	// The view change voids 3; the tail makes 1 and the rest below 6
	// final. Only the status says so.
	o.set(func(st *pb.StatusResponse) {
		st.Tail = 6
		st.Spec = &pb.SpecState{View: 1, Void: []*pb.ViewChange{{View: 1, ConfirmedGp: 2, FailedShard: 1}}}
	})
	take(2)
	if g, w := strings.Join(got, " "), "deliver1 deliver3 fail2 confirm6"; g != w {
		t.Fatalf("events %q, want %q", g, w)
	}
}

// TestEngineFetchesNoStatusWhilePositionsBecomeFinal: a speculative stream
// that confirms each entry with the next one keeps an unconfirmed entry in
// the merger all along; as long as positions become final, the
// subscription has no reason to fetch the status, which it did every
// stuckRefreshAfter while the merger held anything.
func TestEngineFetchesNoStatusWhilePositionsBecomeFinal(t *testing.T) {
	const n = 30 // messages, one every stuckRefreshAfter/5
	var msgs []*pb.SubscribeResponse
	for p := range uint64(n) {
		msgs = append(msgs, &pb.SubscribeResponse{Confirmed: p,
			Entries: []*pb.SpecEntry{{Position: p, Shard: 1, Record: &pb.Record{Key: fmt.Sprint("k", p)}}}})
	}
	r := &fakeReplica{msgs: msgs, every: stuckRefreshAfter / 5}
	o, c := fakeCluster(t, true, map[uint32][]*fakeReplica{1: {r}})
	ctx := testContext(t)
	sub, err := c.SubscribeSpec(ctx, 0, Filter{}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	before := o.statusCalls()
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == EventConfirm && ev.Position == n-1 {
			break
		}
	}
	// A stall of the test's goroutines may let one fetch through.
	if polls := o.statusCalls() - before; polls > 1 {
		t.Fatalf("%d status fetches over %v of positions becoming final every %v", polls, time.Duration(n-1)*r.every, r.every)
	}
}

func TestEngineEndsWhenItsClientCloses(t *testing.T) {
	s := cuts(1, 1)
	_, c := fakeCluster(t, false, map[uint32][]*fakeReplica{1: {{msgs: s[1]}}})
	sub, err := c.Subscribe(testContext(t), 0, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	readEntries(t, sub, 1)
	c.Close()
	// Nothing more will come; only the client's end can end this wait
	// before the test's own deadline.
	if _, err := sub.Next(testContext(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after the client closed: %v, want ErrClosed", err)
	}
}
