package bench

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPUSample is what the harness reads of CPU use at a window's edges: this
// process's CPU time and the host's CPU tick counters.
type CPUSample struct {
	Process time.Duration
	// steal and total are the machine's ticks stolen by the hypervisor
	// and in all; total is 0 where /proc/stat is not readable.
	steal, total uint64
}

// SampleCPU reads the counters now.
func SampleCPU() (CPUSample, error) {
	p, err := CPUTime()
	if err != nil {
		return CPUSample{}, err
	}
	s := CPUSample{Process: p}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		s.steal, s.total = parseStealTicks(data)
	}
	return s, nil
}

// Since returns the process's CPU time from a to s and, where the host
// reports it, the percentage of the machine's CPU time the hypervisor gave
// to other guests meanwhile: above a few percent, latencies measured in
// the window are inflated by waits no code of ours can shorten.
func (s CPUSample) Since(a CPUSample) (time.Duration, *float64) {
	cpu := s.Process - a.Process
	if a.total == 0 || s.total <= a.total {
		return cpu, nil
	}
	return cpu, Ptr(round(100*float64(s.steal-a.steal)/float64(s.total-a.total), 1))
}

// parseStealTicks reads the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal ... ; it returns zeros if the line
// is missing or has no steal column.
func parseStealTicks(data []byte) (steal, total uint64) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 9 {
			return 0, 0
		}
		// Guest time (columns 9 and 10) is already counted in user.
		for i, v := range f[1:min(len(f), 9)] {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, 0
			}
			total += n
			if i == 7 {
				steal = n
			}
		}
		return steal, total
	}
	return 0, 0
}
