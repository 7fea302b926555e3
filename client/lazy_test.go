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
