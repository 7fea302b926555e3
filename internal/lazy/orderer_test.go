package lazy

import (
	"testing"

	"github.com/augur-log/augur/internal/cut"
)

func TestOrdererAdvancesStableOnlyAfterEveryShardThenEveryReplica(t *testing.T) {
	o := NewOrderer(OrdererConfig{BatchMax: 3}, 1, 10, []cut.ShardID{0, 1}, []ReplicaID{100, 101})
	entries := []Meta{meta(1, 1, 0, 1), meta(2, 1, 1, 1), meta(1, 2, 0, 1)}
	out, err := o.Order(entries)
	if err != nil || out.Map == nil || out.Map.From != 10 || out.Map.End() != 13 || out.Map.View != 1 {
		t.Fatalf("order: %+v, %v", out, err)
	}
	if out, _ := o.Order(entries); out.Map != nil {
		t.Fatal("a second batch went out while the first was in flight")
	}
	if _, err := o.Order(append(entries, meta(3, 1, 0, 1))); err != nil {
		t.Errorf("a batch in flight makes Order a no-op, not an error: %v", err)
	}
	if out := o.MapAcked(MappingAck{Shard: 0, View: 1, End: 13}); out.GC != nil {
		t.Fatal("GC before every shard held the mapping")
	}
	if out := o.MapAcked(MappingAck{Shard: 1, View: 1, End: 12}); out.GC != nil {
		t.Fatal("an ack short of the batch's end counted")
	}
	if out := o.MapAcked(MappingAck{Shard: 1, View: 0, End: 13}); out.GC != nil {
		t.Fatal("an ack of another view counted")
	}
	out = o.MapAcked(MappingAck{Shard: 1, View: 1, End: 13})
	if out.GC == nil || out.GC.From != 10 || out.GC.End != 13 || len(out.GC.IDs) != 3 || out.GC.IDs[1] != rid(2, 1) {
		t.Fatalf("GC %+v", out.GC)
	}
	if o.Stable() != 10 {
		t.Fatalf("stable %d before any replica collected", o.Stable())
	}
	if out := o.Collected(Collected{Replica: 100, View: 1, End: 13}); out.Stable != nil {
		t.Fatal("stable advanced before every replica collected (paper §4.5: a follower could rebind it)")
	}
	if out := o.Collected(Collected{Replica: 7, View: 1, End: 13}); out.Stable != nil {
		t.Fatal("a stranger's collect counted")
	}
	out = o.Collected(Collected{Replica: 101, View: 1, End: 13})
	if out.Stable == nil || out.Stable.Stable != 13 || o.Stable() != 13 || o.Busy() {
		t.Fatalf("after every collect: %+v, stable %d, busy %v", out.Stable, o.Stable(), o.Busy())
	}
	out, _ = o.Order([]Meta{meta(4, 1, 1, 1)})
	if out.Map == nil || out.Map.From != 13 {
		t.Fatalf("next batch %+v, want it from 13", out.Map)
	}
}

func TestOrdererPendingResendsTheCurrentStep(t *testing.T) {
	o := NewOrderer(OrdererConfig{}, 2, 0, []cut.ShardID{0, 1}, []ReplicaID{1})
	if p := o.Pending(); p.Map != nil || p.GC != nil || p.Stable == nil || p.Stable.Stable != 0 {
		t.Fatalf("idle pending %+v", p)
	}
	o.Order([]Meta{meta(1, 1, 0, 2)})
	o.MapAcked(MappingAck{Shard: 1, View: 2, End: 1})
	if p := o.Pending(); p.Map == nil || len(o.MissingShards()) != 1 || o.MissingShards()[0] != 0 {
		t.Fatalf("pending %+v, missing %v", p, o.MissingShards())
	}
	o.MapAcked(MappingAck{Shard: 0, View: 2, End: 1})
	if p := o.Pending(); p.GC == nil || p.Map != nil || len(o.MissingReplicas()) != 1 {
		t.Fatalf("pending %+v, missing replicas %v", p, o.MissingReplicas())
	}
}

func TestOrdererTakesNewShardsWithTheNextBatch(t *testing.T) {
	o := NewOrderer(OrdererConfig{}, 1, 0, []cut.ShardID{0}, []ReplicaID{1})
	o.Order([]Meta{meta(1, 1, 0, 1)})
	o.SetShards([]cut.ShardID{0, 1}, 2)
	if out := o.MapAcked(MappingAck{Shard: 0, View: 1, End: 1}); out.GC == nil {
		t.Fatal("the batch in flight waited for a shard added after it started")
	}
	o.Collected(Collected{Replica: 1, View: 1, End: 1})
	o.Order([]Meta{meta(1, 2, 0, 1)})
	if out := o.MapAcked(MappingAck{Shard: 0, View: 1, End: 2}); out.GC != nil {
		t.Fatal("the next batch did not wait for the added shard")
	}
}

func TestOrdererDropsRecordsOfAFinalizedShardAndDoesNotWaitForIt(t *testing.T) {
	// Shards 0 and 2 are live; 1 was finalized (below next, not live).
	o := NewOrderer(OrdererConfig{}, 1, 5, []cut.ShardID{0, 2}, []ReplicaID{1})
	a, b, c := meta(1, 1, 0, 1), meta(1, 2, 1, 1), meta(1, 3, 2, 1)
	out, err := o.Order([]Meta{a, b, c})
	if err != nil || out.Map == nil || len(out.Map.Records) != 2 || out.Map.Records[0] != a || out.Map.Records[1] != c || out.Map.From != 5 {
		t.Fatalf("order: %+v, %v; want [5:a 6:c], b of the finalized shard left out", out.Map, err)
	}
	if out.WaitFor != nil {
		t.Fatalf("waits for shard %d, which was finalized", *out.WaitFor)
	}
	if m := o.MissingShards(); len(m) != 2 || m[0] != 0 || m[1] != 2 {
		t.Fatalf("waits for %v, want the live shards 0 and 2", m)
	}
	o.MapAcked(MappingAck{Shard: 0, View: 1, End: 7})
	out = o.MapAcked(MappingAck{Shard: 2, View: 1, End: 7})
	if out.GC == nil || len(out.GC.IDs) != 2 || len(out.GC.Dropped) != 1 || out.GC.Dropped[0] != b.ID {
		t.Fatalf("GC %+v, want a and c collected and b dropped", out.GC)
	}
	out = o.Collected(Collected{Replica: 1, View: 1, End: 7})
	if out.Stable == nil || out.Stable.Stable != 7 || len(out.Unplaced) != 1 || out.Unplaced[0] != b.ID {
		t.Fatalf("end of batch %+v, want stable 7 and b unplaced", out)
	}
}

func TestOrdererCollectsABatchOfFinalizedShardsOnlyWithoutAMapping(t *testing.T) {
	o := NewOrderer(OrdererConfig{}, 1, 5, []cut.ShardID{0}, []ReplicaID{1, 2})
	o.SetShards([]cut.ShardID{0}, 2)
	out, _ := o.Order([]Meta{meta(1, 1, 1, 1)})
	if out.Map != nil || out.GC == nil || out.GC.From != 5 || out.GC.End != 5 || len(out.GC.Dropped) != 1 {
		t.Fatalf("order %+v: want no mapping and a GC that drops the record", out)
	}
	o.Collected(Collected{Replica: 1, View: 1, End: 5})
	out = o.Collected(Collected{Replica: 2, View: 1, End: 5})
	if out.Stable == nil || out.Stable.Stable != 5 || o.Busy() || len(out.Unplaced) != 1 {
		t.Fatalf("%+v, busy %v", out, o.Busy())
	}
}

func TestOrdererStopsWaitingForAShardFinalizedMidBatch(t *testing.T) {
	o := NewOrderer(OrdererConfig{}, 1, 0, []cut.ShardID{0, 1}, []ReplicaID{1})
	a, b := meta(1, 1, 0, 1), meta(1, 2, 1, 1)
	o.Order([]Meta{a, b})
	if out := o.MapAcked(MappingAck{Shard: 0, View: 1, End: 2}); out.GC != nil {
		t.Fatal("GC before shard 1 answered or was finalized")
	}
	// Every replica of shard 1 is gone; the table says it is finalized.
	out := o.SetShards([]cut.ShardID{0}, 2)
	if out.GC == nil || out.GC.End != 2 || len(out.GC.IDs) != 2 {
		t.Fatalf("after shard 1 was finalized: %+v, want the batch's GC", out)
	}
	out = o.Collected(Collected{Replica: 1, View: 1, End: 2})
	if out.Stable == nil || out.Stable.Stable != 2 || len(out.Unplaced) != 1 || out.Unplaced[0] != b.ID {
		t.Fatalf("%+v: want stable 2, with b (never placed by its shard) unplaced", out)
	}
	out, _ = o.Order([]Meta{meta(1, 3, 0, 1)})
	if out.Map == nil || len(o.MissingShards()) != 1 || o.MissingShards()[0] != 0 {
		t.Fatalf("next batch %+v waits for %v, want shard 0 only", out.Map, o.MissingShards())
	}
}

func TestOrdererStopsABatchAtAShardTheTableDoesNotHaveYet(t *testing.T) {
	o := NewOrderer(OrdererConfig{}, 1, 0, []cut.ShardID{0}, []ReplicaID{1})
	a, b, c := meta(1, 1, 0, 1), meta(1, 2, 3, 1), meta(2, 1, 0, 1)
	out, _ := o.Order([]Meta{a, b, c})
	if out.Map == nil || len(out.Map.Records) != 1 || out.Map.Records[0] != a || out.WaitFor == nil || *out.WaitFor != 3 {
		t.Fatalf("order %+v waiting for %v: want [0:a], waiting for shard 3 before b (c behind it)", out.Map, out.WaitFor)
	}
	o.MapAcked(MappingAck{Shard: 0, View: 1, End: 1})
	o.Collected(Collected{Replica: 1, View: 1, End: 1})
	if out, _ := o.Order([]Meta{b, c}); out.Map != nil || out.GC != nil || out.WaitFor == nil {
		t.Fatalf("ordered %+v past a shard still unknown", out)
	}
	o.SetShards([]cut.ShardID{0, 3}, 4)
	out, _ = o.Order([]Meta{b, c})
	if out.Map == nil || len(out.Map.Records) != 2 || out.Map.From != 1 || out.WaitFor != nil {
		t.Fatalf("after the table learned shard 3: %+v", out)
	}
	if m := o.MissingShards(); len(m) != 2 {
		t.Fatalf("waits for %v, want shards 0 and 3", m)
	}
}
