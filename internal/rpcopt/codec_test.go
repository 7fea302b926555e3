package rpcopt

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/augur-log/augur/api/augurpb"
)

func TestCodecRoundTripReusesDirtyBuffers(t *testing.T) {
	var c codec
	for round, n := range []int{4096, 3000, 4096, 100, 70000, 5000} {
		payload := bytes.Repeat([]byte{byte('a' + round)}, n)
		in := &pb.AppendRequest{ClusterId: "c", ClientId: uint64(round), Shard: 1,
			Entries: []*pb.AppendEntry{{Seq: 7, Record: &pb.Record{Key: "k", Tags: []string{"t"}, Payload: payload}}}}
		data, err := c.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		out := &pb.AppendRequest{}
		if err := c.Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
		// The buffer goes back to the pool dirty; what was decoded from
		// it must not change.
		data.Free()
		if again, err := c.Marshal(&pb.AppendRequest{ClusterId: "other", Entries: []*pb.AppendEntry{{Seq: 1,
			Record: &pb.Record{Payload: bytes.Repeat([]byte{'z'}, n)}}}}); err == nil {
			again.Free()
		}
		if !proto.Equal(in, out) {
			t.Fatalf("round %d: decoded message differs", round)
		}
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Fatal("marshalling a string succeeded")
	}
}
