package lazy

import (
	"testing"
	"time"

	"github.com/augur-log/augur/internal/cut"
)

func controlConfig() ControlConfig {
	return ControlConfig{Replicas: []ReplicaID{1, 2}, FailureTimeout: 10 * time.Millisecond, ResendAfter: 5 * time.Millisecond}
}

// The first view is recorded, then started on every replica once the
// record is applied, never before.
func TestControlRecordsThenStartsTheFirstView(t *testing.T) {
	t0 := time.Unix(0, 0)
	c := NewControl(controlConfig(), "a", t0)
	out := c.Tick(t0)
	if r := out.Record; r == nil || r.View != 1 || r.Leader != 1 || len(r.Replicas) != 2 || out.Start != nil {
		t.Fatalf("first tick: %+v", out)
	}
	c.Status(1, ReplicaStatus{Sealed: true, Amnesiac: true}, t0)
	if out := c.Tick(t0.Add(time.Millisecond)); !out.Empty() {
		t.Fatalf("acted before the first view was applied: %+v", out)
	}
	cfg := *out.Record
	c.Applied(ControlState{Config: &cfg}, t0)
	c.Status(1, ReplicaStatus{Sealed: true, Amnesiac: true}, t0)
	c.Status(2, ReplicaStatus{Sealed: true, Amnesiac: true}, t0)
	out = c.Tick(t0.Add(time.Millisecond))
	if out.Start == nil || out.Start.View != 1 || len(out.StartTo) != 2 || out.Claim != nil {
		t.Fatalf("after the first view is applied: %+v", out)
	}
}

// A replica silent for the failure timeout starts a view change: the
// control plane claims the next view, seals only once its claim is
// applied, and advances stable-gp and starts the view only once the new
// configuration is applied.
func TestControlChangesTheViewUnderItsClaim(t *testing.T) {
	t0 := time.Unix(0, 0)
	shards := []cut.ShardID{0}
	cur := SeqConfig{View: 1, Replicas: []ReplicaID{1, 2}, Leader: 1}
	c := NewControl(controlConfig(), "a", t0)
	c.Applied(ControlState{Config: &cur, Shards: shards}, t0)
	now := t0.Add(11 * time.Millisecond)
	c.Status(2, ReplicaStatus{View: 1}, now)
	out := c.Tick(now)
	if out.Claim == nil || out.Claim.View != 2 || out.Claim.Owner != "a" || out.Seal != nil {
		t.Fatalf("on a silent replica: %+v", out)
	}
	// Someone else's claim of view 2 is not ours: no seal.
	if out := c.Applied(ControlState{Config: &cur, Claim: &Claim{View: 2, Owner: "b"}, Shards: shards}, now); !out.Empty() || c.Changing() {
		t.Fatalf("sealed under another's claim: %+v", out)
	}
	out = c.Tick(now.Add(time.Millisecond))
	if out.Claim == nil || out.Claim.View != 3 {
		t.Fatalf("after another's claim of view 2: %+v, want a claim of view 3", out)
	}
	claim := *out.Claim
	out = c.Applied(ControlState{Config: &cur, Claim: &claim, Shards: shards}, now)
	if out.Seal == nil || out.Seal.View != 1 || len(out.SealTo) != 2 {
		t.Fatalf("after the claim applied: %+v", out)
	}
	m := meta(7, 1, 0, 1)
	out = c.Sealed(2, SealReply{View: 1, Ordered: 0, Entries: []Meta{m}})
	if out.Flush == nil || out.Map != nil {
		t.Fatalf("after the seal: %+v, want the flush recorded before it goes out", out)
	}
	flush := *out.Flush
	out = c.Applied(ControlState{Config: &cur, Claim: &claim, Flush: &flush, Shards: shards}, now)
	if out.Map == nil || out.Map.View != 3 || len(out.Map.Records) != 1 {
		t.Fatalf("flush: %+v", out)
	}
	out = c.MapAcked(MappingAck{Shard: 0, View: 3, End: 1})
	rec := out.Record
	if rec == nil || rec.View != 3 || rec.Leader != 2 || rec.Stable != 1 || out.Stable != nil || out.Start != nil {
		t.Fatalf("after the flush: %+v", out)
	}
	// The proposal is not the record: nothing advances until it applies.
	if out := c.Tick(now.Add(2 * time.Millisecond)); out.Stable != nil || out.Start != nil {
		t.Fatalf("acted on its own proposal: %+v", out)
	}
	out = c.Applied(ControlState{Config: rec, Claim: &claim, Shards: shards}, now)
	if out.Stable == nil || out.Stable.Stable != 1 || out.Stable.View != 3 || out.Start == nil || len(out.Start.Flushed) != 1 || len(out.StartTo) != 1 {
		t.Fatalf("after the record applied: %+v", out)
	}
}

// A control plane overtaken by a newer claim (it was deposed) drops its
// view change: when its record later turns out not applied, it neither
// advances stable-gp nor starts the view.
func TestControlOvertakenDropsItsViewChange(t *testing.T) {
	t0 := time.Unix(0, 0)
	shards := []cut.ShardID{0}
	cur := SeqConfig{View: 1, Replicas: []ReplicaID{1, 2}, Leader: 1}
	c := NewControl(controlConfig(), "a", t0)
	c.Applied(ControlState{Config: &cur, Shards: shards}, t0)
	now := t0.Add(11 * time.Millisecond)
	c.Status(2, ReplicaStatus{View: 1}, now)
	claim := *c.Tick(now).Claim
	c.Applied(ControlState{Config: &cur, Claim: &claim, Shards: shards}, now)
	c.Sealed(2, SealReply{View: 1})
	if !c.Changing() {
		t.Fatal("no view change under way")
	}
	newer := Claim{View: 3, Owner: "b"}
	if out := c.Applied(ControlState{Config: &cur, Claim: &newer, Shards: shards}, now); !out.Empty() || c.Changing() {
		t.Fatalf("overtaken, it went on: %+v", out)
	}
	next := SeqConfig{View: 3, Replicas: []ReplicaID{2}, Leader: 2}
	if out := c.Applied(ControlState{Config: &next, Claim: &newer, Shards: shards}, now); out.Stable != nil || out.Start != nil {
		t.Fatalf("started another's view: %+v", out)
	}
}

// The detector dropped replica 1 after its answers were delayed, while
// replica 2 crashed and came back without its ring: no replica of the
// new configuration [2] can recover the view. After the failure timeout
// the control plane gives the view change up (nothing was flushed) and
// claims a newer view from fresh probes, which keeps replica 1 and
// recovers from it; waiting on left the view sealed for good.
func TestControlGivesUpASealNoReplicaCanRecover(t *testing.T) {
	t0 := time.Unix(0, 0)
	shards := []cut.ShardID{0}
	cur := SeqConfig{View: 1, Replicas: []ReplicaID{1, 2}, Leader: 1}
	c := NewControl(controlConfig(), "a", t0)
	c.Applied(ControlState{Config: &cur, Shards: shards}, t0)
	now := t0.Add(11 * time.Millisecond)
	c.Status(2, ReplicaStatus{View: 1}, now)
	claim := *c.Tick(now).Claim
	if out := c.Applied(ControlState{Config: &cur, Claim: &claim, Shards: shards}, now); out.Seal == nil {
		t.Fatalf("no seal under the applied claim: %+v", out)
	}
	m := meta(7, 1, 0, 1)
	c.Sealed(2, SealReply{View: 1, Amnesiac: true})
	c.Sealed(1, SealReply{View: 1, Entries: []Meta{m}})
	now = now.Add(5 * time.Millisecond)
	c.Status(1, ReplicaStatus{View: 1, Sealed: true}, now)
	c.Status(2, ReplicaStatus{View: 1, Sealed: true, Amnesiac: true}, now)
	if out := c.Tick(now); out.Seal == nil || out.Claim != nil {
		t.Fatalf("before the failure timeout: %+v, want the seal sent again", out)
	}
	now = now.Add(6 * time.Millisecond)
	c.Status(1, ReplicaStatus{View: 1, Sealed: true}, now)
	c.Status(2, ReplicaStatus{View: 1, Sealed: true, Amnesiac: true}, now)
	out := c.Tick(now)
	if out.Claim == nil || out.Claim.View != 3 {
		t.Fatalf("after the failure timeout: %+v, want a claim of view 3", out)
	}
	claim = *out.Claim
	if out := c.Applied(ControlState{Config: &cur, Claim: &claim, Shards: shards}, now); out.Seal == nil {
		t.Fatalf("no seal under the newer claim: %+v", out)
	}
	out = c.Sealed(1, SealReply{View: 1, Entries: []Meta{m}})
	if out.Flush == nil {
		t.Fatalf("after the seal: %+v, want the flush to record", out)
	}
	flush := *out.Flush
	out = c.Applied(ControlState{Config: &cur, Claim: &claim, Flush: &flush, Shards: shards}, now)
	if out.Map == nil || out.Map.View != 3 || len(out.Map.Records) != 1 || out.Map.Records[0] != m {
		t.Fatalf("flush: %+v, want replica 1's entry in view 3", out)
	}
	out = c.MapAcked(MappingAck{Shard: 0, View: 3, End: 1})
	if r := out.Record; r == nil || r.Leader != 1 || len(r.Replicas) != 1 || r.Replicas[0] != 1 {
		t.Fatalf("recorded %+v, want view 3 of [1] led by 1", out.Record)
	}
}

// Control plane "a" recorded the flush of its view change of view 1 (from
// replica 2, which had collected up to 34) and sent it to some shards,
// then crashed before recording view 2. The next control plane must flush
// the same again: replica 1 collected up to 42, and a flush of its ring
// from 42 would leave a's rebinding of [34, 42) on the shards that got it.
func TestControlFlushesAnUnfinishedViewChangesRecordedFlushAgain(t *testing.T) {
	t0 := time.Unix(0, 0)
	shards := []cut.ShardID{0, 1}
	cur := SeqConfig{View: 1, Replicas: []ReplicaID{1, 2}, Leader: 1, Stable: 30}
	a, b := meta(7, 1, 0, 1), meta(8, 1, 1, 1)
	recorded := Mapping{View: 2, From: 34, Records: []Meta{a, b}}
	st := ControlState{Config: &cur, Claim: &Claim{View: 2, Owner: "a"}, Flush: &recorded, Shards: shards}
	c := NewControl(controlConfig(), "b", t0)
	c.Applied(st, t0)
	now := t0.Add(time.Millisecond)
	c.Status(1, ReplicaStatus{View: 1, Sealed: true}, now)
	c.Status(2, ReplicaStatus{View: 1, Sealed: true}, now)
	out := c.Tick(now)
	if out.Claim == nil || out.Claim.View != 3 {
		t.Fatalf("on the sealed view: %+v, want a claim of view 3", out)
	}
	st.Claim = out.Claim
	out = c.Applied(st, now)
	if out.Seal == nil || out.Seal.View != 1 {
		t.Fatalf("under the newer claim: %+v, want view 1 sealed again", out)
	}
	// Replica 1 answers from its own ordered end; the recorded flush goes
	// out all the same.
	out = c.Sealed(1, SealReply{View: 1, Ordered: 42, Entries: []Meta{b}})
	m := out.Map
	if m == nil || m.View != 3 || m.From != 34 || len(m.Records) != 2 || m.Records[0] != a || m.Records[1] != b {
		t.Fatalf("after the seal: %+v, want the recorded flush [34:a 35:b] in view 3", out)
	}
	if out := c.Sealed(2, SealReply{View: 1, Ordered: 34, Entries: []Meta{a, b}}); !out.Empty() {
		t.Fatalf("a second seal reply restarted the flush: %+v", out)
	}
	c.MapAcked(MappingAck{Shard: 0, View: 3, End: 36})
	out = c.MapAcked(MappingAck{Shard: 1, View: 3, End: 36})
	if r := out.Record; r == nil || r.View != 3 || r.Stable != 36 || r.From != 34 || r.Leader != 1 {
		t.Fatalf("after the flush: %+v, want view 3 led by 1 recorded from 34 to stable 36", out)
	}
}

// An answer to a probe that came before the configuration changed is
// about the old one: it neither counts as the replica heard from nor says
// where the replica stands (its view before the new one started would
// have it started again).
func TestControlIgnoresAnswersFromBeforeTheConfiguration(t *testing.T) {
	t0 := time.Unix(0, 0)
	c := NewControl(controlConfig(), "a", t0)
	cfg := SeqConfig{View: 1, Replicas: []ReplicaID{1, 2}, Leader: 1}
	applied := t0.Add(5 * time.Millisecond)
	c.Applied(ControlState{Config: &cfg}, applied)
	for id := range ReplicaID(2) {
		c.Status(id+1, ReplicaStatus{View: 1}, applied)
	}
	// Replica 2's answer from before the view was recorded comes late.
	c.Status(2, ReplicaStatus{}, t0.Add(time.Millisecond))
	if out := c.Tick(applied.Add(time.Millisecond)); !out.Empty() {
		t.Fatalf("acted on an answer from before the configuration: %+v", out)
	}
	// Silence still counts from the configuration's start: the stale
	// answer did not move it back.
	if out := c.Tick(applied.Add(9 * time.Millisecond)); !out.Empty() {
		t.Fatalf("took a replica for failed within the failure timeout: %+v", out)
	}
}
