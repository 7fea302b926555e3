package mode

import (
	"strings"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/merge"
	"github.com/augur-log/augur/internal/order"
	"github.com/augur-log/augur/internal/shard"
	"github.com/augur-log/augur/internal/spec"
)

var params = Params{OrderingInterval: 2 * time.Millisecond, FailureTimeout: time.Second, WindowCuts: 10, StaggerAbove: 3}

func TestParseUnknownModeListsTheKnownOnes(t *testing.T) {
	_, err := Parse("lazier", params)
	if err == nil {
		t.Fatal("mode lazier parsed")
	}
	for _, want := range []string{`"lazier"`, "eager", "spec", "lazy"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, err := Lookup("Eager"); err == nil {
		t.Error("names are case-sensitive, yet Eager was found")
	}
}

func TestParseRefusesParametersTheModeCannotRunWith(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Params
		want string
	}{
		{EagerName, Params{}, "ordering interval must be positive"},
		{SpecName, Params{OrderingInterval: time.Millisecond}, "at least one cut"},
	} {
		if _, err := Parse(c.name, c.p); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s with %+v: %v, want an error saying %q", c.name, c.p, err, c.want)
		}
	}
	// Eager has no lease window: it needs no window size.
	if _, err := Parse(EagerName, Params{OrderingInterval: time.Millisecond}); err != nil {
		t.Errorf("eager without window cuts: %v", err)
	}
}

func TestEagerBuildsEagerParts(t *testing.T) {
	m, err := Parse(EagerName, params)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != EagerName || m.Speculative() {
		t.Errorf("eager is named %q, speculative %v", m.Name(), m.Speculative())
	}
	if st := m.NewState("c"); st.ClusterID != "c" || st.Spec != nil {
		t.Errorf("eager starts from %+v, want cluster c without speculative state", st)
	}
	if _, ok := m.NewPolicy().(*order.Eager); !ok {
		t.Errorf("eager policy is %T", m.NewPolicy())
	}
	if _, ok := m.NewShardOrdering(0, 0, time.Unix(0, 0)).(shard.Eager); !ok {
		t.Errorf("eager shard ordering is %T", m.NewShardOrdering(0, 0, time.Unix(0, 0)))
	}
	if _, ok := m.NewShardOrdering(0, 0, time.Unix(0, 0)).(shard.WindowFollower); ok {
		t.Error("an eager shard follows lease windows")
	}
	if _, ok := m.NewMerger(0, true, false).(*merge.Eager); !ok {
		t.Errorf("eager merger is %T", m.NewMerger(0, true, false))
	}
}

func TestSpecBuildsSpeculativePartsFromTheParameters(t *testing.T) {
	m, err := Parse(SpecName, params)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != SpecName || !m.Speculative() {
		t.Errorf("spec is named %q, speculative %v", m.Name(), m.Speculative())
	}
	sm := m.(Spec)
	if c := sm.Config; c.Interval != params.OrderingInterval || c.StaggerAbove != 3 || c.SuspectAfter != time.Second || !c.LagFix || !c.QuotaChange {
		t.Errorf("spec policy config %+v does not follow %+v", c, params)
	}
	if sm.FillAfter != 3*time.Millisecond || sm.IdleAfter != 0 {
		t.Errorf("fills after %v, idle after %v; want 1.5 ordering intervals, and no idle fills with lag-fixes", sm.FillAfter, sm.IdleAfter)
	}
	if st := m.NewState("c"); st.Spec == nil || st.Spec.WindowCuts != 10 {
		t.Errorf("spec starts from speculative state %+v, want windows of 10 cuts", st.Spec)
	}
	if _, ok := m.NewPolicy().(*order.Spec); !ok {
		t.Errorf("spec policy is %T", m.NewPolicy())
	}
	if _, ok := m.NewShardOrdering(0, 0, time.Unix(0, 0)).(*shard.Speculative); !ok {
		t.Errorf("spec shard ordering is %T", m.NewShardOrdering(0, 0, time.Unix(0, 0)))
	}
	if _, ok := m.NewMerger(0, false, true).(*spec.StreamMerger); !ok {
		t.Errorf("spec merger is %T", m.NewMerger(0, false, true))
	}
	off, err := Parse(SpecName, Params{OrderingInterval: time.Millisecond, WindowCuts: 1, NoLagFix: true, NoQuotaChange: true})
	if err != nil {
		t.Fatal(err)
	}
	if c := off.(Spec).Config; c.LagFix || c.QuotaChange {
		t.Errorf("no_lagfix and no_quota_change left %+v", c)
	}
	if idle := off.(Spec).IdleAfter; idle != time.Millisecond {
		t.Errorf("without lag-fixes idle shards fill for %v, want the window's 1 ordering interval", idle)
	}
}

func TestFromStatusPicksTheModeTheStatusDescribes(t *testing.T) {
	if m := FromStatus(&pb.StatusResponse{}); m.Name() != EagerName {
		t.Errorf("a status without speculative state is %s", m.Name())
	}
	if m := FromStatus(&pb.StatusResponse{Spec: &pb.SpecState{}}); m.Name() != SpecName {
		t.Errorf("a status with speculative state is %s", m.Name())
	}
	for _, name := range Names() {
		r, err := Lookup(name)
		if err != nil || r.Name() != name {
			t.Errorf("Lookup(%s) = %v, %v", name, r, err)
		}
	}
}

func TestOnlyLazyOrderIsSequenced(t *testing.T) {
	for _, name := range Names() {
		m, err := Parse(name, params)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.Sequenced(), name == LazyName; got != want {
			t.Errorf("mode %s: sequenced %v, want %v", name, got, want)
		}
	}
}
