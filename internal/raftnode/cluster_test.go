package raftnode

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestClusterAppliesSameSequence(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	leader := c.waitLeader()
	c.waitUntil("every replica to report the leader on LeaderChanges", func() bool {
		for _, tn := range c.nodes {
			if tn.lastLeader.Load() != leader.id {
				return false
			}
		}
		return true
	})

	c.proposeAll(values("a", 100))
	c.waitConverged()

	// A follower's proposal is forwarded to the leader by raft.
	var follower *testNode
	for _, tn := range c.nodes {
		if tn.id != leader.id {
			follower = tn
			break
		}
	}
	if err := follower.node.Propose(context.Background(), []byte("via-follower")); err != nil {
		t.Fatalf("propose on follower %d: %v", follower.id, err)
	}
	c.expected = append(c.expected, "via-follower")
	c.waitConverged()

	c.waitUntil("equal applied indexes", func() bool {
		var idx uint64
		for _, tn := range c.nodes {
			if idx != 0 && tn.node.AppliedIndex() != idx {
				return false
			}
			idx = tn.node.AppliedIndex()
		}
		// 101 values plus at least the first leader's empty entry.
		return idx >= 102
	})
}

func TestLeaderFailoverAndRestart(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	c.proposeAll(values("before", 20))
	c.waitConverged()

	old := c.waitLeader().id
	c.stop(old)
	next := c.waitLeader()
	if next.id == old {
		t.Fatalf("stopped replica %d still leads", old)
	}
	c.proposeAll(values("after", 20))
	c.waitConverged()

	// The old leader rebuilds its FSM from its WAL (no snapshot yet) and
	// catches up on what it missed.
	back := c.restart(old)
	if n := back.startupRestores; n != 0 {
		t.Errorf("restart without snapshot restored the FSM %d times", n)
	}
	got := c.waitConverged()
	if len(got) < 40 {
		t.Fatalf("converged on %d values, want at least 40", len(got))
	}
	c.proposeAll(values("rejoined", 5))
	c.waitConverged()
}

func TestSnapshotCompactionAndRestart(t *testing.T) {
	const snapshotEvery = 10
	c := newTestCluster(t, 3, snapshotEvery)
	c.proposeAll(values("a", 30))
	c.waitConverged()

	// A follower misses more than the leader keeps in its log, so it can only
	// catch up from a snapshot sent over the network.
	leader := c.waitLeader()
	var lagging uint64
	for id := range c.nodes {
		if id != leader.id {
			lagging = id
			break
		}
	}
	c.stop(lagging)
	c.proposeAll(values("b", 60))
	c.waitConverged()

	leader = c.waitLeader()
	first, _ := leader.node.storage.ms.FirstIndex()
	if first <= snapshotEvery {
		t.Errorf("leader log starts at %d: not compacted", first)
	}
	back := c.restart(lagging)
	if back.startupRestores != 1 {
		t.Errorf("restarted replica restored %d snapshots at start-up, want 1 (its own)", back.startupRestores)
	}
	c.waitConverged()
	c.waitUntil("the lagging replica to install the leader's snapshot", func() bool {
		return back.fsm.restoreCount() >= 2
	})

	// A whole-cluster restart restores every FSM from its snapshot and
	// replays the WAL tail.
	want := c.waitConverged()
	c.stopAll()
	for _, id := range slices.Sorted(maps.Keys(c.cfgs)) {
		assertDirBounded(t, c.cfgs[id].Dir)
		tn := c.restart(id)
		if tn.startupRestores != 1 {
			t.Errorf("replica %d restored %d snapshots at start-up, want 1", id, tn.startupRestores)
		}
	}
	if got := c.waitConverged(); !slices.Equal(got, want) {
		t.Fatalf("after restart replicas hold %d values, before %d", len(got), len(want))
	}
	c.proposeAll(values("c", 5))
	c.waitConverged()
}

// assertDirBounded checks that compaction left one snapshot and one WAL
// segment behind. The replica must be stopped: a running one may be writing
// a new snapshot.
func assertDirBounded(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var snaps, segs int
	for _, e := range ents {
		switch filepath.Ext(e.Name()) {
		case snapExt:
			snaps++
		case walSegmentExt:
			segs++
		case tmpExt:
			t.Errorf("%s: leftover %s", dir, e.Name())
		}
	}
	if snaps != 1 || segs != 1 {
		t.Errorf("%s holds %d snapshots and %d wal segments, want 1 and 1", dir, snaps, segs)
	}
}

func TestProposeAndStopErrors(t *testing.T) {
	c := newTestCluster(t, 1, 0)
	leader := c.waitLeader()
	n := leader.node
	ctx := context.Background()
	if err := n.Propose(ctx, nil); !errors.Is(err, ErrEmptyProposal) {
		t.Errorf("empty proposal: %v, want ErrEmptyProposal", err)
	}
	if err := n.Propose(ctx, make([]byte, ProposalBytesMax+1)); !errors.Is(err, ErrProposalTooLarge) {
		t.Errorf("large proposal: %v, want ErrProposalTooLarge", err)
	}
	c.proposeAll([]string{"only"})
	c.waitConverged()

	// A second replica may not open the same directory.
	if _, err := New(c.cfgs[leader.id], &listFSM{events: c.events}); err == nil || !strings.Contains(err.Error(), "lock") {
		t.Errorf("second New on a used Dir: %v, want a lock error", err)
	}

	n.Stop()
	n.Stop()
	if err := n.Propose(ctx, []byte("late")); !errors.Is(err, ErrStopped) {
		t.Errorf("propose after Stop: %v, want ErrStopped", err)
	}
	if n.IsLeader() || n.Leader() != 0 {
		t.Errorf("stopped node reports leader %d (self: %v)", n.Leader(), n.IsLeader())
	}
}

func TestStopWithoutStart(t *testing.T) {
	cfg := Config{ID: 1, Peers: map[uint64]string{1: "127.0.0.1:1"}, Dir: t.TempDir()}
	n, err := New(cfg, &listFSM{events: &notifier{}})
	if err != nil {
		t.Fatal(err)
	}
	n.Stop()
	n.Start() // no effect after Stop
	n.Stop()
	again, err := New(cfg, &listFSM{events: &notifier{}})
	if err != nil {
		t.Fatalf("reopen after Stop: %v", err)
	}
	again.Stop()
}

// TestLeaderWithoutQuorumStepsDown checks raft's check-quorum: a leader
// that hears from no quorum (both followers stopped, as in a partition)
// stops leading, so an ordering replica cut off from the others stops
// acting as the leader instead of holding storage servers' streams.
func TestLeaderWithoutQuorumStepsDown(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	lead := c.waitLeader()
	var followers []uint64
	for id := range c.nodes {
		if id != lead.id {
			followers = append(followers, id)
		}
	}
	for _, id := range followers {
		c.stop(id)
	}
	c.waitUntil("the leader without a quorum to step down", func() bool { return !lead.node.IsLeader() })
}

// TestLeaderSeesAStoppedFollowerUnreachable checks that a leader calls a
// follower unreachable once it heard nothing from it for an election
// timeout, and only then, while the live follower stays reachable; a
// follower cannot tell and never says so.
func TestLeaderSeesAStoppedFollowerUnreachable(t *testing.T) {
	c := newTestCluster(t, 3, 0)
	c.proposeAll(values("before", 5))
	c.waitConverged()
	ld := c.waitLeader()
	var followers []uint64
	for id := range c.nodes {
		if id != ld.id {
			followers = append(followers, id)
		}
	}
	stopped, live := followers[0], followers[1]
	for _, id := range followers {
		if ld.node.Unreachable(id) {
			t.Fatalf("the leader calls live follower %d unreachable", id)
		}
	}
	c.stop(stopped)
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(testTick)
	defer tick.Stop()
	for !ld.node.Unreachable(stopped) {
		select {
		case <-deadline.C:
			t.Fatalf("the leader never called stopped follower %d unreachable", stopped)
		case <-tick.C:
		}
	}
	if ld.node.Unreachable(live) {
		t.Errorf("the leader calls live follower %d unreachable", live)
	}
	if c.nodes[live].node.Unreachable(stopped) {
		t.Errorf("follower %d calls %d unreachable; only a leader can tell", live, stopped)
	}
}

// TestFSMErrorHaltsTheNode: a committed entry the FSM cannot apply halts the
// node instead of being skipped, since a replica that skipped it would
// hold another state than its peers.
func TestFSMErrorHaltsTheNode(t *testing.T) {
	c := newTestCluster(t, 1, 0)
	leader := c.waitLeader()
	c.proposeAll([]string{"before"})
	c.waitConverged()
	if err := leader.node.Propose(t.Context(), []byte(refusedPrefix+"x")); err != nil {
		t.Fatal(err)
	}
	c.waitUntil("the node to halt", func() bool { return leader.node.Err() != nil })
	if err := leader.node.Err(); !strings.Contains(err.Error(), "cannot apply") {
		t.Errorf("halted with %v, want the FSM's error", err)
	}
	if got := leader.fsm.values(); !slices.Equal(got, []string{"before"}) {
		t.Errorf("applied %q, want only the entry before the refused one", got)
	}
	if err := leader.node.Propose(t.Context(), []byte("after")); err == nil {
		t.Error("a halted node took a proposal")
	}
}
