package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/check"
)

// Bounds of TestFullDisk.
const (
	// fullDiskSize is the size of the tmpfs that holds the victim's data
	// directory: room for the Raft-free storage state and some segments.
	fullDiskSize = 16 << 20
	// fullDiskSegmentBytes keeps segments small, so a new segment is
	// needed (and refused) soon after the disk fills.
	fullDiskSegmentBytes = 64 << 10
	// fullDiskHold is how long the disk stays full while clients append.
	fullDiskHold = 3 * time.Second
	// fullDiskProbeTimeout bounds the wait for the answer to an append
	// sent to the full server's shard.
	fullDiskProbeTimeout = 5 * time.Second
	// fullDiskFillChunk is what the filler writes at a time.
	fullDiskFillChunk = 64 << 10
)

// TestFullDisk gives one storage server (the primary of group a) a data
// directory on a size-limited tmpfs, fills it while clients append, and
// frees it again. While the disk is full, no append is acknowledged that
// was not stored: every acknowledged append is read back at its position
// and the history passes internal/check. Once the filler is deleted, the
// cluster acknowledges appends again. It needs root for mount(8) and skips
// otherwise.
func TestFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 7 server processes; skipped under -short")
	}
	testStart := time.Now()
	bin := augurBinary(t)
	ctx := t.Context()
	pc := newProcClusterSettings(t, bin, time.Millisecond, fmt.Sprintf("segment_bytes: %d\n", fullDiskSegmentBytes))
	victim := pc.cfg.Group("a")[0].ID
	dir := pc.cfg.ServerDir(victim)
	mountTmpfs(t, dir, fullDiskSize)
	pc.startAll()
	admin := pc.dial(ctx)
	st := waitStatus(t, ctx, admin, procReadyTimeout, "cluster ready", func(st *pb.StatusResponse) string {
		return clusterReady(st, "a", "b")
	})
	t.Logf("cluster ready after %v: leader %s; %s's data on a %d MiB tmpfs at %s",
		time.Since(testStart).Round(time.Millisecond), st.LeaderId, victim, fullDiskSize>>20, dir)

	clk := newClock()
	h := &history{}
	subs := []*collector{
		collect(ctx, "s1", subscribe(t, ctx, pc.dial(ctx))),
		collect(ctx, "s2", subscribe(t, ctx, pc.dial(ctx))),
	}
	opCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range procAppenders {
		cl := pc.dial(ctx)
		wg.Go(func() { appendPaced(opCtx, stop, cl, h, clk, i, procAppendPace) })
	}
	seed := testSeed(t)
	readCl := pc.dial(ctx)
	wg.Go(func() { readPaced(opCtx, stop, readCl, h, clk, procAppenders, seed, true) })
	waitAcks(t, h, clk, procPhaseAcksMin, "before the disk fills")

	filler := filepath.Join(dir, "filler")
	written := fillDisk(t, filler)
	acked, _ := h.counts()
	t.Logf("at %v (%d acked): filled %s's disk with %d KiB", clk.now().Round(time.Millisecond), acked, victim, written>>10)
	// An append sent straight to a shard of the full server's group is
	// answered (an error that says why, or an acknowledgement of a record
	// the checks below then find), not left waiting.
	st = waitStatus(t, ctx, admin, procStatusTimeout*2, "status with the disk full", func(st *pb.StatusResponse) string {
		return clusterReady(st, "a")
	})
	probe := liveShard(st, "a").Id
	probeCl := pc.dial(ctx)
	pctx, cancel := context.WithTimeout(ctx, fullDiskProbeTimeout)
	h.begin()
	call := clk.now()
	ack, err := probeCl.AppendToShard(pctx, client.Record{Key: "probe", Payload: []byte("probe-0")}, probe)
	h.addAppend(appendOp{worker: procAppenders + 1, payload: "probe-0", call: call, ret: clk.now(), ack: ack, err: err})
	cancel()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		t.Errorf("an append to shard %d of %s's group got no answer within %v while the disk was full", probe, victim, fullDiskProbeTimeout)
	case err != nil:
		t.Logf("  an append to shard %d while the disk is full: %v", probe, err)
	default:
		t.Logf("  an append to shard %d while the disk is full was acknowledged by shard %d at %d", probe, ack.Shard, ack.Position)
	}
	held := time.NewTimer(fullDiskHold)
	select {
	case <-held.C: // the fault's duration, not synchronisation
	case <-ctx.Done():
	}
	if err := os.Remove(filler); err != nil {
		t.Fatalf("remove the filler: %v", err)
	}
	acked, pending := h.counts()
	t.Logf("at %v (%d acked, %d in flight): removed the filler", clk.now().Round(time.Millisecond), acked, pending)
	for _, l := range pc.logLines(victim, "no space left") {
		t.Logf("  %s logged: %s", victim, l)
		break
	}
	waitAcks(t, h, clk, procPhaseAcksMin, "after the disk has room again")
	pc.checkAlive()

	close(stop)
	drainAppends(t, h, &wg, giveUp, procDrainTimeout)
	appends, reads := h.snapshot()
	acked, _ = h.counts()
	var failures []string
	for _, op := range appends {
		if op.err != nil && len(failures) < 3 {
			failures = append(failures, op.err.Error())
		}
	}
	t.Logf("at %v: %d appends (%d acked, per shard %v), %d reads; first failures: %v",
		clk.now().Round(time.Millisecond), len(appends), acked, h.ackedByShard(), len(reads), failures)
	n := int(h.tail())
	if n != acked {
		t.Errorf("%d appends acknowledged but the largest acknowledged position is %d: positions are not dense or are shared", acked, n-1)
	}
	waitCollectors(t, procCatchUpTimeout, n, subs...)
	var logs []check.Log
	for _, s := range subs {
		logs = append(logs, checkLog(t, s.name, s.entries(), appends, true))
	}
	failOn(t, check.Order(checkAppends(appends), logs...))
	failOn(t, check.RealTime(checkAppends(appends)))
	failOn(t, check.Reads(checkReadOps(reads), logs[0]))
	checkLinearizable(t, appends, reads, true)
	pc.checkAlive()
	t.Logf("done in %v", time.Since(testStart).Round(time.Millisecond))
}

// mountTmpfs mounts a tmpfs of size bytes at dir (creating it) and
// unmounts it when the test ends, after the servers stopped. It skips the
// test if mounting is not permitted.
func mountTmpfs(t *testing.T, dir string, size int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v: %s", err, strings.TrimSpace(string(out)))
	}
	// Registered before the servers' cleanups, so it runs after them.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
		}
	})
}

// fillDisk writes path until its file system is full and returns how many
// bytes it wrote.
func fillDisk(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("create the filler: %v", err)
	}
	defer f.Close()
	buf := make([]byte, fullDiskFillChunk)
	var written int64
	for {
		n, err := f.Write(buf)
		written += int64(n)
		if errors.Is(err, syscall.ENOSPC) {
			return written
		}
		if err != nil {
			t.Fatalf("fill the disk: %v", err)
		}
	}
}
