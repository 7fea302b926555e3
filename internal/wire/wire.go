// Package wire converts between the protocol cores' types and their
// protobuf wire forms.
package wire

import (
	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
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
			Epoch:       sh.Epoch,
		}
		for _, r := range sh.Replicas {
			si.Replicas = append(si.Replicas, &pb.ReplicaAddr{Id: r.ID, Addr: r.Addr, Incarnation: r.Incarnation, Pending: r.Pending})
		}
		for _, r := range sh.Out {
			si.Out = append(si.Out, &pb.ReplicaAddr{Id: r.ID, Addr: r.Addr, Incarnation: r.Incarnation})
		}
		out = append(out, si)
	}
	return out
}

// SpecToProto converts the speculative state; nil stays nil.
func SpecToProto(sp *control.Spec) *pb.SpecState {
	if sp == nil {
		return nil
	}
	out := &pb.SpecState{View: sp.View, ConfirmedGp: sp.ConfirmedGP, WindowCuts: sp.WindowCuts, Fallback: sp.Fallback}
	for _, w := range sp.Windows {
		pw := &pb.Window{Index: w.Index, FirstCut: w.FirstCut, Cuts: w.Cuts, Start: w.Start, Groups: uint32(w.Groups)}
		for _, q := range w.Quotas {
			pw.Quotas = append(pw.Quotas, &pb.Quota{Shard: q.Shard, PerCut: q.PerCut, Group: uint32(q.Group), Base: q.Base})
		}
		out.Windows = append(out.Windows, pw)
	}
	for _, v := range sp.Void {
		out.Void = append(out.Void, VoidToProto(v))
	}
	return out
}

// VoidToProto converts a failed shard's void record.
func VoidToProto(v control.Void) *pb.ViewChange {
	pv := &pb.ViewChange{View: v.View, ConfirmedGp: v.ConfirmedGP, FailedShard: v.Shard, VoidFrom: v.From, Filler: v.Filler}
	for _, r := range v.Slots {
		pv.Slots = append(pv.Slots, &pb.Range{Start: r.Start, Count: r.Count})
	}
	return pv
}

// SpecFromProto converts the speculative state; nil stays nil.
func SpecFromProto(ps *pb.SpecState) *control.Spec {
	if ps == nil {
		return nil
	}
	sp := &control.Spec{View: ps.View, ConfirmedGP: ps.ConfirmedGp, WindowCuts: ps.WindowCuts, Fallback: ps.Fallback}
	for _, pw := range ps.Windows {
		w := fixante.Window{Index: pw.Index, FirstCut: pw.FirstCut, Cuts: pw.Cuts, Start: pw.Start, Groups: int(pw.Groups)}
		for _, q := range pw.Quotas {
			w.Quotas = append(w.Quotas, fixante.Quota{Shard: q.Shard, PerCut: q.PerCut, Group: int(q.Group), Base: q.Base})
		}
		sp.Windows = append(sp.Windows, w)
	}
	for _, v := range ps.Void {
		cv := control.Void{ConfirmedGP: v.ConfirmedGp, Shard: v.FailedShard, From: v.VoidFrom, Filler: v.Filler, View: v.View}
		for _, r := range v.Slots {
			cv.Slots = append(cv.Slots, fixante.Range{Start: r.Start, Count: r.Count})
		}
		sp.Void = append(sp.Void, cv)
	}
	return sp
}
