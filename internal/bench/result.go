package bench

import (
	"encoding/json"
	"fmt"
	"io"
)

// Result is what one benchmark run reports, printed as one JSON object.
// Fields a workload does not measure are left zero and omitted; fields whose
// zero value is meaningful (a rate of 0 means closed loop) are pointers.
type Result struct {
	Workload    string `json:"workload"`
	Mode        string `json:"mode,omitempty"`
	Shards      int    `json:"shards,omitempty"`
	Replicas    int    `json:"replicas,omitempty"`
	RecordBytes int    `json:"record_bytes,omitempty"`
	// Rate is the offered load in appends per second over all clients; 0
	// means closed loop.
	Rate    *int `json:"rate,omitempty"`
	Clients int  `json:"clients,omitempty"`
	// DurationS is the measured window, warm-up excluded.
	DurationS     float64  `json:"duration_s,omitempty"`
	ThroughputRPS *float64 `json:"throughput_rps,omitempty"`
	// AppendLatencyUS is from an append's start (its scheduled start in open
	// loop, so queueing behind a slow cluster counts) to its acknowledgement.
	AppendLatencyUS *LatencySummary `json:"append_latency_us,omitempty"`
	// DeliveryLatencyUS is from an append's start to a subscriber's receipt.
	DeliveryLatencyUS *LatencySummary `json:"delivery_latency_us,omitempty"`
	// Errors counts operations that failed during the measured window.
	Errors int64 `json:"errors,omitempty"`
	// CPUSeconds is this process's user+system CPU time over the measured
	// window (servers included when the cluster is embedded).
	CPUSeconds *float64 `json:"cpu_seconds,omitempty"`
	// CPUPercentOfOneCore is CPUSeconds over the window's wall time, in
	// percent of one core.
	CPUPercentOfOneCore *float64 `json:"cpu_percent_of_one_core,omitempty"`
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

// Ptr returns a pointer to v, for Result's optional fields.
func Ptr[T any](v T) *T { return &v }

// WriteJSON writes r as one line of JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	data = append(data, '\n')
	_, err = w.Write(data)
	return err
}
