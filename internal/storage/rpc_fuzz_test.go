package storage

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/segment"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// FuzzUnaryRequests hands arbitrary Resolve and Ping requests to a storage
// server that is opened over one shard but not started, so no cluster is
// needed. Neither may panic; an answer to Resolve has one result per
// sequence number asked about, and says OK only with the position the
// store holds.
func FuzzUnaryRequests(f *testing.F) {
	srv := fuzzServer(f)
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

// fuzzServer opens a storage server over one shard (3) holding a record,
// a run of two no-ops and a record, all ordered, without starting it.
func fuzzServer(f *testing.F) *Server {
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
		HeartbeatInterval: time.Second, Mode: testMode(f, mode.EagerName), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.Stop)

	return srv
}

// fetchStream collects what Fetch sends.
type fetchStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*pb.FetchResponse
}

func (s *fetchStream) Context() context.Context { return s.ctx }
func (s *fetchStream) Send(m *pb.FetchResponse) error {
	s.sent = append(s.sent, m)
	return nil
}

// FuzzFetch hands arbitrary Fetch requests to the server of fuzzServer.
// It may refuse; whatever it streams must be the store's entries, in
// order from the first index asked for, within the range asked for,
// each with the checksum of what it carries.
func FuzzFetch(f *testing.F) {
	srv := fuzzServer(f)
	want := []segment.Entry{{ClientID: 9, Seq: 1, Payload: []byte("a")}, {Noops: 1}, {Noops: 1}, {ClientID: 9, Seq: 2, Payload: []byte("b")}}
	f.Add("c", uint32(3), uint64(0), uint64(4))
	f.Add("c", uint32(3), uint64(2), uint64(3))
	f.Add("c", uint32(3), uint64(3), uint64(100))
	f.Add("c", uint32(4), uint64(0), uint64(1))
	f.Add("other", uint32(3), uint64(0), uint64(1))
	f.Fuzz(func(t *testing.T, cluster string, shard uint32, first, end uint64) {
		st := &fetchStream{ctx: context.Background()}
		err := srv.Fetch(&pb.FetchRequest{ClusterId: cluster, Shard: shard, First: first, End: end}, st)
		if err != nil {
			if len(st.sent) > 0 {
				t.Fatalf("Fetch failed (%v) after sending %d messages", err, len(st.sent))
			}
			return
		}
		if cluster != "c" || shard != 3 || end <= first {
			t.Fatalf("Fetch(%q, %d, [%d, %d)) succeeded", cluster, shard, first, end)
		}
		at := first
		for _, m := range st.sent {
			if m.FirstLocal != at || len(m.Checksums) != len(m.Records) {
				t.Fatalf("message at %d (want %d) with %d records and %d checksums", m.FirstLocal, at, len(m.Records), len(m.Checksums))
			}
			for i, rec := range m.Records {
				e := entryOf(rec)
				if segment.Checksum(e) != m.Checksums[i] {
					t.Fatalf("entry at %d does not match its checksum", at)
				}
				n := max(e.Noops, 1)
				for k := range n {
					w := want[at+k]
					if at+k >= end || (w.Noops > 0) != (e.Noops > 0) || w.Seq != e.Seq || string(w.Payload) != string(e.Payload) {
						t.Fatalf("Fetch [%d, %d) sent %+v at %d, the store holds %+v", first, end, e, at+k, w)
					}
				}
				at += n
			}
		}
		if wantEnd := max(first, min(end, uint64(len(want)))); at != wantEnd {
			t.Fatalf("Fetch [%d, %d) sent up to %d, want %d", first, end, at, wantEnd)
		}
	})
}
