package raftnode

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/augur-log/augur/api/augurpb"
)

func TestCoalesceCommits(t *testing.T) {
	app := func(name string) outMsg { return outMsg{data: []byte(name), app: true} }
	commit := func(name string) outMsg { return outMsg{data: []byte(name), app: true, commitOnly: true} }
	other := func(name string) outMsg { return outMsg{data: []byte(name)} }
	names := func(ms []outMsg) []string {
		var out []string
		for _, m := range ms {
			out = append(out, string(m.data))
		}
		return out
	}
	cases := []struct {
		name string
		in   []outMsg
		sent []string
		held string // "" when nothing is held
	}{
		{"a later append replaces a commit", []outMsg{commit("c1"), app("a2")}, []string{"a2"}, ""},
		{"every earlier commit goes", []outMsg{commit("c1"), other("hb"), commit("c2"), app("a3")}, []string{"hb", "a3"}, ""},
		{"a trailing commit is held", []outMsg{app("a1"), commit("c2")}, []string{"a1"}, "c2"},
		{"only the newest of trailing commits is held", []outMsg{commit("c1"), commit("c2")}, nil, "c2"},
		{"a message after a commit sends it", []outMsg{commit("c1"), other("vote")}, []string{"c1", "vote"}, ""},
		{"a lone commit is held", []outMsg{commit("c1")}, nil, "c1"},
		{"no appends pass unchanged", []outMsg{other("hb1"), other("hb2")}, []string{"hb1", "hb2"}, ""},
	}
	for _, tc := range cases {
		sent, held, hold := coalesceCommits(slices.Clone(tc.in))
		if got := names(sent); !slices.Equal(got, tc.sent) {
			t.Errorf("%s: sent %v, want %v", tc.name, got, tc.sent)
		}
		if hold != (tc.held != "") || (hold && string(held.data) != tc.held) {
			t.Errorf("%s: held %q (%v), want %q", tc.name, held.data, hold, tc.held)
		}
	}
}

// batchRecorder is a peer's RaftTransport that passes on every batch it
// receives.
type batchRecorder struct {
	augurpb.UnimplementedRaftTransportServer
	batches chan []string
}

func (b *batchRecorder) Send(s grpc.ClientStreamingServer[augurpb.RaftBatch, augurpb.RaftAck]) error {
	for {
		batch, err := s.Recv()
		if err != nil {
			return err
		}
		var names []string
		for _, m := range batch.Messages {
			names = append(names, string(m))
		}
		b.batches <- names
	}
}

// A peer's stream drops a commit that a later append replaces, and sends
// one that nothing replaces after holding it.
func TestStreamHoldsCommitsUntilReplacedOrDue(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &batchRecorder{batches: make(chan []string, 16)}
	gs := grpc.NewServer()
	augurpb.RegisterRaftTransportServer(gs, rec)
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	p := &peer{id: 2, conn: conn, client: augurpb.NewRaftTransportClient(conn), q: make(chan outMsg, 16),
		reportc: make(chan peerReport, 1), log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Queued before the stream starts, so that both are in its first batch.
	p.q <- outMsg{data: []byte("a2"), app: true}
	done := make(chan error, 1)
	go func() {
		_, err := p.stream(ctx, outMsg{data: []byte("c1"), app: true, commitOnly: true})
		done <- err
	}()
	next := func() []string {
		t.Helper()
		select {
		case b := <-rec.batches:
			return b
		case err := <-done:
			t.Fatalf("stream ended: %v", err)
		case <-ctx.Done():
			t.Fatal("no batch arrived")
		}
		return nil
	}
	if b := next(); !slices.Equal(b, []string{"a2"}) {
		t.Fatalf("first batch %v, want only the append that replaces the commit", b)
	}
	p.q <- outMsg{data: []byte("c3"), app: true, commitOnly: true}
	if b := next(); !slices.Equal(b, []string{"c3"}) {
		t.Fatalf("a commit nothing replaced arrived as %v", b)
	}
	p.q <- outMsg{data: []byte("hb")}
	if b := next(); !slices.Equal(b, []string{"hb"}) {
		t.Fatalf("a heartbeat arrived as %v", b)
	}
}
