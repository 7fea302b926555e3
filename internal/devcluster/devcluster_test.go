package devcluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/config"
)

// testTimeout bounds each wait of the test; it is a failure bound, never a
// synchronization device.
const testTimeout = 30 * time.Second

func TestClusterLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := Start(ctx, Options{Shards: 1, Replicas: 2, OrderingReplicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	dir := c.Dir()
	defer c.Close()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	// The equivalent cluster file is valid and names the same servers.
	cfg := c.Config()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Config() is not a valid cluster file: %v", err)
	}
	if _, err := config.Parse(mustMarshal(t, cfg)); err != nil {
		t.Fatalf("Config() does not survive a round trip: %v", err)
	}
	if got := c.StorageIDs(); len(got) != 2 || got[0] != "a1" || got[1] != "a2" {
		t.Fatalf("storage ids %v", got)
	}

	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	first, err := cl.Append(ctx, client.Record{Payload: []byte("one")})
	if err != nil {
		t.Fatal(err)
	}

	// Stop the leader; the others elect a new one and the log goes on.
	leader, err := c.Leader(ctx)
	if err != nil || leader == "" {
		t.Fatalf("leader %q, %v", leader, err)
	}
	if err := c.StopOrdering(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.StopOrdering(leader); err == nil {
		t.Fatal("stopping a stopped replica: no error")
	}
	if err := c.StopStorage(leader); err == nil {
		t.Fatal("StopStorage of an ordering replica: no error")
	}
	second, err := cl.Append(ctx, client.Record{Payload: []byte("two")})
	if err != nil {
		t.Fatal(err)
	}
	if second.Position <= first.Position {
		t.Fatalf("positions %d then %d", first.Position, second.Position)
	}
	if err := c.StartOrdering(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.StartOrdering(leader); err == nil {
		t.Fatal("starting a running replica: no error")
	}

	// A new group forms a live shard.
	if err := c.AddGroup(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := c.AddGroup(ctx, "b"); err == nil {
		t.Fatal("adding an existing group: no error")
	}
	if got := c.Config().Groups(); len(got) != 2 || got[1] != "b" {
		t.Fatalf("groups %v", got)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := cl.ReadRange(ctx, first.Position, 2)
	if err != nil {
		t.Fatal(err)
	}
	if string(got[0].Record.Payload) != "one" || string(got[1].Record.Payload) != "two" {
		t.Fatalf("read back %q, %q", got[0].Record.Payload, got[1].Record.Payload)
	}

	cl.Close()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("temporary data dir %s survives Close: %v", dir, err)
	}
}

// TestOrderingOnly starts the ordering layer alone, as the emulated shards
// of `augur bench scale --emulate` use it.
func TestOrderingOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an ordering layer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := startReady(ctx, t, Options{NoStorage: true, Shards: 3, Mode: config.ModeSpec, NoStagger: true})
	cfg := c.Config()
	if len(cfg.Storage) != 0 || len(cfg.Ordering) != DefaultOrderingReplicas || cfg.StaggerAbove != 0 {
		t.Fatalf("config: %d storage servers, %d ordering replicas, stagger_above %d", len(cfg.Storage), len(cfg.Ordering), cfg.StaggerAbove)
	}
	if err := cfg.ValidateWithoutStorage(); err != nil {
		t.Fatal(err)
	}
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LeaderId == "" || len(st.Shards) != 0 {
		t.Fatalf("status: leader %q, %d shards", st.LeaderId, len(st.Shards))
	}
}

// A storage server watching a follower would get every cut late, so a
// follower that knows the leader ends a Watch by naming it.
func TestWatchOnAFollowerNamesTheLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an ordering layer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := startReady(ctx, t, Options{NoStorage: true})
	cfg := c.Config()
	followers := 0
	for _, n := range cfg.Ordering {
		conn, err := grpc.NewClient(n.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		oc := pb.NewOrderingClient(conn)
		// Wait until this replica knows a leader; the failure bound is
		// ctx's.
		var st *pb.StatusResponse
		for st == nil || st.LeaderAddr == "" {
			if st, err = oc.Status(ctx, &pb.StatusRequest{ClusterId: cfg.ClusterID}); err != nil {
				t.Fatalf("status of %s: %v", n.ID, err)
			}
		}
		if st.LeaderId == n.ID {
			continue
		}
		followers++
		stream, err := oc.Watch(ctx, &pb.WatchRequest{ClusterId: cfg.ClusterID, From: 1, ServerId: "a2"})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("watch on follower %s: %v", n.ID, err)
		}
		if resp.LeaderAddr != st.LeaderAddr || len(resp.Events) != 0 || resp.Snapshot != nil {
			t.Fatalf("follower %s answered a watch with %v, want only leader_addr %s", n.ID, resp, st.LeaderAddr)
		}
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("follower %s kept the watch open after naming the leader: %v", n.ID, err)
		}
	}
	if followers != len(cfg.Ordering)-1 {
		t.Fatalf("checked %d followers of %d ordering replicas", followers, len(cfg.Ordering))
	}
}

// startReady starts a cluster that the test's end closes, and waits until
// it is ready.
func startReady(ctx context.Context, t *testing.T, o Options) *Cluster {
	t.Helper()
	c, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{Shards: -1}, {Replicas: 1}, {Replicas: 4}, {OrderingReplicas: -3}, {Fsync: "sometimes"}} {
		if c, err := Start(context.Background(), o); err == nil {
			c.Close()
			t.Errorf("%+v: no error", o)
		}
	}
}

func mustMarshal(t *testing.T, c *config.Cluster) []byte {
	t.Helper()
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestANewShardsBackupsServeBeforeTheFirstAppend checks that the backups
// of a shard just formed hold their copy at once, as `augur status`
// shows them, rather than from the shard's first append on.
func TestANewShardsBackupsServeBeforeTheFirstAppend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := startReady(ctx, t, Options{Shards: 1, Replicas: 3})
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Shards) != 1 || len(st.Shards[0].Replicas) != 3 {
		t.Fatalf("shards %v", st.Shards)
	}
	for _, r := range st.Shards[0].Replicas[1:] {
		// The primary's first message may still be on its way.
		for {
			resp, err := cl.Ping(ctx, r.Addr)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Health) == 1 && resp.Health[0].Role == "backup" {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("backup %s holds no copy of the new shard: health %v", r.Id, resp.Health)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// recordingHandler keeps every record it is given.
type recordingHandler struct {
	mu      *sync.Mutex
	records *[]slog.Record
}

func (h recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.records = append(*h.records, r)
	return nil
}
func (h recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordingHandler) WithGroup(string) slog.Handler      { return h }

// TestCloseLogsOnlyErrors checks that closing a cluster logs no warning:
// its servers stop one by one, and the others' warnings of vanished peers
// (Raft streams, leaders) only alarm whoever closed it. Errors still show.
func TestCloseLogsOnlyErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var mu sync.Mutex
	var records []slog.Record
	c := startReady(ctx, t, Options{Shards: 1, Logger: slog.New(recordingHandler{mu: &mu, records: &records})})
	// What the servers log before the close (a shard formed, say) may
	// still come in; only what they log from the close on counts.
	closing := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.serverLog.Warn("a late warning")
	c.serverLog.Error("a late error")
	mu.Lock()
	defer mu.Unlock()
	var levels []string
	for _, r := range records {
		if !r.Time.Before(closing) {
			levels = append(levels, r.Level.String()+" "+r.Message)
		}
	}
	if len(levels) != 1 || levels[0] != "ERROR a late error" {
		t.Fatalf("logged while and after closing: %q, want only the late error", levels)
	}
}
