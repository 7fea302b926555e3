package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runAugur runs the CLI with args and returns its stdout and error.
func runAugur(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return runAugurCtx(ctx, args...)
}

// runAugurCtx runs the CLI with args under ctx, which stands for the
// context main cancels on SIGINT and SIGTERM.
func runAugurCtx(ctx context.Context, args ...string) (string, error) {
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

func TestBenchFlagErrors(t *testing.T) {
	cluster := filepath.Join("..", "..", "examples", "cluster.yaml")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "name a workload: one of append, lazy-append, lazy-reads, lazy-reconfig, e2e, burst"},
		{[]string{"bench", "e2e", "--modes", "eager,lazier"}, `unknown mode "lazier"`},
		{[]string{"bench", "e2e", "--modes", "fast"}, `unknown mode "fast" (available: eager`},
		{[]string{"bench", "append", "--duration", "0s"}, "duration must be positive"},
		{[]string{"bench", "append", "--rate", "1000000000"}, "below the pacer's"},
		{[]string{"bench", "e2e", "--plot", "fig.jpg"}, "--plot must name a .png or .svg file"},
		{[]string{"bench", "e2e", "--compute", "1.5ms,soon"}, `--compute: "soon" is not a valid element`},
		{[]string{"bench", "scale", "--shards", "1,,4"}, `--shards: "" is not a valid element`},
		{[]string{"bench", "e2e", "--window", "100"}, "needs a speculative mode in --modes"},
		{[]string{"bench", "burst", "--no-lagfix"}, "--no-lagfix needs a speculative mode in --modes"},
		{[]string{"bench", "ratechange"}, "ratechange needs a speculative mode in --modes"},
		{[]string{"bench", "window"}, "window needs a speculative mode in --modes"},
		{[]string{"bench", "straggler"}, "straggler needs a speculative mode in --modes"},
		{[]string{"bench", "append", "--compute", "1ms"}, "unknown flag: --compute"},
		{[]string{"bench", "append", "--cluster", cluster, "--shards", "4"}, "--shards shapes the embedded cluster"},
		{[]string{"bench", "failure", "--cluster", cluster}, "failure stops and restarts servers, so it needs the embedded cluster"},
		{[]string{"bench", "scale", "--emulate", "8"}, "--emulate needs an open-loop --rate"},
		{[]string{"bench", "scale", "--emulate", "0", "--rate", "1000"}, "emulate must be in [1, 1000] shards, got 0"},
		{[]string{"bench", "scale", "--emulate", "10,1001", "--rate", "100000"}, "emulate must be in [1, 1000] shards, got 1001"},
		{[]string{"bench", "scale", "--emulate", "10,x", "--rate", "1000"}, `--emulate: "x" is not a valid element`},
		{[]string{"bench", "scale", "--emulate", "8", "--rate", "8000", "--cluster", cluster}, "--emulate runs its own ordering layer with emulated shards, so it needs the embedded cluster"},
		{[]string{"bench", "scale", "--emulate", "8", "--rate", "8000", "--compute", "1ms"}, "--compute applies to real shards; --emulate runs emulated ones"},
		{[]string{"bench", "scale", "--emulate", "8", "--rate", "8000", "--shards", "4"}, "--shards applies to real shards"},
		{[]string{"bench", "scale", "--emulate", "8", "--rate", "8000", "--no-stagger"}, "--no-stagger needs a speculative mode in --modes"},
		{[]string{"bench", "e2e", "--emulate", "8"}, "unknown flag: --emulate"},
		{[]string{"bench", "e2e", "--follow", "shard"}, `follow must be shards or log, got "shard"`},
		{[]string{"bench", "elastic", "--follow", "shards"}, "elastic changes the shards during the run"},
		{[]string{"bench", "all"}, "--out DIR is required"},
		{[]string{"bench", "all", "--out", t.TempDir(), "--modes", "lazier"}, `unknown mode "lazier"`},
		{[]string{"bench", "all", "--out", t.TempDir(), "--duration", "-1s"}, "duration must be positive"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := runAugur(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// all checks its common flags as e2e sees them, with e2e's defaults
	// for the flags it does not have.
	_, err := runAugur(t, "bench", "all", "--out", t.TempDir(), "--duration", "-1s")
	if err == nil || strings.Contains(err.Error(), "follow") {
		t.Fatalf("bench all --duration -1s: %q, want errors about the duration only", err)
	}
}

func TestBenchCommandsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded clusters")
	}
	dir := t.TempDir()
	plot := filepath.Join(dir, "e2e.svg")
	out, err := runAugur(t, "bench", "e2e", "--shards", "1", "--replicas", "2", "--rate", "200", "--clients", "1",
		"--duration", "200ms", "--warmup", "50ms", "--compute", "1ms", "--plot", plot)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if r["workload"] != "e2e" || r["mode"] != "eager" || r["e2e_latency_us"] == nil {
		t.Fatalf("result %s", out)
	}
	if data, err := os.ReadFile(plot); err != nil || !bytes.HasPrefix(data, []byte("<svg")) {
		t.Fatalf("plot: %v", err)
	}

	// The README documents these two.
	out, err = runAugur(t, "bench", "append", "--shards", "1", "--replicas", "2", "--rate", "0", "--clients", "1",
		"--duration", "200ms", "--warmup", "50ms")
	if err != nil || !strings.HasPrefix(out, `{"workload":"append","mode":"eager"`) {
		t.Fatalf("bench append: %v: %s", err, out)
	}
	out, err = runAugur(t, "bench", "idle", "--shards", "1", "--replicas", "2", "--duration", "100ms", "--warmup", "50ms")
	if err != nil || !strings.Contains(out, `"cpu_percent_of_one_core"`) {
		t.Fatalf("bench idle: %v: %s", err, out)
	}

	// Emulated shards, not staggered, with their figure.
	plot = filepath.Join(dir, "scale.svg")
	out, err = runAugur(t, "bench", "scale", "--emulate", "4", "--rate", "2000", "--modes", "spec", "--no-stagger",
		"--duration", "200ms", "--warmup", "100ms", "--plot", plot)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if r["emulated"] != true || r["stagger_above"] != 0.0 || r["order_latency_us"] == nil || r["records_ordered"] != r["records_arrived"] {
		t.Fatalf("bench scale --emulate: %s", out)
	}
	if data, err := os.ReadFile(plot); err != nil || !bytes.Contains(data, []byte("order latency p50")) {
		t.Fatalf("plot: %v", err)
	}
}
