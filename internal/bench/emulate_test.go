package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/segment"
	"github.com/augur-log/augur/internal/shard"
)

// TestEmuShardOrdersThroughTheCore checks an emulated shard's log as
// the watcher orders it: cuts may end inside runs of records or no-ops,
// each record is counted once with its arrival index, a cut past the log
// fails the run, a snapshot's gap is crossed, and ordered entries go.
func TestEmuShardOrdersThroughTheCore(t *testing.T) {
	const id = 3
	r := &emuRun{spec: true, clusterMode: mode.Spec{FillAfter: time.Hour, IdleAfter: time.Hour}}
	s := newEmuShard(r, 0, 1)
	s.start(id)
	s.spec.SetWindows([]fixante.Window{{Cuts: 100, Groups: 1, Quotas: []fixante.Quota{{Shard: id, PerCut: 3}}}}, false)
	now := time.Unix(1000, 0)
	ingest := func(first, n uint64) {
		var es []segment.Entry
		for k := first; k < first+n; k++ {
			es = append(es, segment.Entry{Seq: k})
		}
		s.carry(s.act(func(out *shard.Output[struct{}]) { s.core.Ingest(es, out) }), now)
	}
	ingest(0, 2)
	ingest(2, 1)
	s.carry(s.act(func(out *shard.Output[struct{}]) { s.core.LagFix(now, 6, out) }), now) // 3 no-ops
	ingest(3, 2)
	if s.length() != 8 {
		t.Fatalf("length %d, want 8", s.length())
	}
	var got []uint64
	record := func(k uint64) { got = append(got, k) }
	var prev cut.Cut
	orderTo := func(length uint64, gap bool) error {
		cur := cut.Cut{Index: prev.Index + 1, Start: prev.End, End: prev.End + length - prev.Len(id),
			Lengths: []cut.Length{{Shard: id, Length: length}}}
		if gap {
			// Cuts of other shards came in between.
			cur.Index += 5
			cur.Start += 40
			cur.End += 40
		}
		err := s.order(prev, cur, gap, record)
		prev = cur
		return err
	}
	for _, upTo := range []uint64{2, 2, 5} {
		if err := orderTo(upTo, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := orderTo(8, true); err != nil {
		t.Fatalf("after a gap: %v", err)
	}
	if want := []uint64{0, 1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("records ordered %v, want %v", got, want)
	}
	if s.orderedRecords.Load() != 5 || s.log.Ordered() != 8 {
		t.Fatalf("%d records of %d entries ordered", s.orderedRecords.Load(), s.log.Ordered())
	}
	if s.log.Start() == 0 {
		t.Fatal("ordered entries are kept")
	}
	ingest(5, 2)
	if err := orderTo(11, false); err == nil || !strings.Contains(err.Error(), "the cut orders 11 entries, but the shard holds 10") {
		t.Fatalf("ordering past the log: %v", err)
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
		if (r.NoopRPS != nil) != spec || (r.LagFixes != nil) != spec || (r.StaggerAbove != nil) != spec || (r.PredeterminedCutsPercent != nil) != spec {
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
