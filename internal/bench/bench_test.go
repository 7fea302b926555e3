package bench

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLatencyPercentiles(t *testing.T) {
	l := NewLatency()
	// 1..10000 µs, each once: the q-quantile is q*10000 µs.
	for i := 1; i <= 10000; i++ {
		l.Record(time.Duration(i) * time.Microsecond)
	}
	if n := l.Count(); n != 10000 {
		t.Fatalf("count %d", n)
	}
	s := l.Summary()
	within := func(name string, got, want float64) {
		t.Helper()
		// Three significant digits: at most 0.1% off.
		if got < want || got > want*1.001 {
			t.Errorf("%s = %v µs, want %v µs (+0.1%%)", name, got, want)
		}
	}
	within("p50", s.P50, 5000)
	within("p90", s.P90, 9000)
	within("p99", s.P99, 9900)
	within("p999", s.P999, 9990)
	if s.Max != 10000 {
		t.Errorf("max = %v, want exactly 10000", s.Max)
	}
	if s.Mean != 5000.5 {
		t.Errorf("mean = %v, want exactly 5000.5", s.Mean)
	}
	if q := l.Quantile(0.5); q < 5*time.Millisecond || q > 5005*time.Microsecond {
		t.Errorf("Quantile(0.5) = %v", q)
	}
}

func TestLatencyEdges(t *testing.T) {
	l := NewLatency()
	if s := l.Summary(); *s != (LatencySummary{}) {
		t.Fatalf("empty summary %+v", s)
	}
	l.Record(-time.Second)
	l.Record(2 * time.Hour)
	if l.Saturated() != 1 {
		t.Fatalf("saturated %d, want 1", l.Saturated())
	}
	s := l.Summary()
	if s.Max != float64(2*time.Hour/time.Microsecond) {
		t.Fatalf("max %v: the exact maximum must survive clamping", s.Max)
	}
}

func TestLatencyConcurrentAndMerge(t *testing.T) {
	a, b := NewLatency(), NewLatency()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				a.Record(time.Duration(g*1000+i+1) * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	b.Record(time.Second)
	b.Merge(a)
	if b.Count() != 4001 {
		t.Fatalf("merged count %d", b.Count())
	}
	if s := b.Summary(); s.Max != 1e6 || s.P50 < 2000 || s.P50 > 2002 {
		t.Fatalf("merged summary %+v", s)
	}
}

func TestScheduleIsExactAndDoesNotDrift(t *testing.T) {
	start := time.Unix(1000, 0)
	s := Schedule{Start: start, Rate: 3}
	for k, want := range []time.Duration{0, 333333333, 666666666, time.Second, time.Second + 333333333} {
		if got := s.At(int64(k)).Sub(start); got != want {
			t.Errorf("At(%d) = +%v, want +%v", k, got, want)
		}
	}
	big := Schedule{Start: start, Rate: 7919}
	// After a year of operations the schedule is still exact.
	k := int64(7919) * 365 * 24 * 3600
	if got, want := big.At(k).Sub(start), 365*24*time.Hour; got != want {
		t.Errorf("At(%d) = +%v, want +%v", k, got, want)
	}
	for _, tc := range []struct {
		after time.Duration
		want  int64
	}{{-time.Second, 0}, {0, 1}, {333333332, 1}, {333333333, 2}, {time.Second, 4}, {10 * time.Second, 31}} {
		if got := s.Due(start.Add(tc.after)); got != tc.want {
			t.Errorf("Due(+%v) = %d, want %d", tc.after, got, tc.want)
		}
	}
	// Due and At agree: operation k is due exactly from At(k) on.
	for k := range int64(50) {
		at := big.At(k)
		if big.Due(at) != k+1 || big.Due(at.Add(-1)) != k {
			t.Fatalf("Due around At(%d) = %d, %d", k, big.Due(at.Add(-1)), big.Due(at))
		}
	}
}

func TestPacersInterleaveToTheSchedule(t *testing.T) {
	start := time.Unix(0, 0)
	s := Schedule{Start: start, Rate: 1000}
	const clients = 3
	pacers := make([]*Pacer, clients)
	for c := range pacers {
		pacers[c] = NewPacer(s, c, clients)
	}
	// Taking from the pacers in turn replays the whole schedule in order.
	for k := range int64(300) {
		got := pacers[k%clients].Next()
		if want := s.At(k); !got.Equal(want) {
			t.Fatalf("operation %d at +%v, want +%v", k, got.Sub(start), want.Sub(start))
		}
	}
}

func TestAlarmNeverWakesEarly(t *testing.T) {
	a := NewAlarm()
	defer a.Close()
	ctx := context.Background()
	// A deadline already passed returns at once; the ones after it must
	// not return before they are due, whatever an earlier arming left on
	// the timer's channel.
	if err := a.SleepUntil(ctx, time.Now().Add(-time.Second)); err != nil {
		t.Fatalf("past deadline: %v", err)
	}
	for _, d := range []time.Duration{3 * time.Millisecond, 200 * time.Microsecond, 0, time.Millisecond} {
		due := time.Now().Add(d)
		if err := a.SleepUntil(ctx, due); err != nil {
			t.Fatalf("sleep %v: %v", d, err)
		}
		if now := time.Now(); now.Before(due) {
			t.Fatalf("woke %v before a deadline %v away", due.Sub(now), d)
		}
	}
	// A wake-up left over from an earlier deadline is waiting on the
	// channel: the next sleep must not take it for its own.
	a.t.Reset(time.Nanosecond)
	for len(a.t.C) == 0 {
		runtime.Gosched()
	}
	due := time.Now().Add(2 * time.Millisecond)
	if err := a.SleepUntil(ctx, due); err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); now.Before(due) {
		t.Fatalf("a stale wake-up ended the sleep %v early", due.Sub(now))
	}
}

func TestAlarmEndsWithItsContext(t *testing.T) {
	a := NewAlarm()
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.SleepUntil(ctx, time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled sleep returned %v", err)
	}
	if err := a.SleepUntil(ctx, time.Now().Add(-time.Second)); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled sleep past its deadline returned %v", err)
	}
}

func TestCheckRate(t *testing.T) {
	ok := []struct {
		rate, clients int
		d             time.Duration
	}{{0, 4, time.Second}, {2000, 4, time.Second}, {4_000_000, 4, time.Second}, {1, 1, time.Second}}
	for _, tc := range ok {
		if err := CheckRate(tc.rate, tc.clients, tc.d); err != nil {
			t.Errorf("CheckRate(%d, %d, %v): %v", tc.rate, tc.clients, tc.d, err)
		}
	}
	bad := []struct {
		rate, clients int
		d             time.Duration
		want          string
	}{
		{-1, 4, time.Second, "must be 0 (closed loop) or positive"},
		{5_000_000, 4, time.Second, "below the pacer's 1µs"},
		{3, 4, time.Second, "less than one operation per client"},
		{10, 0, time.Second, "clients must be positive"},
	}
	for _, tc := range bad {
		err := CheckRate(tc.rate, tc.clients, tc.d)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckRate(%d, %d, %v) = %v, want error containing %q", tc.rate, tc.clients, tc.d, err, tc.want)
		}
	}
}

func TestPercentilesNeverExceedMax(t *testing.T) {
	l := NewLatency()
	// 38175686ns sits low in its bucket, whose highest equivalent value is
	// above it.
	l.Record(38175686)
	s := l.Summary()
	if s.P999 > s.Max || s.P50 > s.Max || l.Quantile(0.999) > 38175686 {
		t.Fatalf("percentiles above the maximum: %+v", s)
	}
}
