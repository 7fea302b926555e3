package spec

import (
	"fmt"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/merge"
)

// StreamMerger is a Merger fed with speculative subscription streams: it
// is speculative order's merge.Merger, gated by the predicted window (or,
// confirmed-only, by the committed cuts).
type StreamMerger struct {
	m *Merger[*pb.SpecEntry]
	// oneStream: the merger follows a single shard's stream (see
	// NewShardMerger).
	oneStream bool
}

var _ merge.Merger = (*StreamMerger)(nil)

// NewStreamMerger returns a merger of every shard's speculative stream from
// from on, or with oneShard of a single shard's; confirmedOnly as for
// NewMerger.
func NewStreamMerger(from uint64, confirmedOnly, oneShard bool) *StreamMerger {
	if oneShard {
		return &StreamMerger{m: NewShardMerger[*pb.SpecEntry](from, confirmedOnly), oneStream: true}
	}
	return &StreamMerger{m: NewMerger[*pb.SpecEntry](from, confirmedOnly)}
}

// Step takes a stream's view change, confirmation and entries, in that
// order. Entries of a view the stream has not announced are an error.
func (s *StreamMerger) Step(shard uint32, r *pb.SubscribeResponse) error {
	// A view change goes before anything the stream sent with it.
	if vc := r.ViewChange; vc != nil {
		s.m.ViewChange(vc.View, vc.ConfirmedGp, vc.FailedShard)
	}
	if r.View > s.m.View() {
		// Every stream carries a view change before anything of the new
		// view; anything else is a broken server.
		return fmt.Errorf("augur: shard %d streamed view %d before its view change", shard, r.View)
	}
	// The confirmed end was a fact when the server sent the entries: those
	// below it are final, not predictions.
	if r.Confirmed > 0 {
		s.m.Confirm(r.Confirmed)
	}
	for _, e := range r.Entries {
		s.m.Add(Item[*pb.SpecEntry]{Pos: e.Position, Shard: e.Shard, Skip: e.Skip, Rec: e})
	}
	return nil
}

// Observe takes what the status says of view changes and committed cuts.
// Only a one-shard merger needs it: a dead or finalized shard's stream
// announces neither its own failure nor later cuts, while a merger of
// every stream hears both from the live shards.
func (s *StreamMerger) Observe(st *pb.StatusResponse) {
	if !s.oneStream || st.Spec == nil {
		return
	}
	// The view changes go first, so that what they void is not confirmed.
	for _, vc := range st.Spec.Void {
		s.m.ViewChange(vc.View, vc.ConfirmedGp, vc.FailedShard)
	}
	s.m.Confirm(st.Tail)
}

// Resume is the first position not delivered yet in the current view.
func (s *StreamMerger) Resume() uint64 { return s.m.Position() }

// Waiting tells whether the merger holds items not confirmed yet: waiting
// for earlier positions or for confirmation, or delivered speculatively.
func (s *StreamMerger) Waiting() bool { return s.m.Buffered() > 0 }

// Next pops the next event, if any.
func (s *StreamMerger) Next() (merge.Event, bool) {
	ev, ok := s.m.Next()
	if !ok {
		return merge.Event{}, false
	}
	out := merge.Event{Kind: ev.Kind, Pos: ev.Pos, Speculative: ev.Speculative, View: ev.View}
	if ev.Kind == EventDeliver {
		out.Shard, out.Rec = ev.Rec.Shard, ev.Rec.Record
	}
	return out, true
}
