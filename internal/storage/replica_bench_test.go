package storage

import (
	"log/slog"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/segment"
)

// BenchmarkPrimaryAppendLoop measures a primary's loop storing batches of
// client appends (no backups, no fsync): the CPU and allocations per
// batch of the path every append takes.
func BenchmarkPrimaryAppendLoop(b *testing.B) {
	s, err := New(Config{
		ClusterID: "c", ID: "s1", Group: []Peer{{ID: "s1", Addr: "127.0.0.1:1"}}, GroupName: "g",
		Ordering: []string{"127.0.0.1:2"}, Dir: b.TempDir(), RecordBytesMax: 1 << 20,
		HeartbeatInterval: time.Second, Sync: segment.SyncNever,
		Mode: testMode(b, mode.EagerName), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	st, err := s.openStore(0)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	r := newReplica(s, 0, rolePrimary, st, nil, 1)
	s.replicas[0] = r
	as := &appendStream{wake: make(chan struct{}, 1)}
	payload := make([]byte, 512)
	const perBatch = 16
	b.ReportAllocs()
	seq := uint64(0)
	for b.Loop() {
		reqs := make([]appendReq, 4)
		for i := range reqs {
			entries := make([]*pb.AppendEntry, perBatch/4)
			for j := range entries {
				seq++
				entries[j] = &pb.AppendEntry{Seq: seq, Record: &pb.Record{Payload: payload}}
			}
			reqs[i] = appendReq{stream: as, clientID: 7, entries: entries}
		}
		r.appendLoop(reqs)
	}
}
