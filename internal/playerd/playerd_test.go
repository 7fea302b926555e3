package playerd

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/player"
	targetsdk "github.com/augur-log/augur/target"
)

// memLog is an in-memory log; positions listed in noops hold no record, as
// a speculative cluster's no-ops.
type memLog struct {
	mu      sync.Mutex
	entries []client.Entry
	noop    map[uint64]bool
	grew    chan struct{}
}

func newMemLog() *memLog { return &memLog{noop: map[uint64]bool{}, grew: make(chan struct{})} }

func (l *memLog) append(key string, noop bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pos := uint64(len(l.entries))
	l.entries = append(l.entries, client.Entry{Position: pos, Record: client.Record{Key: key, Payload: []byte(key)}})
	l.noop[pos] = noop
	close(l.grew)
	l.grew = make(chan struct{})
}

// at returns the record at pos, waiting for it; ok is false for a no-op.
func (l *memLog) at(ctx context.Context, pos uint64) (client.Entry, bool, error) {
	for {
		l.mu.Lock()
		if pos < uint64(len(l.entries)) {
			e, noop := l.entries[pos], l.noop[pos]
			l.mu.Unlock()
			return e, !noop, nil
		}
		grew := l.grew
		l.mu.Unlock()
		select {
		case <-grew:
		case <-ctx.Done():
			return client.Entry{}, false, ctx.Err()
		}
	}
}

type memSub struct {
	l    *memLog
	next uint64
}

func (s *memSub) Next(ctx context.Context) (client.Entry, error) {
	for {
		e, ok, err := s.l.at(ctx, s.next)
		if err != nil {
			return e, err
		}
		s.next++
		if ok {
			return e, nil
		}
	}
}

func (s *memSub) Close() {}

func (l *memLog) Subscribe(_ context.Context, from uint64) (Subscription, error) {
	return &memSub{l: l, next: from}, nil
}

func (l *memLog) ReadRange(ctx context.Context, from uint64, n int) ([]client.Entry, error) {
	var out []client.Entry
	for p := from; p < from+uint64(n); p++ {
		e, ok, err := l.at(ctx, p)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// memStore is a target store that records the indices it applied.
type memStore struct {
	mu      sync.Mutex
	applied []uint64
	last    uint64
}

func (m *memStore) Apply(_ context.Context, b targetsdk.Batch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range b.Entries {
		m.applied = append(m.applied, e.Index)
	}
	m.last = b.Last
	return nil
}

func (m *memStore) LastApplied(context.Context) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last, nil
}

func (m *memStore) snapshot() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.applied)
}

// targetProc is a target server that can be stopped and started again on
// the same address with the same store, as a restarted process would.
type targetProc struct {
	t     *testing.T
	addr  string
	store *memStore
	g     *grpc.Server
}

func startTarget(t *testing.T, addr string, store *memStore) *targetProc {
	t.Helper()
	var l net.Listener
	var err error
	for range 50 { // the old listener's port may take a moment to free
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	targetsdk.Register(g, store)
	go g.Serve(l)
	return &targetProc{t: t, addr: l.Addr().String(), store: store, g: g}
}

func (p *targetProc) stop() { p.g.Stop() }

// waitFor polls cond until it holds, failing the test after a bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expected is each target's share of the log's first n positions, in log
// order, as the core's routing computes it.
func expected(l *memLog, cfg Config, n int) [][]uint64 {
	c := cfg.withDefaults()
	out := make([][]uint64, len(cfg.Targets))
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := 0; p < n; p++ {
		if l.noop[uint64(p)] {
			continue
		}
		e := player.Entry{Key: l.entries[p].Record.Key}
		for _, id := range player.TargetsOf(c.Core, &e) {
			out[id] = append(out[id], uint64(p+1))
		}
	}
	return out
}

func runPlayer(t *testing.T, cfg Config, l Log) (*Server, func()) {
	t.Helper()
	s, err := New(cfg, l)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return s, func() {
		cancel()
		if err := <-done; err != nil && err != context.Canceled {
			t.Errorf("player run: %v", err)
		}
	}
}

// delivered reports whether every target applied exactly its entries of
// the log's first n positions, in log order.
func delivered(l *memLog, cfg Config, procs []*targetProc, n int) bool {
	want := expected(l, cfg, n)
	for i, p := range procs {
		if !slices.Equal(p.store.snapshot(), want[i]) {
			return false
		}
	}
	return true
}

// TestPlayerExactlyOnce runs the player against three targets over real
// gRPC while a target goes down and comes back and the player restarts,
// and checks every target applied exactly its entries, in log order.
func TestPlayerExactlyOnce(t *testing.T) {
	l := newMemLog()
	const targets = 3
	var procs []*targetProc
	cfg := Config{
		Core:         player.Config{Route: player.RouteKeyHash, BatchEntriesMax: 8, QueueEntriesMax: 32, EmptyEvery: 16},
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
		RecoveryChunk: 7,
	}
	for i := range targets {
		p := startTarget(t, "127.0.0.1:0", &memStore{})
		defer func() { procs[i].stop() }()
		procs = append(procs, p)
		cfg.Targets = append(cfg.Targets, TargetSpec{Name: fmt.Sprint("t", i), Addr: p.addr})
	}
	n := 0
	appendN := func(k int) {
		for range k {
			l.append(fmt.Sprint("key", n), n%11 == 5)
			n++
		}
	}
	s, stopPlayer := runPlayer(t, cfg, l)
	appendN(100)
	waitFor(t, "first 100", func() bool { return delivered(l, cfg, procs, n) })

	// A target goes down; the log moves on; it comes back and recovers.
	procs[1].stop()
	appendN(150)
	waitFor(t, "target 1 down", func() bool { return !s.Status().Targets[1].Up })
	procs[1] = startTarget(t, procs[1].addr, procs[1].store)
	appendN(50)
	waitFor(t, "recovery", func() bool { return delivered(l, cfg, procs, n) })

	// The player restarts while entries keep coming, with a target down.
	stopPlayer()
	procs[2].stop()
	appendN(80)
	s, stopPlayer = runPlayer(t, cfg, l)
	defer stopPlayer()
	appendN(40)
	procs[2] = startTarget(t, procs[2].addr, procs[2].store)
	waitFor(t, "after restart", func() bool { return delivered(l, cfg, procs, n) })
}

// stuckStore is a memStore whose applies block while stuck is set.
type stuckStore struct {
	memStore
	gate  sync.Mutex
	stuck chan struct{}
}

func (s *stuckStore) Apply(ctx context.Context, b targetsdk.Batch) error {
	s.gate.Lock()
	stuck := s.stuck
	s.gate.Unlock()
	if stuck != nil {
		<-stuck
	}
	return s.memStore.Apply(ctx, b)
}

// TestPlayerAckTimeout: a target that stops acknowledging (its apply hangs
// on a live connection) is taken down after the ack timeout and, once it
// answers again, recovers; the apply that hung completes late, and still
// nothing is applied twice or skipped.
func TestPlayerAckTimeout(t *testing.T) {
	l := newMemLog()
	stuck := &stuckStore{}
	cfg := Config{
		Core:         player.Config{Route: player.RouteAll, BatchEntriesMax: 4, EmptyEvery: 8},
		AckTimeout:   100 * time.Millisecond,
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
		ConnectTimeout: 100 * time.Millisecond,
	}
	var procs []*targetProc
	for i := range 2 {
		var store *memStore
		p := &targetProc{}
		if i == 0 {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			g := grpc.NewServer()
			targetsdk.Register(g, stuck)
			go g.Serve(l)
			defer g.Stop()
			p = &targetProc{t: t, addr: l.Addr().String(), store: &stuck.memStore, g: g}
		} else {
			store = &memStore{}
			p = startTarget(t, "127.0.0.1:0", store)
			defer p.stop()
		}
		procs = append(procs, p)
		cfg.Targets = append(cfg.Targets, TargetSpec{Name: fmt.Sprint("t", i), Addr: p.addr})
	}
	s, stop := runPlayer(t, cfg, l)
	defer stop()
	n := 0
	for range 20 {
		l.append(fmt.Sprint("k", n), false)
		n++
	}
	waitFor(t, "first 20", func() bool { return delivered(l, cfg, procs, n) })

	release := make(chan struct{})
	stuck.gate.Lock()
	stuck.stuck = release
	stuck.gate.Unlock()
	for range 20 {
		l.append(fmt.Sprint("k", n), false)
		n++
	}
	waitFor(t, "the silent target taken down", func() bool {
		// A status that has seen the 40 entries, so not the one published
		// before the player started.
		st := s.Status()
		return st.CurrentIndex >= 40 && st.Targets[0].State == player.Suspended.String()
	})
	stuck.gate.Lock()
	stuck.stuck = nil
	stuck.gate.Unlock()
	close(release)
	for range 20 {
		l.append(fmt.Sprint("k", n), false)
		n++
	}
	waitFor(t, "recovery", func() bool { return delivered(l, cfg, procs, n) })
}
