package storage_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/devcluster"
	"github.com/augur-log/augur/internal/metrics"
)

// TestDamagedRecordIsRefusedThenRepairedFromThePeer damages one record in
// the middle of a stopped backup's segment file and restarts it while the
// primary, the only other replica, is down. The backup must report the
// damage (metric, Ping), refuse to serve the damaged position with
// Unavailable naming the shard, the range and "damaged on this replica",
// keep serving the positions after it, and say that its repair waits for
// a source. Once the primary is back, the backup must copy the record
// back from it (checksums verified on the way and on every later read)
// and serve it itself, and a client read of every position must return
// what was appended.
func TestDamagedRecordIsRefusedThenRepairedFromThePeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := devcluster.Start(ctx, devcluster.Options{Shards: 1, Replicas: 2, OrderingReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 5
	const damagedIdx = 2
	var acks []client.Ack
	for i := range n {
		a, err := cl.Append(ctx, client.Record{Payload: []byte(fmt.Sprintf("record-%d-payload", i))})
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	shardID := acks[0].Shard
	ids := c.StorageIDs()
	primary, backup := ids[0], ids[1]
	// The backup holds every record once a read from it returns the last.
	addr, err := c.Config().Addr(backup)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cc.Close() }()
	readFrom := func(from uint64) (*pb.SubscribeResponse, error) {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		stream, err := pb.NewLogClient(cc).Subscribe(sctx, &pb.SubscribeRequest{ClusterId: c.ClusterID, Shard: shardID, From: from})
		if err != nil {
			return nil, err
		}
		return stream.Recv()
	}
	firstPayload := func(resp *pb.SubscribeResponse) string {
		if len(resp.GetBatches()) == 0 || len(resp.Batches[0].Records) == 0 {
			return ""
		}
		return string(resp.Batches[0].Records[0].GetRecord().GetPayload())
	}
	for {
		resp, err := readFrom(acks[n-1].Position)
		if err != nil {
			t.Fatalf("read the last record from the backup before damage: %v", err)
		}
		if firstPayload(resp) != "" {
			break
		}
	}
	for _, id := range []string{backup, primary} {
		if err := c.StopStorage(id); err != nil {
			t.Fatal(err)
		}
	}
	damageRecord(t, filepath.Join(c.Dir(), backup), []byte(fmt.Sprintf("record-%d-payload", damagedIdx)))
	if err := c.StartStorage(backup); err != nil {
		t.Fatal(err)
	}
	// A connection to the stopped server may not know yet that it broke:
	// talk to the restarted one on a new one.
	cc.Close()
	if cc, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	if got := gaugeValue(t, metrics.DamagedRecords, backup, shardID); got != 1 {
		t.Fatalf("augur_damaged_records{server=%q} = %v, want 1", backup, got)
	}

	// The damaged position is refused, with a message that says why.
	_, err = readFrom(acks[damagedIdx].Position)
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "damaged on this replica") ||
		!strings.Contains(st.Message(), fmt.Sprintf("shard %d", shardID)) || !strings.Contains(st.Message(), fmt.Sprintf("[%d, %d)", damagedIdx, damagedIdx+1)) {
		t.Fatalf("read of the damaged position from the backup: %v; want Unavailable naming shard, range and the damage", err)
	}
	// The positions after it are served.
	resp, err := readFrom(acks[damagedIdx+1].Position)
	if err != nil {
		t.Fatalf("read past the damage from the backup: %v", err)
	}
	if got, want := firstPayload(resp), fmt.Sprintf("record-%d-payload", damagedIdx+1); got != want {
		t.Fatalf("read past the damage from the backup: %q, want %q", got, want)
	}
	// Resolve scans around the damage instead of failing, and leaves an
	// append it does not find pending.
	res, err := pb.NewLogClient(cc).Resolve(ctx, &pb.ResolveRequest{ClusterId: c.ClusterID, Shard: shardID, ClientId: 1 << 62, Seqs: []uint64{1}})
	if err != nil || len(res.Results) != 1 || res.Results[0].Code != pb.Code_PENDING {
		t.Fatalf("resolve on the damaged backup: %v, %v; want PENDING", res, err)
	}
	// With its only source down, the repair says it waits for one.
	h := awaitHealth(ctx, t, cl, addr, shardID, func(h *pb.ReplicaHealth) bool { return h.GetCatchUp().GetStalled() })
	if len(h.Damaged) != 1 || h.CatchUp.Total != 1 || h.CatchUp.Fetched != 0 || h.CatchUp.Done {
		t.Fatalf("health of the damaged backup with its source down: %v", h)
	}

	// The primary comes back: the backup repairs the record from it.
	if err := c.StartStorage(primary); err != nil {
		t.Fatal(err)
	}
	h = awaitHealth(ctx, t, cl, addr, shardID, func(h *pb.ReplicaHealth) bool {
		return h.GetCatchUp().GetDone() && !h.GetCatchUp().GetRejoin()
	})
	if len(h.Damaged) != 0 || h.CatchUp.Fetched != 1 || len(h.CatchUp.Lost) != 0 {
		t.Fatalf("health of the backup after its repair: %v", h)
	}
	if got := gaugeValue(t, metrics.DamagedRecords, backup, shardID); got != 0 {
		t.Fatalf("augur_damaged_records{server=%q} = %v after the repair, want 0", backup, got)
	}
	if got := gaugeValue(t, metrics.CatchUpRemaining, backup, shardID); got != 0 {
		t.Fatalf("augur_catchup_remaining_records{server=%q} = %v after the repair, want 0", backup, got)
	}
	// The backup serves the record itself (its read checks the repaired
	// frame's checksum).
	resp, err = readFrom(acks[damagedIdx].Position)
	if err != nil {
		t.Fatalf("read of the repaired position from the backup: %v", err)
	}
	if got, want := firstPayload(resp), fmt.Sprintf("record-%d-payload", damagedIdx); got != want {
		t.Fatalf("the backup serves %q at the repaired position, want %q", got, want)
	}
	// A client read of every position returns what was appended.
	got, err := cl.ReadRange(ctx, acks[0].Position, n)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range got {
		if want := fmt.Sprintf("record-%d-payload", i); string(e.Record.Payload) != want {
			t.Fatalf("position %d holds %q, want %q", e.Position, e.Record.Payload, want)
		}
	}
}

// gaugeValue reads the value of a per-server, per-shard gauge.
func gaugeValue(t *testing.T, g *prometheus.GaugeVec, server string, shardID uint32) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.WithLabelValues(server, fmt.Sprint(shardID)).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// awaitHealth pings the storage server at addr until the health of its
// copy of shard id satisfies ok, and returns it; it fails the test at
// ctx's deadline.
func awaitHealth(ctx context.Context, t *testing.T, cl *client.Client, addr string, id uint32, ok func(*pb.ReplicaHealth) bool) *pb.ReplicaHealth {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var last *pb.PingResponse
	for {
		resp, err := cl.Ping(ctx, addr)
		if err == nil {
			for _, h := range resp.Health {
				if h.Shard == id && ok(h) {
					return h
				}
			}
		}
		if err == nil {
			last = resp
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("health of %s never got there; last %v", addr, last)
		}
	}
}

// damageRecord flips a byte of the one payload equal to payload in the
// files under dir, so its frame no longer checks out.
func damageRecord(t *testing.T, dir string, payload []byte) {
	t.Helper()
	editHolder(t, dir, payload, func(path string, b []byte, i int) error {
		b[i+len(payload)-1] ^= 0xff
		return os.WriteFile(path, b, 0o644)
	})
}

// TestReadOfARecordDamagedOnEveryReplicaSaysSo damages the same record on
// both replicas of a shard. Neither can repair it from the other, so each
// says which position is lost. A read of it can be answered by neither, so it
// must end at its deadline with an error that passes on the replicas'
// refusal, not only "not ordered before the deadline", and a read of the
// record after it still returns that record.
func TestReadOfARecordDamagedOnEveryReplicaSaysSo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := devcluster.Start(ctx, devcluster.Options{Shards: 1, Replicas: 2, OrderingReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var acks []client.Ack
	for i := range 3 {
		// An acknowledged record is stored on every replica.
		a, err := cl.Append(ctx, client.Record{Payload: []byte(fmt.Sprintf("both-%d-payload", i))})
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	for _, id := range c.StorageIDs() {
		if err := c.StopStorage(id); err != nil {
			t.Fatal(err)
		}
		damageRecord(t, filepath.Join(c.Dir(), id), []byte("both-1-payload"))
	}
	for _, id := range c.StorageIDs() {
		if err := c.StartStorage(id); err != nil {
			t.Fatal(err)
		}
	}
	// Each replica's repair finds the record damaged on the other too, and
	// says which position is lost rather than waiting.
	for _, id := range c.StorageIDs() {
		addr, err := c.Config().Addr(id)
		if err != nil {
			t.Fatal(err)
		}
		h := awaitHealth(ctx, t, cl, addr, acks[0].Shard, func(h *pb.ReplicaHealth) bool {
			lost := h.GetCatchUp().GetLost()
			return h.GetCatchUp().GetDone() && len(lost) > 0 && lost[0].HasGlobal
		})
		lost := h.CatchUp.GetLost()
		if len(lost) != 1 || lost[0].First != 1 || lost[0].End != 2 || !lost[0].HasGlobal || lost[0].GlobalFirst != acks[1].Position || len(h.Damaged) != 1 {
			t.Fatalf("health of %s: %v; want local [1, 2) at position %d lost and still refused", id, h, acks[1].Position)
		}
	}
	// readDeadline bounds a read no replica can answer.
	const readDeadline = 2 * time.Second
	rctx, rcancel := context.WithTimeout(ctx, readDeadline)
	defer rcancel()
	got, err := cl.ReadRange(rctx, acks[1].Position, 1)
	if err == nil || !strings.Contains(err.Error(), "damaged on this replica") {
		t.Fatalf("read of a record damaged everywhere returned %v, %v; want an error naming the damage", got, err)
	}
	e, err := cl.Read(ctx, acks[2].Position)
	if err != nil || string(e.Record.Payload) != "both-2-payload" {
		t.Fatalf("read past the damage: %q, %v", e.Record.Payload, err)
	}
}

// TestTornTailThatDroppedOrderedRecordsIsReportedLost cuts the last
// record of a stopped backup's segment file in half, as a crash in the
// middle of a write would, after a cut ordered it, and stops the primary
// too, so the shard is final and the backup has nothing to rejoin. The
// restarted backup cannot follow the order any more: Ping must report its
// copy lost, and a read of every record must still return them, from the
// restarted primary.
func TestTornTailThatDroppedOrderedRecordsIsReportedLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := devcluster.Start(ctx, devcluster.Options{Shards: 1, Replicas: 2, OrderingReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := c.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 3
	var acks []client.Ack
	for i := range n {
		a, err := cl.Append(ctx, client.Record{Payload: []byte(fmt.Sprintf("torn-%d-payload", i))})
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	primary, backup := c.StorageIDs()[0], c.StorageIDs()[1]
	if err := c.StopStorage(backup); err != nil {
		t.Fatal(err)
	}
	tearAfter(t, filepath.Join(c.Dir(), backup), []byte(fmt.Sprintf("torn-%d-payload", n-1)))
	// With its primary gone too the shard is final, so the torn copy has
	// nothing to rejoin and nobody to catch up from (a live shard's copy
	// gets the records back: TestRestartedReplicaCatchesUpAndRejoins).
	if err := c.StopStorage(primary); err != nil {
		t.Fatal(err)
	}
	if err := c.StartStorage(backup); err != nil {
		t.Fatal(err)
	}
	addr, err := c.Config().Addr(backup)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// A subscription to the torn position waits until the backup learns
	// the order it cannot follow, then is refused.
	stream, err := pb.NewLogClient(cc).Subscribe(ctx, &pb.SubscribeRequest{ClusterId: c.ClusterID, Shard: acks[0].Shard, From: acks[n-1].Position})
	if err != nil {
		t.Fatal(err)
	}
	// Messages that carry none of the torn records may come first (the
	// stream may start before the backup learns the order); a record at
	// or past the torn position may never come.
	var before []*pb.SubscribeResponse
	for {
		var msg *pb.SubscribeResponse
		msg, err = stream.Recv()
		if err != nil {
			break
		}
		before = append(before, msg)
		for _, b := range msg.GetBatches() {
			for _, e := range b.GetRecords() {
				if e.Position >= acks[n-1].Position {
					t.Fatalf("the torn backup served position %d", e.Position)
				}
			}
		}
	}
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "missed records the shard ordered") ||
		!strings.Contains(st.Message(), fmt.Sprintf("shard %d", acks[0].Shard)) {
		t.Fatalf("read of the torn position from the backup: %v after %v; want Unavailable saying the copy is lost", err, before)
	}
	ping, err := cl.Ping(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if len(ping.Health) != 1 || !ping.Health[0].Lost {
		t.Fatalf("Ping of the torn backup says %v, want its copy lost", ping.Health)
	}
	var m dto.Metric
	if err := metrics.ReplicaLost.WithLabelValues(backup, fmt.Sprint(acks[0].Shard)).Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetGauge().GetValue(); got != 1 {
		t.Fatalf("augur_replica_lost{server=%q} = %v, want 1", backup, got)
	}
	if err := c.StartStorage(primary); err != nil {
		t.Fatal(err)
	}
	got, err := cl.ReadRange(ctx, acks[0].Position, n)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range got {
		if want := fmt.Sprintf("torn-%d-payload", i); string(e.Record.Payload) != want {
			t.Fatalf("position %d holds %q, want %q", e.Position, e.Record.Payload, want)
		}
	}
}

// tearAfter truncates the one file under dir that holds payload in the
// middle of it.
func tearAfter(t *testing.T, dir string, payload []byte) {
	t.Helper()
	editHolder(t, dir, payload, func(path string, _ []byte, i int) error {
		return os.Truncate(path, int64(i+len(payload)/2))
	})
}

// editHolder calls edit for the one file under dir that holds payload,
// with its bytes and the payload's offset in them.
func editHolder(t *testing.T, dir string, payload []byte, edit func(path string, b []byte, i int) error) {
	t.Helper()
	hits := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		i := bytes.Index(b, payload)
		if i < 0 {
			return nil
		}
		hits++
		return edit(path, b, i)
	})
	if err != nil || hits != 1 {
		t.Fatalf("edit %q under %s: %d files hold it, %v", payload, dir, hits, err)
	}
}
