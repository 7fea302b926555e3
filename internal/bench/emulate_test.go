package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEmuLogOrdersRunsInPart(t *testing.T) {
	var l emuLog
	l.appendRecords(0, 2)
	l.appendRecords(2, 1) // joins the run of records 0, 1
	l.appendNoops(3)
	l.appendNoops(1) // joins the no-op run
	l.appendRecords(3, 2)
	if len(l.entries) != 3 || l.length != 9 {
		t.Fatalf("entries %+v, length %d", l.entries, l.length)
	}
	var got []uint64
	record := func(k uint64) { got = append(got, k) }
	// A cut may end inside a run of either kind.
	for _, upTo := range []uint64{2, 2, 5, 8, 9} {
		if err := l.order(upTo, record); err != nil {
			t.Fatal(err)
		}
	}
	if want := []uint64{0, 1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("records ordered %v, want %v", got, want)
	}
	if l.recordsOrdered() != 5 || l.ordered != 9 {
		t.Fatalf("%d records of %d entries ordered", l.recordsOrdered(), l.ordered)
	}
	// Wholly ordered runs take no more entries.
	l.appendRecords(5, 1)
	if e := l.entries[len(l.entries)-1]; e.first != 5 || e.n != 1 {
		t.Fatalf("a new record joined an ordered run: %+v", l.entries)
	}
	if err := l.order(11, record); err == nil || !strings.Contains(err.Error(), "the cut orders 11 entries, but the shard holds 10") {
		t.Fatalf("ordering past the log: %v", err)
	}
	// Ordered runs are dropped once there are many.
	for i := range uint64(3 * emuCompactAfter) {
		l.appendNoops(1)
		l.appendRecords(6+i, 1)
		if err := l.order(l.length, record); err != nil {
			t.Fatal(err)
		}
	}
	if len(l.entries) > 2*emuCompactAfter+2 {
		t.Fatalf("the log keeps %d ordered runs", len(l.entries))
	}
}

// TestEmuScheduleSplitsTheLoad checks that the shards' arrivals interleave
// into exactly the run's open-loop schedule.
func TestEmuScheduleSplitsTheLoad(t *testing.T) {
	start := time.Unix(1000, 0)
	r := &emuRun{n: 7, sched: Schedule{Start: start, Rate: 3000}}
	for _, ops := range []int64{0, 1, 6, 7, 8, 100, 3000} {
		var sum int64
		for c := range r.n {
			sum += r.shardOps(c, ops)
		}
		if sum != ops {
			t.Fatalf("the shards take %d of the first %d operations", sum, ops)
		}
	}
	seen := map[time.Time]int{}
	for c := range r.n {
		for k := range r.shardOps(c, 3000) {
			seen[r.arrival(c, k)]++
		}
	}
	for op := range int64(3000) {
		if seen[r.sched.At(op)] == 0 {
			t.Fatalf("operation %d (due %v) arrives at no shard", op, r.sched.At(op))
		}
	}
}

// TestEmulatedSmoke runs scale on 8 emulated shards in both modes: the
// ordering layer commits cuts, and every record that arrived is ordered.
func TestEmulatedSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded ordering layer")
	}
	p := params(t, "scale")
	p.Modes = []string{"eager", "spec"}
	p.Emulate = []int{8}
	p.Rate = 4000
	p.Compute, p.Subscribers = nil, 0
	p.Warmup = 200 * time.Millisecond
	p.Duration = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, "scale", p)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d JSON lines, want two results and a comparison:\n%s", len(lines), buf.String())
	}
	for i, mode := range p.Modes {
		var r Result
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, lines[i])
		}
		if r.Workload != "scale" || r.Mode != mode || !r.Emulated || r.Shards != 8 || r.DurationS != 0.3 {
			t.Fatalf("line %d: %s", i, lines[i])
		}
		if r.ThroughputRPS == nil || *r.ThroughputRPS <= 0 || r.CutsPerS == nil || *r.CutsPerS <= 0 || r.OrderLatencyUS == nil {
			t.Fatalf("no records ordered, cuts or order latency: %s", lines[i])
		}
		// Every record that arrived in the window was ordered during the
		// drain; the schedule puts 4000/s × 0.3 s in the window.
		if r.RecordsArrived == nil || r.RecordsOrdered == nil || *r.RecordsArrived != 1200 || *r.RecordsOrdered != *r.RecordsArrived {
			t.Fatalf("records arrived %v, ordered %v: %s", deref64(r.RecordsArrived), deref64(r.RecordsOrdered), lines[i])
		}
		if r.AppendLatencyUS != nil || r.Misspeculations != nil || r.Subscribers != 0 {
			t.Fatalf("emulated shards have no appends or subscribers: %s", lines[i])
		}
		spec := mode == "spec"
		if (r.NoopRPS != nil) != spec || (r.LagFixes != nil) != spec || (r.StaggerAbove != nil) != spec {
			t.Fatalf("speculative fields in mode %s: %s", mode, lines[i])
		}
		if spec && (*r.StaggerAbove != 6 || r.StaggerGroups == nil || *r.StaggerGroups != 2) {
			t.Fatalf("8 shards are staggered in 2 groups by default: %s", lines[i])
		}
	}
	if c := rep.Comparisons(); len(c) != 1 || !c[0].Emulated || c[0].Ratios.OrderP50 == nil {
		t.Fatalf("comparison %s", lines[2])
	}
}

func deref64(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
