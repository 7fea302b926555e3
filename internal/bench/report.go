package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"time"
)

// writeReport writes REPORT.md: the machine and settings, then for each job
// its figure, a table of its results, its comparisons, and the papers'
// headline numbers beside them.
func writeReport(w io.Writer, o AllOptions, entries []*allEntry) {
	b := o.Base
	fmt.Fprintf(w, "# augur bench all\n\n")
	fmt.Fprintf(w, "Generated %s on %s (%d CPUs, %s/%s, %s).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	if o.Command != "" {
		fmt.Fprintf(w, "Command: `%s`\n\n", o.Command)
	}
	fmt.Fprintf(w, "Everything runs in one process: the embedded cluster (3 ordering replicas, "+
		"shards of %d replicas on loopback), the load generators and the downstream subscribers. "+
		"Each run: %v of warm-up, then a measured window of %v (time series: longer, as listed), "+
		"%d-byte records, ordering interval %v, fsync %s, modes %s (the first is the baseline).\n\n",
		b.Replicas, b.Warmup, b.Duration, b.RecordBytes, b.OrderingInterval, orDefault(b.Fsync, "group"), strings.Join(b.Modes, ", "))
	fmt.Fprintf(w, "Latencies run from an append's scheduled start: *append* to its acknowledgement, "+
		"*delivery* to a subscriber's first receipt, *e2e* until the subscriber has computed over it "+
		"(and, when speculative, its position is confirmed). Ratios are baseline ÷ candidate for latencies "+
		"and candidate ÷ baseline for throughput, so above 1 favours the candidate. The papers ran on "+
		"CloudLab clusters of many machines; this is one small machine, so compare shapes and ratios, not absolute numbers.\n\n")
	for _, e := range entries {
		writeReportEntry(w, e)
	}
}

func writeReportEntry(w io.Writer, e *allEntry) {
	fmt.Fprintf(w, "## %s\n\n", e.job.Name)
	fmt.Fprintf(w, "`augur bench %s`%s\n\n", e.job.Workload, describeParams(e.params))
	switch {
	case e.skipped != nil:
		fmt.Fprintf(w, "**Not run:** %v\n\n", e.skipped)
	case e.failed != nil:
		fmt.Fprintf(w, "**Failed:** %v\n\n", e.failed)
	}
	if e.report != nil && len(e.report.Points) > 0 {
		fmt.Fprintf(w, "![%s](%s.svg)\n\n", e.job.Name, e.job.Name)
		writeResultsTable(w, e.report)
		writeComparisonsTable(w, e.report)
		if len(e.files) > 0 {
			fmt.Fprintf(w, "Files: %s.\n\n", strings.Join(e.files, ", "))
		}
	}
	if len(e.job.Paper) > 0 {
		fmt.Fprintf(w, "**Papers:**\n\n")
		for _, line := range e.job.Paper {
			fmt.Fprintf(w, "- %s\n", line)
		}
		fmt.Fprintln(w)
	}
	if e.job.Target != "" {
		fmt.Fprintf(w, "**Target (issue 4):** %s\n\n", e.job.Target)
	}
}

// describeParams lists a job's sweep and load briefly.
func describeParams(p Params) string {
	var parts []string
	if len(p.Emulate) > 0 {
		parts = append(parts, "emulated shards "+joinInts(p.Emulate), fmt.Sprintf("%d records/s open loop over all shards", p.Rate))
		if p.NoStagger {
			parts = append(parts, "spec not staggered")
		}
		parts = append(parts, fmt.Sprintf("%v measured", p.Duration))
		return ": " + strings.Join(parts, "; ")
	}
	if len(p.Shards) > 0 {
		parts = append(parts, "shards "+joinInts(p.Shards))
	}
	if p.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%d appends/s open loop from %d clients", p.Rate, p.Clients))
	} else {
		parts = append(parts, fmt.Sprintf("closed loop, %d clients × %d in flight", p.Clients, p.Inflight))
	}
	if len(p.Compute) > 0 {
		var cs []string
		for _, c := range p.Compute {
			cs = append(cs, c.String())
		}
		parts = append(parts, "compute "+strings.Join(cs, ", ")+" per batch")
	}
	if p.Subscribers > 0 {
		parts = append(parts, plural(p.Subscribers, "subscriber")+" following the "+p.Follow)
	}
	parts = append(parts, fmt.Sprintf("%v measured", p.Duration))
	return ": " + strings.Join(parts, "; ")
}

func joinInts(xs []int) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, ",")
}

// writeResultsTable tabulates every result; time series add their extremes.
func writeResultsTable(w io.Writer, rep *Report) {
	if emulated(rep) {
		writeEmulatedTable(w, rep)
		return
	}
	series := false
	for _, r := range rep.Results() {
		series = series || len(r.Series) > 0
	}
	head := "| mode | point | throughput (rec/s) | append p50 / p99 (ms) | delivery p50 (ms) | e2e p50 / p99 (ms) | errors | CPU stolen |"
	rule := "|---|---|---|---|---|---|---|---|"
	if series {
		head += " lowest interval throughput | highest interval e2e p50 (ms) |"
		rule += "---|---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	labels := pointLabels(rep)
	for pi, pt := range rep.Points {
		for _, r := range pt.Results {
			fmt.Fprintf(w, "| %s | %s | %s | %s / %s | %s | %s / %s | %d | %s |", r.Mode, orDefault(oneLine(labels[pi]), "—"),
				fmtNum(r.ThroughputRPS, 0), fmtMs(p50Of(r.AppendLatencyUS)), fmtMs(p99Of(r.AppendLatencyUS)),
				fmtMs(p50Of(r.DeliveryLatencyUS)), fmtMs(p50Of(r.E2ELatencyUS)), fmtMs(p99Of(r.E2ELatencyUS)), r.Errors, fmtPercent(r.StealPercent))
			if series {
				low, high := math.Inf(1), math.Inf(-1)
				for _, s := range r.Series {
					low = math.Min(low, s.ThroughputRPS)
					if s.E2EP50US != nil {
						high = math.Max(high, *s.E2EP50US)
					}
				}
				fmt.Fprintf(w, " %s | %s |", fmtNum(finiteOrNil(low), 0), fmtMs(finiteOrNaN(high)))
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w)
	for _, r := range rep.Results() {
		if len(r.Events) == 0 {
			continue
		}
		var evs []string
		for _, ev := range r.Events {
			evs = append(evs, fmt.Sprintf("%.2f s %s", ev.TS, ev.What))
		}
		fmt.Fprintf(w, "Events (%s): %s.\n\n", r.Mode, strings.Join(evs, "; "))
	}
}

// writeEmulatedTable tabulates results on emulated shards.
func writeEmulatedTable(w io.Writer, rep *Report) {
	fmt.Fprintln(w, "| mode | point | ordered (rec/s) | order p50 / p99 (ms) | cuts/s | no-ops/s | lag-fixes | stagger groups | records arrived / ordered | CPU (% of a core) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	labels := pointLabels(rep)
	for pi, pt := range rep.Points {
		for _, r := range pt.Results {
			groups := "—"
			if r.StaggerGroups != nil {
				groups = fmt.Sprint(*r.StaggerGroups)
			}
			lagFixes := "—"
			if r.LagFixes != nil {
				lagFixes = fmt.Sprint(*r.LagFixes)
			}
			counts := "—"
			if r.RecordsArrived != nil && r.RecordsOrdered != nil {
				counts = fmt.Sprintf("%d / %d", *r.RecordsArrived, *r.RecordsOrdered)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s / %s | %s | %s | %s | %s | %s | %s |\n", r.Mode, orDefault(oneLine(labels[pi]), "—"),
				fmtNum(r.ThroughputRPS, 0), fmtMs(p50Of(r.OrderLatencyUS)), fmtMs(p99Of(r.OrderLatencyUS)),
				fmtNum(r.CutsPerS, 0), fmtNum(r.NoopRPS, 0), lagFixes, groups, counts, fmtNum(r.CPUPercentOfOneCore, 0))
		}
	}
	fmt.Fprintln(w)
}

func writeComparisonsTable(w io.Writer, rep *Report) {
	cs := rep.Comparisons()
	if len(cs) == 0 {
		return
	}
	if emulated(rep) {
		fmt.Fprintln(w, "| candidate ÷ baseline | point | order p50 | throughput |")
		fmt.Fprintln(w, "|---|---|---|---|")
		labels := pointLabels(rep)
		for pi, pt := range rep.Points {
			for _, c := range pt.Comparisons {
				fmt.Fprintf(w, "| %s vs %s | %s | %s | %s |\n", c.Candidate, c.Baseline, orDefault(oneLine(labels[pi]), "—"),
					fmtRatio(c.Ratios.OrderP50), fmtRatio(c.Ratios.Throughput))
			}
		}
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintln(w, "| candidate ÷ baseline | point | delivery p50 | e2e p50 | e2e p99 | append p50 | throughput |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	labels := pointLabels(rep)
	for pi, pt := range rep.Points {
		for _, c := range pt.Comparisons {
			fmt.Fprintf(w, "| %s vs %s | %s | %s | %s | %s | %s | %s |\n", c.Candidate, c.Baseline, orDefault(oneLine(labels[pi]), "—"),
				fmtRatio(c.Ratios.DeliveryP50), fmtRatio(c.Ratios.E2EP50), fmtRatio(c.Ratios.E2EP99),
				fmtRatio(c.Ratios.AppendP50), fmtRatio(c.Ratios.Throughput))
		}
	}
	fmt.Fprintln(w)
}

func fmtNum(v *float64, digits int) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.*f", digits, *v)
}

func fmtMs(us float64) string {
	if math.IsNaN(us) {
		return "—"
	}
	return fmt.Sprintf("%.2f", us/1e3)
}

func fmtRatio(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.2f×", *v)
}

func finiteOrNil(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	return &v
}

func finiteOrNaN(v float64) float64 {
	if math.IsInf(v, 0) {
		return math.NaN()
	}
	return v
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// cpuModel names this machine's CPU, from /proc/cpuinfo where there is one.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// fmtPercent renders a percentage, or "—" when unknown.
func fmtPercent(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", *v)
}
