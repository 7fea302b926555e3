package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/augur-log/augur/internal/stagetime"
)

// Result is what one run (one workload, one mode, one point of a sweep)
// reports, printed as one JSON object. Fields a run does not measure are
// left zero and omitted; fields whose zero value is meaningful (a rate of 0
// means closed loop) are pointers.
type Result struct {
	Workload string `json:"workload"`
	Mode     string `json:"mode,omitempty"`
	// Durability is the sync setting of a run of a durability sweep
	// ("default" or "optout").
	Durability string `json:"durability,omitempty"`
	// Security is the setting of a run of a security sweep ("tls" or
	// "insecure").
	Security string `json:"security,omitempty"`
	Shards   int    `json:"shards,omitempty"`
	// Emulated marks a run whose shards were emulated by the benchmark
	// process (scale --emulate): the ordering layer was real, the shards
	// registered, heartbeat and reported like storage servers, but stored
	// nothing; records took no bytes and no client appended them.
	Emulated    bool `json:"emulated,omitempty"`
	Replicas    int  `json:"replicas,omitempty"`
	RecordBytes int  `json:"record_bytes,omitempty"`
	// Rate is the offered load in appends per second over all clients; 0
	// means closed loop.
	Rate    *int `json:"rate,omitempty"`
	Clients int  `json:"clients,omitempty"`
	// Subscribers is how many downstream consumers followed the log, and
	// Follow how: "shards" (one subscription per shard) or "log".
	Subscribers int    `json:"subscribers,omitempty"`
	Follow      string `json:"follow,omitempty"`
	// ComputeUS is the simulated downstream compute per batch, set when the
	// workload has consumers (0 is a valid point of a sweep).
	ComputeUS *float64 `json:"compute_us,omitempty"`
	// Window is the speculation lease window in cuts, when the run set one.
	Window int `json:"window,omitempty"`
	// StaggerAbove is, for speculative modes on an embedded cluster, the
	// largest number of shards that shared every cut (more were split into
	// staggered groups); 0 means staggering was off (--no-stagger).
	StaggerAbove *int `json:"stagger_above,omitempty"`
	// StaggerGroups is how many groups the last lease window announced
	// during the measured window split the shards into (emulated
	// speculative runs; 1: every shard in every cut).
	StaggerGroups *int `json:"stagger_groups,omitempty"`
	// DurationS is the measured window, warm-up excluded.
	DurationS float64 `json:"duration_s,omitempty"`
	// ThroughputRPS counts real records acknowledged in the measured window
	// per second (no-ops excluded).
	ThroughputRPS *float64 `json:"throughput_rps,omitempty"`
	// NoopRPS counts no-op entries the cluster added per second (speculative
	// modes that report it).
	NoopRPS *float64 `json:"noop_rps,omitempty"`
	// CutsPerS counts the global cuts committed in the measured window per
	// second (runs on an embedded cluster, real or emulated shards).
	CutsPerS *float64 `json:"cuts_per_s,omitempty"`
	// PredeterminedCutsPercent is, in speculative mode, the share of the
	// window's cuts that lease windows predetermined: 100 where the
	// cluster speculated throughout, 0 where its leader made eager cuts
	// throughout because fills would have cost more than speculation
	// saves.
	PredeterminedCutsPercent *float64 `json:"predetermined_cuts_percent,omitempty"`
	// AppendLatencyUS is from an append's start (its scheduled start in open
	// loop, so queueing behind a slow cluster counts) to its acknowledgement.
	AppendLatencyUS *LatencySummary `json:"append_latency_us,omitempty"`
	// GRPCFloorUS is the round trip of an almost empty gRPC call (a health
	// check) over loopback to a server in the benchmark process, paced
	// every millisecond during the warm-up, under the run's load: the
	// least any RPC costs on this machine at that moment, to set append
	// latency against. Omitted without a warm-up.
	GRPCFloorUS *LatencySummary `json:"grpc_floor_us,omitempty"`
	// OrderLatencyUS is, with emulated shards, from a record's arrival at
	// its shard (its scheduled time: the load is open loop) to the moment
	// the benchmark's Watch stream of the ordering leader delivers the
	// committed cut that orders it. It is what an append's latency would be
	// with instant storage and acknowledgement, over records that arrived
	// in the measured window.
	OrderLatencyUS *LatencySummary `json:"order_latency_us,omitempty"`
	// DeliveryLatencyUS is from an append's start to its first delivery to
	// a subscriber (speculative or not), over every subscriber.
	DeliveryLatencyUS *LatencySummary `json:"delivery_latency_us,omitempty"`
	// ConfirmLatencyUS is from an append's start to the confirmation of its
	// speculative position (speculative modes only).
	ConfirmLatencyUS *LatencySummary `json:"confirm_latency_us,omitempty"`
	// E2ELatencyUS is from an append's start until a subscriber finished
	// computing over it and, when it was delivered speculatively, its
	// position was confirmed.
	E2ELatencyUS *LatencySummary `json:"e2e_latency_us,omitempty"`
	// E2EBreakdownUS splits the mean e2e latency into its parts.
	E2EBreakdownUS *Breakdown `json:"e2e_breakdown_us,omitempty"`
	// StagesUS times the stages of the append path inside an embedded
	// cluster over the window (internal/stagetime names them), by stage,
	// with Params.Stages.
	StagesUS map[string]stagetime.Summary `json:"stages_us,omitempty"`
	// Misspeculations counts the fail_spec events of the run, as the
	// subscriber that saw most saw them (speculative modes only).
	Misspeculations *int64 `json:"misspeculations,omitempty"`
	// Targets is the player workload's number of targets, and
	// TargetsPerEntry how many of them each record went to.
	Targets         int `json:"targets,omitempty"`
	TargetsPerEntry int `json:"targets_per_entry,omitempty"`
	// ApplyLatencyUS is, in the player workload, from an append's start
	// until a target applied it (one sample per record and target).
	ApplyLatencyUS *LatencySummary `json:"apply_latency_us,omitempty"`
	// PlayerLatencyUS is from the player's fetch of a record until a
	// target applied it: the player's own delay.
	PlayerLatencyUS *LatencySummary `json:"player_latency_us,omitempty"`
	// RolledBack counts deliveries voided by those failures, over all
	// subscribers.
	RolledBack   *int64 `json:"rolled_back,omitempty"`
	LagFixes     *int64 `json:"lag_fixes,omitempty"`
	QuotaChanges *int64 `json:"quota_changes,omitempty"`
	ViewChanges  *int64 `json:"view_changes,omitempty"`
	// RecordsAppended counts acknowledged appends started in the measured
	// window; RecordsDelivered counts, per subscriber, those records it
	// received and finished (computed and, if speculative, confirmed).
	// Without failures every element of RecordsDelivered equals
	// RecordsAppended.
	RecordsAppended  *int64  `json:"records_appended,omitempty"`
	RecordsDelivered []int64 `json:"records_delivered,omitempty"`
	// RecordsArrived counts the records that arrived at emulated shards in
	// the measured window; RecordsOrdered counts those of them a committed
	// cut ordered by the end of the run's drain. Without failures they are
	// equal.
	RecordsArrived *int64 `json:"records_arrived,omitempty"`
	RecordsOrdered *int64 `json:"records_ordered,omitempty"`
	// LazyReads are the lazy-reads workload's readers, one per lag.
	LazyReads []LazyReads `json:"lazy_reads,omitempty"`
	// Errors counts appends started in the measured window that failed.
	Errors int64 `json:"errors,omitempty"`
	// CPUSeconds is this process's user+system CPU time over the measured
	// window (servers included when the cluster is embedded).
	CPUSeconds *float64 `json:"cpu_seconds,omitempty"`
	// CPUPercentOfOneCore is CPUSeconds over the window's wall time, in
	// percent of one core.
	CPUPercentOfOneCore *float64 `json:"cpu_percent_of_one_core,omitempty"`
	// StealPercent is the share of the machine's CPU time over the window
	// that the hypervisor gave to other guests (Linux only): on a shared
	// host above a few percent, every latency of the run is inflated.
	StealPercent *float64 `json:"steal_percent,omitempty"`
	// IOWaitPercent is the share of the machine's CPU time over the
	// window that it idled while a task waited for the disk (Linux
	// only): high when many fsyncs queue on one disk, which slows every
	// server of an embedded cluster, whatever its order.
	IOWaitPercent *float64 `json:"iowait_percent,omitempty"`
	// Failover summarizes the replica failure of failure --kill-replica.
	Failover *FailoverSummary `json:"failover,omitempty"`
	// Events are what a time-series workload did to the cluster, and when.
	Events []Event `json:"events,omitempty"`
	// Series are per-interval points of a time-series workload.
	Series []SeriesPoint `json:"series,omitempty"`

	// e2eCDF is the e2e latency distribution for the plots, in µs at the
	// quantiles of cdfQuantiles; not part of the JSON.
	e2eCDF []float64
}

// LatencySummary summarizes a latency histogram, in microseconds.
type LatencySummary struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Breakdown is the mean of each part of the e2e latency, in microseconds;
// the parts add up to the mean e2e latency. For a record delivered more
// than once (after a failed speculation), the parts are those of its last,
// final delivery.
type Breakdown struct {
	// Delivery is from the append's start to the delivery.
	Delivery float64 `json:"delivery"`
	// Queue is from the delivery to the start of the batch computing it.
	Queue float64 `json:"queue"`
	// Compute is the batch's compute time.
	Compute float64 `json:"compute"`
	// WaitForConfirm is from the end of the compute to the confirmation,
	// when that came later (always 0 when not speculative).
	WaitForConfirm float64 `json:"wait_for_confirm"`
}

// FailoverSummary sets the series of a run in which one replica of a
// shard stopped against itself: before the stop, and after the shard
// recovered.
type FailoverSummary struct {
	// StoppedAtS is when the replica stopped, in seconds from the start of
	// the measured window.
	StoppedAtS float64 `json:"stopped_at_s"`
	// PauseS bounds, at the series' resolution, how long the cluster took
	// to recover: from the stop to the end of the first interval after it
	// with at least half the throughput before.
	PauseS float64 `json:"pause_s"`
	// ThroughputBeforeRPS and ThroughputAfterRPS are the mean throughput
	// of the intervals before the stop and after the recovery;
	// E2EP50BeforeUS and E2EP50AfterUS the mean of their e2e p50s.
	ThroughputBeforeRPS float64  `json:"throughput_before_rps"`
	ThroughputAfterRPS  float64  `json:"throughput_after_rps"`
	E2EP50BeforeUS      *float64 `json:"e2e_p50_before_us,omitempty"`
	E2EP50AfterUS       *float64 `json:"e2e_p50_after_us,omitempty"`
	// Misspeculations counts fail_spec events after the stop (speculative
	// modes; a failover inside a shard should cause none).
	Misspeculations *int64 `json:"misspeculations,omitempty"`
}

// summarizeFailover summarizes series around a stop at at.
func summarizeFailover(series []SeriesPoint, at, interval time.Duration) *FailoverSummary {
	f := &FailoverSummary{StoppedAtS: round(at.Seconds(), 3), PauseS: -1}
	atS := at.Seconds()
	var before, after []SeriesPoint
	recovered := -1.0
	for _, pt := range series {
		switch {
		case pt.TS+interval.Seconds() <= atS:
			before = append(before, pt)
		case pt.TS < atS:
			// The interval of the stop belongs to neither side.
		default:
			if f.Misspeculations != nil || pt.Misspeculations != nil {
				f.Misspeculations = Ptr(countOf(f.Misspeculations) + countOf(pt.Misspeculations))
			}
			if recovered < 0 && len(before) > 0 && pt.ThroughputRPS >= mean(before, func(p SeriesPoint) *float64 { return &p.ThroughputRPS })/2 {
				recovered = pt.TS + interval.Seconds()
				f.PauseS = round(recovered-atS, 3)
				continue
			}
			if recovered >= 0 {
				after = append(after, pt)
			}
		}
	}
	f.ThroughputBeforeRPS = round(mean(before, func(p SeriesPoint) *float64 { return &p.ThroughputRPS }), 1)
	f.ThroughputAfterRPS = round(mean(after, func(p SeriesPoint) *float64 { return &p.ThroughputRPS }), 1)
	e2e := func(p SeriesPoint) *float64 { return p.E2EP50US }
	if len(before) > 0 {
		f.E2EP50BeforeUS = Ptr(round(mean(before, e2e), 1))
	}
	if len(after) > 0 {
		f.E2EP50AfterUS = Ptr(round(mean(after, e2e), 1))
	}
	return f
}

// mean is the mean of the values of pts that get returns (nil: none).
func mean(pts []SeriesPoint, get func(SeriesPoint) *float64) float64 {
	var sum float64
	n := 0
	for _, p := range pts {
		if v := get(p); v != nil {
			sum += *v
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// countOf is *p, or 0 for nil.
func countOf(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// Event is something a workload did during the run, at T seconds from the
// start of the measured window.
type Event struct {
	TS   float64 `json:"t_s"`
	What string  `json:"what"`
}

// SeriesPoint is one interval of a time-series workload, starting T
// seconds after the start of the measured window. Latencies are of the
// records that completed (acknowledged, delivered, finished) in the
// interval; they are omitted when none did.
type SeriesPoint struct {
	TS            float64  `json:"t_s"`
	ThroughputRPS float64  `json:"throughput_rps"`
	NoopRPS       *float64 `json:"noop_rps,omitempty"`
	AppendP50US   *float64 `json:"append_p50_us,omitempty"`
	DeliveryP50US *float64 `json:"delivery_p50_us,omitempty"`
	E2EP50US      *float64 `json:"e2e_p50_us,omitempty"`
	E2EP99US      *float64 `json:"e2e_p99_us,omitempty"`
	// Misspeculations counts fail_spec events in the interval (speculative
	// modes only).
	Misspeculations *int64 `json:"misspeculations,omitempty"`
}

// Comparison sets a candidate mode's result against the baseline's (the
// first mode of --modes) for the same point of a sweep. Latency ratios are
// baseline ÷ candidate and the throughput ratio candidate ÷ baseline, so a
// ratio above 1 always favours the candidate.
type Comparison struct {
	Workload  string `json:"workload"`
	Baseline  string `json:"baseline"`
	Candidate string `json:"candidate"`
	// BaselineDurability and CandidateDurability are the results' sync
	// settings in a durability sweep.
	BaselineDurability  string `json:"baseline_durability,omitempty"`
	CandidateDurability string `json:"candidate_durability,omitempty"`
	// BaselineSecurity and CandidateSecurity are the results' security
	// settings in a security sweep.
	BaselineSecurity  string `json:"baseline_security,omitempty"`
	CandidateSecurity string `json:"candidate_security,omitempty"`
	// The point of the sweep both results are at.
	Shards    int      `json:"shards,omitempty"`
	Emulated  bool     `json:"emulated,omitempty"`
	ComputeUS *float64 `json:"compute_us,omitempty"`
	Window    int      `json:"window,omitempty"`
	Ratios    Ratios   `json:"ratios"`
}

// Ratios are omitted when an input is missing or zero.
type Ratios struct {
	DeliveryP50 *float64 `json:"delivery_p50,omitempty"`
	E2EP50      *float64 `json:"e2e_p50,omitempty"`
	E2EP99      *float64 `json:"e2e_p99,omitempty"`
	AppendP50   *float64 `json:"append_p50,omitempty"`
	// OrderP50 compares the order latency of emulated runs.
	OrderP50   *float64 `json:"order_p50,omitempty"`
	Throughput *float64 `json:"throughput,omitempty"`
}

// Compare computes the comparison of candidate against baseline.
func Compare(baseline, candidate *Result) *Comparison {
	c := &Comparison{
		Workload:  baseline.Workload,
		Baseline:  baseline.Mode,
		Candidate: candidate.Mode,
		Shards:    baseline.Shards,

		BaselineDurability:  baseline.Durability,
		CandidateDurability: candidate.Durability,
		BaselineSecurity:    baseline.Security,
		CandidateSecurity:   candidate.Security,
		Emulated:            baseline.Emulated,
		ComputeUS:           baseline.ComputeUS,
		Window:              baseline.Window,
	}
	p50 := func(s *LatencySummary) float64 {
		if s == nil {
			return 0
		}
		return s.P50
	}
	p99 := func(s *LatencySummary) float64 {
		if s == nil {
			return 0
		}
		return s.P99
	}
	val := func(v *float64) float64 {
		if v == nil {
			return 0
		}
		return *v
	}
	c.Ratios.DeliveryP50 = ratio(p50(baseline.DeliveryLatencyUS), p50(candidate.DeliveryLatencyUS))
	c.Ratios.E2EP50 = ratio(p50(baseline.E2ELatencyUS), p50(candidate.E2ELatencyUS))
	c.Ratios.E2EP99 = ratio(p99(baseline.E2ELatencyUS), p99(candidate.E2ELatencyUS))
	c.Ratios.AppendP50 = ratio(p50(baseline.AppendLatencyUS), p50(candidate.AppendLatencyUS))
	c.Ratios.OrderP50 = ratio(p50(baseline.OrderLatencyUS), p50(candidate.OrderLatencyUS))
	c.Ratios.Throughput = ratio(val(candidate.ThroughputRPS), val(baseline.ThroughputRPS))
	return c
}

// ratio is num ÷ den to three decimals, or nil when either is zero (or
// not a positive number).
func ratio(num, den float64) *float64 {
	if !(num > 0) || !(den > 0) {
		return nil
	}
	return Ptr(round(num/den, 3))
}

// Report is everything one `augur bench WORKLOAD` prints: for each point of
// the sweep, one result per mode, then (with two or more modes) one
// comparison per candidate mode.
type Report struct {
	Workload string
	Points   []Point
}

// Point is one point of a sweep: the same workload and parameters run
// under each mode.
type Point struct {
	Results     []*Result
	Comparisons []*Comparison
}

// add appends a point, comparing every result after the first with the
// baseline mode's (the first mode's) under the same durability and
// security settings, and the baseline mode's own results under other
// settings with the first (what a setting costs).
func (r *Report) add(results []*Result) {
	pt := Point{Results: results}
	first := results[0]
	for _, c := range results[1:] {
		base := first
		if c.Mode != first.Mode {
			for _, b := range results {
				if b.Mode == first.Mode && b.Durability == c.Durability && b.Security == c.Security {
					base = b
					break
				}
			}
		}
		pt.Comparisons = append(pt.Comparisons, Compare(base, c))
	}
	r.Points = append(r.Points, pt)
}

// Results lists every result of the report, in order.
func (r *Report) Results() []*Result {
	var out []*Result
	for _, pt := range r.Points {
		out = append(out, pt.Results...)
	}
	return out
}

// Comparisons lists every comparison of the report, in order.
func (r *Report) Comparisons() []*Comparison {
	var out []*Comparison
	for _, pt := range r.Points {
		out = append(out, pt.Comparisons...)
	}
	return out
}

// WriteJSON writes the report as JSON lines: each point's results, then
// its comparisons.
func (r *Report) WriteJSON(w io.Writer) error {
	for _, pt := range r.Points {
		for _, res := range pt.Results {
			if err := writeLine(w, res); err != nil {
				return err
			}
		}
		for _, c := range pt.Comparisons {
			if err := writeLine(w, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteJSON writes r as one line of JSON.
func (r *Result) WriteJSON(w io.Writer) error { return writeLine(w, r) }

func writeLine(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	data = append(data, '\n')
	_, err = w.Write(data)
	return err
}

// Ptr returns a pointer to v, for Result's optional fields.
func Ptr[T any](v T) *T { return &v }

// LazyReads is one reader of the lazy-reads workload: it read the last
// durable position LagMS after learning it; Fast reads were below
// stable-gp when they arrived, Slow ones waited for it.
type LazyReads struct {
	LagMS       float64         `json:"lag_ms"`
	LatencyUS   *LatencySummary `json:"read_latency_us,omitempty"`
	Fast        int64           `json:"fast"`
	Slow        int64           `json:"slow"`
	FastPercent float64         `json:"fast_percent"`
	Errors      int64           `json:"errors,omitempty"`
}
