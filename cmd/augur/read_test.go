package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/devcluster"
)

// TestReadInSpeculativeMode reads a speculative cluster whose positions are
// mostly no-ops: `read 0 --n` past the tail clips at the tail and prints
// every record, and `read` of a no-op position says so; both answer well
// before their --timeout.
func TestReadInSpeculativeMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), Shards: 2, OrderingReplicas: 1, Mode: config.ModeSpec, WindowCuts: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := dc.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var want []string
	acked := map[uint64]bool{}
	for i := 0; i < 4; i++ {
		a, err := cl.Append(ctx, client.Record{Payload: []byte(fmt.Sprint("r", i))})
		if err != nil {
			t.Fatal(err)
		}
		acked[a.Position] = true
		want = append(want, fmt.Sprintf("%d\t%d\t\tr%d", a.Position, a.Shard, i))
	}
	tail, err := cl.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	noop := tail
	for p := tail; p > 0; p-- {
		if !acked[p-1] {
			noop = p - 1
			break
		}
	}
	if noop == tail {
		t.Fatalf("no no-op below the tail %d: the test needs one", tail)
	}
	cluster := []string{"--ordering", strings.Join(dc.OrderingAddrs(), ","), "--cluster", dc.ClusterID, "--timeout", "10s", "--insecure"}
	// answerBound is far below the --timeout the old reads waited out.
	const answerBound = 2 * time.Second

	start := time.Now()
	out, err := runAugurCtx(ctx, append([]string{"read", "0", "--n", fmt.Sprint(tail + 10)}, cluster...)...)
	if took := time.Since(start); err != nil || took > answerBound {
		t.Fatalf("read 0 --n %d with the tail at %d: %v after %v", tail+10, tail, err, took)
	}
	// The records are in position order, as acknowledged in turn.
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("read 0 --n %d printed\n%s\nwant\n%s", tail+10, out, strings.Join(want, "\n"))
	}

	start = time.Now()
	out, err = runAugurCtx(ctx, append([]string{"read", fmt.Sprint(noop)}, cluster...)...)
	if took := time.Since(start); err == nil || !strings.Contains(err.Error(), "no-op") || took > answerBound {
		t.Fatalf("read %d (a no-op): printed %q, %v after %v; want a no-op error at once", noop, out, err, took)
	}

	// The cluster is insecure: true, and status says so first.
	out, err = runAugurCtx(ctx, append([]string{"status"}, cluster...)...)
	if err != nil || !strings.HasPrefix(out, "WARNING: INSECURE") {
		t.Fatalf("status of a plaintext cluster printed\n%s(%v)\nwant it to start with the insecure warning", out, err)
	}
}
