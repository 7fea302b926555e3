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
	o.SetShards([]cut.ShardID{0, 1})
	if out := o.MapAcked(MappingAck{Shard: 0, View: 1, End: 1}); out.GC == nil {
		t.Fatal("the batch in flight waited for a shard added after it started")
	}
	o.Collected(Collected{Replica: 1, View: 1, End: 1})
	o.Order([]Meta{meta(1, 2, 0, 1)})
	if out := o.MapAcked(MappingAck{Shard: 0, View: 1, End: 2}); out.GC != nil {
		t.Fatal("the next batch did not wait for the added shard")
	}
}
