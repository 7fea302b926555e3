package raftnode

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
)

// TestLeaderAppliesBeforePersistingNewEntries checks that a leader applies
// the entries a Ready commits before it writes and fsyncs the entries the
// same Ready appends: under load every Ready of the leader carries both
// (the cut that just committed and the cuts proposed since), and applying
// after the fsync made each commit wait for one more fsync.
func TestLeaderAppliesBeforePersistingNewEntries(t *testing.T) {
	var both, late atomic.Int64
	beforeSaveHook = func(n *Node, rd *raft.Ready) {
		if !n.isLeader.Load() || len(rd.CommittedEntries) == 0 || len(rd.Entries) == 0 {
			return
		}
		both.Add(1)
		last := rd.CommittedEntries[len(rd.CommittedEntries)-1].GetIndex()
		if n.AppliedIndex() < last {
			late.Add(1)
		}
	}
	t.Cleanup(func() { beforeSaveHook = nil })

	c := newTestCluster(t, 3, 0)
	tn := c.waitLeader()
	// A steady stream of proposals, one after another: the leader's
	// Readys then commit some entries while appending newer ones.
	deadline := time.Now().Add(waitTimeout)
	for i := 0; both.Load() < 20 && time.Now().Before(deadline); i++ {
		if err := tn.node.Propose(context.Background(), []byte(fmt.Sprintf("v%d", i))); err != nil {
			t.Fatalf("propose: %v", err)
		}
	}
	if both.Load() == 0 {
		t.Fatal("no leader Ready both committed and appended entries; the test proves nothing")
	}
	if n := late.Load(); n > 0 {
		t.Fatalf("%d of %d leader Readys persisted new entries before applying the committed ones", n, both.Load())
	}
}
