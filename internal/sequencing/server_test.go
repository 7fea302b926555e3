package sequencing

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/lazy"
)

func newTestServer(t *testing.T, id string) *Server {
	t.Helper()
	s, err := New(Config{ClusterID: "c", ID: id, Replicas: []Peer{{"q1", "127.0.0.1:1"}, {"q2", "127.0.0.1:2"}},
		Ordering: []string{"127.0.0.1:3"}, BatchInterval: time.Millisecond, RingMax: 64})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func startView(t *testing.T, s *Server, view, ordered uint64, replicas ...string) {
	t.Helper()
	st := &pb.LazyState{View: view}
	for _, r := range replicas {
		st.Replicas = append(st.Replicas, &pb.SequencingReplica{Id: r})
	}
	resp, err := s.StartView(context.Background(), &pb.StartViewRequest{ClusterId: "c", State: st, Ordered: ordered})
	if err != nil || resp.GetCode() != pb.Code_OK {
		t.Fatalf("start view %d: %v %v", view, resp, err)
	}
}

func meta(view uint64, seqs ...uint64) *pb.SeqAppendRequest {
	req := &pb.SeqAppendRequest{ClusterId: "c", View: view}
	for _, s := range seqs {
		req.Metas = append(req.Metas, &pb.RecordMeta{ClientId: 7, Seq: s, Shard: 1, Floor: 1})
	}
	return req
}

func ackCodes(resp *pb.SeqAppendResponse) []pb.Code {
	var out []pb.Code
	for _, a := range resp.Acks {
		out = append(out, a.Code)
	}
	return out
}

// A replica takes appends only in the view the control plane started, and
// answers each refusal with its code; the leader's CheckTail counts what
// it holds; a sealed replica refuses and hands over its ring.
func TestReplicaTakesAppendsInItsOpenViewOnly(t *testing.T) {
	s := newTestServer(t, "q1")
	acks := &ackStream{out: make(chan *pb.SeqAppendResponse, 8), done: make(chan struct{})}
	if got := ackCodes(s.take(meta(1, 1), acks, nil)); got[0] != pb.Code_WRONG_VIEW {
		t.Fatalf("before any view started here: %v, want WRONG_VIEW", got)
	}
	startView(t, s, 1, 0, "q1", "q2")
	got := ackCodes(s.take(meta(1, 1, 2, 2), acks, nil))
	if got[0] != pb.Code_OK || got[1] != pb.Code_OK || got[2] != pb.Code_OK {
		t.Fatalf("in view 1: %v, want OK (a repeat is a duplicate, acknowledged)", got)
	}
	if got := ackCodes(s.take(meta(2, 3), acks, nil)); got[0] != pb.Code_WRONG_VIEW {
		t.Fatalf("view 2 on a view-1 replica: %v, want WRONG_VIEW", got)
	}
	if got := ackCodes(s.take(meta(1, 9), acks, map[uint32]error{1: fmt.Errorf("shard 1: %w", lazy.ErrUnknownShard)})); got[0] != pb.Code_UNKNOWN_SHARD {
		t.Fatalf("a shard the cluster never had: %v, want UNKNOWN_SHARD", got)
	}
	// No ordering replica answers (127.0.0.1:3): a shard the replica has
	// not heard of cannot be checked, and is refused as unavailable
	// rather than taken into the ring, where it would hold the order up.
	checkCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	refused := map[uint32]error{1: s.checkShard(checkCtx, 1)}
	if got := ackCodes(s.take(meta(1, 10), acks, refused)); got[0] != pb.Code_UNAVAILABLE {
		t.Fatalf("a shard the replica cannot check: %v (%v), want UNAVAILABLE", got, refused[1])
	}
	if got := ackCodes(s.take(&pb.SeqAppendRequest{ClusterId: "c", View: 1, Metas: []*pb.RecordMeta{{ClientId: 0, Seq: 1}}}, acks, nil)); got[0] != pb.Code_INVALID {
		t.Fatalf("client id 0: %v, want INVALID", got)
	}
	tail, err := s.CheckTail(context.Background(), &pb.CheckTailRequest{ClusterId: "c"})
	if err != nil || tail.GetNotLeader() || tail.GetTail() != 2 {
		t.Fatalf("check tail %v %v, want 2 from the leader", tail, err)
	}
	if _, err := s.CheckTail(context.Background(), &pb.CheckTailRequest{ClusterId: "other"}); err == nil {
		t.Fatal("another cluster's check tail was answered")
	}
	seal, err := s.Seal(context.Background(), &pb.SealRequest{ClusterId: "c", View: 1})
	if err != nil || seal.GetCode() != pb.Code_OK || len(seal.GetEntries()) != 2 || seal.GetView() != 1 {
		t.Fatalf("seal %v %v, want both records of view 1", seal, err)
	}
	if got := ackCodes(s.take(meta(1, 3), acks, nil)); got[0] != pb.Code_SEALED {
		t.Fatalf("after the seal: %v, want SEALED", got)
	}
	startView(t, s, 2, 2, "q2", "q1")
	tail, _ = s.CheckTail(context.Background(), &pb.CheckTailRequest{ClusterId: "c"})
	if !tail.GetNotLeader() || tail.GetStableGp() != 2 {
		t.Fatalf("a follower of view 2 answered %v", tail)
	}
}

// The ring is bounded: a full ring answers FULL and holds nothing more.
func TestFullRingPushesBack(t *testing.T) {
	s := newTestServer(t, "q1")
	startView(t, s, 1, 0, "q1", "q2")
	acks := &ackStream{out: make(chan *pb.SeqAppendResponse, 8), done: make(chan struct{})}
	var seqs []uint64
	for i := range 65 {
		seqs = append(seqs, uint64(i+1))
	}
	got := ackCodes(s.take(meta(1, seqs...), acks, nil))
	if got[63] != pb.Code_OK || got[64] != pb.Code_FULL {
		t.Fatalf("64th and 65th of a 64-entry ring: %v, %v", got[63], got[64])
	}
}

// The leader orders as a group commit: an order loop that found nothing
// to order waits for the first record taken, which wakes it once; records
// taken while a batch is in flight (the loop is not idle) wake nothing,
// and neither do records a follower takes.
func TestFirstRecordWakesAnIdleLeader(t *testing.T) {
	s := newTestServer(t, "q1")
	acks := &ackStream{out: make(chan *pb.SeqAppendResponse, 8), done: make(chan struct{})}
	startView(t, s, 1, 0, "q1", "q2")
	s.take(meta(1, 1), acks, nil)
	if len(s.orderKick) != 0 {
		t.Fatal("a record taken while the order loop is busy woke it")
	}
	s.orderIdle = true
	s.take(meta(1, 2), acks, nil)
	if len(s.orderKick) != 1 || s.orderIdle {
		t.Fatalf("the first record after the loop went idle: kicks %d, idle %v; want 1 kick, not idle", len(s.orderKick), s.orderIdle)
	}
	<-s.orderKick
	s.take(meta(1, 3), acks, nil)
	if len(s.orderKick) != 0 {
		t.Fatal("a second record woke the loop again before it looked")
	}

	f := newTestServer(t, "q2")
	startView(t, f, 1, 0, "q1", "q2")
	f.orderIdle = true
	f.take(meta(1, 1), acks, nil)
	if len(f.orderKick) != 0 {
		t.Fatal("a follower's record woke its order loop")
	}
}

// A start of the view the replica runs, sent again (the control plane
// repeats it until a probe shows the view running), changes nothing: the
// appender waiting for its record's position still learns it.
func TestRepeatedStartKeepsThePositionWaiters(t *testing.T) {
	s := newTestServer(t, "q1")
	startView(t, s, 1, 0, "q1", "q2")
	acks := &ackStream{out: make(chan *pb.SeqAppendResponse, 8), done: make(chan struct{})}
	req := meta(1, 1)
	req.WantPosition = true
	if got := ackCodes(s.take(req, acks, nil)); got[0] != pb.Code_OK {
		t.Fatalf("append in view 1: %v", got)
	}
	startView(t, s, 1, 0, "q1", "q2")
	s.mu.Lock()
	s.answerPositionsLocked(0, []lazy.RecordID{{Client: 7, Seq: 1}}, nil)
	s.mu.Unlock()
	select {
	case r := <-acks.out:
		if a := r.GetAcks()[0]; !a.GetOrdered() || a.GetPosition() != 0 {
			t.Fatalf("position answer %v, want position 0", a)
		}
	default:
		t.Fatal("the appender waiting for its position was forgotten by a repeated start of its view")
	}
}
