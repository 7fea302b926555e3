package e2e

// TestPlayerProcess runs the exactly-once player as real processes: a dev
// cluster (`augur dev`), playerKVTargets kv targets (`augur target kv`),
// playerPGTargets PostgreSQL targets (`augur target postgres`, on one real
// PostgreSQL server) and the player (`augur player`), with records flowing while targets and the
// player are kill -9ed and restarted; then each target's applied sequence
// must equal the log's sequence for that target, with no gap and no
// duplicate, and its key-value state must be the last write of each key:
//
//	go test ./test/e2e/ -run PlayerProcess -v

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/pgtest"
	"github.com/augur-log/augur/internal/player"
	"github.com/augur-log/augur/internal/playerd"
	"github.com/augur-log/augur/target/kv"
	"github.com/augur-log/augur/target/postgres"
)

// Workload and fault schedule of TestPlayerProcess.
const (
	playerKVTargets = 8
	playerPGTargets = 2
	playerTargets   = playerKVTargets + playerPGTargets
	// playerKeys is how many keys the records spread over: few enough that
	// keys are overwritten, so the final state checks the apply order.
	playerKeys      = 40
	playerAppenders = 2
	playerPace      = 3 * time.Millisecond
	// playerFaultRounds kill -9s a target, then the player, this many
	// times; each fault lasts until playerFaultAcks more appends returned.
	playerFaultRounds = 3
	playerFaultAcks   = 150
	playerEmptyEvery  = 50
	playerCatchUp     = 60 * time.Second
)

func TestPlayerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts cluster, target and player processes; skipped under -short")
	}
	bin := augurBinary(t)
	ctx := t.Context()
	dir := t.TempDir()
	pc := &procCluster{t: t, bin: bin, logDir: filepath.Join(dir, "logs"), procs: map[string]*proc{}}
	if err := os.MkdirAll(pc.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var ids []string
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range ids {
				data, _ := os.ReadFile(filepath.Join(pc.logDir, id+".log"))
				t.Logf("--- %s: last %d lines ---\n%s", id, procLogTailLines, logTail(string(data), procLogTailLines))
			}
		}
	})
	t.Cleanup(pc.stopAll)

	// The cluster: one `augur dev` process holding 3 ordering replicas and
	// 2 storage groups, which writes its cluster file into its data dir.
	clusterDir := filepath.Join(dir, "cluster")
	ids = append(ids, "dev")
	pc.startArgs("dev", "dev", "--data", clusterDir, "--log-level", "info")
	clusterFile := filepath.Join(clusterDir, "cluster.yaml")
	var cfg *config.Cluster
	if !eventually(t, procReadyTimeout, func() bool {
		c, err := config.Load(clusterFile)
		cfg = c
		return err == nil
	}) {
		t.Fatalf("augur dev wrote no cluster file at %s", clusterFile)
	}
	pc.cfg = cfg
	cl := pc.dial(ctx)
	waitStatus(t, ctx, cl, procReadyTimeout, "cluster ready", func(st *pb.StatusResponse) string {
		return clusterReady(st, "a", "b")
	})

	// The targets and the player.
	dsn := pgtest.Start(t)
	addrs := freeAddrs(t, playerTargets+1)
	statusAddr := addrs[playerTargets]
	var yaml strings.Builder
	// The player's status endpoint serves HTTPS with a certificate of the
	// cluster's CA.
	if out, err := exec.Command(bin, "certs", "issue", "--config", clusterFile, "player", "player", "--host", "127.0.0.1").CombinedOutput(); err != nil {
		t.Fatalf("augur certs issue player: %v\n%s", err, out)
	}
	statusTLS, err := cfg.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&yaml, "cluster: %s\nstatus_addr: %s\nstatus_cert: player\nroute: key-hash\nempty_every: %d\nack_timeout: 2s\nreconnect_max: 300ms\ntargets:\n",
		clusterFile, statusAddr, playerEmptyEvery)
	// Targets 0..playerKVTargets-1 are kv targets, the rest PostgreSQL
	// targets, each on its own table.
	names := make([]string, playerTargets)
	targetDirs := make([]string, playerTargets)
	// Each target serves TLS with a certificate of the cluster's CA, and
	// takes batches only from the cluster's clients (the player).
	certDir := cfg.CertDir()
	tlsArgs := func(name string) []string {
		if out, err := exec.Command(bin, "certs", "issue", "--config", clusterFile, "target", name, "--host", "127.0.0.1").CombinedOutput(); err != nil {
			t.Fatalf("augur certs issue target %s: %v\n%s", name, err, out)
		}
		return []string{"--ca", filepath.Join(certDir, "ca.crt"), "--cert", filepath.Join(certDir, name+".crt"), "--cert-key", filepath.Join(certDir, name+".key")}
	}
	startTarget := func(i int) {
		if i < playerKVTargets {
			pc.startArgs(names[i], append([]string{"target", "kv", "--addr", addrs[i], "--dir", targetDirs[i], "--history", "--log-level", "info"}, tlsArgs(names[i])...)...)
		} else {
			pc.startArgs(names[i], append([]string{"target", "postgres", "--addr", addrs[i], "--dsn", dsn, "--table", names[i], "--history", "--log-level", "info"}, tlsArgs(names[i])...)...)
		}
	}
	for i := range playerTargets {
		names[i] = fmt.Sprint("kv", i)
		if i >= playerKVTargets {
			names[i] = fmt.Sprint("pg", i)
		}
		targetDirs[i] = filepath.Join(dir, names[i])
		fmt.Fprintf(&yaml, "  - {name: %s, addr: %s}\n", names[i], addrs[i])
		ids = append(ids, names[i])
		startTarget(i)
	}
	playerFile := filepath.Join(dir, "player.yaml")
	if err := os.WriteFile(playerFile, []byte(yaml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, "player")
	startPlayer := func() { pc.startArgs("player", "player", "--config", playerFile, "--log-level", "info") }
	startPlayer()

	// Records flow for the whole run.
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var next atomic.Int64
	for range playerAppenders {
		acl := pc.dial(ctx)
		wg.Go(func() {
			tick := time.NewTicker(playerPace)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				n := next.Add(1)
				rec := client.Record{Key: fmt.Sprint("k", n%playerKeys), Payload: []byte(fmt.Sprint("p", n))}
				if _, err := acl.Append(ctx, rec); err == nil {
					acked.Add(1)
				}
			}
		})
	}
	waitAppends := func(n int64, what string) {
		t.Helper()
		from := acked.Load()
		if !eventually(t, procPhaseTimeout, func() bool { return acked.Load() >= from+n }) {
			t.Fatalf("%s: fewer than %d appends returned within %v", what, n, procPhaseTimeout)
		}
	}
	waitAppends(playerFaultAcks, "before the faults")

	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	for round := range playerFaultRounds {
		// Every round hits a PostgreSQL target and a random other one.
		victim := rng.IntN(playerTargets)
		pgVictim := playerKVTargets + round%playerPGTargets
		t.Logf("round %d: kill -9 %s and %s", round, names[victim], names[pgVictim])
		pc.kill9(names[victim])
		if pgVictim != victim {
			pc.kill9(names[pgVictim])
		}
		waitAppends(playerFaultAcks, "target down")
		startTarget(victim)
		if pgVictim != victim {
			startTarget(pgVictim)
		}
		waitAppends(playerFaultAcks/2, "target back")

		t.Logf("round %d: kill -9 the player", round)
		pc.kill9("player")
		waitAppends(playerFaultAcks, "player down")
		startPlayer()
		// Kill a target while the player is restarting, so it recovers
		// from the player's restart and its own at once.
		if round == playerFaultRounds-1 {
			other := (victim + 1) % playerTargets
			t.Logf("round %d: kill -9 %s during the player's restart", round, names[other])
			pc.kill9(names[other])
			waitAppends(playerFaultAcks/2, "target down with the player restarting")
			startTarget(other)
		}
		waitAppends(playerFaultAcks/2, "player back")
	}
	close(stop)
	wg.Wait()

	// The log as every target must see it.
	tail, err := cl.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, playerCatchUp)
	entries, err := cl.ReadRange(rctx, 0, int(tail))
	cancel()
	if err != nil {
		t.Fatalf("read the log's %d positions: %v", tail, err)
	}
	pcfg := player.Config{Route: player.RouteKeyHash, Targets: names}
	want := make([][]kv.Applied, playerTargets)
	wantState := make([]map[string]string, playerTargets)
	for i := range wantState {
		wantState[i] = map[string]string{}
	}
	for _, e := range entries {
		pe := player.Entry{Index: player.Index(e.Position + 1), Key: e.Record.Key}
		for _, id := range player.TargetsOf(pcfg, &pe) {
			want[id] = append(want[id], kv.Applied{Index: uint64(pe.Index), Key: e.Record.Key})
			wantState[id][e.Record.Key] = string(e.Record.Payload)
		}
	}
	t.Logf("%d records in the log; per target %v", len(entries), func() []int {
		var n []int
		for _, w := range want {
			n = append(n, len(w))
		}
		return n
	}())

	// Wait until the player reports every target past its last entry.
	var st playerd.Status
	if !eventually(t, playerCatchUp, func() bool {
		if playerStatus(statusAddr, statusTLS, &st) != nil {
			return false
		}
		for i, ts := range st.Targets {
			if n := len(want[i]); n > 0 && ts.LastAck < want[i][n-1].Index {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the targets did not catch up within %v: %+v", playerCatchUp, st)
	}
	t.Logf("caught up: %+v", st)
	// An append that failed for its client may still have reached the log
	// after the tail was read; then the final state may hold its write.
	lastTail, err := cl.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Stop everything, then read each target's file.
	pc.stopAll()
	for i := range playerTargets {
		got, get, closeStore := openApplied(t, i, targetDirs[i], dsn, names[i])
		// Records ordered after the tail was read (an append that failed
		// for the client but reached the log) may follow; none may be
		// missing, doubled or out of order before it.
		got = slices.DeleteFunc(got, func(a kv.Applied) bool { return a.Index > tail })
		if !slices.Equal(got, want[i]) {
			t.Errorf("%s applied %d entries, want %d; first difference: %s", names[i], len(got), len(want[i]), firstDiff(got, want[i]))
		}
		for k, v := range wantState[i] {
			if lastTail != tail {
				t.Logf("the log grew from %d to %d after the appenders stopped: state not checked", tail, lastTail)
				break
			}
			if got, ok, err := get(k); err != nil || !ok || string(got) != v {
				t.Errorf("%s: %s = %q (set %v, %v), want %q", names[i], k, got, ok, err, v)
			}
		}
		closeStore()
	}
}

// openApplied opens target i's store after its process stopped and returns
// its apply history and a reader of its keys.
func openApplied(t *testing.T, i int, dir, dsn, table string) ([]kv.Applied, func(string) ([]byte, bool, error), func()) {
	t.Helper()
	if i < playerKVTargets {
		s, err := kv.Open(filepath.Join(dir, "kv.db"), kv.Options{History: true})
		if err != nil {
			t.Fatal(err)
		}
		h, err := s.History()
		if err != nil {
			t.Fatal(err)
		}
		return h, s.Get, func() { s.Close() }
	}
	ctx := t.Context()
	s, err := postgres.Open(ctx, dsn, postgres.Options{Table: table, History: true})
	if err != nil {
		t.Fatal(err)
	}
	ph, err := s.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var h []kv.Applied
	for _, a := range ph {
		h = append(h, kv.Applied{Index: a.Index, Key: a.Key})
	}
	return h, func(k string) ([]byte, bool, error) { return s.Get(ctx, k) }, s.Close
}

func playerStatus(addr string, tlsCfg *tls.Config, st *playerd.Status) error {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + addr + "/status")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(st)
}

func firstDiff(got, want []kv.Applied) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d: applied %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(got) > len(want) {
		return fmt.Sprintf("extra %+v", got[len(want)])
	}
	if len(got) < len(want) {
		return fmt.Sprintf("missing %+v", want[len(got)])
	}
	return "none"
}
