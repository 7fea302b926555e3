package storage

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/fixante"
	"github.com/augur-log/augur/internal/wire"
)

// TestReleaseThatFinalizesAnswersEveryAppend feeds a primary the events of
// a speculative cluster in which one release commits two cuts and, with
// the second, finalizes the shard (the end of the last window that holds
// a leaving shard). Every append either cut orders must be acknowledged
// with its position: finality must not reach the primary before the
// earlier cut's successors, or it drops their appends unanswered and the
// clients wait forever.
func TestReleaseThatFinalizesAnswersEveryAppend(t *testing.T) {
	s, err := New(Config{
		ClusterID: "c", ID: "s1", Group: []Peer{{ID: "s1", Addr: "127.0.0.1:1"}}, GroupName: "g",
		Ordering: []string{"127.0.0.1:2"}, Dir: t.TempDir(), RecordBytesMax: 1024,
		HeartbeatInterval: time.Second, Spec: true, FillAfter: time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.openStore(0)
	if err != nil {
		t.Fatal(err)
	}
	r := newReplica(s, 0, rolePrimary, st, nil)
	defer st.Close()
	defer r.fillTimer.Close()
	s.replicas[0] = r

	// Four appends, stored and durable (no backups), none ordered yet.
	as := &appendStream{wake: make(chan struct{}, 1)}
	var entries []*pb.AppendEntry
	for seq := uint64(1); seq <= 4; seq++ {
		entries = append(entries, &pb.AppendEntry{Seq: seq, Record: &pb.Record{Payload: fmt.Appendf(nil, "r%d", seq)}})
	}
	r.appendLoop([]appendReq{{stream: as, clientID: 7, entries: entries}})
	if acks := as.take(); len(acks) != 0 {
		t.Fatalf("acknowledged before any cut: %v", acks)
	}

	// The ordering side: shard 0 joins, a window of two cuts gives it two
	// entries per cut, it is asked to leave (final at the window's end),
	// and both cuts are released at once.
	cs := control.NewSpec("c", 2)
	cmds := []control.Command{
		{Register: &control.RegisterCommand{Group: "g", Replicas: []control.Replica{{ID: "s1", Addr: "127.0.0.1:1"}}}},
		{Window: &control.WindowCommand{Quotas: []fixante.Quota{{Shard: 0, PerCut: 2}}, Groups: 1}},
		{Finalize: &control.FinalizeCommand{Shard: 0, GraceCuts: 1}},
		{Cut: &control.CutCommand{ReleaseThrough: 2}},
	}
	for i, c := range cmds {
		ev, ok := cs.Apply(c)
		if !ok {
			t.Fatalf("command %d changed nothing", i)
		}
		s.applyEvent(eventToProto(cs, ev))
		for len(r.cutCh) > 0 {
			r.applyCut(<-r.cutCh)
		}
	}
	if sh := cs.Shard(0); sh.State != control.Finalized || sh.FinalLength != 4 {
		t.Fatalf("shard 0 is %v at length %d, want finalized at 4", sh.State, sh.FinalLength)
	}
	if len(cs.LastCut.Lengths) != 1 || cs.LastCut.Index != 2 {
		t.Fatalf("last cut %+v", cs.LastCut)
	}

	got := map[uint64]*pb.AppendAck{}
	for _, a := range as.take() {
		got[a.Seq] = a
	}
	for seq := uint64(1); seq <= 4; seq++ {
		a := got[seq]
		if a == nil {
			t.Errorf("append %d was never answered", seq)
			continue
		}
		if a.Code != pb.Code_OK || a.Position != seq-1 {
			t.Errorf("append %d answered %v at %d, want OK at %d", seq, a.Code, a.Position, seq-1)
		}
	}
	if !r.finalized.Load() || r.finalLen.Load() != 4 {
		t.Fatalf("replica finalized %v at %d, want at 4", r.finalized.Load(), r.finalLen.Load())
	}
}

// eventToProto is the ordering replica's wire form of an applied event
// (see ordering's appendEventLocked).
func eventToProto(st *control.State, ev control.Event) *pb.Event {
	pe := &pb.Event{Seq: ev.Seq, MembershipVersion: st.MembershipVersion, Trim: ev.Trim}
	if ev.Cut != nil {
		pe.Cut = wire.CutToProto(*ev.Cut, st.MembershipVersion)
	}
	if ev.MembershipChanged {
		pe.Shards = wire.ShardsToProto(st.Shards)
	}
	for _, c := range ev.Cuts[:max(len(ev.Cuts), 1)-1] {
		pe.EarlierCuts = append(pe.EarlierCuts, wire.CutToProto(c, st.MembershipVersion))
	}
	pe.Spec = wire.SpecToProto(st.Spec)
	return pe
}
