package bench

import (
	"strings"
	"testing"
	"time"
)

// TestPlayerSmoke runs the player workload at tiny scale over a sweep of
// two points: each reports apply and player delays, and since the drain
// waits for every record at each of its targets, a run that returns
// applied every record of the window PerEntry times.
func TestPlayerSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded clusters")
	}
	p := smokeParams(t, "player")
	p.Shards = []int{1}
	p.Duration = 400 * time.Millisecond
	p.PlayerTargets = []int{3}
	p.TargetsPerEntry = []int{1, 2}
	rep := runSmoke(t, "player", p, true)
	if len(rep.Points) != 2 {
		t.Fatalf("%d points, want 2", len(rep.Points))
	}
	for i, pt := range rep.Points {
		r := pt.Results[0]
		if r.Targets != 3 || r.TargetsPerEntry != i+1 || r.ApplyLatencyUS == nil || r.PlayerLatencyUS == nil {
			t.Fatalf("point %d: %+v", i, r)
		}
		if r.PlayerLatencyUS.P50 > r.ApplyLatencyUS.P50 {
			t.Fatalf("point %d: the player's delay %v exceeds the apply delay %v, which contains it", i, r.PlayerLatencyUS.P50, r.ApplyLatencyUS.P50)
		}
	}
}

// TestPlayerTags: a record goes to PerEntry distinct targets.
func TestPlayerTags(t *testing.T) {
	pb := &playerBench{targets: 5, perEntry: 3, names: []string{"t0", "t1", "t2", "t3", "t4"}}
	for seq := range uint64(20) {
		tags := pb.tags(1, seq)
		seen := map[string]bool{}
		for _, tag := range tags {
			seen[tag] = true
		}
		if len(tags) != 3 || len(seen) != 3 {
			t.Fatalf("seq %d: tags %v", seq, tags)
		}
	}
}

// TestPlayerFaultsSmoke: with --faults the run stops and restarts a target
// and restarts the player, reports both catch-ups, and still applies every
// record of the window exactly once at each of its targets (the drain
// counts applications, and a second application of a batch is refused).
func TestPlayerFaultsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded cluster")
	}
	p := smokeParams(t, "player")
	p.Shards = []int{1}
	p.Duration = 2 * time.Second
	p.PlayerTargets = []int{3}
	p.TargetsPerEntry = []int{1}
	p.PlayerFaults = true
	rep := runSmoke(t, "player", p, true)
	r := rep.Points[0].Results[0]
	if len(r.Events) != 3 || !strings.Contains(r.Events[1].What, "caught up in") || !strings.Contains(r.Events[2].What, "caught up in") {
		t.Fatalf("events %v", r.Events)
	}
	if r.ApplyLatencyUS == nil || r.PlayerLatencyUS == nil {
		t.Fatalf("no apply or player delays: %+v", r)
	}
}
