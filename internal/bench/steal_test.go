package bench

import (
	"testing"
	"time"
)

func TestStealPercent(t *testing.T) {
	a := []byte("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 50 0 25 400 5 0 0 20 0 0\nintr 1\n")
	b := []byte("cpu  160 0 70 900 10 0 0 100 7 0\ncpu0 80 0 35 450 5 0 0 50 0 0\n")
	sa, ta := parseStealTicks(a)
	sb, tb := parseStealTicks(b)
	if sa != 40 || ta != 1000 || sb != 100 || tb != 1240 {
		t.Fatalf("ticks %d/%d and %d/%d, want 40/1000 and 100/1240", sa, ta, sb, tb)
	}
	cpu, steal := CPUSample{Process: 3 * time.Second, steal: sb, total: tb}.Since(CPUSample{Process: time.Second, steal: sa, total: ta})
	if cpu != 2*time.Second || steal == nil || *steal != 25 {
		t.Fatalf("cpu %v, steal %v; want 2s and 25%%", cpu, steal)
	}
	if _, steal := (CPUSample{total: 5}).Since(CPUSample{}); steal != nil {
		t.Fatalf("steal %v without a first reading, want none", *steal)
	}
	if s, tot := parseStealTicks([]byte("cpu 1 2 3\n")); s != 0 || tot != 0 {
		t.Fatalf("short cpu line: %d/%d, want nothing", s, tot)
	}
}
