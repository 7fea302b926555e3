package devcluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/config"
)

// TestLazyClusterAppendsAndReads runs a lazy cluster: appends are
// acknowledged before they are ordered, AppendSync learns a position, and
// every acknowledged append is read back exactly once, at one position,
// through reads and through a subscription.
func TestLazyClusterAppendsAndReads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := startReady(ctx, t, Options{Mode: config.ModeLazy, Shards: 2, Replicas: 2, OrderingReplicas: 1})
	if got := c.SequencingIDs(); len(got) != config.DefaultSequencingReplicas {
		t.Fatalf("sequencing replicas %v, want %d", got, config.DefaultSequencingReplicas)
	}
	cfg := c.Config()
	if _, err := config.Parse(mustMarshal(t, cfg)); err != nil {
		t.Fatalf("Config() of a lazy cluster does not survive a round trip: %v", err)
	}
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	const n = 200
	sent := map[string]bool{}
	for i := range n {
		p := fmt.Sprintf("r%03d", i)
		a, err := cl.Append(ctx, client.Record{Payload: []byte(p)})
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if !a.Unordered {
			t.Fatalf("lazy append %d came back ordered: %+v", i, a)
		}
		sent[p] = true
	}
	synced, err := cl.AppendSync(ctx, client.Record{Payload: []byte("sync")})
	if err != nil {
		t.Fatal(err)
	}
	if synced.Unordered || synced.Position < n {
		t.Fatalf("AppendSync after %d appends answered %+v", n, synced)
	}
	tail, err := cl.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tail < n+1 {
		t.Fatalf("tail %d after %d acknowledged appends", tail, n+1)
	}
	got, err := cl.ReadRange(ctx, 0, int(tail))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]uint64{}
	for _, e := range got {
		p := string(e.Record.Payload)
		if prev, dup := seen[p]; dup {
			t.Fatalf("record %s read at %d and %d", p, prev, e.Position)
		}
		seen[p] = e.Position
	}
	for p := range sent {
		if _, ok := seen[p]; !ok {
			t.Fatalf("acknowledged record %s not read back (read %d records)", p, len(got))
		}
	}
	if seen["sync"] != synced.Position {
		t.Fatalf("AppendSync said %d, the log holds it at %d", synced.Position, seen["sync"])
	}
	// Appends one after another are ordered in that order (real time).
	for i := 1; i < n; i++ {
		a, b := fmt.Sprintf("r%03d", i-1), fmt.Sprintf("r%03d", i)
		if seen[a] >= seen[b] {
			t.Fatalf("%s at %d, %s (appended after it returned) at %d", a, seen[a], b, seen[b])
		}
	}

	t.Logf("tail %d, read %d records, sync at %d", tail, len(got), synced.Position)
	sub, err := cl.Subscribe(ctx, 0, client.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for range len(got) {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if pos, ok := seen[string(e.Record.Payload)]; !ok || pos != e.Position {
			t.Fatalf("subscription delivered %s at %d; reads put it at %d", e.Record.Payload, e.Position, pos)
		}
	}
}

// TestLazySequencingLeaderCrash stops the sequencing leader while appends
// run: the ordering layer seals its view, flushes the survivor's ring and
// starts a view without it; appends go on in the new view, the restarted
// replica comes back in a later one, and every acknowledged append is read
// back exactly once.
func TestLazySequencingLeaderCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := startReady(ctx, t, Options{Mode: config.ModeLazy, Shards: 2, Replicas: 2, OrderingReplicas: 3, FailureTimeout: 300 * time.Millisecond})
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	acked := map[string]bool{}
	appendSome := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			p := fmt.Sprintf("r%04d", i)
			if _, err := cl.Append(ctx, client.Record{Payload: []byte(p)}); err != nil {
				t.Fatalf("append %s: %v", p, err)
			}
			acked[p] = true
		}
	}
	appendSome(0, 50)
	leader := c.SequencingIDs()[0]
	if err := c.StopSequencing(leader); err != nil {
		t.Fatal(err)
	}
	// These appends wait until a view without the stopped leader starts.
	appendSome(50, 50)
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetLazy().GetView() < 2 || st.GetLazy().GetReplicas()[0].GetId() == leader {
		t.Fatalf("after the leader %s stopped the view is %v", leader, st.GetLazy())
	}
	if err := c.StartSequencing(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.waitFor(ctx, func(st *pb.StatusResponse) string {
		for _, r := range st.GetLazy().GetReplicas() {
			if r.GetId() == leader {
				return ""
			}
		}
		return "the restarted replica is not back in a view yet"
	}); err != nil {
		t.Fatal(err)
	}
	appendSome(100, 50)
	tail, err := cl.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cl.ReadRange(ctx, 0, int(tail))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range got {
		seen[string(e.Record.Payload)]++
	}
	for p := range acked {
		if seen[p] != 1 {
			t.Fatalf("acknowledged record %s read %d times", p, seen[p])
		}
	}
}

// TestLazyTrim trims a lazy cluster as the other modes: a trim past
// stable-gp is refused; reads and subscriptions below the trim point get
// ErrTrimmed, those at and above it go on; every replica deletes the
// first segments of its lazy log, which hold trimmed records only.
func TestLazyTrim(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := startReady(ctx, t, Options{Mode: config.ModeLazy, Shards: 2, Replicas: 2, OrderingReplicas: 1, SegmentBytes: 4 << 10})
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 100
	for i := range n {
		// A kilobyte each: a few records fill a segment.
		p := fmt.Appendf(nil, "r%03d-", i)
		p = append(p, make([]byte, 1<<10)...)
		if _, err := cl.Append(ctx, client.Record{Payload: p}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	last, err := cl.AppendSync(ctx, client.Record{Payload: []byte("last")})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Trim(ctx, last.Position+1000); err == nil {
		t.Fatalf("a trim past stable-gp (%d) was taken", last.Position+1)
	}
	const at = 40
	if err := cl.Trim(ctx, at); err != nil {
		t.Fatal(err)
	}
	st, err := cl.Status(ctx)
	if err != nil || st.Trim != at {
		t.Fatalf("status trim %d, %v; want %d", st.GetTrim(), err, at)
	}
	// Every replica trims when its event comes: wait for the reads.
	for pos := range uint64(at) {
		for {
			_, err := cl.Read(ctx, pos)
			if errors.Is(err, client.ErrTrimmed) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("read %d below the trim point %d: %v", pos, at, err)
			}
		}
	}
	got, err := cl.ReadRange(ctx, at, int(last.Position+1-at))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0].Position < at || string(got[len(got)-1].Record.Payload) != "last" {
		t.Fatalf("read from the trim point: %d entries", len(got))
	}
	// Every lazy log loses its first segment (local indexes from 0 on),
	// as its replica hears of the trim.
	logs, _ := filepath.Glob(filepath.Join(c.Dir(), "*", "lazy-*"))
	if len(logs) != 4 {
		t.Fatalf("lazy logs %v, want one per replica of two shards of two", logs)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		firsts, err := filepath.Glob(filepath.Join(c.Dir(), "*", "lazy-*", fmt.Sprintf("%020d.*", 0)))
		if err != nil {
			t.Fatal(err)
		}
		if len(firsts) == 0 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("first segments still there after the trim: %v", firsts)
		}
	}
	if _, err := cl.Subscribe(ctx, at-1, client.Filter{}); !errors.Is(err, client.ErrTrimmed) {
		t.Fatalf("subscribe below the trim point: %v", err)
	}
}

// TestLazyScrubsOrphans: data whose metadata never reached a sequencing
// replica (a client that failed in between) is scrubbed from every shard
// replica once a view change completed, by the storage server's periodic
// scrub; an acknowledged record is not.
func TestLazyScrubsOrphans(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := startReady(ctx, t, Options{Mode: config.ModeLazy, Shards: 1, Replicas: 2, OrderingReplicas: 3, FailureTimeout: 300 * time.Millisecond})
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.AppendSync(ctx, client.Record{Payload: []byte("real")}); err != nil {
		t.Fatal(err)
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cluster, view := c.Config().ClusterID, st.GetLazy().GetView()
	orphan := &pb.RecordMeta{ClientId: 1 << 60, Seq: 1}
	var replicas []pb.LazyShardClient
	for _, r := range st.GetShards()[0].GetReplicas() {
		cc, err := grpc.NewClient(r.GetAddr(), c.ClientDialOption())
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		replicas = append(replicas, pb.NewLazyShardClient(cc))
	}
	holds := func(r pb.LazyShardClient) bool {
		t.Helper()
		resp, err := r.Fetch(ctx, &pb.LazyFetchRequest{ClusterId: cluster, Shard: 0, Ids: []*pb.RecordMeta{orphan}})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.GetRecords()) == 1
	}
	// The orphan's data reaches every replica of the shard; its metadata
	// goes nowhere.
	for _, r := range replicas {
		stream, err := r.Store(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&pb.LazyStoreRequest{ClusterId: cluster, ClientId: orphan.ClientId, Shard: 0, View: view, Epoch: st.GetShards()[0].GetEpoch(),
			Entries: []*pb.AppendEntry{{Seq: orphan.Seq, Record: &pb.Record{Payload: []byte("orphan")}}}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil || resp.GetAcks()[0].GetCode() != pb.Code_OK {
			t.Fatalf("store the orphan: %v, %v", resp, err)
		}
		stream.CloseSend()
		if !holds(r) {
			t.Fatal("the replica does not hold the orphan it acknowledged")
		}
	}
	// A view change: the orphan's view is left behind without its
	// metadata.
	if err := c.StopSequencing(c.SequencingIDs()[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Append(ctx, client.Record{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i, r := range replicas {
		for holds(r) {
			select {
			case <-tick.C:
			case <-ctx.Done():
				t.Fatalf("replica %d still holds the orphan after the view change", i)
			}
		}
	}
	tail, err := cl.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cl.ReadRange(ctx, 0, int(tail))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range got {
		seen[string(e.Record.Payload)]++
	}
	if seen["real"] != 1 || seen["after"] != 1 || seen["orphan"] != 0 {
		t.Fatalf("read back %v, want real and after once, no orphan", seen)
	}
}

// TestLazyOrderGoesOnAfterAShardIsFinalized kills both storage servers of
// one shard of a lazy cluster. Once the ordering layer has taken them out
// and finalized the shard, the sequencing leader no longer maps batches to
// it nor waits for it: AppendSync on the live shard returns its position,
// and the record reads back there.
func TestLazyOrderGoesOnAfterAShardIsFinalized(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := startReady(ctx, t, Options{Mode: config.ModeLazy, Shards: 2, Replicas: 2, OrderingReplicas: 1, FailureTimeout: 300 * time.Millisecond})
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetShards()) != 2 {
		t.Fatalf("shards %v, want 2", st.GetShards())
	}
	dead, live := st.GetShards()[0], st.GetShards()[1]
	for i := range 20 {
		if _, err := cl.AppendToShard(ctx, client.Record{Payload: []byte(fmt.Sprintf("before%d", i))}, dead.GetId()); err != nil {
			t.Fatalf("append to shard %d: %v", dead.GetId(), err)
		}
	}
	for _, r := range dead.GetReplicas() {
		if err := c.KillStorage(r.GetId()); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.waitFor(ctx, func(st *pb.StatusResponse) string {
		for _, sh := range st.GetShards() {
			if sh.GetId() == dead.GetId() && sh.GetState() != pb.ShardState_SHARD_FINALIZED {
				return fmt.Sprintf("shard %d is %v", sh.GetId(), sh.GetState())
			}
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	// The order goes on: each AppendSync needs a batch every shard the
	// leader maps to acknowledged, and every sequencing replica collected.
	// (A client whose table still has the shard live may pick it, and
	// that append fails; a new client knows the table as it is now.)
	cl2, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	cl = cl2
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	for i := range 5 {
		p := fmt.Sprintf("after%d", i)
		a, err := cl.AppendSync(sctx, client.Record{Payload: []byte(p)})
		if err != nil {
			t.Fatalf("AppendSync %s after shard %d was finalized: %v", p, dead.GetId(), err)
		}
		e, err := cl.Read(sctx, a.Position)
		if err != nil {
			t.Fatalf("read %s at %d (shard %d): %v", p, a.Position, a.Shard, err)
		}
		if string(e.Record.Payload) != p {
			t.Fatalf("position %d holds %q, AppendSync of %q said it was there", a.Position, e.Record.Payload, p)
		}
	}
	if _, err := cl.AppendToShard(sctx, client.Record{Payload: []byte("live")}, live.GetId()); err != nil {
		t.Fatalf("append to the live shard %d: %v", live.GetId(), err)
	}
}

// TestLazyBackupsShowTheirCopies checks that once a lazy shard took an
// append, each of its backups says, as `augur status` shows, that it
// serves the shard as a backup: a lazy copy lives in the lazy shell, which
// the servers' health left out.
func TestLazyBackupsShowTheirCopies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := startReady(ctx, t, Options{Mode: config.ModeLazy, Shards: 1, Replicas: 3, OrderingReplicas: 1})
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// A lazy append is acknowledged once every replica holds its data.
	if _, err := cl.Append(ctx, client.Record{Payload: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Shards) != 1 || len(st.Shards[0].Replicas) != 3 {
		t.Fatalf("shards %v", st.Shards)
	}
	for i, r := range st.Shards[0].Replicas {
		resp, err := cl.Ping(ctx, r.Addr)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"primary", "backup", "backup"}[i]
		if len(resp.Health) != 1 || resp.Health[0].Shard != st.Shards[0].Id || resp.Health[0].Role != want {
			t.Errorf("%s: health %v, want its copy as %s", r.Id, resp.Health, want)
		}
	}
}
