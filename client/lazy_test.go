package client

import (
	"context"
	"slices"
	"testing"

	pb "github.com/augur-log/augur/api/augurpb"
)

func shardWith(addrs ...string) *pb.ShardInfo {
	info := &pb.ShardInfo{Id: 0}
	for _, a := range addrs {
		info.Replicas = append(info.Replicas, &pb.ReplicaAddr{Id: a, Addr: a})
	}
	return info
}

func TestLazyDataWaitsForTheReplicasOfTheCurrentConfiguration(t *testing.T) {
	var got []error
	o := &lazyOp{ctx: context.Background(), done: func(_ Ack, err error) { got = append(got, err) },
		dataLeft: map[string]bool{"a": true, "b": true}, metaLeft: map[string]bool{}}
	o.acked("a", false, 0)
	if len(got) != 0 {
		t.Fatal("done while b of the configuration lacks the data")
	}
	// b is still a replica: it is asked again, and still waited for.
	if send := o.followShard(shardWith("a", "b"), "b"); !slices.Equal(send, []string{"b"}) || len(got) != 0 {
		t.Fatalf("b still a replica: send %v, done %v", send, got)
	}
	// A new configuration adds c: it is sent the data and waited for.
	if send := o.followShard(shardWith("a", "b", "c"), ""); !slices.Equal(send, []string{"c"}) || len(got) != 0 {
		t.Fatalf("c added: send %v, done %v", send, got)
	}
	o.acked("c", false, 0)
	// b is taken out: nothing is left, the append is done.
	if send := o.followShard(shardWith("a", "c"), "b"); len(send) != 0 || len(got) != 1 || got[0] != nil {
		t.Fatalf("b taken out: send %v, done %v", send, got)
	}
}

// TestLazyDataAcksCountWithinOneConfiguration: b acknowledged the data in
// epoch 1; in epoch 3 b may be a copy that rejoined without it (taken out
// in epoch 2, copied before the data came), so the data goes to b again
// and the append waits for its answer in epoch 3.
func TestLazyDataAcksCountWithinOneConfiguration(t *testing.T) {
	var got []error
	o := &lazyOp{ctx: context.Background(), done: func(_ Ack, err error) { got = append(got, err) },
		epoch: 1, dataLeft: map[string]bool{"a": true, "b": true}, metaLeft: map[string]bool{}}
	o.acked("b", false, 0)
	next := shardWith("a", "b")
	next.Epoch = 3
	if send := o.followShard(next, "a"); !slices.Equal(send, []string{"a", "b"}) {
		t.Fatalf("epoch 3: send %v, want the data sent to a and b again", send)
	}
	o.acked("a", false, 0)
	if len(got) != 0 {
		t.Fatal("done on b's acknowledgement of epoch 1")
	}
	o.acked("b", false, 0)
	if len(got) != 1 || got[0] != nil {
		t.Fatalf("both replicas of epoch 3 acknowledged: done %v", got)
	}
}

// TestLazyStaleRefusalAfterResend: an append whose data went to a shard
// replica in view 1 and again in view 2 (after the cluster moved on) must
// not be decided by the replica's refusal of the view-1 send: that answer
// would otherwise take the entry the view-2 send's answer needs and retry
// from view 2, waiting for a view 3 that never comes.
func TestLazyStaleRefusalAfterResend(t *testing.T) {
	var got []error
	o := &lazyOp{seq: 7, shard: 0, metaView: 2, dataLeft: map[string]bool{"r": true}, metaLeft: map[string]bool{},
		done: func(_ Ack, err error) { got = append(got, err) }}
	for _, meta := range []bool{false, true} {
		lc := &lazyConn{addr: "r", meta: meta, ops: map[uint64]*lazyOp{7: o}, sentViews: map[uint64][]uint64{7: {1, 2}}}
		if meta {
			lc.metaAck(&pb.SeqAck{Seq: 7, Code: pb.Code_SEALED}, 2)
		} else {
			lc.dataAck(&pb.AppendAck{Seq: 7, Code: pb.Code_WRONG_VIEW})
		}
		if lc.ops[7] != o || len(lc.sentViews[7]) != 1 || len(got) != 0 {
			t.Fatalf("meta=%v: the stale refusal of view 1 decided the op: ops %v, sent views %v, finished %v", meta, lc.ops, lc.sentViews, got)
		}
	}
	lc := &lazyConn{addr: "r", ops: map[uint64]*lazyOp{7: o}, sentViews: map[uint64][]uint64{7: {2}}}
	lc.dataAck(&pb.AppendAck{Seq: 7, Code: pb.Code_OK})
	if len(got) != 1 || got[0] != nil {
		t.Fatalf("the view-2 answer did not finish the op: %v", got)
	}
	if len(lc.ops) != 0 || len(lc.sentViews) != 0 {
		t.Fatalf("the stream still owes the op: %v %v", lc.ops, lc.sentViews)
	}
}
