package storage

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/segment"
	"github.com/augur-log/augur/internal/shard"
)

// syncTestWait bounds the wait for a syncLoop's fsync.
const syncTestWait = 10 * time.Second

// groupSyncReplica returns a server under SyncGroup holding shard 0 in
// role (a primary without backups, or a backup); nothing runs its loops.
func groupSyncReplica(t *testing.T, role shard.Role) (*Server, *replica) {
	t.Helper()
	s, err := New(Config{
		ClusterID: "c", ID: "s1", Group: []Peer{{ID: "s1", Addr: "127.0.0.1:1"}}, GroupName: "g",
		Ordering: []string{"127.0.0.1:2"}, Dir: t.TempDir(), RecordBytesMax: 1024,
		HeartbeatInterval: time.Second, Sync: segment.SyncGroup, SyncInterval: time.Millisecond,
		Mode:   testMode(t, mode.EagerName),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.openStore(0)
	if err != nil {
		t.Fatal(err)
	}
	r := newReplica(s, 0, role, st, nil, 1)
	s.replicas[0] = r
	t.Cleanup(func() { st.Close() })
	return s, r
}

// runSyncLoop runs r's syncLoop until the test ends.
func runSyncLoop(t *testing.T, r *replica) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.syncLoop()
	}()
	t.Cleanup(func() {
		close(r.stop)
		<-done
	})
}

func await(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(syncTestWait):
		t.Fatalf("no %s within %v", what, syncTestWait)
	}
}

// TestGroupSyncPrimaryReportsOnlySynced: under SyncGroup a primary's
// stored records are not durable, so not reported, until its syncLoop
// fsynced them; then the report follows at once.
func TestGroupSyncPrimaryReportsOnlySynced(t *testing.T) {
	s, r := groupSyncReplica(t, rolePrimary)
	as := &appendStream{wake: make(chan struct{}, 1)}
	var entries []*pb.AppendEntry
	for seq := uint64(1); seq <= 4; seq++ {
		entries = append(entries, &pb.AppendEntry{Seq: seq, Record: &pb.Record{Payload: fmt.Appendf(nil, "r%d", seq)}})
	}
	r.appendLoop([]appendReq{{stream: as, clientID: 7, entries: entries}})
	if d, n := r.core.Durable(), r.store.Len(); d != 0 || n != 4 {
		t.Fatalf("after the write: durable %d of %d, want 0 of 4", d, n)
	}
	if rep, _ := r.core.Report(); rep.Length != 0 {
		t.Fatalf("report %+v before any fsync, want length 0", rep)
	}
	if len(s.hbWake) != 0 {
		t.Fatal("heartbeat woken before anything was durable")
	}
	if len(r.syncWake) != 1 {
		t.Fatal("the write did not ask for a sync")
	}
	runSyncLoop(t, r)
	await(t, s.hbWake, "report after the fsync")
	if d, synced := r.core.Durable(), r.store.SyncedLen(); d != 4 || synced != 4 {
		t.Fatalf("after the fsync: durable %d, synced %d; want 4 and 4", d, synced)
	}
	if rep, _ := r.core.Report(); rep.Length != 4 {
		t.Fatalf("report %+v after the fsync, want length 4", rep)
	}
}

// TestGroupSyncBackupAcknowledgesOnlySynced: under SyncGroup a backup
// acknowledges a replicated batch only once its syncLoop fsynced it.
func TestGroupSyncBackupAcknowledgesOnlySynced(t *testing.T) {
	_, r := groupSyncReplica(t, roleBackup)
	recs := []*pb.StoredRecord{
		{ClientId: 7, Seq: 1, Record: &pb.Record{Payload: []byte("a")}},
		{ClientId: 7, Seq: 2, Record: &pb.Record{Payload: []byte("b")}},
		{Noops: 3},
	}
	if err := r.appendReplicated(1, 0, recs); err != nil {
		t.Fatal(err)
	}
	if d := r.core.Durable(); d != 0 || len(r.durableCh) != 0 {
		t.Fatalf("backup acknowledges %d (woken %v) before its fsync, want nothing", d, len(r.durableCh) != 0)
	}
	runSyncLoop(t, r)
	await(t, r.durableCh, "acknowledgement after the fsync")
	if d := r.core.Durable(); d != 5 || r.store.SyncedLen() != 5 {
		t.Fatalf("backup acknowledges %d, synced %d; want 5 and 5", d, r.store.SyncedLen())
	}
}
