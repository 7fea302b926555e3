package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/devcluster"
)

// startClusterWithoutLiveShard runs a cluster of one shard whose servers
// both failed: the shard is finalized, and its primary, down, forms no new
// one, so no shard takes appends. It returns the flags that name the
// cluster.
func startClusterWithoutLiveShard(t *testing.T, ctx context.Context) []string {
	t.Helper()
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), Shards: 1, Replicas: 2, OrderingReplicas: 1, FailureTimeout: 200 * time.Millisecond, TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := dc.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	only := st.Shards[0]
	sub, err := cl.Subscribe(ctx, 0, client.OnShard(only.Id))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// A record, so that each server holds a copy of the shard to serve;
	// then both servers fail, one after the other: the shard fails over to
	// the primary alone, then has no replica left and is finalized. The
	// backup comes back to serve the record; only a group's primary forms
	// shards.
	if _, err := cl.AppendToShard(ctx, client.Record{Payload: []byte("only")}, only.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dc.StopStorage(only.Replicas[1].Id); err != nil {
		t.Fatal(err)
	}
	for st, err := cl.Status(ctx); err != nil || st.Shards[0].Epoch == only.Epoch; st, err = cl.Status(ctx) {
		select {
		case <-ctx.Done():
			t.Fatalf("shard %d never failed over: %v %v", only.Id, st, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := dc.StopStorage(only.Replicas[0].Id); err != nil {
		t.Fatal(err)
	}
	if err := dc.StartStorage(only.Replicas[1].Id); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); !errors.Is(err, client.ErrShardFinalized) {
		t.Fatalf("shard %d after its servers failed: %v, want ErrShardFinalized", only.Id, err)
	}
	if st, err = cl.Status(ctx); err != nil {
		t.Fatal(err)
	}
	for _, sh := range st.Shards {
		if sh.State == pb.ShardState_SHARD_LIVE {
			t.Fatalf("shard %d is live", sh.Id)
		}
	}
	return append([]string{"--ordering", strings.Join(dc.OrderingAddrs(), ","), "--cluster", dc.ClusterID}, tlsFlags(dc)...)
}

// tlsFlags name a TLS dev cluster's CA and admin certificate.
func tlsFlags(dc *devcluster.Cluster) []string {
	dir := dc.CertDir()
	return []string{"--ca", filepath.Join(dir, auth.CACertFile),
		"--cert", auth.CertPath(dir, config.AdminClient), "--cert-key", auth.KeyPath(dir, config.AdminClient)}
}

// TestAppendStopsOnTimeoutAndSignal runs `augur append` while no shard is
// live: it must stop soon after its --timeout, and soon after its context
// ends (what SIGINT and SIGTERM do to it), saying that no shard was live.
func TestAppendStopsOnTimeoutAndSignal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster := startClusterWithoutLiveShard(t, ctx)
	// stopBound is far below any wait for a shard that never comes and
	// far above scheduling noise.
	const stopBound = 3 * time.Second
	cases := []struct {
		name    string
		timeout string
		// signalAfter ends the command's context, as a signal would.
		signalAfter time.Duration
	}{
		{name: "timeout", timeout: "300ms"},
		{name: "signal", timeout: "1m", signalAfter: 300 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmdCtx, stop := context.WithCancel(ctx)
			defer stop()
			if tc.signalAfter > 0 {
				cmdCtx, stop = context.WithTimeout(ctx, tc.signalAfter)
				defer stop()
			}
			args := append([]string{"append", "--timeout", tc.timeout}, cluster...)
			done := make(chan error, 1)
			go func() {
				_, err := runAugurCtx(cmdCtx, append(args, "hello")...)
				done <- err
			}()
			bound, cancelBound := context.WithTimeout(ctx, stopBound)
			defer cancelBound()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "no live shard") {
					t.Fatalf("append with no live shard: %v, want an error saying no shard is live", err)
				}
			case <-bound.Done():
				t.Fatalf("append --timeout %s still running after %v", tc.timeout, stopBound)
			}
		})
	}
}

// TestAppendOnALazyClusterPrintsNoPosition checks that `augur append` on a
// lazy cluster, which acknowledges appends before it orders them, prints
// '-' for the position rather than a position the record does not have,
// and that the records are read back once ordered.
func TestAppendOnALazyClusterPrintsNoPosition(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), Shards: 1, OrderingReplicas: 1, Mode: config.ModeLazy})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cluster := []string{"--ordering", strings.Join(dc.OrderingAddrs(), ","), "--cluster", dc.ClusterID, "--insecure"}
	out, err := runAugur(t, append([]string{"append", "one"}, cluster...)...)
	if err != nil {
		t.Fatal(err)
	}
	if out != "- 0\n" {
		t.Fatalf("append printed %q, want %q", out, "- 0\n")
	}
	out, err = runAugur(t, append([]string{"read", "0", "--wait", "--timeout", "30s"}, cluster...)...)
	if err != nil || !strings.HasSuffix(out, "\tone\n") {
		t.Fatalf("read the appended record: %q, %v", out, err)
	}
}
