package storage

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/mode"
)

// Bounds of the silent-leader tests.
const (
	silenceTestHeartbeat = 20 * time.Millisecond
	// silenceTestSlack is how late, beyond the silence bound, the server
	// may reach the live replica on a loaded machine.
	silenceTestSlack   = 2 * time.Second
	silenceTestTimeout = 10 * time.Second
)

// fakeMode is how a fakeOrdering behaves.
type fakeMode int

const (
	// fakeStopped accepts calls and streams and never answers, as a
	// SIGSTOPped process whose kernel still accepts connections.
	fakeStopped fakeMode = iota
	// fakeLive leads: it names itself the leader, answers every
	// heartbeat and keeps watches alive.
	fakeLive
	// fakeMute names itself the leader but says nothing on its streams.
	fakeMute
	// fakeLeaderless knows no leader, as during an election.
	fakeLeaderless
	// fakeFollower names fakeOtherLeader the leader.
	fakeFollower
)

const fakeOtherLeader = "127.0.0.1:3"

// fakeOrdering is an ordering replica for the storage server to talk to.
type fakeOrdering struct {
	pb.UnimplementedOrderingServer
	addr string
	mode fakeMode
	// heartbeats and watches receive the server id of each stream
	// opened; heartbeatCalls counts the heartbeat streams.
	heartbeats     chan string
	watches        chan string
	heartbeatCalls atomic.Int64
	// rejoins receives the shard of each rejoin asked.
	rejoins chan uint32
}

func startFakeOrdering(t *testing.T, mode fakeMode) *fakeOrdering {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeOrdering{addr: l.Addr().String(), mode: mode,
		heartbeats: make(chan string, 64), watches: make(chan string, 64), rejoins: make(chan uint32, 64)}
	g := grpc.NewServer()
	pb.RegisterOrderingServer(g, f)
	go g.Serve(l)
	t.Cleanup(g.Stop)
	return f
}

func (f *fakeOrdering) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	if f.mode == fakeStopped {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	switch f.mode {
	case fakeLeaderless:
		return &pb.StatusResponse{}, nil
	case fakeFollower:
		return &pb.StatusResponse{LeaderId: "other", LeaderAddr: fakeOtherLeader}, nil
	}
	return &pb.StatusResponse{LeaderId: "live", LeaderAddr: f.addr}, nil
}

func (f *fakeOrdering) RejoinShard(ctx context.Context, req *pb.RejoinShardRequest) (*pb.RejoinShardResponse, error) {
	if f.mode == fakeStopped {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	f.rejoins <- req.Shard
	return &pb.RejoinShardResponse{Epoch: req.Epoch + 1}, nil
}

func (f *fakeOrdering) Heartbeat(stream pb.Ordering_HeartbeatServer) error {
	f.heartbeatCalls.Add(1)
	if f.mode == fakeStopped {
		// A stopped process reads nothing; the requests wait in the
		// kernel's buffers.
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	f.heartbeats <- req.ServerId
	for {
		if f.mode == fakeMute {
			if _, err := stream.Recv(); err != nil {
				return err
			}
			continue
		}
		if err := stream.Send(&pb.HeartbeatResponse{}); err != nil {
			return err
		}
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}

func (f *fakeOrdering) Watch(req *pb.WatchRequest, stream pb.Ordering_WatchServer) error {
	if f.mode == fakeStopped {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	f.watches <- req.ServerId
	if f.mode == fakeMute {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	tick := time.NewTicker(silenceTestHeartbeat)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := stream.Send(&pb.WatchResponse{}); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// silenceTestServer returns a storage server, a backup of group a, of the
// ordering replicas at addrs; nothing runs yet.
func silenceTestServer(t *testing.T, addrs ...string) *Server {
	t.Helper()
	s, err := New(Config{
		ClusterID: "c", ID: "a2", Group: []Peer{{ID: "a1", Addr: "127.0.0.1:1"}, {ID: "a2", Addr: "127.0.0.1:2"}},
		GroupName: "a", Ordering: addrs, Dir: t.TempDir(), RecordBytesMax: 1024,
		HeartbeatInterval: silenceTestHeartbeat, Mode: testMode(t, mode.EagerName), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSilentLeaderIsLeft checks that a storage server whose believed
// ordering leader stopped (it accepts connections and streams but answers
// nothing) drops its heartbeat and watch streams after the silence bound
// and moves both to a replica that answers; and that it stays there while
// that replica answers.
func TestSilentLeaderIsLeft(t *testing.T) {
	stopped := startFakeOrdering(t, fakeStopped)
	live := startFakeOrdering(t, fakeLive)
	s := silenceTestServer(t, stopped.addr, live.addr)
	s.setLeader(stopped.addr)
	start := time.Now()
	s.Start()
	t.Cleanup(s.Stop)

	deadline := time.After(silenceTestTimeout)
	for _, ch := range []chan string{live.heartbeats, live.watches} {
		select {
		case id := <-ch:
			if id != "a2" {
				t.Fatalf("the live replica heard from %q, want a2", id)
			}
		case <-deadline:
			t.Fatalf("the server did not move to the live replica within %v", silenceTestTimeout)
		}
	}
	took := time.Since(start)
	if took < s.silenceMax() || took > s.silenceMax()+silenceTestSlack {
		t.Errorf("the server moved to the live replica after %v, want after the silence bound %v (and within %v more)", took, s.silenceMax(), silenceTestSlack)
	}
	if n := stopped.heartbeatCalls.Load(); n == 0 {
		t.Error("the server never tried the stopped replica it believed the leader")
	}

	// The live replica answers: its streams stay up for many bounds.
	calls := live.heartbeatCalls.Load()
	hold := time.NewTimer(10 * s.silenceMax())
	select {
	case id := <-live.watches:
		t.Errorf("%s watched the live replica again though it answered", id)
	case <-hold.C:
	}
	if n := live.heartbeatCalls.Load(); n != calls {
		t.Errorf("the server opened %d more heartbeat streams to the live replica though it answered", n-calls)
	}
}

// TestStalledStreamOfALeaderIsReopened checks that a stream that stays
// silent though its replica answers that it leads is replaced by a new
// stream to the same replica, not abandoned for another one.
func TestStalledStreamOfALeaderIsReopened(t *testing.T) {
	mute := startFakeOrdering(t, fakeMute)
	other := startFakeOrdering(t, fakeStopped)
	s := silenceTestServer(t, mute.addr, other.addr)
	s.Start()
	t.Cleanup(s.Stop)
	deadline := time.After(silenceTestTimeout)
	for _, ch := range []chan string{mute.heartbeats, mute.heartbeats, mute.watches, mute.watches} {
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("the server did not reopen its streams to the leader within %v", silenceTestTimeout)
		}
	}
	if n := other.heartbeatCalls.Load(); n != 0 {
		t.Errorf("the server left a leader that answered for another replica (%d heartbeat streams)", n)
	}
}

// TestQuietReplicaIsAsked checks what a storage server concludes when a
// stream to an ordering replica stays quiet and it asks the replica which
// one leads: only a replica that does not answer went silent (and is
// avoided for a while); one that knows no leader, or names another, is
// alive and is left without a mark, to the leader it names if any.
func TestQuietReplicaIsAsked(t *testing.T) {
	for _, c := range []struct {
		mode fakeMode
		want error
	}{
		{fakeStopped, errSilent},
		{fakeLeaderless, errNoLeader},
		{fakeFollower, errRedirected},
	} {
		f := startFakeOrdering(t, c.mode)
		s := silenceTestServer(t, f.addr)
		// The question to the replica must be answered within one
		// heartbeat interval; a long one keeps a loaded machine (the race
		// detector on two cores) from turning a live replica silent.
		s.cfg.HeartbeatInterval = 250 * time.Millisecond
		ctx, cancel, _ := s.listen(f.addr)
		<-ctx.Done()
		cancel(nil)
		if err := droppedCause(ctx, nil); !errors.Is(err, c.want) {
			t.Errorf("mode %d: a quiet call ended with %v, want %v", c.mode, err, c.want)
		}
		if leader := s.orderingAddrs()[0]; c.mode == fakeFollower && leader != fakeOtherLeader {
			t.Errorf("the leader named was not taken up: the believed leader is %s", leader)
		}
		s.Stop()
	}
}

// TestPickerTriesASilentReplicaLast checks the order in which a storage
// server tries the ordering replicas: one whose stream went silent comes
// last for one silence bound, though it is still named the leader, and
// takes its turn again after it.
func TestPickerTriesASilentReplicaLast(t *testing.T) {
	const bound = time.Second
	t0 := time.Unix(1000, 0)
	p := newReplicaPicker(bound)
	addrs := []string{"o1", "o2", "o3"} // o1 believed the leader
	if got := p.order(addrs, t0); !slices.Equal(got, addrs) {
		t.Fatalf("with none silent: %v, want %v", got, addrs)
	}
	p.silent("o1", t0)
	want := []string{"o2", "o3", "o1"}
	if got := p.order(addrs, t0.Add(bound-1)); !slices.Equal(got, want) {
		t.Fatalf("just after o1 went silent: %v, want %v", got, want)
	}
	if !p.quiet("o1", t0.Add(bound-1)) || p.quiet("o2", t0) {
		t.Fatal("quiet replicas misreported")
	}
	if got := p.order(addrs, t0.Add(bound)); !slices.Equal(got, addrs) {
		t.Fatalf("a bound after o1 went silent: %v, want %v", got, addrs)
	}
}

// TestRejoinAskPassesAStoppedLeader checks that a copy asking to rejoin
// does not wait for good on an ordering replica it believes the leader
// that accepts the call and never answers (stopped, or holding a
// proposal Raft dropped): it gives up on it after a bound and asks the
// next replica.
func TestRejoinAskPassesAStoppedLeader(t *testing.T) {
	stopped := startFakeOrdering(t, fakeStopped)
	live := startFakeOrdering(t, fakeLive)
	s := silenceTestServer(t, stopped.addr, live.addr)
	s.setLeader(stopped.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 3*orderingCallTimeout)
	defer cancel()
	start := time.Now()
	if err := s.askRejoin(ctx, 7, 1, 10, false); err != nil {
		t.Fatalf("the rejoin was not asked of the live replica: %v", err)
	}
	if took := time.Since(start); took > orderingCallTimeout+silenceTestSlack {
		t.Errorf("the rejoin waited %v on the stopped replica, want at most %v", took, orderingCallTimeout)
	}
	select {
	case id := <-live.rejoins:
		if id != 7 {
			t.Errorf("the live replica was asked to rejoin shard %d, want 7", id)
		}
	default:
		t.Error("the live replica was not asked")
	}
}
