package bench

import (
	"bytes"
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
	row := matrixRow(matrixParams(2, 2000), rep, nil)
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
		row := matrixRow(matrixParams(1, 8000), c.rep, c.err)
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
	for name, o := range map[string]MatrixOptions{"one mode": oneMode, "closed loop": closed, "no output": noOut} {
		if err := CheckMatrix(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
