package bench

import (
	"math"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Bounds of a latency histogram: values are recorded in nanoseconds with
// three significant digits (0.1% error) from 1ns to latencyNanosMax; larger
// values are clamped to latencyNanosMax and counted in Saturated.
const (
	latencyNanosMax           = int64(time.Minute)
	latencySignificantFigures = 3
)

// Latency is a concurrency-safe latency histogram.
type Latency struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
	// sum and max are exact, unlike the histogram's bucketed values.
	sum       float64
	max       int64
	saturated int64
}

// NewLatency returns an empty histogram.
func NewLatency() *Latency {
	return &Latency{h: hdrhistogram.New(1, latencyNanosMax, latencySignificantFigures)}
}

// Record adds one latency; negative values count as zero.
func (l *Latency) Record(d time.Duration) {
	v := max(int64(d), 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sum += float64(v)
	l.max = max(l.max, v)
	if v > latencyNanosMax {
		l.saturated++
		v = latencyNanosMax
	}
	// RecordValue fails only outside [0, latencyNanosMax], excluded above.
	_ = l.h.RecordValue(v)
}

// Merge adds every value of other to l.
func (l *Latency) Merge(other *Latency) {
	other.mu.Lock()
	h := other.h.Clone()
	sum, mx, sat := other.sum, other.max, other.saturated
	other.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.h.Merge(h)
	l.sum += sum
	l.max = max(l.max, mx)
	l.saturated += sat
}

// Count is how many values were recorded.
func (l *Latency) Count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h.TotalCount()
}

// Saturated is how many values exceeded the histogram's range.
func (l *Latency) Saturated() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.saturated
}

// Quantile returns the latency at quantile q in [0, 1] (0.99 for p99), or 0
// when nothing was recorded.
func (l *Latency) Quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q >= 1 {
		return time.Duration(l.max)
	}
	return time.Duration(min(l.h.ValueAtQuantile(q*100), l.max))
}

// Summary returns the histogram's summary in microseconds.
func (l *Latency) Summary() *LatencySummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.h.TotalCount()
	if n == 0 {
		return &LatencySummary{}
	}
	// A bucket's highest equivalent value can exceed the largest value
	// recorded in it; no percentile may exceed the exact maximum.
	at := func(p float64) float64 { return micros(float64(min(l.h.ValueAtQuantile(p), l.max))) }
	return &LatencySummary{
		Mean: micros(l.sum / float64(n)),
		P50:  at(50),
		P90:  at(90),
		P99:  at(99),
		P999: at(99.9),
		Max:  micros(float64(l.max)),
	}
}

// micros converts nanoseconds to microseconds rounded to the nanosecond.
func micros(nanos float64) float64 { return round(nanos/1e3, 3) }

func round(v float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(v*p) / p
}

// cdfQuantiles are the quantiles at which cdf samples a histogram for the
// plots: every percent, and the tail up to p99.9.
var cdfQuantiles = func() []float64 {
	var qs []float64
	for i := 1; i <= 99; i++ {
		qs = append(qs, float64(i)/100)
	}
	return append(qs, 0.995, 0.999)
}()

// cdf returns the latency in µs at each of cdfQuantiles, nil when empty.
func (l *Latency) cdf() []float64 {
	if l.Count() == 0 {
		return nil
	}
	out := make([]float64, len(cdfQuantiles))
	for i, q := range cdfQuantiles {
		out[i] = micros(float64(l.Quantile(q)))
	}
	return out
}
