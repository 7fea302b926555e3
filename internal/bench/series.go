package bench

import (
	"math"
	"slices"
	"sync"
	"time"
)

// seriesIntervalMin is the shortest automatic series interval.
const seriesIntervalMin = 10 * time.Millisecond

// seriesPointsAuto is how many points an automatic interval aims for.
const seriesPointsAuto = 50

// seriesInterval is p's series bucket: p.Interval, or Duration cut into
// about seriesPointsAuto points of a whole number of milliseconds.
func seriesInterval(p Params) time.Duration {
	if p.Interval > 0 {
		return p.Interval
	}
	return max(seriesIntervalMin, (p.Duration / seriesPointsAuto).Truncate(time.Millisecond))
}

// series collects per-interval measurements over the measured window.
// Latencies are kept as raw samples: a run is short, and exact percentiles
// of a few thousand samples need no histogram.
type series struct {
	start    time.Time
	interval time.Duration

	mu      sync.Mutex
	buckets []bucket
}

type bucket struct {
	acked    int64
	noops    *int64
	misspec  int64
	appendL  []time.Duration
	delivery []time.Duration
	e2e      []time.Duration
}

func newSeries(start time.Time, window, interval time.Duration) *series {
	n := int((window + interval - 1) / interval)
	return &series{start: start, interval: interval, buckets: make([]bucket, n)}
}

// at returns the bucket holding time t, or nil outside the window; the
// caller holds s.mu.
func (s *series) atLocked(t time.Time) *bucket {
	d := t.Sub(s.start)
	if d < 0 {
		return nil
	}
	i := int(d / s.interval)
	if i >= len(s.buckets) {
		return nil
	}
	return &s.buckets[i]
}

// The record methods are no-ops on a nil series.

func (s *series) ack(t time.Time, latency time.Duration) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.atLocked(t); b != nil {
		b.acked++
		b.appendL = append(b.appendL, latency)
	}
}

func (s *series) delivered(t time.Time, latency time.Duration) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.atLocked(t); b != nil {
		b.delivery = append(b.delivery, latency)
	}
}

func (s *series) finished(t time.Time, latency time.Duration) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.atLocked(t); b != nil {
		b.e2e = append(b.e2e, latency)
	}
}

func (s *series) failed(t time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.atLocked(t); b != nil {
		b.misspec++
	}
}

// setNoops records the no-ops added during bucket i.
func (s *series) setNoops(i int, n int64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= 0 && i < len(s.buckets) {
		s.buckets[i].noops = &n
	}
}

// points renders the series; speculative adds the misspeculation counts.
func (s *series) points(speculative bool) []SeriesPoint {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	secs := s.interval.Seconds()
	out := make([]SeriesPoint, len(s.buckets))
	for i, b := range s.buckets {
		pt := SeriesPoint{
			TS:            round(float64(i)*secs, 3),
			ThroughputRPS: round(float64(b.acked)/secs, 1),
			AppendP50US:   samplesQuantile(b.appendL, 0.5),
			DeliveryP50US: samplesQuantile(b.delivery, 0.5),
			E2EP50US:      samplesQuantile(b.e2e, 0.5),
			E2EP99US:      samplesQuantile(b.e2e, 0.99),
		}
		if b.noops != nil {
			pt.NoopRPS = Ptr(round(float64(*b.noops)/secs, 1))
		}
		if speculative {
			pt.Misspeculations = Ptr(b.misspec)
		}
		out[i] = pt
	}
	return out
}

// samplesQuantile returns the q-quantile of xs in µs (the smallest sample
// with at least a q share of the samples at or below it), or nil for none.
// It sorts xs.
func samplesQuantile(xs []time.Duration, q float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	slices.Sort(xs)
	// The nearest rank; the epsilon keeps q*n = 99.00000000000001 at 99.
	i := int(math.Ceil(q*float64(len(xs))-1e-9)) - 1
	i = min(max(i, 0), len(xs)-1)
	return Ptr(micros(float64(xs[i])))
}
