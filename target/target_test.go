package target

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	pb "github.com/augur-log/augur/api/augurpb"
)

// memStore applies entries to a list; failNext makes its next Apply fail
// without applying anything.
type memStore struct {
	applied  []uint64
	last     uint64
	failNext bool
	reads    int
}

func (m *memStore) Apply(_ context.Context, b Batch) error {
	if m.failNext {
		m.failNext = false
		return errors.New("disk full")
	}
	for _, e := range b.Entries {
		m.applied = append(m.applied, e.Index)
	}
	m.last = b.Last
	return nil
}

func (m *memStore) LastApplied(context.Context) (uint64, error) {
	m.reads++
	return m.last, nil
}

func dialTarget(t *testing.T, store Store) pb.TargetClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	Register(g, store)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient("passthrough:///target",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewTargetClient(cc)
}

func batch(prev uint64, idx ...uint64) *pb.ApplyBatch {
	b := &pb.ApplyBatch{PrevIndex: prev}
	for _, i := range idx {
		b.Entries = append(b.Entries, &pb.TargetEntry{Index: i, Key: "k"})
	}
	return b
}

func lastApplied(t *testing.T, c pb.TargetClient) uint64 {
	t.Helper()
	r, err := c.LastApplied(t.Context(), &pb.LastAppliedRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Index
}

// TestApplyInOrder: batches that follow each other are applied and
// acknowledged with their last index, an empty entry only advances the
// index, and LastApplied reports where the store stands.
func TestApplyInOrder(t *testing.T) {
	m := &memStore{}
	c := dialTarget(t, m)
	s, err := c.Apply(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	empty := &pb.ApplyBatch{PrevIndex: 7, Entries: []*pb.TargetEntry{{Index: 9, Empty: true}}}
	for _, b := range []*pb.ApplyBatch{batch(0, 2, 5), batch(5, 7), empty, batch(9, 10)} {
		if err := s.Send(b); err != nil {
			t.Fatal(err)
		}
		ack, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if want := b.Entries[len(b.Entries)-1].Index; ack.Index != want {
			t.Fatalf("ack %d, want %d", ack.Index, want)
		}
	}
	if want := []uint64{2, 5, 7, 10}; !slices.Equal(m.applied, want) {
		t.Fatalf("applied %v, want %v", m.applied, want)
	}
	if got := lastApplied(t, c); got != 10 {
		t.Fatalf("last applied %d, want 10", got)
	}
}

// TestRefuseNotNext: a batch that does not continue from the last applied
// index, as a stale connection would send after a newer one applied the
// same entries, is refused and not applied, and the stream ends.
func TestRefuseNotNext(t *testing.T) {
	m := &memStore{}
	c := dialTarget(t, m)
	fresh, _ := c.Apply(t.Context())
	stale, _ := c.Apply(t.Context())
	fresh.Send(batch(0, 1, 2))
	if _, err := fresh.Recv(); err != nil {
		t.Fatal(err)
	}
	// The stale stream resends 1..2 as if nothing had been applied.
	stale.Send(batch(0, 1, 2))
	if _, err := stale.Recv(); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale batch: %v, want FailedPrecondition", err)
	}
	// A gap is refused too.
	fresh.Send(batch(3, 4))
	if _, err := fresh.Recv(); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("gap: %v, want FailedPrecondition", err)
	}
	if want := []uint64{1, 2}; !slices.Equal(m.applied, want) {
		t.Fatalf("applied %v, want %v", m.applied, want)
	}
}

// TestApplyErrorRereads: after a failed Apply the SDK does not trust its
// cached index and reads the store's again before the next batch.
func TestApplyErrorRereads(t *testing.T) {
	m := &memStore{}
	c := dialTarget(t, m)
	s, _ := c.Apply(t.Context())
	s.Send(batch(0, 1))
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	reads := m.reads
	m.failNext = true
	s.Send(batch(1, 2))
	if _, err := s.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("failed apply: %v, want Unavailable", err)
	}
	if got := lastApplied(t, c); got != 1 || m.reads != reads+1 {
		t.Fatalf("last applied %d after %d reads, want 1 after %d", got, m.reads, reads+1)
	}
}

// TestMalformed: an empty batch or one whose indices do not increase is an
// invalid argument.
func TestMalformed(t *testing.T) {
	c := dialTarget(t, &memStore{})
	for _, b := range []*pb.ApplyBatch{{PrevIndex: 0}, batch(0, 2, 2), batch(3, 3)} {
		s, _ := c.Apply(t.Context())
		s.Send(b)
		if _, err := s.Recv(); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("batch %v: %v, want InvalidArgument", b, err)
		}
	}
}
