// Package wire converts between the protocol cores' types and their
// protobuf wire forms.
package wire

import (
	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
)

// CutToProto converts a cut to its wire form.
func CutToProto(c cut.Cut, mv uint64) *pb.Cut {
	pc := &pb.Cut{Index: c.Index, Start: c.Start, End: c.End, MembershipVersion: mv}
	for _, l := range c.Lengths {
		pc.Lengths = append(pc.Lengths, &pb.ShardLength{Shard: l.Shard, Length: l.Length})
	}
	return pc
}

// CutFromProto converts a wire cut.
func CutFromProto(pc *pb.Cut) cut.Cut {
	c := cut.Cut{Index: pc.GetIndex(), Start: pc.GetStart(), End: pc.GetEnd()}
	for _, l := range pc.GetLengths() {
		c.Lengths = append(c.Lengths, cut.Length{Shard: l.Shard, Length: l.Length})
	}
	return c
}

// ShardsToProto converts the shard table.
func ShardsToProto(shards []control.Shard) []*pb.ShardInfo {
	out := make([]*pb.ShardInfo, 0, len(shards))
	for _, sh := range shards {
		si := &pb.ShardInfo{
			Id:          sh.ID,
			Group:       sh.Group,
			State:       pb.ShardState(sh.State),
			AddedCut:    sh.AddedCut,
			FinalCut:    sh.FinalCut,
			FinalLength: sh.FinalLength,
			Failed:      sh.Failed,
		}
		for _, r := range sh.Replicas {
			si.Replicas = append(si.Replicas, &pb.ReplicaAddr{Id: r.ID, Addr: r.Addr, Incarnation: r.Incarnation})
		}
		out = append(out, si)
	}
	return out
}
