package bench

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenReport has every field of the schema set, and a second mode, so
// the golden file pins every name and the comparison object.
func goldenReport() *Report {
	lat := func(base float64) *LatencySummary {
		return &LatencySummary{Mean: base * 1.25, P50: base, P90: base * 2, P99: base * 3, P999: base * 4, Max: base * 5.5}
	}
	eager := &Result{
		Workload: "e2e", Mode: "eager", Shards: 2, Replicas: 2, RecordBytes: 4096,
		Rate: Ptr(2000), Clients: 4, Subscribers: 2, Follow: "shards", ComputeUS: Ptr(1500.0), DurationS: 10, StealPercent: Ptr(4.5), IOWaitPercent: Ptr(2.5),
		ThroughputRPS:     Ptr(1999.5),
		AppendLatencyUS:   lat(4000),
		GRPCFloorUS:       lat(100),
		DeliveryLatencyUS: lat(4200),
		E2ELatencyUS:      lat(6000),
		E2EBreakdownUS:    &Breakdown{Delivery: 4200, Queue: 300, Compute: 1500, WaitForConfirm: 0},
		RecordsAppended:   Ptr(int64(19995)),
		RecordsDelivered:  []int64{19995, 19995},
		CPUSeconds:        Ptr(12.5),
		Events:            []Event{{TS: 3.334, What: "add 2 shards: 2 (group a), 3 (group b)"}},
		Series: []SeriesPoint{
			{TS: 0, ThroughputRPS: 2000, AppendP50US: Ptr(4000.0), DeliveryP50US: Ptr(4100.0), E2EP50US: Ptr(6000.0), E2EP99US: Ptr(9000.0)},
			{TS: 0.2, ThroughputRPS: 0},
		},
	}
	spec := &Result{
		Workload: "e2e", Mode: "spec", Shards: 2, Replicas: 2, RecordBytes: 4096,
		Rate: Ptr(2000), Clients: 4, Subscribers: 2, Follow: "shards", ComputeUS: Ptr(1500.0), Window: 100, StaggerAbove: Ptr(6), DurationS: 10,
		ThroughputRPS:            Ptr(2000.0),
		NoopRPS:                  Ptr(12.5),
		PredeterminedCutsPercent: Ptr(100.0),
		AppendLatencyUS:          lat(4100),
		DeliveryLatencyUS:        lat(1200),
		ConfirmLatencyUS:         lat(4150),
		E2ELatencyUS:             lat(3750),
		E2EBreakdownUS:           &Breakdown{Delivery: 1200, Queue: 300, Compute: 1500, WaitForConfirm: 750},
		Misspeculations:          Ptr(int64(0)),
		RolledBack:               Ptr(int64(0)),
		LagFixes:                 Ptr(int64(3)),
		QuotaChanges:             Ptr(int64(1)),
		ViewChanges:              Ptr(int64(0)),
		RecordsAppended:          Ptr(int64(20000)),
		RecordsDelivered:         []int64{20000, 20000},
		Errors:                   2,
		CPUSeconds:               Ptr(13.0),
		Series: []SeriesPoint{
			{TS: 0, ThroughputRPS: 2000, NoopRPS: Ptr(10.0), E2EP50US: Ptr(3700.0), E2EP99US: Ptr(5000.0), Misspeculations: Ptr(int64(0))},
		},
	}
	idle := &Result{Workload: "idle", Mode: "eager", Shards: 1, Replicas: 1, DurationS: 10, CPUSeconds: Ptr(0.36), CPUPercentOfOneCore: Ptr(3.6)}
	emuEager := &Result{
		Workload: "scale", Mode: "eager", Shards: 40, Emulated: true, Rate: Ptr(40000), DurationS: 10,
		ThroughputRPS:       Ptr(40010.5),
		CutsPerS:            Ptr(310.5),
		OrderLatencyUS:      lat(9000),
		RecordsArrived:      Ptr(int64(400000)),
		RecordsOrdered:      Ptr(int64(400000)),
		CPUSeconds:          Ptr(13.7),
		CPUPercentOfOneCore: Ptr(137.0),
	}
	emuSpec := &Result{
		Workload: "scale", Mode: "spec", Shards: 40, Emulated: true, Rate: Ptr(40000), StaggerAbove: Ptr(0), StaggerGroups: Ptr(1), DurationS: 10,
		ThroughputRPS:       Ptr(39990.0),
		NoopRPS:             Ptr(8600.0),
		CutsPerS:            Ptr(1100.0),
		OrderLatencyUS:      lat(4500),
		LagFixes:            Ptr(int64(700)),
		QuotaChanges:        Ptr(int64(180)),
		ViewChanges:         Ptr(int64(0)),
		RecordsArrived:      Ptr(int64(400000)),
		RecordsOrdered:      Ptr(int64(400000)),
		CPUSeconds:          Ptr(10.0),
		CPUPercentOfOneCore: Ptr(100.0),
	}
	rep := &Report{Workload: "e2e"}
	rep.add([]*Result{eager, spec})
	rep.add([]*Result{idle})
	rep.add([]*Result{emuEager, emuSpec})
	return rep
}

func TestReportJSONGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := goldenReport().WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "report.golden.jsonl")
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestReportJSONGolden -update to create it)", err)
	}
	if got := buf.String(); got != string(want) {
		t.Fatalf("JSON differs from %s (rerun with -update and review the diff):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
	// Each line is one object; the third and the last are comparisons.
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 7 (two results, a comparison, a result, two emulated results, a comparison)", len(lines))
	}
	for _, i := range []int{2, 6} {
		var c map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &c); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"workload", "baseline", "candidate", "ratios"} {
			if _, ok := c[k]; !ok {
				t.Errorf("comparison lacks %q: %s", k, lines[i])
			}
		}
	}
	if !strings.Contains(lines[6], `"emulated":true`) || !strings.Contains(lines[6], `"order_p50":2`) {
		t.Errorf("emulated comparison: %s", lines[6])
	}
}

func TestCompareRatios(t *testing.T) {
	base := &Result{
		Workload: "e2e", Mode: "eager", Shards: 4,
		ThroughputRPS:     Ptr(1000.0),
		AppendLatencyUS:   &LatencySummary{P50: 3000},
		DeliveryLatencyUS: &LatencySummary{P50: 4000},
		E2ELatencyUS:      &LatencySummary{P50: 6000, P99: 9000},
	}
	cand := &Result{
		Workload: "e2e", Mode: "spec", Shards: 4,
		ThroughputRPS:     Ptr(1100.0),
		AppendLatencyUS:   &LatencySummary{P50: 3300},
		DeliveryLatencyUS: &LatencySummary{P50: 1250},
		E2ELatencyUS:      &LatencySummary{P50: 4000, P99: 7000},
	}
	c := Compare(base, cand)
	if c.Workload != "e2e" || c.Baseline != "eager" || c.Candidate != "spec" || c.Shards != 4 {
		t.Fatalf("header %+v", c)
	}
	check := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || *got != want {
			t.Errorf("%s = %v, want %v", name, deref(got), want)
		}
	}
	// Latencies: baseline ÷ candidate; throughput: candidate ÷ baseline.
	check("delivery_p50", c.Ratios.DeliveryP50, 3.2)
	check("e2e_p50", c.Ratios.E2EP50, 1.5)
	check("e2e_p99", c.Ratios.E2EP99, 1.286)
	check("append_p50", c.Ratios.AppendP50, 0.909)
	check("throughput", c.Ratios.Throughput, 1.1)

	// Missing or zero inputs omit the ratio, never divide by zero.
	appendOnly := &Result{Workload: "append", Mode: "eager", ThroughputRPS: Ptr(0.0), AppendLatencyUS: &LatencySummary{P50: 10}}
	other := &Result{Workload: "append", Mode: "spec", ThroughputRPS: Ptr(5.0), AppendLatencyUS: &LatencySummary{}}
	c = Compare(appendOnly, other)
	if c.Ratios != (Ratios{}) {
		t.Fatalf("ratios %+v, want none", c.Ratios)
	}
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), `{"workload":"append","baseline":"eager","candidate":"spec","ratios":{}}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}

	// A report compares every mode after the first with the first.
	rep := &Report{}
	rep.add([]*Result{base, cand, cand})
	if cs := rep.Comparisons(); len(cs) != 2 || cs[1].Baseline != "eager" {
		t.Fatalf("comparisons %+v", cs)
	}
	rep.add([]*Result{base})
	if n := len(rep.Comparisons()); n != 2 {
		t.Fatalf("a single-mode point added %d comparisons", n-2)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestSamplesQuantile(t *testing.T) {
	if samplesQuantile(nil, 0.5) != nil {
		t.Fatal("quantile of no samples")
	}
	var xs []time.Duration
	for i := 100; i >= 1; i-- {
		xs = append(xs, time.Duration(i)*time.Microsecond)
	}
	for _, tc := range []struct{ q, want float64 }{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}, {0.001, 1}} {
		if got := *samplesQuantile(xs, tc.q); got != tc.want {
			t.Errorf("q%v = %v µs, want %v", tc.q, got, tc.want)
		}
	}
}

func TestSeriesBuckets(t *testing.T) {
	start := time.Unix(100, 0)
	s := newSeries(start, time.Second, 250*time.Millisecond)
	if len(s.buckets) != 4 {
		t.Fatalf("%d buckets", len(s.buckets))
	}
	s.ack(start.Add(-time.Millisecond), time.Millisecond) // before the window
	s.ack(start, 2*time.Millisecond)
	s.ack(start.Add(260*time.Millisecond), 4*time.Millisecond)
	s.ack(start.Add(time.Second), time.Millisecond) // after it
	s.finished(start.Add(999*time.Millisecond), 3*time.Millisecond)
	s.failed(start.Add(500 * time.Millisecond))
	pts := s.points(true)
	if len(pts) != 4 {
		t.Fatalf("%d points", len(pts))
	}
	if pts[0].ThroughputRPS != 4 || pts[1].ThroughputRPS != 4 || pts[2].ThroughputRPS != 0 {
		t.Fatalf("throughput %v %v %v", pts[0].ThroughputRPS, pts[1].ThroughputRPS, pts[2].ThroughputRPS)
	}
	if *pts[0].AppendP50US != 2000 || pts[2].AppendP50US != nil || *pts[3].E2EP50US != 3000 {
		t.Fatalf("latencies %+v", pts)
	}
	if *pts[2].Misspeculations != 1 || *pts[0].Misspeculations != 0 {
		t.Fatalf("misspeculations %v %v", *pts[0].Misspeculations, *pts[2].Misspeculations)
	}
	if pts[1].TS != 0.25 {
		t.Fatalf("t_s %v", pts[1].TS)
	}
	if got := seriesInterval(Params{Duration: 10 * time.Second}); got != 200*time.Millisecond {
		t.Fatalf("automatic interval %v", got)
	}
	if got := seriesInterval(Params{Duration: 100 * time.Millisecond}); got != seriesIntervalMin {
		t.Fatalf("automatic interval of a short run %v", got)
	}
}

func TestPayloadHeader(t *testing.T) {
	fill, run := filler(7, 64)
	fill2, run2 := filler(7, 64)
	if !bytes.Equal(fill, fill2) || run != run2 {
		t.Fatal("the same seed gave different payloads")
	}
	if _, other := filler(8, 64); other == run {
		t.Fatal("seeds 7 and 8 share a run id")
	}
	at := time.Unix(1700000000, 123456789)
	putHeader(fill, run, at, recID{appender: 3, seq: 99})
	start, id, ok := readHeader(fill, run)
	if !ok || !start.Equal(at) || id != (recID{3, 99}) {
		t.Fatalf("read back %v %v %v", start, id, ok)
	}
	if _, _, ok := readHeader(fill, run+2); ok {
		t.Fatal("a record of another run was taken for this one's")
	}
	if _, _, ok := readHeader(fill[:headerBytes-1], run); ok {
		t.Fatal("a short payload was taken for a stamped one")
	}
}

// TestReportComparesModesUnderTheSameSettings: in a durability sweep each
// mode is set against the baseline mode under its own setting, and the
// baseline mode's other settings against its first.
func TestReportComparesModesUnderTheSameSettings(t *testing.T) {
	res := func(mode, durability string, p50 float64) *Result {
		return &Result{Workload: "lazy-append", Mode: mode, Durability: durability, AppendLatencyUS: &LatencySummary{P50: p50}}
	}
	var rep Report
	rep.add([]*Result{
		res("eager", DurabilityDefault, 4000), res("eager", DurabilityOptOut, 400),
		res("lazy", DurabilityDefault, 2000), res("lazy", DurabilityOptOut, 100),
	})
	type pair struct{ base, baseDur, cand, candDur string }
	var got []pair
	for _, c := range rep.Comparisons() {
		got = append(got, pair{c.Baseline, c.BaselineDurability, c.Candidate, c.CandidateDurability})
	}
	want := []pair{
		{"eager", DurabilityDefault, "eager", DurabilityOptOut},
		{"eager", DurabilityDefault, "lazy", DurabilityDefault},
		{"eager", DurabilityOptOut, "lazy", DurabilityOptOut},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("comparisons %v, want %v", got, want)
	}
	if r := rep.Comparisons()[2].Ratios.AppendP50; r == nil || *r != 4 {
		t.Fatalf("lazy optout append ratio %v, want eager optout ÷ lazy optout = 4", deref(r))
	}
}
