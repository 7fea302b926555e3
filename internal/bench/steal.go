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
	host    hostTicks
}

// hostTicks are the machine's CPU ticks from /proc/stat: stolen by the
// hypervisor, idle while a task waited for the disk, and in all; total is
// 0 where /proc/stat is not readable.
type hostTicks struct {
	steal, iowait, total uint64
}

// HostShares are the percentages of the machine's CPU time over a window
// that explain latencies no code of ours can shorten; nil where the host
// does not report them.
type HostShares struct {
	// Steal is the time the hypervisor gave to other guests.
	Steal *float64
	// IOWait is the time the CPUs idled while a task waited for the
	// disk: fsyncs that queue behind each other, as when every storage
	// server of an embedded cluster shares one disk.
	IOWait *float64
}

// SampleCPU reads the counters now.
func SampleCPU() (CPUSample, error) {
	p, err := CPUTime()
	if err != nil {
		return CPUSample{}, err
	}
	s := CPUSample{Process: p}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		s.host = parseHostTicks(data)
	}
	return s, nil
}

// Since returns the process's CPU time from a to s and, where the host
// reports them, the shares of the machine's CPU time stolen and spent
// waiting for the disk meanwhile: above a few percent, latencies measured
// in the window are inflated by waits outside the process.
func (s CPUSample) Since(a CPUSample) (time.Duration, HostShares) {
	cpu := s.Process - a.Process
	if a.host.total == 0 || s.host.total <= a.host.total {
		return cpu, HostShares{}
	}
	share := func(to, from uint64) *float64 {
		return Ptr(round(100*float64(to-from)/float64(s.host.total-a.host.total), 1))
	}
	return cpu, HostShares{Steal: share(s.host.steal, a.host.steal), IOWait: share(s.host.iowait, a.host.iowait)}
}

// parseHostTicks reads the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal ... ; it returns zeros if the line
// is missing or has no steal column.
func parseHostTicks(data []byte) hostTicks {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 9 {
			return hostTicks{}
		}
		var t hostTicks
		// Guest time (columns 9 and 10) is already counted in user.
		for i, v := range f[1:9] {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return hostTicks{}
			}
			t.total += n
			switch i {
			case 4:
				t.iowait = n
			case 7:
				t.steal = n
			}
		}
		return t
	}
	return hostTicks{}
}
