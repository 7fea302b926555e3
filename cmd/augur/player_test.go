package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/devcluster"
	targetsdk "github.com/augur-log/augur/target"
	"github.com/augur-log/augur/target/kv"
)

// TestPlayerStatusOverTLS runs `augur player` against a TLS cluster with a
// kv target: its status_addr must serve HTTPS with the certificate `augur
// certs issue player` wrote, refuse a plaintext HTTP client, and answer
// `augur player status` (by player file, and by --addr with the cluster
// CA), while a CA of another cluster does not verify it. A player file
// without status_cert is refused on a secured cluster.
func TestPlayerStatusOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: filepath.Join(dir, "cluster"), Shards: 1, Replicas: 2, OrderingReplicas: 1, TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	clusterFile := filepath.Join(dir, "cluster.yaml")
	if err := dc.Config().Save(clusterFile); err != nil {
		t.Fatal(err)
	}
	if out, err := runAugur(t, "certs", "issue", "--config", clusterFile, "player", "p1", "--host", "127.0.0.1"); err != nil {
		t.Fatalf("certs issue player: %v\n%s", err, out)
	}

	store, err := kv.Open(filepath.Join(dir, "kv1.db"), kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sec, err := dc.TargetSecurity("kv1")
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(sec.ServerOptions()...)
	targetsdk.Register(g, store)
	go g.Serve(tl)
	defer g.Stop()

	// The player binds status_addr itself: take a free port for it.
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	statusAddr := sl.Addr().String()
	sl.Close()
	writePlayer := func(name, statusCert string) string {
		p := filepath.Join(dir, name)
		body := fmt.Sprintf("cluster: %s\nstatus_addr: %s\n%stargets:\n  - {name: kv1, addr: %s}\n", clusterFile, statusAddr, statusCert, tl.Addr())
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := runPlayer(ctx, writePlayer("nocert.yaml", "")); err == nil || !strings.Contains(err.Error(), "status_cert") {
		t.Fatalf("a secured player without status_cert: %v", err)
	}
	playerFile := writePlayer("player.yaml", "status_cert: p1\n")
	pctx, stopPlayer := context.WithCancel(ctx)
	playerDone := make(chan error, 1)
	go func() { playerDone <- runPlayer(pctx, playerFile) }()
	defer func() {
		stopPlayer()
		if err := <-playerDone; err != nil {
			t.Errorf("player: %v", err)
		}
	}()

	// The player listens once it has dialled the cluster; ask until then.
	var out string
	for {
		out, err = runAugur(t, "player", "status", "--config", playerFile, "--timeout", "5s")
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("augur player status: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("augur player status never answered: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !strings.Contains(out, "current index") || !strings.Contains(out, "kv1") {
		t.Errorf("augur player status printed:\n%s", out)
	}
	ca := filepath.Join(dc.CertDir(), auth.CACertFile)
	if out, err := runAugur(t, "player", "status", "--addr", statusAddr, "--ca", ca); err != nil || !strings.Contains(out, "kv1") {
		t.Errorf("augur player status --addr --ca: %v\n%s", err, out)
	}

	// Plaintext HTTP gets no status.
	resp, err := http.Get("http://" + statusAddr + "/status")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("a plaintext HTTP client got the status (%s)", resp.Status)
		}
	}
	if _, err := runAugur(t, "player", "status", "--addr", statusAddr, "--insecure"); err == nil {
		t.Error("augur player status --insecure got the status of a TLS player")
	}

	// A CA of another cluster does not verify the player.
	other, err := auth.NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherDir := filepath.Join(dir, "other")
	if err := other.Save(otherDir); err != nil {
		t.Fatal(err)
	}
	if _, err := runAugur(t, "player", "status", "--addr", statusAddr, "--ca", filepath.Join(otherDir, auth.CACertFile)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("augur player status with another cluster's CA: %v", err)
	}
}
