package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/augur-log/augur/api/augurpb"
)

// gatedOrdering answers Status only when the test lets a call through,
// numbering the calls in EventSeq and counting how many run at once.
type gatedOrdering struct {
	pb.UnimplementedOrderingServer
	gate chan struct{}

	mu             sync.Mutex
	calls, running int
	mostRunning    int
	arrived        chan struct{}
}

func (o *gatedOrdering) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	o.mu.Lock()
	o.calls++
	n := o.calls
	o.running++
	o.mostRunning = max(o.mostRunning, o.running)
	o.mu.Unlock()
	o.arrived <- struct{}{}
	defer func() {
		o.mu.Lock()
		o.running--
		o.mu.Unlock()
	}()
	select {
	case <-o.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &pb.StatusResponse{ClusterId: "gated", EventSeq: uint64(n)}, nil
}

// TestRefreshSharesOneStatusCall checks that however many callers refresh
// the shard table at once, a client has one Status call in flight, that
// each caller gets the answer of a call that began after its own call
// (never an older one), and that a caller's deadline bounds its wait.
func TestRefreshSharesOneStatusCall(t *testing.T) {
	o := &gatedOrdering{gate: make(chan struct{}), arrived: make(chan struct{}, 1000)}
	addr := serve(t, func(s *grpc.Server) { pb.RegisterOrderingServer(s, o) })
	ctx := testContext(t)
	dialed := make(chan *Client, 1)
	go func() {
		c, err := Dial(ctx, Config{ClusterID: "gated", Ordering: []string{addr}, Insecure: true})
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	<-o.arrived
	o.gate <- struct{}{} // call 1: Dial's
	c := <-dialed
	if c == nil {
		t.FailNow()
	}
	defer c.Close()

	// The first caller's call is held while the others come: none may
	// take the answer of a call that began before its own call, and
	// they share the calls that follow, one at a time.
	const callers = 100
	var wg sync.WaitGroup
	refresh := func() {
		o.mu.Lock()
		began := o.calls
		o.mu.Unlock()
		st, err := c.refresh(ctx)
		switch {
		case err != nil:
			t.Error(err)
		case int(st.GetEventSeq()) <= began:
			t.Errorf("a caller that came when %d calls had begun got the answer of call %d", began, st.GetEventSeq())
		}
	}
	wg.Go(refresh)
	<-o.arrived
	for range callers {
		wg.Go(refresh)
	}
	// Each caller's wait honours its own deadline, even while the call it
	// waits for hangs.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := c.refresh(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("refresh with a 20ms deadline while the call hangs: %v, want DeadlineExceeded", err)
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for held := true; ; {
		if held {
			o.gate <- struct{}{}
		}
		select {
		case <-o.arrived:
			held = true
		case <-done:
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.mostRunning != 1 || o.calls > callers/2 {
				t.Fatalf("%d callers made %d Status calls, at most %d at once; want one at a time, shared", callers+1, o.calls-1, o.mostRunning)
			}
			return
		}
	}
}
