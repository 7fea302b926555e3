package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/devcluster"
)

// startCluster runs a dev cluster (3 ordering replicas, 2 shards × 2) for one
// test and returns a connected client.
func startCluster(t *testing.T) (*devcluster.Cluster, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), RecordBytesMax: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, client.Config{ClusterID: dc.ClusterID, Ordering: dc.OrderingAddrs(), RecordBytesMax: 1 << 20, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return dc, c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestAppendReadSubscribe(t *testing.T) {
	_, c := startCluster(t)
	ctx := testCtx(t)
	sub, err := c.Subscribe(ctx, 0, client.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	tagged, err := c.Subscribe(ctx, 0, client.Filter{Tags: []string{"odd"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tagged.Close()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oneShard := st.Shards[len(st.Shards)-1].Id
	ofShard, err := c.Subscribe(ctx, 0, client.OnShard(oneShard))
	if err != nil {
		t.Fatal(err)
	}
	defer ofShard.Close()
	const n = 40
	acks := map[uint64]string{}
	var shardAcks []client.Ack
	for i := 0; i < n; i++ {
		rec := client.Record{Key: fmt.Sprintf("k%d", i%3), Payload: []byte(fmt.Sprintf("r%d", i))}
		if i%2 == 1 {
			rec.Tags = []string{"odd"}
		}
		a, err := c.Append(ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := acks[a.Position]; dup {
			t.Fatalf("position %d acknowledged twice", a.Position)
		}
		acks[a.Position] = string(rec.Payload)
		if a.Shard == oneShard {
			shardAcks = append(shardAcks, a)
		}
	}
	if len(shardAcks) == 0 {
		t.Fatalf("no append went to shard %d", oneShard)
	}
	for _, a := range shardAcks {
		e, err := ofShard.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e.Position != a.Position || e.Shard != oneShard || string(e.Record.Payload) != acks[a.Position] {
			t.Fatalf("subscriber of shard %d got %d:%s from shard %d, want %d:%s", oneShard, e.Position, e.Record.Payload, e.Shard, a.Position, acks[a.Position])
		}
	}
	for p := uint64(0); p < n; p++ {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e.Position != p || string(e.Record.Payload) != acks[p] {
			t.Fatalf("subscriber got %d:%s, want %d:%s", e.Position, e.Record.Payload, p, acks[p])
		}
	}
	for i := 0; i < n/2; i++ {
		e, err := tagged.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var k int
		fmt.Sscanf(string(e.Record.Payload), "r%d", &k)
		if k%2 != 1 || acks[e.Position] != string(e.Record.Payload) {
			t.Fatalf("filtered subscriber got %d:%s", e.Position, e.Record.Payload)
		}
	}
	es, err := c.ReadRange(ctx, 5, 10)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		if e.Position != uint64(5+i) || string(e.Record.Payload) != acks[e.Position] {
			t.Fatalf("read %d: %d:%s", i, e.Position, e.Record.Payload)
		}
	}
	tail, err := c.CheckTail(ctx)
	if err != nil || tail != n {
		t.Fatalf("tail %d, %v; want %d", tail, err, n)
	}
}

func TestReadBeyondTailWaitsForDeadline(t *testing.T) {
	_, c := startCluster(t)
	ctx := testCtx(t)
	if _, err := c.Append(ctx, client.Record{Payload: []byte("only")}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.Read(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read beyond the tail: %v, want deadline exceeded", err)
	}
	// A read that waits is answered when the record arrives.
	got := make(chan client.Entry, 1)
	go func() {
		e, err := c.Read(ctx, 1)
		if err == nil {
			got <- e
		}
		close(got)
	}()
	if _, err := c.Append(ctx, client.Record{Payload: []byte("second")}); err != nil {
		t.Fatal(err)
	}
	e, ok := <-got
	if !ok || string(e.Record.Payload) != "second" {
		t.Fatalf("waiting read got %+v", e)
	}
}

func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	dc, c := startCluster(t)
	ctx := testCtx(t)
	if _, err := c.Append(ctx, client.Record{}); !errors.Is(err, client.ErrInvalidRecord) {
		t.Fatalf("empty record: %v", err)
	}
	if _, err := c.Append(ctx, client.Record{Payload: make([]byte, 2<<20)}); !errors.Is(err, client.ErrInvalidRecord) {
		t.Fatalf("record over the client's limit: %v", err)
	}
	// The servers enforce their own limit (64 KiB here) for clients that
	// allow more.
	_, err := c.Append(ctx, client.Record{Payload: make([]byte, 100<<10)})
	if !errors.Is(err, client.ErrInvalidRecord) || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("record over the server's limit: %v", err)
	}
	if _, err := c.AppendToShard(ctx, client.Record{Payload: []byte("x")}, 99); !errors.Is(err, client.ErrUnknownShard) {
		t.Fatalf("unknown shard: %v", err)
	}
	if _, err := client.Dial(ctx, client.Config{ClusterID: "other", Ordering: dc.OrderingAddrs(), Insecure: true}); !errors.Is(err, client.ErrWrongCluster) || strings.Contains(err.Error(), strconv.Quote(dc.ClusterID)) {
		t.Fatalf("wrong cluster: %v (must not tell the cluster's id %q)", err, dc.ClusterID)
	}
	if _, err := c.ReadRange(ctx, 0, 0); err == nil {
		t.Fatal("read of zero records accepted")
	}
	if err := c.Trim(ctx, 1000); err == nil {
		t.Fatal("trim beyond the tail accepted")
	}
	if err := c.FinalizeShard(ctx, 42, 0); !errors.Is(err, client.ErrUnknownShard) {
		t.Fatalf("finalize unknown shard: %v", err)
	}
	// Nothing above reached the log.
	tail, err := c.CheckTail(ctx)
	if err != nil || tail != 0 {
		t.Fatalf("tail %d, %v after refused input", tail, err)
	}
}

// failWholeShard ends shard sh by failing both its servers, one after
// the other: the backup (the shard fails over to its primary alone), then
// the primary (no replica is left, so the shard is finalized as failed).
// The backup then restarts: its copy serves what the shard ordered, and
// it forms no shard (only a group's primary does).
func failWholeShard(t *testing.T, ctx context.Context, dc *devcluster.Cluster, c *client.Client, sh *pb.ShardInfo) {
	t.Helper()
	primary, backup := sh.Replicas[0].Id, sh.Replicas[1].Id
	if err := dc.StopStorage(backup); err != nil {
		t.Fatal(err)
	}
	waitShard(t, ctx, c, sh.Id, "failed over to its primary alone", func(now *pb.ShardInfo) bool {
		return now.Epoch > sh.Epoch && len(now.Replicas) == 1
	})
	if err := dc.StopStorage(primary); err != nil {
		t.Fatal(err)
	}
	waitShard(t, ctx, c, sh.Id, "finalized", func(now *pb.ShardInfo) bool { return now.State == pb.ShardState_SHARD_FINALIZED })
	if err := dc.StartStorage(backup); err != nil {
		t.Fatal(err)
	}
}

// waitShard waits until shard id is as ok wants it (it polls the status).
func waitShard(t *testing.T, ctx context.Context, c *client.Client, id uint32, what string, ok func(*pb.ShardInfo) bool) {
	t.Helper()
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range st.Shards {
			if sh.Id == id && ok(sh) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("shard %d never %s: %v", id, what, st.Shards)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// startClusterWithoutLiveShard runs a cluster of one shard whose servers
// have both failed: the shard is finalized, and its primary, down, forms
// no new one, so no shard takes appends.
func startClusterWithoutLiveShard(t *testing.T) *client.Client {
	t.Helper()
	ctx := testCtx(t)
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), Shards: 1, Replicas: 2, OrderingReplicas: 1, FailureTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := dc.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	only := st.Shards[0]
	sub, err := c.Subscribe(ctx, 0, client.OnShard(only.Id))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// A record, so that each server holds a copy of the shard to serve.
	if _, err := c.AppendToShard(ctx, client.Record{Payload: []byte("only")}, only.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); err != nil {
		t.Fatal(err)
	}
	failWholeShard(t, ctx, dc, c, only)
	if _, err := sub.Next(ctx); !errors.Is(err, client.ErrShardFinalized) {
		t.Fatalf("shard %d after its servers failed: %v, want ErrShardFinalized", only.Id, err)
	}
	if st, err = c.Status(ctx); err != nil {
		t.Fatal(err)
	}
	for _, sh := range st.Shards {
		if sh.State == pb.ShardState_SHARD_LIVE {
			t.Fatalf("shard %d is live", sh.Id)
		}
	}
	return c
}

// TestAppendWithNoLiveShardEndsWithItsDeadline appends while no shard is
// live: Append and AppendAsync must fail with ErrNoLiveShard when their
// ctx ends, not wait for a shard beyond it.
func TestAppendWithNoLiveShardEndsWithItsDeadline(t *testing.T) {
	c := startClusterWithoutLiveShard(t)
	ctx := testCtx(t)
	short, cancel := context.WithTimeout(ctx, appendDeadline)
	defer cancel()
	start := time.Now()
	_, err := c.Append(short, client.Record{Payload: []byte("nowhere")})
	if took := time.Since(start); took > answerBound {
		t.Fatalf("Append took %v with a deadline of %v", took, appendDeadline)
	}
	if !errors.Is(err, client.ErrNoLiveShard) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Append with no live shard: %v, want ErrNoLiveShard and the deadline", err)
	}

	if err := appendAsyncWithDeadline(t, ctx, c, "nowhere"); !errors.Is(err, client.ErrNoLiveShard) {
		t.Fatalf("AppendAsync with no live shard: %v, want ErrNoLiveShard", err)
	}
}

const (
	// appendDeadline is the deadline of the appends that must end with it.
	appendDeadline = 300 * time.Millisecond
	// answerBound is far below any wait for what never comes (a live
	// shard, a cut) and far above scheduling noise.
	answerBound = 3 * time.Second
)

// appendAsyncWithDeadline appends payload with AppendAsync under a ctx
// that ends after appendDeadline and returns the error done gets; the
// test fails if done is not called within answerBound.
func appendAsyncWithDeadline(t *testing.T, ctx context.Context, c *client.Client, payload string) error {
	t.Helper()
	short, cancel := context.WithTimeout(ctx, appendDeadline)
	defer cancel()
	done := make(chan error, 1)
	c.AppendAsync(short, client.Record{Payload: []byte(payload)}, func(_ client.Ack, err error) { done <- err })
	bound, cancelBound := context.WithTimeout(ctx, answerBound)
	defer cancelBound()
	select {
	case err := <-done:
		return err
	case <-bound.Done():
		t.Fatalf("AppendAsync with a deadline of %v still unanswered after %v", appendDeadline, answerBound)
		return nil
	}
}

// TestUnorderedAppendEndsWithItsDeadline appends while no cut can order
// anything (every ordering replica is down) over a live append stream:
// the primary stores the record and cannot answer, so AppendAsync must
// give up when its ctx ends, saying the record may still be ordered.
func TestUnorderedAppendEndsWithItsDeadline(t *testing.T) {
	dc, c := startCluster(t)
	ctx := testCtx(t)
	// The append streams to both shards are open before the ordering
	// layer goes.
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range st.Shards {
		if _, err := c.AppendToShard(ctx, client.Record{Payload: []byte("before")}, sh.Id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range dc.OrderingIDs() {
		if err := dc.StopOrdering(id); err != nil {
			t.Fatal(err)
		}
	}
	err = appendAsyncWithDeadline(t, ctx, c, "unordered")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "may still be ordered") {
		t.Fatalf("AppendAsync with nothing ordering: %v, want the deadline and that it may still be ordered", err)
	}
}

func TestTrim(t *testing.T) {
	_, c := startCluster(t)
	ctx := testCtx(t)
	for i := 0; i < 20; i++ {
		if _, err := c.Append(ctx, client.Record{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Trim(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(ctx, 3); !errors.Is(err, client.ErrTrimmed) {
		t.Fatalf("read below the trim point: %v", err)
	}
	e, err := c.Read(ctx, 10)
	if err != nil || string(e.Record.Payload) != "10" {
		t.Fatalf("read at the trim point: %+v, %v", e, err)
	}
}

// TestRetriedAppendIsStoredOnce sends the same (client id, sequence) twice
// straight to a primary, as a client retrying after a lost answer would.
func TestRetriedAppendIsStoredOnce(t *testing.T) {
	dc, c := startCluster(t)
	ctx := testCtx(t)
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sh := st.Shards[0]
	conn, err := grpc.NewClient(sh.Replicas[0].Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	appendOnce := func() *pb.AppendAck {
		stream, err := pb.NewLogClient(conn).Append(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.CloseSend()
		err = stream.Send(&pb.AppendRequest{ClusterId: dc.ClusterID, ClientId: 77, Shard: sh.Id,
			Entries: []*pb.AppendEntry{{Seq: 1, Record: &pb.Record{Payload: []byte("once")}}}})
		if err != nil {
			t.Fatal(err)
		}
		for {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range resp.Acks {
				if a.Code != pb.Code_PENDING {
					return a
				}
			}
		}
	}
	first, second := appendOnce(), appendOnce()
	if first.Code != pb.Code_OK || second.Code != pb.Code_OK || first.Position != second.Position {
		t.Fatalf("first %v, retry %v", first, second)
	}
	tail, err := c.CheckTail(ctx)
	if err != nil || tail != 1 {
		t.Fatalf("tail %d, %v; the retry was stored again", tail, err)
	}
	e, err := c.Read(ctx, first.Position)
	if err != nil || !bytes.Equal(e.Record.Payload, []byte("once")) {
		t.Fatalf("read %+v, %v", e, err)
	}
}

// TestStorageFailureFailsOverAndAppendsGoOn stops a primary mid-stream: its
// shard fails over to the backup and keeps its id, the appends in flight
// to the stopped primary are re-sent to the new one, and every append is
// acknowledged exactly once. The stopped server, back, stays out of the
// configuration (it rejoins only after catching up) and forms no shard.
func TestStorageFailureFailsOverAndAppendsGoOn(t *testing.T) {
	dc, c := startCluster(t)
	ctx := testCtx(t)
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim, survivor := st.Shards[0].Replicas[0].Id, st.Shards[0].Replicas[1].Id
	shards := len(st.Shards)
	// Some of the victim's records are ordered before it fails.
	seen := map[uint64]bool{}
	for i := 0; i < 5; i++ {
		a, err := c.AppendToShard(ctx, client.Record{Payload: []byte("early")}, st.Shards[0].Id)
		if err != nil {
			t.Fatal(err)
		}
		seen[a.Position] = true
	}
	const n = 600
	type result struct {
		a   client.Ack
		err error
	}
	results := make(chan result, n)
	for i := 0; i < n; i++ {
		if i == n/3 {
			if err := dc.StopStorage(victim); err != nil {
				t.Fatal(err)
			}
		}
		c.AppendAsync(ctx, client.Record{Payload: []byte(fmt.Sprint(i))}, func(a client.Ack, err error) { results <- result{a, err} })
	}
	for i := 0; i < n; i++ {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		if seen[r.a.Position] {
			t.Fatalf("position %d acknowledged twice", r.a.Position)
		}
		seen[r.a.Position] = true
	}
	if err := dc.StartStorage(victim); err != nil {
		t.Fatal(err)
	}
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The restarted victim stays out of the shard's configuration until it
	// rejoins, which it starts on its own: it may be back already (a later
	// epoch), but never without the failover that took it out.
	sh := st.Shards[0]
	ids := func(rs []*pb.ReplicaAddr) (out []string) {
		for _, r := range rs {
			out = append(out, r.Id)
		}
		return out
	}
	out := sh.Epoch == 2 && slices.Equal(ids(sh.Replicas), []string{survivor}) && slices.Equal(ids(sh.Out), []string{victim})
	rejoined := sh.Epoch >= 3 && slices.Equal(ids(sh.Replicas), []string{survivor, victim}) && len(sh.Out) == 0
	if sh.State != pb.ShardState_SHARD_LIVE || !(out || rejoined) || len(st.Shards) != shards {
		t.Fatalf("after the failover: shards %v, want shard %d live on %s alone, or rejoined by %s, and no new shard", st.Shards, sh.Id, survivor, victim)
	}
	const total = n + 5
	if st.Tail != total {
		t.Fatalf("tail %d, want %d: an append was lost or duplicated", st.Tail, total)
	}
	// Every acknowledged record reads back at its position.
	es, err := c.ReadRange(ctx, 0, total)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != total {
		t.Fatalf("read %d records, want %d", len(es), total)
	}
	for _, e := range es {
		if !seen[e.Position] {
			t.Fatalf("position %d was never acknowledged", e.Position)
		}
	}
}

// TestLaggingSubscriptionAcrossTrim holds a subscription back with a small
// flow-control window while a trim removes segments it has not read yet. It
// must deliver every position with the record acknowledged there, or stop
// with OutOfRange; never another record.
func TestLaggingSubscriptionAcrossTrim(t *testing.T) {
	ctx := testCtx(t)
	lag := startLaggingSubscription(ctx, t, config.ModeEager)
	for {
		resp, err := lag.stream.Recv()
		if lag.endedWith(err) {
			return
		}
		for _, b := range resp.Batches {
			for _, e := range b.Records {
				lag.check(e.Position, e.Record.Payload)
			}
			if b.RunStart+b.RunCount >= lag.n {
				return // served everything that was not trimmed
			}
		}
	}
}

// laggingSubscription is a raw subscription to a one-shard cluster's shard,
// held back by a 64 KiB flow-control window while a trim removes segments
// it has not read yet.
type laggingSubscription struct {
	t         *testing.T
	stream    pb.Log_SubscribeClient
	payloadAt map[uint64]string
	n         uint64 // records appended
	last      uint64 // the highest position acknowledged
}

// startLaggingSubscription appends 400 records of 4 KB in waves of 50 to
// a one-shard cluster of mode with small segments, subscribes to the
// shard's primary (speculatively in speculative mode) from position 0, and
// trims all but the last 50 positions while the server sends its first
// response (about 1 MiB, ~250 records, against the 64 KiB window).
func startLaggingSubscription(ctx context.Context, t *testing.T, mode string) *laggingSubscription {
	t.Helper()
	// Small segments, so a trim deletes some inside a run the subscription
	// has yet to read.
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), SegmentBytes: 16 << 10, Shards: 1, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, client.Config{ClusterID: dc.ClusterID, Ordering: dc.OrderingAddrs(), Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	lag := &laggingSubscription{t: t, payloadAt: map[uint64]string{}, n: 400}
	var mu sync.Mutex
	var wg sync.WaitGroup
	// Waves of 50, each waited for, so the shard's records span many cuts.
	for i := range lag.n {
		if i%50 == 0 {
			wg.Wait()
		}
		wg.Add(1)
		p := fmt.Sprintf("rec-%d-%s", i, strings.Repeat("x", 4000))
		c.AppendAsync(ctx, client.Record{Payload: []byte(p)}, func(a client.Ack, err error) {
			defer wg.Done()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			lag.payloadAt[a.Position] = p
			lag.last = max(lag.last, a.Position)
			mu.Unlock()
		})
	}
	wg.Wait()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sh := st.Shards[0]
	conn, err := grpc.NewClient(sh.Replicas[0].Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	lag.stream, err = pb.NewLogClient(conn).Subscribe(ctx, &pb.SubscribeRequest{ClusterId: dc.ClusterID, Shard: sh.Id,
		Speculative: mode == config.ModeSpec})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Trim(ctx, lag.last+1-50); err != nil {
		t.Fatal(err)
	}
	return lag
}

// endedWith says whether the stream ended with err, failing the test
// unless it is OutOfRange.
func (lag *laggingSubscription) endedWith(err error) bool {
	if err == nil {
		return false
	}
	if status.Code(err) != codes.OutOfRange {
		lag.t.Fatalf("subscription ended with %v, want OutOfRange", err)
	}
	return true
}

// check fails the test unless payload was acknowledged at pos.
func (lag *laggingSubscription) check(pos uint64, payload []byte) {
	if string(payload) != lag.payloadAt[pos] {
		lag.t.Fatalf("position %d carries %.12q, appended there was %.12q", pos, payload, lag.payloadAt[pos])
	}
}

// TestOneShardSubscriptionEndsWithItsShard follows one shard of an eager
// cluster alone while it is finalized: the subscriber gets every record the
// shard ordered, then ErrShardFinalized.
func TestOneShardSubscriptionEndsWithItsShard(t *testing.T) {
	_, c := startCluster(t)
	ctx := testCtx(t)
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := st.Shards[0].Id
	sub, err := c.Subscribe(ctx, 0, client.OnShard(id))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var want []client.Ack
	for i := 0; i < 10; i++ {
		a, err := c.AppendToShard(ctx, client.Record{Payload: []byte(fmt.Sprint("r", i))}, id)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, a)
	}
	if err := c.FinalizeShard(ctx, id, 2); err != nil {
		t.Fatal(err)
	}
	for i, a := range want {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if e.Position != a.Position || string(e.Record.Payload) != fmt.Sprint("r", i) {
			t.Fatalf("record %d at %d (%q), acknowledged at %d", i, e.Position, e.Record.Payload, a.Position)
		}
	}
	if e, err := sub.Next(ctx); !errors.Is(err, client.ErrShardFinalized) {
		t.Fatalf("after the shard's last record: %+v, %v; want ErrShardFinalized", e, err)
	}
}

// TestSubscriptionFindsShardsAddedAfterAllItsShardsEnded follows the whole
// log of an eager cluster while every shard it follows is finalized, and
// only then a new shard joins: with no stream left to announce the new
// shard table, the subscription must still find the new shard and deliver
// its records. The last live shard cannot be finalized on request, so a
// failure of both its servers ends it (see failWholeShard); its backup
// comes back to serve its records, and forms no shard.
func TestSubscriptionFindsShardsAddedAfterAllItsShardsEnded(t *testing.T) {
	dc, c := startCluster(t)
	ctx := testCtx(t)
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, 0, client.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var want []client.Ack
	for _, sh := range st.Shards {
		a, err := c.AppendToShard(ctx, client.Record{Payload: []byte(fmt.Sprint("before ", sh.Id))}, sh.Id)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, a)
	}
	last := st.Shards[len(st.Shards)-1]
	ofLast, err := c.Subscribe(ctx, 0, client.OnShard(last.Id))
	if err != nil {
		t.Fatal(err)
	}
	defer ofLast.Close()
	for _, sh := range st.Shards[:len(st.Shards)-1] {
		if err := c.FinalizeShard(ctx, sh.Id, 1); err != nil {
			t.Fatal(err)
		}
	}
	failWholeShard(t, ctx, dc, c, last)
	if _, err := ofLast.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if e, err := ofLast.Next(ctx); !errors.Is(err, client.ErrShardFinalized) {
		t.Fatalf("shard %d after its servers failed: %+v, %v; want ErrShardFinalized", last.Id, e, err)
	}
	// Every followed stream has ended once both records are out.
	for range want {
		if _, err := sub.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := dc.AddGroup(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	a, err := c.Append(ctx, client.Record{Payload: []byte("after")})
	if err != nil {
		t.Fatal(err)
	}
	e, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("after every followed shard ended and a shard joined: %v", err)
	}
	if e.Position != a.Position || string(e.Record.Payload) != "after" {
		t.Fatalf("got %q at %d, the new shard's record is at %d", e.Record.Payload, e.Position, a.Position)
	}
}

// TestCleanStopTakesTheServerOutAtOnce stops a primary cleanly (as SIGTERM
// does) in a cluster whose failure timeout is far longer than the test:
// the server says it goes away, the leader takes it out of its shard's
// configuration at once, the backup becomes primary, and AppendToShard
// goes on.
func TestCleanStopTakesTheServerOutAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), Shards: 1, Replicas: 2, OrderingReplicas: 1, FailureTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := dc.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sh := st.Shards[0]
	before, err := c.AppendToShard(ctx, client.Record{Payload: []byte("before")}, sh.Id)
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.StopStorage(sh.Replicas[0].Id); err != nil {
		t.Fatal(err)
	}
	waitShard(t, ctx, c, sh.Id, "failed over to the backup", func(now *pb.ShardInfo) bool {
		return now.Epoch > sh.Epoch && len(now.Replicas) == 1 && now.Replicas[0].Id == sh.Replicas[1].Id && now.State == pb.ShardState_SHARD_LIVE
	})
	after, err := c.AppendToShard(ctx, client.Record{Payload: []byte("after")}, sh.Id)
	if err != nil {
		t.Fatal(err)
	}
	if after.Shard != sh.Id || after.Position <= before.Position {
		t.Fatalf("append after the failover %+v, before %+v", after, before)
	}
}
