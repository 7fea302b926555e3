package lazy

import (
	"testing"

	"github.com/augur-log/augur/internal/cut"
)

// The paper's §4.5 example: positions below 4 are stable; the leader bound
// [4:a, 5:c, 6:b] on the shards but failed before the followers collected
// it. Follower 2's ring holds [a, b, c]. The flush rebinds 4..6 in its
// order, which is safe because no reader could see past stable 4.
func TestReconfigFlushesTheRecoveryReplicaFromItsOrderedEnd(t *testing.T) {
	a, b, c := meta(1, 1, 0, 1), meta(2, 1, 1, 1), meta(3, 1, 0, 1)
	leader := open(t, 0)
	follower := NewSequencer(SequencerConfig{}, SequencerState{})
	follower.Start(StartView{View: 1})
	for _, s := range []*Sequencer{leader, follower} {
		s.ordered = 4
	}
	for _, m := range []Meta{a, c, b} {
		mustAppend(t, leader, m, false)
	}
	for _, m := range []Meta{a, b, c} {
		mustAppend(t, follower, m, false)
	}
	shards := []cut.ShardID{0, 1}
	cur := SeqConfig{View: 1, Replicas: []ReplicaID{1, 2}, Leader: 1, Stable: 4}
	rc, out, err := NewReconfig(cur, []ReplicaID{1}, []ReplicaID{3}, shards)
	if err != nil || out.Seal == nil || out.Seal.View != 1 {
		t.Fatalf("start: %+v, %v", out, err)
	}
	// The failed leader's answer (it may still answer) is not used.
	rep, _ := leader.Seal(1)
	if out := rc.Sealed(1, rep); out.Map != nil || out.Record != nil {
		t.Fatal("the failed replica became the recovery replica")
	}
	rep, _ = follower.Seal(1)
	out = rc.Sealed(2, rep)
	if out.Flush == nil || out.Map != nil {
		t.Fatalf("after the seal: %+v, want the flush to record before it goes out", out)
	}
	if out := rc.Pending(); out.Flush == nil {
		t.Fatal("the flush's record is not sent again")
	}
	out = rc.FlushRecorded()
	m := out.Map
	if m == nil || m.View != 2 || m.From != 4 || len(m.Records) != 3 || m.Records[1] != b {
		t.Fatalf("flush %+v, want [4:a 5:b 6:c] of view 2", m)
	}
	if out := rc.Sealed(2, rep); out.Map != nil {
		t.Error("a second seal reply restarted the flush")
	}
	if out := rc.MapAcked(MappingAck{Shard: 0, View: 2, End: 7}); out.Record != nil {
		t.Fatal("recorded before every shard held the flush")
	}
	if out := rc.Recorded(); out.Stable != nil {
		t.Fatal("stable advanced before the configuration was recorded")
	}
	out = rc.MapAcked(MappingAck{Shard: 1, View: 2, End: 7})
	if r := out.Record; r == nil || r.View != 2 || r.Leader != 2 || r.Stable != 7 || len(r.Replicas) != 2 || r.Replicas[0] != 2 || r.Replicas[1] != 3 {
		t.Fatalf("recorded %+v, want view 2 of replicas [2 3] led by 2, stable 7", out.Record)
	}
	out = rc.Recorded()
	if out.Stable == nil || out.Stable.Stable != 7 || out.Stable.View != 2 || out.Start == nil || out.Start.Ordered != 7 || len(out.Start.Flushed) != 3 {
		t.Fatalf("after recording: %+v", out)
	}
	added := NewSequencer(SequencerConfig{}, SequencerState{})
	for _, m := range []struct {
		id ReplicaID
		s  *Sequencer
	}{{2, follower}, {3, added}} {
		id, s := m.id, m.s
		if _, err := s.Start(*out.Start); err != nil {
			t.Fatal(err)
		}
		if s.Ordered() != 7 || s.Len() != 0 {
			t.Errorf("replica %d starts at %d holding %d", id, s.Ordered(), s.Len())
		}
	}
	// A retry of a flushed record in the new view is a duplicate on every
	// member, the added one included.
	b.View = 2
	mustAppend(t, added, b, true)
	mustAppend(t, follower, b, true)
}

func TestReconfigNeverRecoversFromAnAmnesiacReplica(t *testing.T) {
	cur := SeqConfig{View: 3, Replicas: []ReplicaID{1, 2}, Stable: 10}
	rc, _, err := NewReconfig(cur, nil, nil, []cut.ShardID{0})
	if err != nil {
		t.Fatal(err)
	}
	if out := rc.Sealed(1, SealReply{View: 3, Ordered: 10, Amnesiac: true}); out.Map != nil || out.Record != nil {
		t.Fatal("a replica that lost its ring became the recovery replica")
	}
	if out := rc.Sealed(2, SealReply{View: 2, Ordered: 10}); out.Map != nil || out.Record != nil {
		t.Fatal("a replica behind the view became the recovery replica")
	}
	// An empty ring needs no flush: the configuration is recorded at once.
	out := rc.Sealed(2, SealReply{View: 3, Ordered: 12})
	if out.Record == nil || out.Record.Stable != 12 || out.Map != nil {
		t.Fatalf("empty recovery ring: %+v", out)
	}
	if _, _, err := NewReconfig(cur, []ReplicaID{1, 2}, nil, nil); err == nil {
		t.Error("a configuration without replicas was accepted")
	}
}

// A view change over the shards that may still grow (a finalized one left
// out) gives a record of a finalized shard no position, and records the
// view once those shards acknowledged the flush.
func TestReconfigLeavesOutShardsNotItsOwn(t *testing.T) {
	live, gone := meta(1, 1, 0, 1), meta(2, 1, 1, 1)
	cur := SeqConfig{View: 1, Replicas: []ReplicaID{1, 2}, Leader: 1}
	rc, _, err := NewReconfig(cur, []ReplicaID{1}, nil, []cut.ShardID{0})
	if err != nil {
		t.Fatal(err)
	}
	// Shard 1 was given (ids below 2) and is not live: finalized.
	rc.SetShards([]cut.ShardID{0}, 2)
	out := rc.Sealed(2, SealReply{View: 1, Entries: []Meta{gone, live}})
	if out.Flush == nil || len(out.Flush.Records) != 1 || out.Flush.Records[0] != live {
		t.Fatalf("flush %+v, want the live shard's record alone", out.Flush)
	}
	out = rc.FlushRecorded()
	out = rc.MapAcked(MappingAck{Shard: 0, View: 2, End: out.Map.End()})
	if out.Record == nil || out.Record.Stable != 1 {
		t.Fatalf("after shard 0 acknowledged: %+v, want the view recorded at stable 1", out)
	}
	if out := rc.Recorded(); out.Start == nil || len(out.Start.Flushed) != 1 || out.Start.Flushed[0] != live.ID {
		t.Fatalf("start %+v, want the live record alone flushed", out.Start)
	}
}

func TestReconfigStopsWaitingForAShardFinalizedDuringTheFlush(t *testing.T) {
	q := open(t, 0)
	a, b := meta(1, 1, 0, 1), meta(1, 2, 1, 1)
	mustAppend(t, q, a, false)
	mustAppend(t, q, b, false)
	rc, _, err := NewReconfig(SeqConfig{View: 1, Replicas: []ReplicaID{1, 2}, Leader: 2}, []ReplicaID{2}, nil, []cut.ShardID{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	rep, _ := q.Seal(1)
	rc.Sealed(1, rep)
	if out := rc.FlushRecorded(); out.Map == nil || out.Map.End() != 2 {
		t.Fatalf("flush %+v", out.Map)
	}
	if out := rc.MapAcked(MappingAck{Shard: 0, View: 2, End: 2}); out.Record != nil {
		t.Fatal("recorded before shard 1 held the flush or was finalized")
	}
	out := rc.SetShards([]cut.ShardID{0}, 2)
	if out.Record == nil || out.Record.Stable != 2 {
		t.Fatalf("after shard 1 was finalized: %+v, want the new view recorded", out)
	}
}

// A shard added a moment ago: the recovery replica holds an acknowledged
// append of it, which the view change's table does not know yet. The
// flush waits for a table that knows the shard, and then goes to it too;
// the new view's orderer is told to wait for a table as new.
func TestReconfigWaitsForAShardItsTableDoesNotHaveYet(t *testing.T) {
	q := open(t, 0)
	a, b := meta(1, 1, 0, 1), meta(1, 2, 1, 1)
	mustAppend(t, q, a, false)
	mustAppend(t, q, b, false)
	rc, _, err := NewReconfig(SeqConfig{View: 1, Replicas: []ReplicaID{1, 2}, Leader: 2}, []ReplicaID{2}, nil, []cut.ShardID{0})
	if err != nil {
		t.Fatal(err)
	}
	rep, _ := q.Seal(1)
	if out := rc.Sealed(1, rep); out.Flush != nil || out.Record != nil {
		t.Fatalf("flushed %+v without shard 1's record (an acknowledged append lost)", out.Flush)
	}
	if out := rc.SetShards([]cut.ShardID{0}, 1); out.Flush != nil {
		t.Fatal("flushed with a table that still lacks shard 1")
	}
	out := rc.SetShards([]cut.ShardID{0, 1}, 2)
	if out.Flush == nil || len(out.Flush.Records) != 2 {
		t.Fatalf("after the table learned shard 1: %+v, want the flush of a and b", out.Flush)
	}
	rc.FlushRecorded()
	rc.MapAcked(MappingAck{Shard: 0, View: 2, End: 2})
	if out := rc.MapAcked(MappingAck{Shard: 1, View: 2, End: 2}); out.Record == nil {
		t.Fatal("not recorded once both shards held the flush")
	}
	if out := rc.Recorded(); out.Start == nil || out.Start.Shards != 2 {
		t.Fatalf("start %+v: want the new orderer told to wait for a table with 2 shard ids", out.Start)
	}
}

func TestOrdererWaitsForATableAsNewAsTheViewChangesOne(t *testing.T) {
	o := NewOrderer(OrdererConfig{}, 2, 5, nil, []ReplicaID{1})
	o.AtLeast(2)
	a := meta(1, 1, 0, 2)
	o.SetShards([]cut.ShardID{0}, 1)
	if out, _ := o.Order([]Meta{a}); out.Map != nil || out.GC != nil {
		t.Fatalf("ordered %+v with a table older than the view change's (shard 1 may have placed its flush)", out)
	}
	o.SetShards([]cut.ShardID{0, 1}, 2)
	if out, _ := o.Order([]Meta{a}); out.Map == nil || len(o.MissingShards()) != 2 {
		t.Fatalf("with a table as new: %+v, waits for %v", out.Map, o.MissingShards())
	}
	if o.SetShards([]cut.ShardID{0}, 1); len(o.live) != 2 {
		t.Fatal("an older table replaced a newer one")
	}
}
