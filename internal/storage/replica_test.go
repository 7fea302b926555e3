package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/fixante"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/segment"
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
	s, r := specPrimary(t, "s1", "g")

	// Four appends, stored and durable (no backups), none ordered yet.
	as := &appendStream{wake: make(chan struct{}, 1)}
	var entries []*pb.AppendEntry
	for seq := uint64(1); seq <= 4; seq++ {
		entries = append(entries, &pb.AppendEntry{Seq: seq, Record: &pb.Record{Payload: fmt.Appendf(nil, "r%d", seq)}})
	}
	r.appendLoop([]appendReq{{stream: as, clientID: 7, entries: entries}})
	if acks, _ := as.take(); len(acks) != 0 {
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
	applyAll(t, s, r, cs, cmds)
	if sh := cs.Shard(0); sh.State != control.Finalized || sh.FinalLength != 4 {
		t.Fatalf("shard 0 is %v at length %d, want finalized at 4", sh.State, sh.FinalLength)
	}
	if len(cs.LastCut.Lengths) != 1 || cs.LastCut.Index != 2 {
		t.Fatalf("last cut %+v", cs.LastCut)
	}

	got := map[uint64]*pb.AppendAck{}
	acks, _ := as.take()
	for _, a := range acks {
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
	if l, final := r.core.Final(); !final || l != 4 {
		t.Fatalf("replica finalized %v at %d, want at 4", final, l)
	}
}

// specPrimary returns a speculative storage server, named id in group,
// holding shard 0 as its primary without backups; nothing runs its loops.
func specPrimary(t *testing.T, id, group string) (*Server, *replica) {
	t.Helper()
	s, err := New(Config{
		ClusterID: "c", ID: id, Group: []Peer{{ID: id, Addr: "127.0.0.1:1"}}, GroupName: group,
		Ordering: []string{"127.0.0.1:2"}, Dir: t.TempDir(), RecordBytesMax: 1024,
		HeartbeatInterval: time.Second, Mode: testMode(t, mode.SpecName),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.openStore(0)
	if err != nil {
		t.Fatal(err)
	}
	r := newReplica(s, 0, rolePrimary, st, nil, 1)
	t.Cleanup(func() {
		if r.fillTimer != nil {
			r.fillTimer.Close()
		}
		st.Close()
	})
	s.replicas[0] = r
	return s, r
}

// testMode is the mode named name with a 1ms ordering interval.
func testMode(tb testing.TB, name string) mode.Mode {
	tb.Helper()
	m, err := mode.Parse(name, mode.Params{OrderingInterval: time.Millisecond, WindowCuts: 10})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// applyAll commits cmds to the control state cs and hands each event to
// server s and its replica r as the Watch stream and the loop would.
func applyAll(t *testing.T, s *Server, r *replica, cs *control.State, cmds []control.Command) {
	t.Helper()
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

// subscribeRecorder is a speculative subscription stream that records
// what the server sends.
type subscribeRecorder struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*pb.SubscribeResponse
	// enough, if set, ends the stream (cancels its context) once it
	// holds for what was sent.
	enough func([]*pb.SubscribeResponse) bool
	cancel context.CancelFunc
}

func (s *subscribeRecorder) Send(r *pb.SubscribeResponse) error {
	s.sent = append(s.sent, r)
	if s.enough != nil && s.enough(s.sent) {
		s.cancel()
	}
	return nil
}

func (s *subscribeRecorder) Context() context.Context { return s.ctx }

// TestFinalizedShardStreamEndsAfterEveryViewChange follows a shard that
// left a speculative cluster after two other shards failed, from position
// 0 on a new stream. A message carries one view change, so the stream must
// not say it is done, and end, before it sent the second: a subscriber
// that got predictions of the second view's positions would otherwise never
// hear that they failed.
func TestFinalizedShardStreamEndsAfterEveryViewChange(t *testing.T) {
	s, r, _ := fillerOfTwoVoids(t, true)
	rec := subscribeAll(t, s, r)
	var views []uint64
	for _, m := range rec.sent {
		if m.ViewChange != nil {
			views = append(views, m.ViewChange.View)
		}
	}
	if last := rec.sent[len(rec.sent)-1]; !last.Done || !slices.Equal(views, []uint64{1, 2}) {
		t.Fatalf("stream sent view changes %v and ended (done %v); want views 1 and 2 before the end", views, last.Done)
	}
}

// TestFillerSendsVoidSlotsAfterTheirViewChange follows, from position 0
// on a new stream, a shard that fills the slots of two failed shards (as a
// shard that registers after both failed does). A message carries one
// view change, and a subscriber takes the slots of a void as no-ops only
// in the view that voided them: every skip of a void must come in a
// message of that void's view or later.
func TestFillerSendsVoidSlotsAfterTheirViewChange(t *testing.T) {
	s, r, cs := fillerOfTwoVoids(t, false)
	filled := func(sent []*pb.SubscribeResponse) map[uint64]bool {
		views := map[uint64]bool{}
		for i, m := range sent {
			for _, e := range m.Entries {
				if e.Skip == 0 {
					continue
				}
				for _, v := range cs.Spec.Void {
					for _, rg := range v.Slots {
						if e.Position < rg.Start+rg.Count && rg.Start < e.Position+e.Skip {
							if m.View < v.View {
								t.Errorf("message %d (view %d) skips [%d,%d), slots of view %d", i, m.View, e.Position, e.Position+e.Skip, v.View)
							}
							views[v.View] = true
						}
					}
				}
			}
		}
		return views
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec := &subscribeRecorder{ctx: ctx, cancel: cancel, enough: func(sent []*pb.SubscribeResponse) bool {
		f := filled(sent)
		return f[1] && f[2]
	}}
	if err := s.subscribeSpec(r, &pb.SubscribeRequest{ClusterId: "c", Shard: 0, Speculative: true}, rec); !errors.Is(err, context.Canceled) {
		t.Fatalf("stream ended with %v", err)
	}
	if f := filled(rec.sent); !f[1] || !f[2] {
		t.Fatalf("filled the voids of views %v, want 1 and 2", f)
	}
}

// fillerOfTwoVoids returns a speculative primary of shard 0 with two
// appends, and the control state it learned: four shards with a quota of
// one in a window of two cuts; shards 1 and 2 fail (views 1 and 2, shard 0
// fills their slots), with leave shard 0 leaves (its slots to fill pass to
// shard 3), and both cuts are released, which makes a leaving shard 0
// final at 2.
func fillerOfTwoVoids(t *testing.T, leave bool) (*Server, *replica, *control.State) {
	t.Helper()
	s, r := specPrimary(t, "s0", "g0")
	as := &appendStream{wake: make(chan struct{}, 1)}
	r.appendLoop([]appendReq{{stream: as, clientID: 7, entries: []*pb.AppendEntry{
		{Seq: 1, Record: &pb.Record{Payload: []byte("a")}}, {Seq: 2, Record: &pb.Record{Payload: []byte("b")}}}}})

	cs := control.NewSpec("c", 2)
	var cmds []control.Command
	for i := range 4 {
		name := fmt.Sprint("g", i)
		cmds = append(cmds, control.Command{Register: &control.RegisterCommand{Group: name, Replicas: []control.Replica{{ID: name, Addr: name}}}})
	}
	cmds = append(cmds,
		control.Command{Window: &control.WindowCommand{Groups: 1, Quotas: []fixante.Quota{{Shard: 0, PerCut: 1}, {Shard: 1, PerCut: 1}, {Shard: 2, PerCut: 1}, {Shard: 3, PerCut: 1}}}},
		control.Command{Finalize: &control.FinalizeCommand{Shard: 1, Failed: true}},
		control.Command{Finalize: &control.FinalizeCommand{Shard: 2, Failed: true}},
	)
	if leave {
		cmds = append(cmds, control.Command{Finalize: &control.FinalizeCommand{Shard: 0}})
	}
	cmds = append(cmds, control.Command{Cut: &control.CutCommand{ReleaseThrough: 2}})
	applyAll(t, s, r, cs, cmds)
	if l, final := r.core.Final(); final != leave || leave && l != 2 || len(cs.Spec.Void) != 2 {
		t.Fatalf("replica finalized %v at %d with %d voids, want final %v (at 2) after 2 failures", final, l, len(cs.Spec.Void), leave)
	}
	return s, r, cs
}

// subscribeAll runs a speculative subscription to r's shard from position
// 0 until the stream is done, and returns what it sent.
func subscribeAll(t *testing.T, s *Server, r *replica) *subscribeRecorder {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec := &subscribeRecorder{ctx: ctx}
	if err := s.subscribeSpec(r, &pb.SubscribeRequest{ClusterId: "c", Shard: 0, Speculative: true}, rec); err != nil {
		t.Fatalf("stream ended with %v", err)
	}
	return rec
}

// TestSpecFeedStartsInTheFirstRunPastItsPosition subscribes from a
// position inside a cut whose run of this shard ends before it, the next
// cut's run already assigned (a subscriber that moves to a backup ahead in
// cuts). The feed must start with the next cut's records, not past every
// ordered one: a client resuming there after its replica died waited for
// those positions forever.
func TestSpecFeedStartsInTheFirstRunPastItsPosition(t *testing.T) {
	_, r := specPrimary(t, "s0", "g0")
	var entries []segment.Entry
	for i := range 6 {
		entries = append(entries, segment.Entry{Payload: []byte(fmt.Sprint("r", i))})
	}
	if _, err := r.store.Append(entries); err != nil {
		t.Fatal(err)
	}
	// Cut 1 orders positions [0, 10), this shard's at [4, 8); cut 2
	// orders [10, 14), this shard's at [10, 12).
	for _, run := range []segment.Run{
		{Cut: 1, CutStart: 0, CutEnd: 10, LocalStart: 0, GlobalStart: 4, Count: 4},
		{Cut: 2, CutStart: 10, CutEnd: 14, LocalStart: 4, GlobalStart: 10, Count: 2},
	} {
		if err := r.store.Assign(run); err != nil {
			t.Fatal(err)
		}
	}
	fd := &specFeed{r: r, f: newFilter(nil), from: 8}
	var resp pb.SubscribeResponse
	if err := fd.fill(&resp, 14, 0, nil); err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, e := range resp.Entries {
		got = append(got, e.Position)
	}
	if !slices.Equal(got, []uint64{10, 11}) || string(resp.Entries[0].Record.Payload) != "r4" {
		t.Fatalf("a feed from position 8 sent positions %v, want 10 and 11 (r4, r5)", got)
	}
}

// TestSpecFeedConfirmsOnlyWhatItSent: a speculative feed sends a cut's
// end only where the end confirms entries it sent, with the entries a cut
// placed; a cut that orders only other shards' entries sends nothing (every
// stream sending every end cost a subscriber a message per shard per cut).
func TestSpecFeedConfirmsOnlyWhatItSent(t *testing.T) {
	_, r := specPrimary(t, "s0", "g0")
	if _, err := r.store.Append([]segment.Entry{{Payload: []byte("r0")}, {Payload: []byte("r1")}}); err != nil {
		t.Fatal(err)
	}
	if err := r.store.Assign(segment.Run{Cut: 1, CutStart: 0, CutEnd: 6, LocalStart: 0, GlobalStart: 2, Count: 2}); err != nil {
		t.Fatal(err)
	}
	fd := &specFeed{r: r, f: newFilter(nil)}
	var first pb.SubscribeResponse
	if err := fd.fill(&first, 6, 0, nil); err != nil {
		t.Fatal(err)
	}
	if len(first.Entries) != 2 || first.Confirmed != 6 {
		t.Fatalf("the first message has %d entries and confirmed %d, want r0 and r1 confirmed by 6", len(first.Entries), first.Confirmed)
	}
	// Cut 2 orders [6, 9), none of it this shard's: nothing to say.
	var quiet pb.SubscribeResponse
	if err := fd.fill(&quiet, 9, 0, nil); err != nil {
		t.Fatal(err)
	}
	if quiet.Confirmed != 0 || len(quiet.Entries) != 0 {
		t.Fatalf("a cut of other shards' entries sent confirmed %d and %d entries, want nothing", quiet.Confirmed, len(quiet.Entries))
	}
	// Cut 3 orders this shard's next record at 9: its end goes with it.
	if _, err := r.store.Append([]segment.Entry{{Payload: []byte("r2")}}); err != nil {
		t.Fatal(err)
	}
	if err := r.store.Assign(segment.Run{Cut: 3, CutStart: 9, CutEnd: 11, LocalStart: 2, GlobalStart: 9, Count: 1}); err != nil {
		t.Fatal(err)
	}
	var next pb.SubscribeResponse
	if err := fd.fill(&next, 11, 0, nil); err != nil {
		t.Fatal(err)
	}
	if len(next.Entries) != 1 || next.Entries[0].Position != 9 || next.Confirmed != 11 {
		t.Fatalf("cut 3 sent %v confirmed by %d, want r2 at 9 confirmed by 11", next.Entries, next.Confirmed)
	}
}

// TestRetryQueuedWithItsOriginalIsStoredOnce: a client whose append stream
// broke re-sends its appends on a new stream; the old stream's request may
// still sit in the shard's queue, and the loop then drains both into one
// batch. The record must be stored once, and the new stream answered.
func TestRetryQueuedWithItsOriginalIsStoredOnce(t *testing.T) {
	s, err := New(Config{
		ClusterID: "c", ID: "s1", Group: []Peer{{ID: "s1", Addr: "127.0.0.1:1"}}, GroupName: "g",
		Ordering: []string{"127.0.0.1:2"}, Dir: t.TempDir(), RecordBytesMax: 1024,
		HeartbeatInterval: time.Second, Mode: testMode(t, mode.EagerName),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.openStore(0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := newReplica(s, 0, rolePrimary, st, nil, 1)
	entry := func() []*pb.AppendEntry {
		return []*pb.AppendEntry{{Seq: 1, Record: &pb.Record{Payload: []byte("once")}}}
	}
	broken := &appendStream{wake: make(chan struct{}, 1)}
	fresh := &appendStream{wake: make(chan struct{}, 1)}
	r.appendLoop([]appendReq{{stream: broken, clientID: 7, entries: entry()}, {stream: fresh, clientID: 7, entries: entry()}})
	if n := st.Len(); n != 1 {
		t.Fatalf("the store holds %d entries after an append and its retry, want 1", n)
	}
	if acks, _ := fresh.take(); len(acks) != 1 || acks[0].Code != pb.Code_PENDING {
		t.Fatalf("the retry's stream got %v before the cut, want one PENDING", acks)
	}
}
