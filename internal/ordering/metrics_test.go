package ordering

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
	"github.com/augur-log/augur/internal/metrics"
	"github.com/augur-log/augur/internal/mode"
)

// TestAppliedCutsCountWhetherAWindowPredeterminedThem checks that a
// replica counts every cut it applies, and among them those a lease
// window predetermined, but not the eager cuts of a fallback: the two
// counters tell an operator how much of the time the cluster speculates.
func TestAppliedCutsCountWhetherAWindowPredeterminedThem(t *testing.T) {
	m, err := mode.Parse(mode.SpecName, mode.Params{OrderingInterval: time.Millisecond, WindowCuts: 4})
	if err != nil {
		t.Fatal(err)
	}
	const id = "o-predetermined"
	s, err := New(Config{
		ClusterID: "c", ID: id, Members: []Member{{ID: id, Addr: "127.0.0.1:1"}}, Dir: t.TempDir(),
		OrderingInterval: time.Millisecond, FailureTimeout: time.Second, KeepaliveInterval: time.Second, Mode: m,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	apply := func(c control.Command) {
		t.Helper()
		if err := (*fsm)(s).Apply(0, c.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	value := func(c prometheus.Counter) float64 {
		var m dto.Metric
		if err := c.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	// The counters are the process's: count from what they hold now.
	cuts0, predetermined0 := value(metrics.CutsCommitted.WithLabelValues(id)), value(metrics.PredeterminedCuts.WithLabelValues(id))
	counts := func() (cuts, predetermined float64) {
		return value(metrics.CutsCommitted.WithLabelValues(id)) - cuts0, value(metrics.PredeterminedCuts.WithLabelValues(id)) - predetermined0
	}
	apply(control.Command{Register: &control.RegisterCommand{Group: "g", Replicas: []control.Replica{{ID: "s1", Incarnation: 1}}}})
	apply(control.Command{Window: &control.WindowCommand{Quotas: []fixante.Quota{{Shard: 0, PerCut: 1}}, Groups: 1}})
	apply(control.Command{Cut: &control.CutCommand{ReleaseThrough: 3}})
	if cuts, predetermined := counts(); cuts != 3 || predetermined != 3 {
		t.Fatalf("after releasing 3 cuts of a window: %v cuts, %v predetermined, want 3 and 3", cuts, predetermined)
	}
	// The leader falls back: once the window is released, cuts are eager.
	apply(control.Command{Window: &control.WindowCommand{Fallback: true}})
	apply(control.Command{Cut: &control.CutCommand{ReleaseThrough: 4}})
	if !s.state.Spec.Eager() {
		t.Fatal("the cluster did not fall back to eager cuts")
	}
	apply(control.Command{Cut: &control.CutCommand{Lengths: []cut.Length{{Shard: 0, Length: 9}}}})
	apply(control.Command{Cut: &control.CutCommand{Lengths: []cut.Length{{Shard: 0, Length: 12}}}})
	if cuts, predetermined := counts(); cuts != 6 || predetermined != 4 {
		t.Fatalf("after 2 eager cuts: %v cuts, %v predetermined, want 6 and 4", cuts, predetermined)
	}
}
