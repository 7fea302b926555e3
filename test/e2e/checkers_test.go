package e2e

import (
	"testing"
	"time"
)

func TestMaxGap(t *testing.T) {
	ms := time.Millisecond
	acks := []time.Duration{5 * ms, 10 * ms, 40 * ms, 45 * ms, 100 * ms}
	cases := []struct {
		from, to, gap, at time.Duration
	}{
		{0, 50 * ms, 30 * ms, 10 * ms},
		{0, 200 * ms, 100 * ms, 100 * ms},
		{41 * ms, 44 * ms, 3 * ms, 41 * ms},
		{0, 45 * ms, 30 * ms, 10 * ms},
	}
	for _, c := range cases {
		gap, at := maxGap(acks, c.from, c.to)
		if gap != c.gap || at != c.at {
			t.Errorf("maxGap(%v..%v) = %v at %v, want %v at %v", c.from, c.to, gap, at, c.gap, c.at)
		}
	}
}
