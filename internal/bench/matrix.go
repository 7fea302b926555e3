package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// matrixSustainedMin is the share of the offered rate the baseline must
// acknowledge in the measured window, without errors, for a point to
// count: where the baseline falls behind, its latencies measure its queue,
// and a ratio against them says nothing about the candidate.
const matrixSustainedMin = 0.95

// MatrixOptions configure RunMatrix.
type MatrixOptions struct {
	// Out is the directory the table and figure go to; it is created if
	// missing.
	Out string
	// Base holds the e2e parameters every point starts from; its Modes
	// are the baseline and the candidate, in that order.
	Base Params
	// Shards and Rates span the grid: every shard count at every rate.
	Shards, Rates []int
	// JSON, when set, gets each point's JSON lines (its results, its
	// comparison, then one row of the matrix) as soon as it completes.
	JSON io.Writer
	// Command is the command line, quoted in the table's file.
	Command string
	// Repeat is how many sweeps each point runs (0 counts as 1). A row
	// holds the median of its sweeps' ratios and their range: on a shared
	// machine one sweep's ratio moves by tens of percent from one minute
	// to the next. Every other sweep runs the candidate first, so that
	// neither mode always gets the machine the other warmed or left busy.
	Repeat int
}

// MatrixRow is one point of the matrix, printed as one JSON line after
// the point's results: the candidate's latencies over the baseline's (so
// below 1 is better, unlike a Comparison's), and why a point does not
// count when it does not.
type MatrixRow struct {
	Workload  string `json:"workload"`
	Baseline  string `json:"baseline"`
	Candidate string `json:"candidate"`
	Shards    int    `json:"shards"`
	Rate      int    `json:"rate"`
	// Skipped says why the point does not count (the baseline could not
	// sustain the rate, or a run failed); the ratios are then omitted.
	Skipped string `json:"skipped,omitempty"`
	// AppendP50, AppendP99, DeliveryP50 and E2EP50 are the candidate's
	// latencies over the baseline's.
	AppendP50   *float64 `json:"append_p50,omitempty"`
	AppendP99   *float64 `json:"append_p99,omitempty"`
	DeliveryP50 *float64 `json:"delivery_p50,omitempty"`
	E2EP50      *float64 `json:"e2e_p50,omitempty"`
	// Runs is how many sweeps the ratios are the median of; Dropped says
	// why the point's other sweeps do not count; Ranges holds the least
	// and the greatest of each ratio over the counted sweeps.
	Runs    int           `json:"runs"`
	Dropped []string      `json:"dropped,omitempty"`
	Ranges  *MatrixRanges `json:"ranges,omitempty"`
	// Misspeculations is the candidate's count over every sweep
	// (speculative modes).
	Misspeculations *int64 `json:"misspeculations,omitempty"`
	// BaselineAppendP50US and BaselineDeliveryP50US are the baseline's own
	// latencies (medians over the counted sweeps), for scale.
	BaselineAppendP50US   *float64 `json:"baseline_append_p50_us,omitempty"`
	BaselineDeliveryP50US *float64 `json:"baseline_delivery_p50_us,omitempty"`
	// BaselineAppendFloor is the baseline's append p50 over the p50 of
	// the empty gRPC round trip measured in its run (the median over the
	// counted sweeps).
	BaselineAppendFloor *float64 `json:"baseline_append_p50_over_floor,omitempty"`
	// PredeterminedCutsPercent is the candidate's share of cuts that
	// lease windows predetermined (the median over the counted sweeps):
	// where it is 0, a speculative candidate made eager cuts throughout.
	PredeterminedCutsPercent *float64 `json:"predetermined_cuts_percent,omitempty"`
}

// MatrixRanges are the least and the greatest of each ratio of a row over
// its counted sweeps.
type MatrixRanges struct {
	AppendP50   [2]float64 `json:"append_p50"`
	AppendP99   [2]float64 `json:"append_p99"`
	DeliveryP50 [2]float64 `json:"delivery_p50"`
	E2EP50      [2]float64 `json:"e2e_p50"`
}

// CheckMatrix checks o before anything starts.
func CheckMatrix(o MatrixOptions) error {
	var errs []error
	if o.Out == "" {
		errs = append(errs, errors.New("name an output directory (--out DIR)"))
	}
	if len(o.Base.Modes) != 2 {
		errs = append(errs, fmt.Errorf("name two modes, the baseline and the candidate (e.g. eager,spec), got %d", len(o.Base.Modes)))
	}
	if o.Repeat < 0 {
		errs = append(errs, fmt.Errorf("repeat cannot be negative, got %d", o.Repeat))
	}
	if len(o.Shards) == 0 || len(o.Rates) == 0 {
		errs = append(errs, errors.New("name at least one shard count and one rate"))
	}
	for _, r := range o.Rates {
		if r <= 0 {
			errs = append(errs, fmt.Errorf("rates must be positive (the matrix is open loop), got %d", r))
		}
	}
	if dup := firstDuplicate(o.Rates); dup != nil {
		errs = append(errs, fmt.Errorf("rate %d is named twice", *dup))
	}
	if len(o.Base.Durability) > 1 {
		errs = append(errs, errors.New("the matrix runs one durability setting"))
	}
	for _, r := range o.Rates {
		p := o.Base
		p.Shards, p.Rate = o.Shards, r
		if _, err := Check("e2e", p); err != nil {
			errs = append(errs, err)
			break
		}
	}
	return errors.Join(errs...)
}

// RunMatrix runs the e2e workload at every point of the grid, both modes
// in one sweep per point (so each pair of runs shares one sitting), prints
// the JSON lines to o.JSON, and writes o.Out/matrix.md (the ratios table)
// and o.Out/matrix.svg and .png (the ratios against the rate). A point
// whose run fails is reported as skipped and the grid goes on; RunMatrix
// returns an error after writing everything if any point failed.
func RunMatrix(ctx context.Context, o MatrixOptions) error {
	if err := CheckMatrix(o); err != nil {
		return fmt.Errorf("spec-matrix: %w", err)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("spec-matrix: %w", err)
	}
	var rows []MatrixRow
	var failed []error
	for _, s := range o.Shards {
		for _, rate := range o.Rates {
			p := o.Base
			p.Shards, p.Rate = []int{s}, rate
			var sweeps []matrixSweep
			for i := range max(o.Repeat, 1) {
				q := p
				if i%2 == 1 {
					q.Modes = []string{p.Modes[1], p.Modes[0]}
				}
				rep, err := Run(ctx, "e2e", q)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err != nil {
					failed = append(failed, fmt.Errorf("%d shards at %d/s, sweep %d: %w", s, rate, i+1, err))
				}
				sweeps = append(sweeps, matrixSweep{rep: rep, err: err})
				if o.JSON != nil && rep != nil {
					if err := rep.WriteJSON(o.JSON); err != nil {
						return err
					}
				}
			}
			row := matrixRow(p, sweeps)
			rows = append(rows, row)
			if o.JSON != nil {
				if err := writeLine(o.JSON, row); err != nil {
					return err
				}
			}
		}
	}
	var buf bytes.Buffer
	writeMatrixTable(&buf, o, rows)
	if err := os.WriteFile(filepath.Join(o.Out, "matrix.md"), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("spec-matrix: %w", err)
	}
	f := matrixFigure(o, rows)
	for _, ext := range []string{".svg", ".png"} {
		if err := writeFigure(filepath.Join(o.Out, "matrix"+ext), f); err != nil {
			return fmt.Errorf("spec-matrix: %w", err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("spec-matrix: %d points failed: %w", len(failed), errors.Join(failed...))
	}
	return nil
}

// matrixSweep is one sweep of a point: rep holds its runs, err how it
// ended.
type matrixSweep struct {
	rep *Report
	err error
}

// sweepRatios is what one sweep of a point measured: the candidate's
// latencies over the baseline's, and the baseline's own, for scale.
type sweepRatios struct {
	appendP50, appendP99, deliveryP50, e2eP50 float64
	baseAppendP50, baseDeliveryP50, baseFloor float64
	// predetermined is the candidate's PredeterminedCutsPercent (NaN
	// where it has none).
	predetermined float64
}

// matrixRow sums up one point of p over its sweeps: the median of each
// ratio over the sweeps that count, and why the others do not.
func matrixRow(p Params, sweeps []matrixSweep) MatrixRow {
	row := MatrixRow{Workload: "spec-matrix", Baseline: p.Modes[0], Candidate: p.Modes[1], Shards: p.Shards[0], Rate: p.Rate}
	var counted []sweepRatios
	var misspeculations *int64
	for _, sw := range sweeps {
		r, cand, why := sweepOf(p, sw)
		if cand != nil && cand.Misspeculations != nil {
			n := *cand.Misspeculations
			if misspeculations != nil {
				n += *misspeculations
			}
			misspeculations = &n
		}
		if why != "" {
			row.Dropped = append(row.Dropped, why)
			continue
		}
		counted = append(counted, r)
	}
	row.Misspeculations = misspeculations
	row.Runs = len(counted)
	if len(counted) == 0 {
		row.Skipped = strings.Join(row.Dropped, "; ")
		row.Dropped = nil
		// The baseline's latencies still say how far behind it fell.
		if len(sweeps) > 0 {
			if base, _ := sweepResults(p, sweeps[0]); base != nil {
				row.BaselineAppendP50US = finiteOrNil(p50Of(base.AppendLatencyUS))
				row.BaselineDeliveryP50US = finiteOrNil(p50Of(base.DeliveryLatencyUS))
			}
		}
		return row
	}
	// A sweep without a measure (no deliveries, say) has no ratio of
	// it: medians and ranges take the sweeps that have one.
	finite := func(of func(sweepRatios) float64) []float64 {
		var vs []float64
		for _, r := range counted {
			if v := of(r); !math.IsInf(v, 0) && !math.IsNaN(v) {
				vs = append(vs, v)
			}
		}
		return vs
	}
	med := func(of func(sweepRatios) float64, digits int) *float64 {
		return finiteOrNil(round(median(finite(of)), digits))
	}
	span := func(of func(sweepRatios) float64) [2]float64 {
		vs := finite(of)
		if len(vs) == 0 {
			return [2]float64{}
		}
		return [2]float64{round(slices.Min(vs), 3), round(slices.Max(vs), 3)}
	}
	appendP50 := func(r sweepRatios) float64 { return r.appendP50 }
	appendP99 := func(r sweepRatios) float64 { return r.appendP99 }
	deliveryP50 := func(r sweepRatios) float64 { return r.deliveryP50 }
	e2eP50 := func(r sweepRatios) float64 { return r.e2eP50 }
	row.AppendP50, row.AppendP99 = med(appendP50, 3), med(appendP99, 3)
	row.DeliveryP50, row.E2EP50 = med(deliveryP50, 3), med(e2eP50, 3)
	row.Ranges = &MatrixRanges{AppendP50: span(appendP50), AppendP99: span(appendP99), DeliveryP50: span(deliveryP50), E2EP50: span(e2eP50)}
	row.BaselineAppendP50US = med(func(r sweepRatios) float64 { return r.baseAppendP50 }, 3)
	row.BaselineDeliveryP50US = med(func(r sweepRatios) float64 { return r.baseDeliveryP50 }, 3)
	row.BaselineAppendFloor = med(func(r sweepRatios) float64 { return r.baseFloor }, 2)
	row.PredeterminedCutsPercent = med(func(r sweepRatios) float64 { return r.predetermined }, 1)
	return row
}

// sweepResults finds the baseline's and the candidate's result in a
// sweep, whichever ran first.
func sweepResults(p Params, sw matrixSweep) (base, cand *Result) {
	if sw.rep == nil || len(sw.rep.Points) != 1 {
		return nil, nil
	}
	for _, r := range sw.rep.Points[0].Results {
		switch r.Mode {
		case p.Modes[0]:
			base = r
		case p.Modes[1]:
			cand = r
		}
	}
	return base, cand
}

// sweepOf is one sweep's ratios, or why it does not count: it failed, or
// the baseline fell behind the offered rate (its latencies then measure
// its queue, and a ratio against them says nothing about the candidate).
func sweepOf(p Params, sw matrixSweep) (r sweepRatios, cand *Result, why string) {
	if sw.err != nil {
		return r, nil, "run failed: " + sw.err.Error()
	}
	base, cand := sweepResults(p, sw)
	if base == nil || cand == nil {
		return r, cand, "run produced no results"
	}
	if got := valOf(base.ThroughputRPS); got < matrixSustainedMin*float64(p.Rate) || base.Errors > 0 {
		return r, cand, fmt.Sprintf("%s sustained %.0f of %d appends/s with %d errors", base.Mode, got, p.Rate, base.Errors)
	}
	over := func(metric func(*LatencySummary) float64, of func(*Result) *LatencySummary) float64 {
		return metric(of(cand)) / metric(of(base))
	}
	appendLat := func(r *Result) *LatencySummary { return r.AppendLatencyUS }
	r = sweepRatios{
		appendP50:       over(p50Of, appendLat),
		appendP99:       over(p99Of, appendLat),
		deliveryP50:     over(p50Of, func(r *Result) *LatencySummary { return r.DeliveryLatencyUS }),
		e2eP50:          over(p50Of, func(r *Result) *LatencySummary { return r.E2ELatencyUS }),
		baseAppendP50:   p50Of(base.AppendLatencyUS),
		baseDeliveryP50: p50Of(base.DeliveryLatencyUS),
	}
	r.predetermined = valOrNaN(cand.PredeterminedCutsPercent)
	r.baseFloor = math.NaN() // no floor measured: no ratio to take the median of
	if floor := p50Of(base.GRPCFloorUS); floor > 0 {
		r.baseFloor = r.baseAppendP50 / floor
	}
	return r, cand, ""
}

// median of vs (the mean of the middle two for an even count).
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// matrixTargets are issue 17's targets for the ratios, candidate over
// baseline (delivery's is 0.3 where every shard gets a record or more per
// ordering interval).
var matrixTargets = struct{ appendP50, appendP99, deliveryP50, e2eP50 float64 }{1.1, 1.5, 0.5, 1}

// writeMatrixTable writes the ratios table.
func writeMatrixTable(w io.Writer, o MatrixOptions, rows []MatrixRow) {
	b, c := o.Base.Modes[0], o.Base.Modes[1]
	fmt.Fprintf(w, "# %s ÷ %s over shards and rates\n\n", c, b)
	fmt.Fprintf(w, "`%s`\n\n", o.Command)
	p := o.Base
	durability := "default"
	if len(p.Durability) == 1 {
		durability = p.Durability[0]
	}
	sweeps := fmt.Sprintf("each point runs %s then %s in one sweep", b, c)
	if n := max(o.Repeat, 1); n > 1 {
		sweeps = fmt.Sprintf("each point runs %d sweeps of both modes, %s first in every other one; a cell is the median of the sweeps' ratios, their range in brackets", n, c)
	}
	fmt.Fprintf(w, "e2e workload: %v ordering interval, %d-byte records open loop from %d clients, %s, compute %s per batch, durability %s, %v measured after %v of warm-up; %s. Cells are %s's latency over %s's (below 1: %s is faster); targets: append p50 ≤ %.1f, append p99 ≤ %.1f, delivery p50 ≤ %.1f, e2e p50 ≤ %.0f, no misspeculations. A sweep where %s did not acknowledge %.0f%% of the offered rate without errors does not count; a point without a counted sweep is skipped.\n\n",
		p.OrderingInterval, p.RecordBytes, p.Clients, plural(p.Subscribers, "subscriber"), joinDurations(p.Compute), durability, p.Duration, p.Warmup, sweeps, c, b, c, matrixTargets.appendP50, matrixTargets.appendP99, matrixTargets.deliveryP50, matrixTargets.e2eP50, b, matrixSustainedMin*100)
	fmt.Fprintln(w, "| shards | rate (/s) | "+c+" predetermined cuts | append p50 | append p99 | delivery p50 | e2e p50 | misspeculations | "+b+" append p50 (ms) | "+b+" delivery p50 (ms) | "+b+" append p50 ÷ gRPC floor |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		base := fmt.Sprintf("%s | %s | %s", fmtMs(valOrNaN(r.BaselineAppendP50US)), fmtMs(valOrNaN(r.BaselineDeliveryP50US)), fmtRatio(r.BaselineAppendFloor))
		if r.Skipped != "" {
			fmt.Fprintf(w, "| %d | %d | skipped: %s | | | | | | %s |\n", r.Shards, r.Rate, strings.ReplaceAll(r.Skipped, "|", "/"), base)
			continue
		}
		miss := "—"
		if r.Misspeculations != nil {
			miss = strconv.FormatInt(*r.Misspeculations, 10)
		}
		cell := func(v *float64, span func(*MatrixRanges) [2]float64) string {
			if r.Runs < 2 || r.Ranges == nil || v == nil {
				return fmtRatio(v)
			}
			lh := span(r.Ranges)
			return fmt.Sprintf("%s (%.2f–%.2f)", fmtRatio(v), lh[0], lh[1])
		}
		var dropped string
		if len(r.Dropped) > 0 {
			dropped = fmt.Sprintf(" (%d of %d sweeps: %s)", r.Runs, r.Runs+len(r.Dropped), strings.ReplaceAll(strings.Join(r.Dropped, "; "), "|", "/"))
		}
		fmt.Fprintf(w, "| %d | %d%s | %s | %s | %s | %s | %s | %s | %s |\n", r.Shards, r.Rate, dropped, fmtPercent(r.PredeterminedCutsPercent),
			cell(r.AppendP50, func(m *MatrixRanges) [2]float64 { return m.AppendP50 }),
			cell(r.AppendP99, func(m *MatrixRanges) [2]float64 { return m.AppendP99 }),
			cell(r.DeliveryP50, func(m *MatrixRanges) [2]float64 { return m.DeliveryP50 }),
			cell(r.E2EP50, func(m *MatrixRanges) [2]float64 { return m.E2EP50 }), miss, base)
	}
	fmt.Fprintln(w)
}

// matrixFigure draws each ratio against the rate, one line per shard
// count, with the target dashed.
func matrixFigure(o MatrixOptions, rows []MatrixRow) *figure {
	b, c := o.Base.Modes[0], o.Base.Modes[1]
	panelOf := func(title string, target float64, ratio func(MatrixRow) *float64) panel {
		p := panel{title: title, xLabel: "appends/s", yLabel: c + " ÷ " + b, kind: linesPanel}
		for _, s := range o.Shards {
			l := plotLine{name: plural(s, "shard"), dots: true}
			for _, r := range rows {
				if r.Shards == s {
					l.xs = append(l.xs, float64(r.Rate))
					l.ys = append(l.ys, valOrNaN(ratio(r)))
				}
			}
			p.lines = append(p.lines, l)
		}
		lo, hi := o.Rates[0], o.Rates[0]
		for _, r := range o.Rates {
			lo, hi = min(lo, r), max(hi, r)
		}
		p.lines = append(p.lines, plotLine{name: "target", xs: []float64{float64(lo), float64(hi)}, ys: []float64{target, target}, dashed: true})
		return p
	}
	return &figure{title: fmt.Sprintf("%s ÷ %s by shard count and rate (e2e workload)", c, b), panels: []panel{
		panelOf("append latency p50", matrixTargets.appendP50, func(r MatrixRow) *float64 { return r.AppendP50 }),
		panelOf("append latency p99", matrixTargets.appendP99, func(r MatrixRow) *float64 { return r.AppendP99 }),
		panelOf("delivery latency p50", matrixTargets.deliveryP50, func(r MatrixRow) *float64 { return r.DeliveryP50 }),
		panelOf("e2e latency p50", matrixTargets.e2eP50, func(r MatrixRow) *float64 { return r.E2EP50 }),
	}}
}

func joinDurations(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.String())
	}
	return strings.Join(s, ", ")
}
