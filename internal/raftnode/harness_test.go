package raftnode

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
)

const (
	// waitTimeout bounds every wait of a test; a healthy run needs a fraction.
	waitTimeout = 20 * time.Second
	// reproposeAfter is how long a proposer waits for its values before it
	// assumes a leader change dropped them, as a real client would.
	reproposeAfter = 2 * time.Second
	testTick       = 5 * time.Millisecond
)

// notifier wakes every waiter on each signal; waiters take the channel
// before checking their condition, so no signal is lost.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) signal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// waitFor returns once cond holds, or false after timeout.
func (n *notifier) waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ch := n.wait()
		if cond() {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return cond()
		}
	}
}

// listFSM is the FSM of the tests: the list of applied values.
type listFSM struct {
	events *notifier

	mu       sync.Mutex
	state    listState
	restores int
	err      error // first invariant violation seen
}

type listState struct {
	Index  uint64   `json:"index"`
	Values []string `json:"values"`
}

// refusedPrefix starts the values listFSM cannot apply.
const refusedPrefix = "refused:"

func (f *listFSM) Apply(index uint64, data []byte) error {
	if strings.HasPrefix(string(data), refusedPrefix) {
		return fmt.Errorf("listFSM cannot apply %q", data)
	}
	f.mu.Lock()
	if index <= f.state.Index && f.err == nil {
		f.err = fmt.Errorf("apply index %d after %d", index, f.state.Index)
	}
	f.state.Index = index
	f.state.Values = append(f.state.Values, string(data))
	f.mu.Unlock()
	f.events.signal()
	return nil
}

func (f *listFSM) Snapshot() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return json.Marshal(f.state)
}

func (f *listFSM) Restore(data []byte) error {
	var st listState
	if err := json.Unmarshal(data, &st); err != nil {
		return err
	}
	f.mu.Lock()
	f.state = st
	f.restores++
	f.mu.Unlock()
	f.events.signal()
	return nil
}

func (f *listFSM) values() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.state.Values)
}

func (f *listFSM) restoreCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restores
}

func (f *listFSM) invariantErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

type testNode struct {
	id         uint64
	node       *Node
	fsm        *listFSM
	srv        *grpc.Server
	serveDone  chan struct{}
	watchStop  chan struct{}
	watchDone  chan struct{}
	lastLeader atomic.Uint64 // last value read from LeaderChanges
	// startupRestores is how often New restored the FSM, read before Start
	// so that a snapshot from the leader cannot be counted in.
	startupRestores int
}

// testCluster runs replicas with real gRPC servers on loopback.
type testCluster struct {
	t        *testing.T
	cfgs     map[uint64]Config
	nodes    map[uint64]*testNode
	events   *notifier
	expected []string // every value proposed so far, in order
}

func newTestCluster(t *testing.T, size int, snapshotEntries uint64) *testCluster {
	t.Helper()
	c := &testCluster{
		t:      t,
		cfgs:   make(map[uint64]Config),
		nodes:  make(map[uint64]*testNode),
		events: &notifier{},
	}
	peers := make(map[uint64]string)
	listeners := make(map[uint64]net.Listener)
	for id := uint64(1); id <= uint64(size); id++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		listeners[id] = lis
		peers[id] = lis.Addr().String()
	}
	base := t.TempDir()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: testLogLevel()}))
	for id := range listeners {
		c.cfgs[id] = Config{
			ID:              id,
			Peers:           peers,
			Dir:             filepath.Join(base, fmt.Sprintf("r%d", id)),
			Fsync:           true,
			TickInterval:    testTick,
			SnapshotEntries: snapshotEntries,
			Logger:          logger,
		}
	}
	t.Cleanup(c.stopAll)
	for _, id := range slices.Sorted(maps.Keys(listeners)) {
		c.startOn(id, listeners[id])
	}
	return c
}

func (c *testCluster) startOn(id uint64, lis net.Listener) *testNode {
	c.t.Helper()
	fsm := &listFSM{events: c.events}
	n, err := New(c.cfgs[id], fsm)
	if err != nil {
		lis.Close()
		c.t.Fatalf("New(%d): %v", id, err)
	}
	tn := &testNode{
		id:        id,
		node:      n,
		fsm:       fsm,
		srv:       grpc.NewServer(ServerOptions()...),
		serveDone: make(chan struct{}),
		watchStop: make(chan struct{}),
		watchDone: make(chan struct{}),
	}
	n.RegisterGRPC(tn.srv)
	go func() {
		defer close(tn.serveDone)
		_ = tn.srv.Serve(lis)
	}()
	go func() {
		defer close(tn.watchDone)
		for {
			select {
			case l := <-n.LeaderChanges():
				tn.lastLeader.Store(l)
				c.events.signal()
			case <-tn.watchStop:
				return
			}
		}
	}()
	c.nodes[id] = tn
	tn.startupRestores = fsm.restoreCount()
	n.Start()
	return tn
}

// restart starts replica id again from its directory, on its old address.
func (c *testCluster) restart(id uint64) *testNode {
	c.t.Helper()
	lis, err := net.Listen("tcp", c.cfgs[id].Peers[id])
	if err != nil {
		c.t.Fatalf("listen again on %s: %v", c.cfgs[id].Peers[id], err)
	}
	return c.startOn(id, lis)
}

func (c *testCluster) stop(id uint64) {
	tn := c.nodes[id]
	if tn == nil {
		return
	}
	delete(c.nodes, id)
	tn.node.Stop()
	tn.srv.Stop()
	<-tn.serveDone
	close(tn.watchStop)
	<-tn.watchDone
	if err := tn.fsm.invariantErr(); err != nil {
		c.t.Errorf("replica %d: %v", id, err)
	}
	c.events.signal()
}

func (c *testCluster) stopAll() {
	for _, id := range slices.Sorted(maps.Keys(c.nodes)) {
		c.stop(id)
	}
}

func (c *testCluster) waitUntil(what string, cond func() bool) {
	c.t.Helper()
	if !c.events.waitFor(waitTimeout, cond) {
		c.t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
	}
}

// leader returns the replica every live replica recognises as leader, if any.
func (c *testCluster) leader() *testNode {
	var lead uint64
	for _, tn := range c.nodes {
		l := tn.node.Leader()
		if l == 0 || (lead != 0 && l != lead) {
			return nil
		}
		lead = l
	}
	tn := c.nodes[lead]
	if tn == nil || !tn.node.IsLeader() {
		return nil
	}
	return tn
}

func (c *testCluster) waitLeader() *testNode {
	c.t.Helper()
	var tn *testNode
	c.waitUntil("a leader all live replicas agree on", func() bool {
		tn = c.leader()
		return tn != nil
	})
	return tn
}

// proposeAll proposes values on the leader until the leader applied them
// all. raft may drop an accepted proposal when leadership changes; such
// values are proposed again, as a client would, so a value can appear twice
// (identically on every replica).
func (c *testCluster) proposeAll(values []string) {
	c.t.Helper()
	c.expected = append(c.expected, values...)
	pending := values
	for attempt := 1; len(pending) > 0; attempt++ {
		if attempt > 5 {
			c.t.Fatalf("values still not applied after %d attempts: %d missing", attempt-1, len(pending))
		}
		tn := c.waitLeader()
		for _, v := range pending {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			err := tn.node.Propose(ctx, []byte(v))
			cancel()
			if err != nil {
				c.t.Logf("propose %q on %d: %v", v, tn.id, err)
				break
			}
		}
		c.events.waitFor(reproposeAfter, func() bool {
			return len(missing(tn.fsm.values(), values)) == 0
		})
		pending = missing(tn.fsm.values(), values)
		if len(pending) > 0 {
			c.t.Logf("attempt %d: %d values not applied on %d; proposing again", attempt, len(pending), tn.id)
		}
	}
}

func missing(have, want []string) []string {
	seen := make(map[string]bool, len(have))
	for _, v := range have {
		seen[v] = true
	}
	var out []string
	for _, v := range want {
		if !seen[v] {
			out = append(out, v)
		}
	}
	return out
}

// firstOccurrences drops repeats, keeping the order of first appearance.
func firstOccurrences(vals []string) []string {
	seen := make(map[string]bool, len(vals))
	var out []string
	for _, v := range vals {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// waitConverged waits until every live replica applied the same sequence and
// that sequence holds every proposed value in proposal order.
func (c *testCluster) waitConverged() []string {
	c.t.Helper()
	var got []string
	ok := c.events.waitFor(waitTimeout, func() bool {
		first := true
		for _, tn := range c.nodes {
			vals := tn.fsm.values()
			if first {
				got, first = vals, false
			} else if !slices.Equal(got, vals) {
				return false
			}
		}
		return slices.Equal(firstOccurrences(got), c.expected)
	})
	if !ok {
		for _, id := range slices.Sorted(maps.Keys(c.nodes)) {
			vals := c.nodes[id].fsm.values()
			c.t.Logf("replica %d applied %d values: %.200v", id, len(vals), vals)
		}
		c.t.Fatalf("replicas did not converge on the %d proposed values", len(c.expected))
	}
	if len(got) != len(c.expected) {
		c.t.Logf("%d values applied twice after re-proposal", len(got)-len(c.expected))
	}
	return got
}

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// testLogLevel is Warn unless RAFTNODE_TEST_LOG names another slog level.
func testLogLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("RAFTNODE_TEST_LOG"))); err != nil {
		return slog.LevelWarn
	}
	return l
}
