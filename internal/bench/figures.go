package bench

import (
	"fmt"
	"math"
	"strings"
)

// WritePlot draws the paper-style figure of rep to path, as SVG or PNG by
// its extension (see CheckPlotPath).
func WritePlot(path string, rep *Report) error {
	if err := CheckPlotPath(path); err != nil {
		return err
	}
	return writeFigure(path, figureOf(rep))
}

// figureOf picks the figure for rep's workload: latency bars and a CDF for
// the e2e family, lines against the shard count for scale, time series for
// the workloads that change something mid-run.
func figureOf(rep *Report) *figure {
	switch rep.Workload {
	case "append":
		return &figure{title: "append: latency and throughput by shard count (SpecLog Fig. 9, Scalog §6.3)", panels: []panel{
			barsOf(rep, "append latency p50", "ms", func(r *Result) float64 { return ms(p50Of(r.AppendLatencyUS)) }),
			barsOf(rep, "append latency p99", "ms", func(r *Result) float64 { return ms(p99Of(r.AppendLatencyUS)) }),
			barsOf(rep, "throughput", "records/s", func(r *Result) float64 { return valOf(r.ThroughputRPS) }),
		}}
	case "scale":
		if emulated(rep) {
			return emulatedFigure(rep)
		}
		return &figure{title: "scale: throughput and latency vs shards (SpecLog Fig. 14, Scalog Fig. 5)", panels: []panel{
			linesByShards(rep, "throughput", "records/s", func(r *Result) float64 { return valOf(r.ThroughputRPS) }),
			linesByShards(rep, "e2e latency p50", "ms", func(r *Result) float64 { return ms(p50Of(r.E2ELatencyUS)) }),
			linesByShards(rep, "append latency p50", "ms", func(r *Result) float64 { return ms(p50Of(r.AppendLatencyUS)) }),
		}}
	case "burst", "ratechange", "elastic", "failure":
		return timeSeriesFigure(rep)
	case "idle":
		return &figure{title: "idle: CPU of an idle embedded cluster", panels: []panel{
			barsOf(rep, "CPU", "% of one core", func(r *Result) float64 { return valOf(r.CPUPercentOfOneCore) }),
		}}
	}
	return e2eFigure(rep)
}

// emulated reports whether rep's results ran on emulated shards.
func emulated(rep *Report) bool {
	for _, r := range rep.Results() {
		if r.Emulated {
			return true
		}
	}
	return false
}

// emulatedFigure draws scale on emulated shards: ordered records, order
// latency and the cut rate against the number of shards, one line per mode
// (Scalog Fig. 5; SpecLog Fig. 14(d)).
func emulatedFigure(rep *Report) *figure {
	title := "scale: emulated shards on a real ordering layer: throughput and latency vs shards (SpecLog Fig. 14(d), Scalog Fig. 5)"
	for _, r := range rep.Results() {
		if r.StaggerAbove != nil && *r.StaggerAbove == 0 {
			title += "; spec not staggered"
			break
		}
	}
	return &figure{title: title, panels: []panel{
		linesByShards(rep, "ordered records", "records/s", func(r *Result) float64 { return valOf(r.ThroughputRPS) }),
		linesByShards(rep, "order latency p50 (arrival -> cut committed)", "ms", func(r *Result) float64 { return ms(p50Of(r.OrderLatencyUS)) }),
		linesByShards(rep, "order latency p99", "ms", func(r *Result) float64 { return ms(p99Of(r.OrderLatencyUS)) }),
		linesByShards(rep, "cuts committed", "cuts/s", func(r *Result) float64 { return valOf(r.CutsPerS) }),
	}}
}

var figureTitles = map[string]string{
	"e2e":        "e2e: delivery and end-to-end latency with downstream compute (SpecLog Fig. 7, 8)",
	"window":     "window: latency vs speculation lease window (SpecLog Fig. 12)",
	"burst":      "burst: extra load on one shard mid-run (SpecLog Fig. 10)",
	"ratechange": "ratechange: sustained extra load on one shard (SpecLog Fig. 11)",
	"elastic":    "elastic: add two shards, then remove them (SpecLog Fig. 13, Scalog Fig. 3)",
	"failure":    "failure: stop a shard replica, then the ordering leader (SpecLog Fig. 17, Scalog Fig. 4)",
}

func titleOf(workload string) string {
	if t, ok := figureTitles[workload]; ok {
		return t
	}
	return workload
}

// e2eFigure draws delivery and e2e latency bars, the e2e CDF of the last
// point, and, for a compute sweep, the e2e breakdown.
func e2eFigure(rep *Report) *figure {
	f := &figure{title: titleOf(rep.Workload), panels: []panel{
		barsOf(rep, "delivery latency p50", "ms", func(r *Result) float64 { return ms(p50Of(r.DeliveryLatencyUS)) }),
		barsOf(rep, "e2e latency p50", "ms", func(r *Result) float64 { return ms(p50Of(r.E2ELatencyUS)) }),
	}}
	if rep.Workload == "window" {
		f.panels = append(f.panels, barsOf(rep, "append latency p50", "ms", func(r *Result) float64 { return ms(p50Of(r.AppendLatencyUS)) }))
	}
	if len(rep.Points) > 0 {
		last := rep.Points[len(rep.Points)-1]
		cdf := panel{title: "e2e latency CDF", xLabel: "e2e latency (ms)", yLabel: "fraction of records", kind: linesPanel}
		if labels := pointLabels(rep); labels[len(labels)-1] != "" {
			cdf.title += " (" + oneLine(labels[len(labels)-1]) + ")"
		}
		for _, r := range last.Results {
			if len(r.e2eCDF) == 0 {
				continue
			}
			l := plotLine{name: r.Mode}
			for i, v := range r.e2eCDF {
				l.xs = append(l.xs, ms(v))
				l.ys = append(l.ys, cdfQuantiles[i])
			}
			cdf.lines = append(cdf.lines, l)
		}
		if len(cdf.lines) > 0 {
			f.panels = append(f.panels, cdf)
		}
	}
	if distinctCompute(rep) > 1 {
		f.panels = append(f.panels, breakdownPanel(rep))
	}
	return f
}

// breakdownPanel stacks the e2e parts of every result (SpecLog Fig. 8(c)).
func breakdownPanel(rep *Report) panel {
	p := panel{title: "e2e breakdown (mean)", yLabel: "ms", kind: barsPanel, stacked: true}
	parts := []string{"delivery", "queue", "compute", "wait for confirm"}
	p.bars = make([]barSeries, len(parts))
	for i, name := range parts {
		p.bars[i].name = name
	}
	labels := pointLabels(rep)
	for pi, pt := range rep.Points {
		for _, r := range pt.Results {
			p.cats = append(p.cats, strings.TrimSpace(r.Mode+"\n"+oneLine(labels[pi])))
			b := r.E2EBreakdownUS
			vals := []float64{math.NaN(), math.NaN(), math.NaN(), math.NaN()}
			if b != nil {
				vals = []float64{ms(b.Delivery), ms(b.Queue), ms(b.Compute), ms(b.WaitForConfirm)}
			}
			for i := range parts {
				p.bars[i].vals = append(p.bars[i].vals, vals[i])
			}
		}
	}
	return p
}

// timeSeriesFigure draws throughput and e2e latency over time, one line per
// run, with the run's events as marks.
func timeSeriesFigure(rep *Report) *figure {
	tput := panel{title: "throughput", xLabel: "time (s)", yLabel: "records/s", kind: linesPanel}
	e2e := panel{title: "e2e latency p50", xLabel: "time (s)", yLabel: "ms", kind: linesPanel}
	labels := pointLabels(rep)
	for pi, pt := range rep.Points {
		for _, r := range pt.Results {
			name := r.Mode
			if len(rep.Points) > 1 {
				name += " " + oneLine(labels[pi])
			}
			var t, rn, lat plotLine
			t.name, lat.name = name, name
			rn = plotLine{name: name + " R+N", dashed: true}
			haveNoops := false
			for _, s := range r.Series {
				t.xs = append(t.xs, s.TS)
				t.ys = append(t.ys, s.ThroughputRPS)
				if s.NoopRPS != nil {
					haveNoops = true
					rn.xs = append(rn.xs, s.TS)
					rn.ys = append(rn.ys, s.ThroughputRPS+*s.NoopRPS)
				}
				lat.xs = append(lat.xs, s.TS)
				lat.ys = append(lat.ys, ms(valOrNaN(s.E2EP50US)))
			}
			tput.lines = append(tput.lines, t)
			if haveNoops {
				tput.lines = append(tput.lines, rn)
			}
			e2e.lines = append(e2e.lines, lat)
		}
	}
	if len(rep.Points) > 0 && len(rep.Points[0].Results) > 0 {
		for i, ev := range rep.Points[0].Results[0].Events {
			m := plotMark{x: ev.TS, label: string(rune('A' + i%26))}
			tput.marks = append(tput.marks, m)
			e2e.marks = append(e2e.marks, m)
		}
	}
	return &figure{title: titleOf(rep.Workload), note: eventLegend(rep), panels: []panel{tput, e2e}}
}

// eventLegend names the lettered marks of a time series.
func eventLegend(rep *Report) string {
	if len(rep.Points) == 0 || len(rep.Points[0].Results) == 0 {
		return ""
	}
	var parts []string
	for i, ev := range rep.Points[0].Results[0].Events {
		parts = append(parts, fmt.Sprintf("%c: %s", 'A'+i%26, ev.What))
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ")
}

// barsOf draws metric for every point (categories) and mode (bars).
func barsOf(rep *Report, title, unit string, metric func(*Result) float64) panel {
	p := panel{title: title, yLabel: unit, kind: barsPanel, cats: pointLabels(rep)}
	modes := modesOf(rep)
	for _, m := range modes {
		b := barSeries{name: m}
		for _, pt := range rep.Points {
			v := math.NaN()
			for _, r := range pt.Results {
				if r.Mode == m {
					v = metric(r)
				}
			}
			b.vals = append(b.vals, v)
		}
		p.bars = append(p.bars, b)
	}
	return p
}

// linesByShards draws metric against the shard count, one line per mode.
func linesByShards(rep *Report, title, unit string, metric func(*Result) float64) panel {
	p := panel{title: title, xLabel: "shards", yLabel: unit, kind: linesPanel}
	for _, m := range modesOf(rep) {
		l := plotLine{name: m, dots: true}
		for _, pt := range rep.Points {
			for _, r := range pt.Results {
				if r.Mode == m {
					l.xs = append(l.xs, float64(r.Shards))
					l.ys = append(l.ys, metric(r))
				}
			}
		}
		p.lines = append(p.lines, l)
	}
	return p
}

// modesOf lists the report's modes in the order of its first point.
func modesOf(rep *Report) []string {
	var out []string
	if len(rep.Points) > 0 {
		for _, r := range rep.Points[0].Results {
			out = append(out, r.Mode)
		}
	}
	return out
}

// pointLabels names each point of the sweep by what varies between them:
// "2 shards", "1.5ms", "window 100" or a combination, one per line.
func pointLabels(rep *Report) []string {
	shards, compute, window := map[int]bool{}, map[float64]bool{}, map[int]bool{}
	for _, pt := range rep.Points {
		r := pt.Results[0]
		shards[r.Shards] = true
		compute[valOf(r.ComputeUS)] = true
		window[r.Window] = true
	}
	labels := make([]string, len(rep.Points))
	for i, pt := range rep.Points {
		r := pt.Results[0]
		var parts []string
		if len(shards) > 1 || (len(compute) <= 1 && len(window) <= 1 && r.Shards > 0) {
			parts = append(parts, plural(r.Shards, "shard"))
		}
		if len(window) > 1 {
			parts = append(parts, fmt.Sprintf("window %d", r.Window))
		}
		if len(compute) > 1 {
			parts = append(parts, fmtMillis(valOf(r.ComputeUS)/1e3))
		}
		labels[i] = strings.Join(parts, "\n")
	}
	return labels
}

// oneLine joins a label's lines with spaces.
func oneLine(label string) string { return strings.ReplaceAll(label, "\n", " ") }

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func distinctCompute(rep *Report) int {
	seen := map[float64]bool{}
	for _, pt := range rep.Points {
		seen[valOf(pt.Results[0].ComputeUS)] = true
	}
	return len(seen)
}

// fmtMillis prints a millisecond value briefly: 1.5ms, 0.5ms, 12ms.
func fmtMillis(v float64) string {
	return fmt.Sprintf("%sms", formatTick(math.Round(v*1000)/1000))
}

func ms(us float64) float64 { return us / 1e3 }

func p50Of(s *LatencySummary) float64 {
	if s == nil {
		return math.NaN()
	}
	return s.P50
}

func p99Of(s *LatencySummary) float64 {
	if s == nil {
		return math.NaN()
	}
	return s.P99
}

func valOf(v *float64) float64 {
	if v == nil {
		return 0
	}
	return *v
}

func valOrNaN(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}
