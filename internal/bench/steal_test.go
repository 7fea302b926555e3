package bench

import (
	"testing"
	"time"
)

func TestHostShares(t *testing.T) {
	a := []byte("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 50 0 25 400 5 0 0 20 0 0\nintr 1\n")
	b := []byte("cpu  160 0 70 900 72 0 0 100 7 0\ncpu0 80 0 35 450 5 0 0 50 0 0\n")
	ta, tb := parseHostTicks(a), parseHostTicks(b)
	if ta != (hostTicks{steal: 40, iowait: 10, total: 1000}) || tb != (hostTicks{steal: 100, iowait: 72, total: 1302}) {
		t.Fatalf("ticks %+v and %+v", ta, tb)
	}
	cpu, host := CPUSample{Process: 3 * time.Second, host: tb}.Since(CPUSample{Process: time.Second, host: ta})
	if cpu != 2*time.Second || host.Steal == nil || *host.Steal != 19.9 || host.IOWait == nil || *host.IOWait != 20.5 {
		t.Fatalf("cpu %v, shares %+v; want 2s, 19.9%% stolen and 20.5%% waiting for the disk", cpu, host)
	}
	if _, host := (CPUSample{host: hostTicks{total: 5}}).Since(CPUSample{}); host.Steal != nil || host.IOWait != nil {
		t.Fatalf("shares %+v without a first reading, want none", host)
	}
	if tk := parseHostTicks([]byte("cpu 1 2 3\n")); tk != (hostTicks{}) {
		t.Fatalf("short cpu line: %+v, want nothing", tk)
	}
}
