package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/stagetime"
)

func params(t *testing.T, workload string) Params {
	t.Helper()
	p, err := DefaultParams(workload)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckRejectsBadParams(t *testing.T) {
	for _, name := range []string{"append", "e2e", "burst", "elastic", "failure", "scale", "idle"} {
		if _, err := Check(name, params(t, name)); err != nil {
			t.Errorf("%s defaults: %v", name, err)
		}
	}
	cases := []struct {
		name     string
		workload string
		edit     func(*Params)
		want     string
	}{
		{"unknown workload", "scan", func(*Params) {}, `unknown workload "scan" (known: append, burst, e2e, elastic, failure, idle,`},
		{"unknown mode", "e2e", func(p *Params) { p.Modes = []string{"eager", "fast"} }, `unknown mode "fast" (available: eager`},
		{"unknown mode", "e2e", func(p *Params) { p.Modes = []string{"eager", "lazier"} }, `unknown mode "lazier"`},
		{"no mode", "e2e", func(p *Params) { p.Modes = nil }, "name at least one mode"},
		{"mode twice", "e2e", func(p *Params) { p.Modes = []string{"eager", "eager"} }, "mode eager is named twice"},
		{"zero duration", "append", func(p *Params) { p.Duration = 0 }, "duration must be positive"},
		{"negative warmup", "append", func(p *Params) { p.Warmup = -time.Second }, "warmup must not be negative"},
		{"negative rate", "append", func(p *Params) { p.Rate = -5 }, "rate must be 0"},
		{"unpaceable rate", "e2e", func(p *Params) { p.Rate = 1 << 30 }, "below the pacer's"},
		{"too slow a rate", "e2e", func(p *Params) { p.Rate = 1; p.Duration = time.Second }, "less than one operation per client"},
		{"zero clients", "append", func(p *Params) { p.Clients = 0 }, "clients must be in [1, 1024]"},
		{"zero inflight", "append", func(p *Params) { p.Rate, p.Inflight = 0, 0 }, "inflight must be in"},
		{"empty records", "append", func(p *Params) { p.RecordBytes = 0 }, "record bytes must be in [1, 1048576]"},
		{"records too short to stamp", "e2e", func(p *Params) { p.RecordBytes = 10 }, "record bytes must be in [28, 1048576]"},
		{"oversized records", "append", func(p *Params) {
			p.Cluster = config.Default()
			p.Cluster.RecordBytesMax = 1000
		}, "record bytes must be in [1, 1000]"},
		{"unknown durability", "append", func(p *Params) { p.Durability = []string{"default", "lax"} }, `durability "lax" is not one of default, optout`},
		{"durability twice", "append", func(p *Params) { p.Durability = []string{"optout", "optout"} }, "durability optout is named twice"},
		{"durability and fsync", "append", func(p *Params) { p.Durability, p.Fsync = []string{"default"}, "never" }, "give it or fsync, not both"},
		{"unknown security", "append", func(p *Params) { p.Security = []string{"tls", "ssl"} }, `security "ssl" is not one of insecure, tls`},
		{"security twice", "append", func(p *Params) { p.Security = []string{"tls", "tls"} }, "security tls is named twice"},
		{"zero shards", "append", func(p *Params) { p.Shards = []int{2, 0} }, "shards must be in [1, 64]"},
		{"shards twice", "scale", func(p *Params) { p.Shards = []int{1, 2, 1} }, "shard count 1 is named twice"},
		{"zero interval", "append", func(p *Params) { p.OrderingInterval = 0 }, "ordering interval must be positive"},
		{"negative compute", "e2e", func(p *Params) { p.Compute = []time.Duration{-time.Millisecond} }, "compute must be in [0, 1m0s]"},
		{"no compute", "e2e", func(p *Params) { p.Compute = nil }, "name at least one compute time"},
		{"compute without consumers", "append", func(p *Params) { p.Compute = []time.Duration{time.Millisecond} }, "compute applies to workloads with downstream consumers"},
		{"zero subscribers", "e2e", func(p *Params) { p.Subscribers = 0 }, "subscribers must be in [1, 64]"},
		{"unknown follow", "e2e", func(p *Params) { p.Follow = "shard" }, `follow must be shards or log, got "shard"`},
		{"elastic following shards", "elastic", func(p *Params) { p.Follow = FollowShards }, "elastic changes the shards during the run, so its tasks must follow the log"},
		{"window with eager only", "e2e", func(p *Params) { p.Window = []int{100} }, "--window (the speculation lease window) needs a speculative mode in --modes"},
		{"no-lagfix with eager only", "burst", func(p *Params) { p.NoLagFix = true }, "--no-lagfix needs a speculative mode in --modes"},
		{"series interval too fine", "burst", func(p *Params) { p.Interval = time.Microsecond }, "more than 10000 points"},
		{"burst without a rate", "burst", func(p *Params) { p.Rate, p.ExtraRate = 0, 0 }, "burst needs a positive --extra-rate"},
		{"ratechange", "ratechange", func(*Params) {}, "ratechange needs a speculative mode in --modes"},
		{"window", "window", func(*Params) {}, "window needs a speculative mode in --modes"},
		{"straggler on a running cluster", "straggler", func(p *Params) {
			p.Modes = []string{"eager", "spec"}
			p.Cluster = config.Default()
		}, "straggler delays one server's reports, so it needs the embedded cluster"},
		{"failure on a running cluster", "failure", func(p *Params) { p.Cluster = config.Default() }, "failure stops and restarts servers, so it needs the embedded cluster"},
		{"a group of one server", "failure", func(p *Params) { p.Replicas = 1 }, "replicas (storage servers per group) must be 2 or 3, got 1"},
		{"a group of four servers", "append", func(p *Params) { p.Replicas = 4 }, "replicas (storage servers per group) must be 2 or 3, got 4"},
		{"scale on a running cluster", "scale", func(p *Params) { p.Cluster = config.Default() }, "scale sweeps cluster sizes"},
		{"idle on a running cluster", "idle", func(p *Params) { p.Cluster = config.Default() }, "needs the embedded cluster"},
		{"emulate on a running cluster", "scale", func(p *Params) {
			p.Emulate, p.Rate = []int{8}, 8000
			p.Cluster = config.Default()
		}, "--emulate runs its own ordering layer with emulated shards, so it needs the embedded cluster"},
		{"emulate zero shards", "scale", func(p *Params) { p.Emulate, p.Rate = []int{0}, 8000 }, "emulate must be in [1, 1000] shards, got 0"},
		{"emulate too many shards", "scale", func(p *Params) { p.Emulate, p.Rate = []int{1001}, 100000 }, "emulate must be in [1, 1000] shards, got 1001"},
		{"emulate twice", "scale", func(p *Params) { p.Emulate, p.Rate = []int{8, 8}, 8000 }, "emulated shard count 8 is named twice"},
		{"emulate closed loop", "scale", func(p *Params) { p.Emulate, p.Rate = []int{8}, 0 }, "--emulate needs an open-loop --rate"},
		{"emulate too slow a rate", "scale", func(p *Params) { p.Emulate, p.Rate, p.Duration = []int{40}, 10, time.Second }, "with 40 emulated shards: rate 10/s over 40 clients sends less than one operation"},
		{"emulate a compute sweep", "scale", func(p *Params) {
			p.Emulate, p.Rate = []int{8}, 8000
			p.Compute = []time.Duration{time.Millisecond, 2 * time.Millisecond}
		}, "emulated shards have none"},
		{"emulate another workload", "e2e", func(p *Params) { p.Emulate, p.Rate = []int{8}, 8000 }, "--emulate applies to the scale workload only"},
		{"no-stagger with eager only", "scale", func(p *Params) { p.Emulate, p.Rate, p.NoStagger = []int{8}, 8000, true }, "--no-stagger needs a speculative mode in --modes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p Params
			if tc.workload != "scan" {
				p = params(t, tc.workload)
			}
			tc.edit(&p)
			_, err := Check(tc.workload, p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestVariantsSweepInOrder(t *testing.T) {
	p := Params{Shards: []int{2, 4}, Compute: []time.Duration{time.Millisecond, 2 * time.Millisecond}}
	got := variants(p)
	want := []Variant{{Shards: 2, Compute: time.Millisecond}, {Shards: 2, Compute: 2 * time.Millisecond}, {Shards: 4, Compute: time.Millisecond}, {Shards: 4, Compute: 2 * time.Millisecond}}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("variant %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	p.Cluster = config.Default()
	if got := variants(p); len(got) != 2 || got[0].Shards != 0 {
		t.Fatalf("with a running cluster: %v", got)
	}
	// Emulated shards replace the shard sweep and take no compute times.
	p = Params{Shards: []int{2}, Emulate: []int{10, 40}, Compute: []time.Duration{time.Millisecond}, Window: []int{50, 100}}
	got = variants(p)
	want = []Variant{{Emulate: 10, Window: 50}, {Emulate: 10, Window: 100}, {Emulate: 40, Window: 50}, {Emulate: 40, Window: 100}}
	if !slices.Equal(got, want) {
		t.Fatalf("emulated variants %v, want %v", got, want)
	}
	if s := got[0].String(); s != "10 emulated shards, window 50" {
		t.Fatalf("variant name %q", s)
	}
}

// smokeParams are tiny runs: a fifth of a second of low load on one or two
// shards.
func smokeParams(t *testing.T, workload string) Params {
	p := params(t, workload)
	p.Shards = []int{2}
	p.Replicas = 2
	p.Rate = 400
	p.Clients = 2
	p.Warmup = 100 * time.Millisecond
	p.Duration = 250 * time.Millisecond
	p.Subscribers = min(p.Subscribers, 1)
	if p.Subscribers > 0 {
		p.Subscribers = 2
		p.Compute = []time.Duration{500 * time.Microsecond}
	}
	return p
}

// runSmoke runs workload, checks that its JSON parses back into the same
// results and that its counts are consistent, and returns the report. In a
// failure-free run no append fails and, unless misspeculates, no
// speculation does.
func runSmoke(t *testing.T, workload string, p Params, failureFree bool, misspeculates ...bool) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, workload, p)
	if err != nil {
		t.Fatalf("%s: %v", workload, err)
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(rep.Results())+len(rep.Comparisons()) {
		t.Fatalf("%d JSON lines for %d results and %d comparisons", len(lines), len(rep.Results()), len(rep.Comparisons()))
	}
	// Comparisons follow the results of their point; take results in order.
	var resultLines []string
	for _, l := range lines {
		if !strings.Contains(l, `"baseline":`) {
			resultLines = append(resultLines, l)
		}
	}
	lines = resultLines
	for i, r := range rep.Results() {
		var back Result
		if err := json.Unmarshal([]byte(lines[i]), &back); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, lines[i])
		}
		if back.Workload != workload || back.Mode != r.Mode || !slices.Contains(p.Modes, back.Mode) {
			t.Fatalf("line %d: %s", i, lines[i])
		}
		if workload == "idle" {
			continue
		}
		if back.DurationS != p.Duration.Seconds() {
			t.Fatalf("line %d: duration: %s", i, lines[i])
		}
		if back.ThroughputRPS == nil || back.AppendLatencyUS == nil || back.RecordsAppended == nil || *back.RecordsAppended == 0 {
			t.Fatalf("line %d lacks throughput, append latency or records: %s", i, lines[i])
		}
		// The floor is measured over the warm-up, the cut rate from the
		// embedded cluster's metrics.
		if back.GRPCFloorUS == nil || back.GRPCFloorUS.P50 <= 0 || back.CutsPerS == nil || *back.CutsPerS <= 0 {
			t.Fatalf("line %d lacks the gRPC floor or the cut rate: %s", i, lines[i])
		}
		if back.Mode == "eager" && back.Misspeculations != nil {
			t.Fatalf("line %d: eager order reports misspeculations: %s", i, lines[i])
		}
		// Speculative runs say how much of the window they speculated.
		if v := back.PredeterminedCutsPercent; (v != nil) != (back.Mode == "spec") || v != nil && (*v < 0 || *v > 100) {
			t.Fatalf("line %d: predetermined cuts %v%% in mode %s: %s", i, deref(v), back.Mode, lines[i])
		}
		if failureFree && len(misspeculates) == 0 && back.Misspeculations != nil && *back.Misspeculations != 0 {
			t.Fatalf("line %d: misspeculations in a failure-free workload: %s", i, lines[i])
		}
		appended := *back.RecordsAppended
		if r.Subscribers > 0 {
			if len(back.RecordsDelivered) != r.Subscribers || back.E2ELatencyUS == nil || back.DeliveryLatencyUS == nil || back.E2EBreakdownUS == nil {
				t.Fatalf("line %d lacks the consumers' side: %s", i, lines[i])
			}
			for s, delivered := range back.RecordsDelivered {
				// A failed append may still have been ordered, and then
				// delivered; without failures the counts are equal.
				if delivered < appended || delivered > appended+back.Errors {
					t.Fatalf("subscriber %d finished %d records; %d were appended, %d failed", s+1, delivered, appended, back.Errors)
				}
			}
		}
		if failureFree && back.Errors != 0 {
			t.Fatalf("%d errors in a failure-free workload: %s", back.Errors, lines[i])
		}
	}
	return rep
}

// TestSmoke runs every workload at tiny scale, in both modes where a
// workload compares them.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded clusters")
	}
	t.Run("append", func(t *testing.T) {
		p := smokeParams(t, "append")
		p.Shards = []int{1}
		p.Rate = 0 // closed loop
		p.Inflight = 2
		runSmoke(t, "append", p, true)
	})
	t.Run("durability", func(t *testing.T) {
		p := smokeParams(t, "append")
		p.Shards = []int{1}
		p.Durability = []string{DurabilityDefault, DurabilityOptOut}
		rep := runSmoke(t, "append", p, true)
		rs, cs := rep.Points[0].Results, rep.Points[0].Comparisons
		if len(rs) != 2 || rs[0].Durability != DurabilityDefault || rs[1].Durability != DurabilityOptOut ||
			len(cs) != 1 || cs[0].BaselineDurability != DurabilityDefault || cs[0].CandidateDurability != DurabilityOptOut {
			t.Fatalf("durability sweep: results %d, comparisons %+v", len(rs), cs)
		}
	})
	t.Run("security", func(t *testing.T) {
		p := smokeParams(t, "append")
		p.Shards = []int{1}
		p.Security = []string{SecurityInsecure, SecurityTLS}
		rep := runSmoke(t, "append", p, true)
		rs, cs := rep.Points[0].Results, rep.Points[0].Comparisons
		if len(rs) != 2 || rs[0].Security != SecurityInsecure || rs[1].Security != SecurityTLS ||
			len(cs) != 1 || cs[0].BaselineSecurity != SecurityInsecure || cs[0].CandidateSecurity != SecurityTLS {
			t.Fatalf("security sweep: results %d, comparisons %+v", len(rs), cs)
		}
	})
	t.Run("e2e", func(t *testing.T) {
		p := smokeParams(t, "e2e")
		p.Modes = []string{"eager", "spec"}
		p.Compute = []time.Duration{0, time.Millisecond}
		rep := runSmoke(t, "e2e", p, true)
		if len(rep.Points) != 2 || *rep.Points[1].Results[0].ComputeUS != 1000 {
			t.Fatalf("compute sweep: %d points", len(rep.Points))
		}
	})
	t.Run("burst", func(t *testing.T) {
		p := smokeParams(t, "burst")
		p.Modes = []string{"eager", "spec"}
		p.Duration = 300 * time.Millisecond
		rep := runSmoke(t, "burst", p, true)
		r := rep.Points[0].Results[0]
		if len(r.Series) == 0 || len(r.Events) != 2 {
			t.Fatalf("series of %d points, events %v", len(r.Series), r.Events)
		}
	})
	t.Run("elastic", func(t *testing.T) {
		p := smokeParams(t, "elastic")
		p.Modes = []string{"eager", "spec"}
		p.Duration = 600 * time.Millisecond
		rep := runSmoke(t, "elastic", p, true)
		if evs := rep.Points[0].Results[0].Events; len(evs) != 2 || !strings.HasPrefix(evs[0].What, "add 2 shards: ") {
			t.Fatalf("events %v", evs)
		}
	})
	t.Run("failure", func(t *testing.T) {
		p := smokeParams(t, "failure")
		p.Duration = 1500 * time.Millisecond
		p.FailureTimeout = 250 * time.Millisecond
		rep := runSmoke(t, "failure", p, false)
		if evs := rep.Points[0].Results[0].Events; len(evs) != 3 {
			t.Fatalf("events %v", evs)
		}
	})
	// SpecLog's Fig. 17(a): a replica of a 3-way replicated shard stops;
	// the shard fails over, with no view change and no misspeculation.
	t.Run("failure --kill-replica", func(t *testing.T) {
		p := smokeParams(t, "failure")
		p.Modes = []string{"spec"}
		p.Replicas = 3
		p.KillReplica = true
		// Detection takes a failure timeout after the kill (at a third of
		// the run), so the run is long enough for the shard to fail over
		// and resume well before it ends. The timeout is the default: at
		// 250 ms, a race-instrumented cluster starved of CPU by other
		// tests takes healthy replicas out too (every run of 4 at once
		// failed so; with 1 s every one passed).
		p.Duration = 4 * time.Second
		p.FailureTimeout = time.Second
		rep := runSmoke(t, "failure", p, false)
		r := rep.Points[0].Results[0]
		if f := r.Failover; f == nil || f.PauseS < 0 || f.Misspeculations == nil || *f.Misspeculations != 0 ||
			r.ViewChanges == nil || *r.ViewChanges != 0 || len(r.Events) != 1 {
			t.Fatalf("failover %+v, view changes %v, events %v; want a pause, no misspeculation and no view change", f, r.ViewChanges, r.Events)
		}
	})
	for _, w := range []string{"ratechange", "window", "straggler"} {
		t.Run(w, func(t *testing.T) {
			p := smokeParams(t, w)
			p.Modes = []string{"spec"}
			p.Duration = 300 * time.Millisecond
			runSmoke(t, w, p, true)
		})
	}
	t.Run("scale", func(t *testing.T) {
		p := smokeParams(t, "scale")
		p.Shards = []int{1, 2}
		p.Rate = 0
		p.Inflight = 2
		p.Subscribers = 1
		rep := runSmoke(t, "scale", p, true)
		if len(rep.Points) != 2 {
			t.Fatalf("%d points", len(rep.Points))
		}
	})
	t.Run("spec-matrix", func(t *testing.T) {
		p := smokeParams(t, "e2e")
		p.Modes = []string{"eager", "spec"}
		var out bytes.Buffer
		o := MatrixOptions{Out: t.TempDir(), Base: p, Shards: []int{1, 2}, Rates: []int{400}, JSON: &out}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := RunMatrix(ctx, o); err != nil {
			t.Fatal(err)
		}
		var rows []MatrixRow
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if strings.Contains(l, `"workload":"spec-matrix"`) {
				var r MatrixRow
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatal(err)
				}
				rows = append(rows, r)
			}
		}
		if len(rows) != 2 || rows[0].Shards != 1 || rows[1].Shards != 2 {
			t.Fatalf("rows %+v, want one per shard count", rows)
		}
		for _, r := range rows {
			if r.Skipped == "" && (r.AppendP50 == nil || r.E2EP50 == nil || r.Misspeculations == nil) {
				t.Fatalf("row %+v neither skipped nor complete", r)
			}
		}
		table, err := os.ReadFile(filepath.Join(o.Out, "matrix.md"))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(table), "| 400 |"); n != 2 {
			t.Fatalf("table has %d rows at 400/s, want 2:\n%s", n, table)
		}
		for _, f := range []string{"matrix.svg", "matrix.png"} {
			if st, err := os.Stat(filepath.Join(o.Out, f)); err != nil || st.Size() == 0 {
				t.Fatalf("%s: %v", f, err)
			}
		}
	})
	t.Run("lazy-reads --stages", func(t *testing.T) {
		p := smokeParams(t, "lazy-reads")
		p.Stages = true
		p.Warmup, p.Duration = 500*time.Millisecond, time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		rep, err := Run(ctx, "lazy-reads", p)
		if err != nil {
			t.Fatal(err)
		}
		r := rep.Points[0].Results[0]
		if len(r.LazyReads) != len(lazyReadLags) {
			t.Fatalf("%d reader figures, want one per lag (%d)", len(r.LazyReads), len(lazyReadLags))
		}
		// The lazy append's stages were timed on every append. (The
		// stages of stable-gp's lag are timed per batch; how many batches
		// fall inside so short a window depends on the machine.)
		for _, stage := range []stagetime.Stage{stagetime.LazyAppendData, stagetime.LazyAppendMeta, stagetime.LazyStore, stagetime.LazySeqTake} {
			if r.StagesUS[stage.String()].Count == 0 {
				t.Errorf("stage %s not timed; stages_us: %v", stage, r.StagesUS)
			}
		}
		for name := range r.StagesUS {
			if !strings.HasPrefix(name, "lazy_") {
				t.Errorf("a lazy cluster timed stage %s of another mode", name)
			}
		}
	})
	t.Run("idle", func(t *testing.T) {
		p := smokeParams(t, "idle")
		p.Shards = []int{1}
		rep := runSmoke(t, "idle", p, true)
		if rep.Points[0].Results[0].CPUPercentOfOneCore == nil {
			t.Fatal("no CPU figure")
		}
	})
}

// TestRunAllWritesReport runs `all` over a reduced job list: one job that
// runs, one that needs a speculative mode the run does not name.
func TestRunAllWritesReport(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded clusters")
	}
	saved := allJobs
	t.Cleanup(func() { allJobs = saved })
	var jobs []allJob
	for _, j := range saved {
		switch j.Name {
		case "e2e", "window":
			j.Edit = func(p *Params) { p.Shards = []int{1}; p.Compute = []time.Duration{time.Millisecond} }
			jobs = append(jobs, j)
		case "scale-emulated":
			edit := j.Edit
			j.Edit = func(p *Params) { edit(p); p.Emulate, p.Rate = []int{4}, 2000 }
			jobs = append(jobs, j)
		}
	}
	allJobs = jobs
	dir := t.TempDir()
	base := smokeParams(t, "e2e")
	base.Subscribers = 1
	err := RunAll(context.Background(), AllOptions{Out: dir, Base: base, Command: "augur bench all --out " + dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"e2e.json", "e2e.svg", "e2e.png", "scale-emulated.json", "scale-emulated.svg", "REPORT.md"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "window.json")); err == nil {
		t.Fatal("window ran without a speculative mode")
	}
	report, err := os.ReadFile(filepath.Join(dir, "REPORT.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## e2e", "![e2e](e2e.svg)", "SpecLog §6.1, Fig. 7(a)", "## window", "**Not run:** window: window needs", "| eager |",
		"## scale-emulated", "emulated shards 4; 2000 records/s open loop", "| mode | point | ordered (rec/s) | order p50 / p99 (ms) |", "/ 500 |"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, report)
		}
	}
}

// TestFiguresRender draws every kind of figure from the golden report and
// a time series as SVG (well-formed XML), and the first as PNG (decodable,
// sized; PNG encoding is slow under the race detector).
func TestFiguresRender(t *testing.T) {
	series := goldenReport()
	series.Workload = "elastic"
	reports := []*Report{goldenReport(), series, {Workload: "append", Points: goldenReport().Points[:1]}, {Workload: "scale", Points: goldenReport().Points[:1]},
		{Workload: "scale", Points: goldenReport().Points[2:]}}
	for i, rep := range reports {
		f := figureOf(rep)
		if len(f.panels) == 0 {
			t.Fatalf("%s: no panels", rep.Workload)
		}
		var svg bytes.Buffer
		if err := encodeFigure(&svg, ".svg", f); err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(&svg)
		for {
			_, err := dec.Token()
			if err != nil {
				if err.Error() != "EOF" {
					t.Fatalf("%s: SVG is not well-formed: %v", rep.Workload, err)
				}
				break
			}
		}
		if i > 0 {
			continue
		}
		var pngBuf bytes.Buffer
		if err := encodeFigure(&pngBuf, ".png", f); err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(&pngBuf)
		if err != nil {
			t.Fatal(err)
		}
		w, h := f.size()
		if b := img.Bounds(); b.Dx() != int(w*pngScale) || b.Dy() != int(h*pngScale) {
			t.Fatalf("%s: PNG is %v, want %vx%v", rep.Workload, b, w*pngScale, h*pngScale)
		}
	}
	if err := CheckPlotPath("fig.jpg"); err == nil || !strings.Contains(err.Error(), "--plot must name a .png or .svg file") {
		t.Fatalf("CheckPlotPath(fig.jpg) = %v", err)
	}
	if err := CheckPlotPath("out/Fig.SVG"); err != nil {
		t.Fatal(err)
	}
}

func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 10, []float64{0, 2, 4, 6, 8, 10}},
		{0, 0, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{0, 0.3, []float64{0, 0.1, 0.2, 0.3}},
		{0, 2345, []float64{0, 500, 1000, 1500, 2000, 2500}},
	} {
		got := niceTicks(tc.lo, tc.hi)
		if len(got) != len(tc.want) {
			t.Errorf("niceTicks(%v, %v) = %v, want %v", tc.lo, tc.hi, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("niceTicks(%v, %v) = %v, want %v", tc.lo, tc.hi, got, tc.want)
				break
			}
		}
	}
}
