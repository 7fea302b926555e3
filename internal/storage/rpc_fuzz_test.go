package storage

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/segment"
	"google.golang.org/protobuf/proto"
)

// FuzzUnaryRequests hands arbitrary Resolve and Ping requests to a storage
// server that is opened over one shard but not started, so no cluster is
// needed. Neither may panic; an answer to Resolve has one result per
// sequence number asked about, and says OK only with the position the
// store holds.
func FuzzUnaryRequests(f *testing.F) {
	dir := f.TempDir()
	st, err := segment.Open(segment.Options{Dir: filepath.Join(dir, "shard-3"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := st.Append([]segment.Entry{{ClientID: 9, Seq: 1, Payload: []byte("a")}, {Noops: 2}, {ClientID: 9, Seq: 2, Payload: []byte("b")}}); err != nil {
		f.Fatal(err)
	}
	if err := st.Assign(segment.Run{Cut: 1, CutEnd: 4, Count: 4}); err != nil {
		f.Fatal(err)
	}
	if err := st.Close(); err != nil {
		f.Fatal(err)
	}
	srv, err := New(Config{
		ClusterID: "c", ID: "s1", GroupName: "g", Group: []Peer{{ID: "s1", Addr: "127.0.0.1:1"}},
		Ordering: []string{"127.0.0.1:2"}, Dir: dir, RecordBytesMax: 1 << 10,
		HeartbeatInterval: time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.Stop)

	seed := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(seed(&pb.ResolveRequest{ClusterId: "c", Shard: 3, ClientId: 9, Seqs: []uint64{1, 2, 7}}))
	f.Add(seed(&pb.ResolveRequest{ClusterId: "c", Shard: 4, ClientId: 9, Seqs: []uint64{1}}))
	f.Add(seed(&pb.ResolveRequest{ClusterId: "other", Shard: 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx := context.Background()
		var ping pb.PingRequest
		if proto.Unmarshal(b, &ping) == nil {
			if resp, err := srv.Ping(ctx, &ping); (err == nil) != (ping.ClusterId == "c") || err == nil && resp.ServerId != "s1" {
				t.Fatalf("Ping(%v) = %v, %v", &ping, resp, err)
			}
		}
		var req pb.ResolveRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		resp, err := srv.Resolve(ctx, &req)
		if err != nil {
			return
		}
		if req.ClusterId != "c" || req.Shard != 3 {
			t.Fatalf("Resolve(%v) answered for another cluster or shard: %v", &req, resp)
		}
		if len(resp.Results) != len(req.Seqs) {
			t.Fatalf("Resolve asked about %d seqs, answered %d", len(req.Seqs), len(resp.Results))
		}
		for i, r := range resp.Results {
			if r.Seq != req.Seqs[i] {
				t.Fatalf("result %d is for seq %d, asked %d", i, r.Seq, req.Seqs[i])
			}
			if r.Code != pb.Code_OK {
				continue
			}
			want, ok := map[string]uint64{"9/1": 0, "9/2": 3}[fmt.Sprintf("%d/%d", req.ClientId, r.Seq)]
			if !ok || r.Position != want {
				t.Fatalf("Resolve says client %d seq %d is at %d", req.ClientId, r.Seq, r.Position)
			}
		}
	})
}
