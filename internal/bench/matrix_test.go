package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func matrixResult(mode string, throughput, appendP50, appendP99, deliveryP50, e2eP50 float64) *Result {
	return &Result{Mode: mode, ThroughputRPS: Ptr(throughput),
		AppendLatencyUS:   &LatencySummary{P50: appendP50, P99: appendP99},
		DeliveryLatencyUS: &LatencySummary{P50: deliveryP50},
		E2ELatencyUS:      &LatencySummary{P50: e2eP50},
		GRPCFloorUS:       &LatencySummary{P50: 100},
	}
}

func matrixParams(shards, rate int) Params {
	return Params{Modes: []string{"eager", "spec"}, Shards: []int{shards}, Rate: rate}
}

// TestMatrixRowRatios checks that a row holds the candidate's latencies
// over the baseline's, its misspeculations, and the baseline's append p50
// over the gRPC floor.
func TestMatrixRowRatios(t *testing.T) {
	spec := matrixResult("spec", 2000, 1200, 3000, 250, 2000)
	spec.Misspeculations = Ptr(int64(0))
	rep := &Report{Workload: "e2e"}
	rep.add([]*Result{matrixResult("eager", 1990, 1000, 2000, 1000, 2500), spec})
	row := matrixRow(matrixParams(2, 2000), []matrixSweep{{rep: rep}})
	if row.Skipped != "" {
		t.Fatalf("row skipped: %s", row.Skipped)
	}
	for _, c := range []struct {
		name string
		got  *float64
		want float64
	}{{"append p50", row.AppendP50, 1.2}, {"append p99", row.AppendP99, 1.5}, {"delivery p50", row.DeliveryP50, 0.25}, {"e2e p50", row.E2EP50, 0.8}, {"floor", row.BaselineAppendFloor, 10}} {
		if c.got == nil || *c.got != c.want {
			t.Errorf("%s ratio %v, want %v", c.name, c.got, c.want)
		}
	}
	if row.Misspeculations == nil || *row.Misspeculations != 0 {
		t.Errorf("misspeculations %v, want 0", row.Misspeculations)
	}
}

// TestMatrixRowSkipsWhatTheBaselineCannotSustain checks that a point where
// the baseline fell behind the offered rate, had errors, or failed carries
// no ratios and says why, in the table too.
func TestMatrixRowSkipsWhatTheBaselineCannotSustain(t *testing.T) {
	behind := &Report{Workload: "e2e"}
	behind.add([]*Result{matrixResult("eager", 7000, 1000, 2000, 1000, 2500), matrixResult("spec", 8000, 1, 1, 1, 1)})
	erred := &Report{Workload: "e2e"}
	failing := matrixResult("eager", 8000, 1000, 2000, 1000, 2500)
	failing.Errors = 3
	erred.add([]*Result{failing, matrixResult("spec", 8000, 1, 1, 1, 1)})
	for _, c := range []struct {
		name string
		rep  *Report
		err  error
		why  string
	}{
		{"behind", behind, nil, "sustained 7000 of 8000"},
		{"errors", erred, nil, "with 3 errors"},
		{"failed", nil, errors.New("boom"), "run failed: boom"},
	} {
		row := matrixRow(matrixParams(1, 8000), []matrixSweep{{rep: c.rep, err: c.err}})
		if !strings.Contains(row.Skipped, c.why) || row.AppendP50 != nil || row.E2EP50 != nil {
			t.Errorf("%s: row %+v, want skipped with %q and no ratios", c.name, row, c.why)
		}
		var buf bytes.Buffer
		writeMatrixTable(&buf, MatrixOptions{Base: matrixParams(1, 8000)}, []MatrixRow{row})
		if !strings.Contains(buf.String(), "skipped: ") || !strings.Contains(buf.String(), c.why) {
			t.Errorf("%s: table does not say why the point is skipped:\n%s", c.name, buf.String())
		}
	}
}

// TestMatrixRowTakesTheMedianOfItsSweeps checks that a point run several
// times holds the median of its sweeps' ratios and their range, whichever
// mode ran first in a sweep; that a sweep the baseline could not sustain
// does not count, and says why; that the misspeculations of every sweep
// add up; and that it holds the median share of predetermined cuts.
func TestMatrixRowTakesTheMedianOfItsSweeps(t *testing.T) {
	sweep := func(eagerThroughput, specAppendP50 float64, misspeculations int64, specFirst bool) matrixSweep {
		spec := matrixResult("spec", 2000, specAppendP50, 3000, 250, 2000)
		spec.Misspeculations = Ptr(misspeculations)
		// 0% in the first sweep, 100% in the others but the one that
		// does not count: the median is 100%.
		spec.PredeterminedCutsPercent = Ptr(0.0)
		if specFirst || eagerThroughput < 2000 {
			spec.PredeterminedCutsPercent = Ptr(100.0)
		}
		eager := matrixResult("eager", eagerThroughput, 1000, 2000, 1000, 2500)
		rep := &Report{Workload: "e2e"}
		if specFirst {
			rep.add([]*Result{spec, eager})
		} else {
			rep.add([]*Result{eager, spec})
		}
		return matrixSweep{rep: rep}
	}
	row := matrixRow(matrixParams(2, 2000), []matrixSweep{
		sweep(2000, 1500, 0, false),
		sweep(2000, 900, 1, true),
		sweep(1000, 5000, 2, false), // eager fell behind: does not count
		sweep(2000, 1100, 0, true),
	})
	if row.Skipped != "" || row.Runs != 3 {
		t.Fatalf("row skipped %q over %d sweeps, want 3 counted", row.Skipped, row.Runs)
	}
	if row.AppendP50 == nil || *row.AppendP50 != 1.1 {
		t.Errorf("append p50 ratio %v, want the median 1.1", row.AppendP50)
	}
	if row.Ranges == nil || row.Ranges.AppendP50 != [2]float64{0.9, 1.5} {
		t.Errorf("append p50 range %+v, want [0.9 1.5]", row.Ranges)
	}
	if row.DeliveryP50 == nil || *row.DeliveryP50 != 0.25 {
		t.Errorf("delivery p50 ratio %v, want 0.25 (the reversed sweeps must not invert it)", row.DeliveryP50)
	}
	if len(row.Dropped) != 1 || !strings.Contains(row.Dropped[0], "sustained 1000 of 2000") {
		t.Errorf("dropped %q, want the sweep eager could not sustain", row.Dropped)
	}
	if row.Misspeculations == nil || *row.Misspeculations != 3 {
		t.Errorf("misspeculations %v, want 3 over every sweep", row.Misspeculations)
	}
	if row.PredeterminedCutsPercent == nil || *row.PredeterminedCutsPercent != 100 {
		t.Errorf("predetermined cuts %v%%, want the median 100%%", row.PredeterminedCutsPercent)
	}
	// A sweep without deliveries has no delivery ratio; the others'
	// median stands, and the row still encodes.
	none := sweep(2000, 1000, 0, false)
	none.rep.Points[0].Results[0].DeliveryLatencyUS = &LatencySummary{}
	if r := matrixRow(matrixParams(2, 2000), []matrixSweep{none, sweep(2000, 1000, 0, false)}); r.DeliveryP50 == nil || *r.DeliveryP50 != 0.25 {
		t.Errorf("delivery p50 ratio %v with one sweep lacking it, want 0.25", r.DeliveryP50)
	} else if _, err := json.Marshal(r); err != nil {
		t.Errorf("row does not encode: %v", err)
	}
	var buf bytes.Buffer
	writeMatrixTable(&buf, MatrixOptions{Base: matrixParams(2, 2000), Repeat: 4}, []MatrixRow{row})
	for _, want := range []string{"| 100% | 1.10× (0.90–1.50)", "3 of 4 sweeps: eager sustained 1000", "spec predetermined cuts"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestCheckMatrix checks that a matrix without two modes, with a closed
// loop rate or without an output directory is refused.
func TestCheckMatrix(t *testing.T) {
	base, err := DefaultParams("e2e")
	if err != nil {
		t.Fatal(err)
	}
	base.Modes = []string{"eager", "spec"}
	ok := MatrixOptions{Out: t.TempDir(), Base: base, Shards: []int{1, 2}, Rates: []int{500, 2000}}
	if err := CheckMatrix(ok); err != nil {
		t.Fatalf("a valid matrix refused: %v", err)
	}
	oneMode := ok
	oneMode.Base.Modes = []string{"eager"}
	closed := ok
	closed.Rates = []int{0}
	noOut := ok
	noOut.Out = ""
	negative := ok
	negative.Repeat = -1
	for name, o := range map[string]MatrixOptions{"one mode": oneMode, "closed loop": closed, "no output": noOut, "negative repeat": negative} {
		if err := CheckMatrix(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPredeterminedPercent checks the share of predetermined cuts between
// two readings of the counters: none without a cut, and never above 100%
// when a cut applied between the reads of its two counters.
func TestPredeterminedPercent(t *testing.T) {
	for _, c := range []struct {
		c0, c1 Counters
		want   *float64
	}{
		{Counters{Cuts: 30, PredeterminedCuts: 30}, Counters{Cuts: 30, PredeterminedCuts: 30}, nil},
		{Counters{Cuts: 30, PredeterminedCuts: 0}, Counters{Cuts: 130, PredeterminedCuts: 25}, Ptr(25.0)},
		{Counters{Cuts: 30, PredeterminedCuts: 30}, Counters{Cuts: 60, PredeterminedCuts: 63}, Ptr(100.0)},
	} {
		got := PredeterminedPercent(c.c0, c.c1)
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("PredeterminedPercent(%+v, %+v) = %v, want %v", c.c0, c.c1, deref(got), deref(c.want))
		}
	}
}
