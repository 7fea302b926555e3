package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/check"
	"github.com/augur-log/augur/internal/config"
)

// Bounds of TestAddServerToTrimmedGroup.
const (
	// trimCopyAcksBeforeTrim is how many appends are acknowledged before
	// the trim: with 4 KiB segments, several segments per shard.
	trimCopyAcksBeforeTrim = 1000
	// trimCopyKeptAcks is how many of the last acknowledged positions
	// the trim keeps.
	trimCopyKeptAcks = 200
	// trimCopyJoinTimeout bounds the new server's copy and join, and the
	// failover to it.
	trimCopyJoinTimeout = 30 * time.Second
	// trimCopyShardAcks is how many more appends the copied shard must
	// acknowledge after each step.
	trimCopyShardAcks = 20
)

// TestAddServerToTrimmedGroup runs a cluster of processes over TLS (groups
// of 2, eager order, 4 KiB segments) under appends, trims its log (whole
// segments deleted), then adds a third server to group a as an operator
// does: lists it in the cluster file, issues its certificate with the
// cluster CA, sends SIGHUP to the running servers and starts it empty. The
// new server must copy the group's shard from where its replicas' logs
// start and join its configuration; then both original servers of the
// group are killed with kill -9, and the new one alone must serve the
// shard, same id, taking appends. Every append must succeed, every
// acknowledged append at or above the trim point must read back exactly
// once at its position, and the history of appends and reads (from the
// trim point on) must be linearizable.
func TestAddServerToTrimmedGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes; skipped under -short")
	}
	ctx := t.Context()
	pc := newProcClusterSettings(t, augurBinary(t), time.Millisecond, "fsync: interval\nsegment_bytes: 4096\n")
	pc.startAll()
	admin := pc.dial(ctx)
	st := waitStatus(t, ctx, admin, procReadyTimeout, "cluster ready", func(st *pb.StatusResponse) string { return clusterReady(st, procGroups...) })
	target := liveShard(st, "a")
	originals := slices.Collect(func(yield func(string) bool) {
		for _, r := range target.Replicas {
			if !yield(r.Id) {
				return
			}
		}
	})

	clk, h := newClock(), &history{}
	opCtx, giveUp := context.WithCancel(ctx)
	t.Cleanup(giveUp)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range procAppenders {
		cl := pc.dial(ctx)
		wg.Go(func() { appendPaced(opCtx, stop, cl, h, clk, i, procAppendPace) })
	}
	waitAcksFor(t, h, clk, trimCopyAcksBeforeTrim, 0, "before the trim")

	trim := h.tail() - trimCopyKeptAcks
	if err := admin.Trim(ctx, trim); err != nil {
		t.Fatalf("trim at %d: %v", trim, err)
	}
	shardDir := func(id string) string {
		return filepath.Join(pc.cfg.DataDir, id, fmt.Sprintf("shard-%d", target.Id))
	}
	for _, id := range originals {
		waitFirstSegmentPast0(t, ctx, shardDir(id))
	}
	t.Logf("at %v: trimmed at %d; %s's replicas deleted their first segments", clk.now().Round(time.Millisecond), trim, "a")
	// Reads from now on, of positions at or above the trim point.
	readCl := pc.dial(ctx)
	seed := testSeed(t)
	wg.Go(func() { readPacedFrom(opCtx, stop, readCl, h, clk, procAppenders, seed, true, trim) })

	added := addStorageServer(t, pc, "a")
	joined := waitStatus(t, ctx, admin, trimCopyJoinTimeout, added+" in shard "+strconv.Itoa(int(target.Id)), func(st *pb.StatusResponse) string {
		sh := shardByID(st, target.Id)
		if sh == nil || sh.State != pb.ShardState_SHARD_LIVE {
			return fmt.Sprintf("shard %d is %v", target.Id, sh)
		}
		if len(sh.Replicas) != 3 || sh.Replicas[2].Id != added || sh.Replicas[2].Pending {
			return fmt.Sprintf("configuration %d: %v", sh.Epoch, sh.Replicas)
		}
		return ""
	})
	waitFirstSegmentPast0(t, ctx, shardDir(added))
	t.Logf("at %v: %s copied shard %d from the trimmed point and joined configuration %d", clk.now().Round(time.Millisecond), added, target.Id, shardByID(joined, target.Id).Epoch)
	waitShardAcks(t, h, target.Id, trimCopyShardAcks, "after "+added+" joined")

	for _, id := range originals {
		pc.kill9(id)
	}
	waitStatus(t, ctx, admin, trimCopyJoinTimeout, added+" alone in shard "+strconv.Itoa(int(target.Id)), func(st *pb.StatusResponse) string {
		sh := shardByID(st, target.Id)
		if sh == nil || sh.State != pb.ShardState_SHARD_LIVE {
			return fmt.Sprintf("shard %d is %v", target.Id, sh)
		}
		if len(sh.Replicas) != 1 || sh.Replicas[0].Id != added {
			return fmt.Sprintf("configuration %d: %v", sh.Epoch, sh.Replicas)
		}
		return ""
	})
	waitShardAcks(t, h, target.Id, trimCopyShardAcks, "after the original servers died")
	t.Logf("at %v: %s alone serves shard %d", clk.now().Round(time.Millisecond), added, target.Id)

	close(stop)
	drainAppends(t, h, &wg, giveUp, procDrainTimeout)
	appends, reads := h.snapshot()
	acked, _ := h.counts()
	t.Logf("%d appends (%d acked, per shard %v), %d reads", len(appends), acked, h.ackedByShard(), len(reads))
	checkAppendsReturned(t, appends)
	failOn(t, check.Returned(nil, checkReadOps(reads)))

	// Every acknowledged append at or above the trim point, read back
	// from the trim point on: once each, at its position.
	tail := h.tail()
	sub, err := pc.dial(ctx).Subscribe(ctx, trim, client.Filter{})
	if err != nil {
		t.Fatalf("subscribe from the trim point %d: %v", trim, err)
	}
	t.Cleanup(sub.Close)
	c := collect(ctx, "from-trim", sub)
	waitCollectors(t, procCatchUpTimeout, int(tail-trim), c)
	es := make([]check.Entry, 0, tail-trim)
	for _, e := range c.entries() {
		es = append(es, check.Entry{Pos: e.Position, Shard: e.Shard, Record: string(e.Record.Payload)})
	}
	l := check.LogOf("from-trim", trim, true, es[:tail-trim])
	as := checkAppends(appends)
	failOn(t, check.Acknowledged(as, l))
	failOn(t, check.StoredOnce(as, l))
	failOn(t, check.Order(as, l))
	failOn(t, check.Reads(checkReadOps(reads), l))
	checkLinearizable(t, appends, reads, true)
	pc.checkAlive()
}

// addStorageServer adds a server to group as an operator does: it lists
// it in the cluster file, issues its certificate with the cluster CA,
// sends SIGHUP to every running server (which rereads the cluster's
// members), and starts it with an empty data directory. It returns its id.
func addStorageServer(t *testing.T, pc *procCluster, group string) string {
	t.Helper()
	n := 0
	for _, s := range pc.cfg.Storage {
		if s.Group == group {
			n++
		}
	}
	id := fmt.Sprintf("%s%d", group, n+1)
	pc.cfg.Storage = append(pc.cfg.Storage, config.StorageNode{ID: id, Group: group, Addr: freeAddrs(t, 1)[0]})
	if err := pc.cfg.Save(pc.cfgPath); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(pc.bin, "certs", "issue", "--config", pc.cfgPath, "server", id).CombinedOutput(); err != nil {
		t.Fatalf("augur certs issue server %s: %v\n%s", id, err, out)
	}
	pc.mu.Lock()
	for _, p := range pc.procs {
		select {
		case <-p.exited:
		default:
			if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Errorf("SIGHUP %s: %v", p.id, err)
			}
		}
	}
	pc.mu.Unlock()
	pc.start(id)
	return id
}

// waitFirstSegmentPast0 waits until the first segment file of shard
// directory dir starts past local index 0: its log starts at a trimmed
// point.
func waitFirstSegmentPast0(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	var first string
	ok := eventually(t, trimCopyJoinTimeout, func() bool {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
		slices.Sort(paths)
		if len(paths) == 0 || ctx.Err() != nil {
			return ctx.Err() != nil
		}
		first = filepath.Base(paths[0])
		base, err := strconv.ParseUint(strings.TrimSuffix(first, ".seg"), 10, 64)
		return err == nil && base > 0
	})
	if !ok || ctx.Err() != nil {
		t.Fatalf("%s: the first segment is %q, want one past local index 0", dir, first)
	}
}

// waitShardAcks waits until shard acknowledged n more appends.
func waitShardAcks(t *testing.T, h *history, shard uint32, n int, phase string) {
	t.Helper()
	from := h.ackedBy(shard)
	if !eventually(t, procPhaseTimeout, func() bool { return h.ackedBy(shard)-from >= n }) {
		t.Fatalf("shard %d acknowledged %d appends %s in %v, want %d", shard, h.ackedBy(shard)-from, phase, procPhaseTimeout, n)
	}
}
