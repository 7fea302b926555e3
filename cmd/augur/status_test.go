package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/devcluster"
)

// TestStatusShowsADamagedCopy damages one record of a stopped backup's
// segment file and restarts it: `augur status` must say, in the row of
// that replica, which local records are damaged, and call the primary's
// copy ok.
func TestStatusShowsADamagedCopy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), Shards: 1, Replicas: 2, OrderingReplicas: 1, TLS: true})
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
	for i := range 3 {
		// An acknowledged record is stored on every replica.
		if _, err := cl.Append(ctx, client.Record{Payload: []byte(fmt.Sprintf("status-record-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	ids := dc.StorageIDs()
	primary, backup := ids[0], ids[1]
	if err := dc.StopStorage(backup); err != nil {
		t.Fatal(err)
	}
	flipPayloadByte(t, filepath.Join(dc.Dir(), backup), []byte("status-record-1"))
	if err := dc.StartStorage(backup); err != nil {
		t.Fatal(err)
	}
	cluster := append([]string{"--ordering", strings.Join(dc.OrderingAddrs(), ","), "--cluster", dc.ClusterID, "--timeout", "10s"}, tlsFlags(dc)...)
	out, err := runAugurCtx(ctx, append([]string{"status"}, cluster...)...)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	t.Log(out)
	if strings.Contains(out, "INSECURE") {
		t.Errorf("status of a TLS cluster warns that it is insecure:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^0\s+` + backup + `\s+damaged: 1 records at local \[1, 2\) refused until repaired$`).MatchString(out) {
		t.Errorf("status does not report the damaged copy of %s:\n%s", backup, out)
	}
	if !regexp.MustCompile(`(?m)^0\s+` + primary + `\s+ok$`).MatchString(out) {
		t.Errorf("status does not call the copy of %s ok:\n%s", primary, out)
	}
}

// flipPayloadByte flips the last byte of the one payload equal to payload
// in the files under dir, so its frame no longer checks out.
func flipPayloadByte(t *testing.T, dir string, payload []byte) {
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
		b[i+len(payload)-1] ^= 0xff
		return os.WriteFile(path, b, 0o644)
	})
	if err != nil || hits != 1 {
		t.Fatalf("damage %q under %s: %d files hold it, %v", payload, dir, hits, err)
	}
}
