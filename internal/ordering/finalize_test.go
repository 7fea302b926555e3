package ordering_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/devcluster"
)

// TestFinalizingTheLastLiveShardIsRefused finalizes one shard of two, which
// is allowed, then the other, the last live one: that is refused with a
// FailedPrecondition naming the shard, and the shard table stays as it was.
func TestFinalizingTheLastLiveShardIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := devcluster.Start(ctx, devcluster.Options{Dir: t.TempDir(), Shards: 2, Replicas: 2, OrderingReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if err := dc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := dc.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Shards) != 2 {
		t.Fatalf("%d shards, want 2", len(st.Shards))
	}
	first, last := st.Shards[0].Id, st.Shards[1].Id
	// A long grace leaves the first shard finalizing, no longer live, for
	// longer than the test runs.
	if err := cl.FinalizeShard(ctx, first, 1_000_000); err != nil {
		t.Fatalf("finalize shard %d while shard %d is live: %v", first, last, err)
	}
	before, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = cl.FinalizeShard(ctx, last, 0)
	var se *client.ServerError
	if !errors.As(err, &se) || se.Code != "failed precondition" || !strings.Contains(se.Message, "the last live shard") {
		t.Fatalf("finalize of the last live shard %d: %v, want a failed precondition naming the last live shard", last, err)
	}
	after, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.MembershipVersion != before.MembershipVersion || !sameShards(before.Shards, after.Shards) {
		t.Fatalf("the refused finalize changed the shard table:\nbefore %v\nafter  %v", before.Shards, after.Shards)
	}
	for _, sh := range after.Shards {
		if sh.Id == last && sh.State != pb.ShardState_SHARD_LIVE {
			t.Fatalf("shard %d is %v after a refused finalize", last, sh.State)
		}
	}
}

func sameShards(a, b []*pb.ShardInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
