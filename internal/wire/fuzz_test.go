package wire

import (
	"testing"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
	"google.golang.org/protobuf/proto"
)

// unmarshal decodes wire bytes as a peer would receive them, dropping
// fields this version does not know (which the conversions never see).
func unmarshal(b []byte, m proto.Message) bool {
	return proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m) == nil
}

func mustMarshal(f *testing.F, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzCutFromProto converts arbitrary wire cuts: no panic, and converting
// back gives the same message, so no field is lost or altered on the way
// into the cores. Two wire fields are not part of a cut and are left out
// of the comparison: the view, which the ordering server sets beside the
// converted cut, and the records, backlog and epoch of a shard length,
// which only storage servers' reports carry.
func FuzzCutFromProto(f *testing.F) {
	c := cut.Cut{Index: 7, Start: 100, End: 130, Lengths: []cut.Length{{Shard: 1, Length: 20}, {Shard: 4, Length: 10}}}
	f.Add(mustMarshal(f, CutToProto(c, 3)))
	f.Add(mustMarshal(f, &pb.Cut{}))
	f.Add([]byte{0x22, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var pc pb.Cut
		if !unmarshal(b, &pc) {
			return
		}
		back := CutToProto(CutFromProto(&pc), pc.GetMembershipVersion())
		want := proto.Clone(&pc).(*pb.Cut)
		want.View = 0
		for _, l := range want.Lengths {
			l.Records, l.Backlog, l.Epoch = 0, 0, 0
		}
		if !proto.Equal(back, want) {
			t.Fatalf("cut %v converts back as %v", &pc, back)
		}
	})
}

// FuzzSpecFromProto does the same for the speculative state, which carries
// windows, quotas and void records.
func FuzzSpecFromProto(f *testing.F) {
	sp := &control.Spec{
		View: 2, ConfirmedGP: 50, WindowCuts: 4,
		Windows: []fixante.Window{{Index: 1, FirstCut: 4, Cuts: 4, Start: 40, Groups: 2,
			Quotas: []fixante.Quota{{Shard: 1, PerCut: 3, Group: 0, Base: 40}, {Shard: 2, PerCut: 2, Group: 1, Base: 43}}}},
		Void: []control.Void{{View: 2, ConfirmedGP: 50, Shard: 2, From: 60, Filler: 1,
			Slots: []fixante.Range{{Start: 61, Count: 2}}}},
	}
	f.Add(mustMarshal(f, SpecToProto(sp)))
	f.Add(mustMarshal(f, &pb.SpecState{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ps pb.SpecState
		if !unmarshal(b, &ps) {
			return
		}
		back := SpecToProto(SpecFromProto(&ps))
		if !proto.Equal(back, &ps) {
			t.Fatalf("spec state %v converts back as %v", &ps, back)
		}
	})
}
