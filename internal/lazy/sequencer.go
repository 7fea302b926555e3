package lazy

import (
	"fmt"

	"github.com/augur-log/augur/internal/cut"
)

// SequencerConfig bounds a sequencing replica.
type SequencerConfig struct {
	// RingMax is how many metadata entries the ring holds unordered; a
	// full ring refuses appends (ErrRingFull). 0 means RingMaxDefault.
	RingMax int
}

// SequencerState is what a sequencing replica keeps across a restart: the
// shell persists it whenever State changes (after Collect and StartView)
// and gives it back to NewSequencer. Records collected at positions not
// known stable yet are not in it: a restarted replica may take a retry of
// one as new, which costs a no-op on its shard, never a second copy. The ring itself is memory only, as in
// the paper: a restarted replica lost it, so it starts sealed and takes
// appends again only in a view that StartView opens for it.
type SequencerState struct {
	View uint64
	// Ordered is the first position not ordered yet (last-ordered-gp + 1)
	// as this replica knows it.
	Ordered uint64
	// Marks is the dedup state: records ordered for good, per client.
	Marks []ClientMark
}

// Sequencer is one sequencing replica: a bounded ring of record metadata
// in arrival order. Appends are coordination-free; the ring's order is the
// replica's local order, which respects real time: if one append was
// acknowledged (by every replica) before another began, it precedes it in
// every replica's ring.
//
// An entry is published (visible to Unordered and Seal) only once whole:
// Append adds it in one step, so a reader of the ring never sees a torn
// entry.
type Sequencer struct {
	ringMax int
	view    uint64
	sealed  bool
	ordered uint64
	// ring holds the unordered entries in arrival order; head skips the
	// collected ones at its front. index maps each held id to its slot.
	ring  []Meta
	head  int
	held  int
	index map[RecordID]int
	seen  *Dedup
	// recent maps the records collected at positions not known stable
	// yet to those positions: a view change may still rebind them (when
	// its recovery replica had not collected them), so they are
	// duplicates only until then, and for good once stable.
	recent map[RecordID]uint64
	// amnesiac says the replica restarted (losing its ring) and has not
	// started a view since: it must never be a recovery replica.
	amnesiac bool
}

// NewSequencer returns a replica restarted from st (the zero state for a
// new one). It is sealed until StartView.
func NewSequencer(cfg SequencerConfig, st SequencerState) *Sequencer {
	if cfg.RingMax <= 0 {
		cfg.RingMax = RingMaxDefault
	}
	return &Sequencer{
		ringMax: cfg.RingMax,
		view:    st.View,
		sealed:  true,
		ordered: st.Ordered,
		index:   map[RecordID]int{},
		recent:  map[RecordID]uint64{},
		seen:    NewDedup(st.Marks),
		// A new replica has nothing to lose, but nothing to recover from
		// either: it waits for a view, as a restarted one does.
		amnesiac: true,
	}
}

// View returns the replica's view and whether it is sealed.
func (s *Sequencer) View() (view uint64, sealed bool) { return s.view, s.sealed }

// Amnesiac says the replica restarted (or is new) and has not started a
// view since: it holds nothing to recover a view from.
func (s *Sequencer) Amnesiac() bool { return s.amnesiac }

// Ordered returns the first position not ordered yet.
func (s *Sequencer) Ordered() uint64 { return s.ordered }

// Len returns how many entries the ring holds.
func (s *Sequencer) Len() int { return s.held }

// State returns what to persist.
func (s *Sequencer) State() SequencerState {
	return SequencerState{View: s.view, Ordered: s.ordered, Marks: s.seen.Marks()}
}

// Append takes a record's metadata. It returns nil when the ring holds
// the record, new or a duplicate (dup), so the replica acknowledges; an
// error says the record is not held here and changes nothing: a wrong
// view (ErrWrongView), a sealed view (ErrSealed), a full ring
// (ErrRingFull), or bad input.
func (s *Sequencer) Append(m Meta) (dup bool, err error) {
	if err := s.seen.Check(m.ID); err != nil {
		return false, err
	}
	switch {
	case m.View != s.view:
		return false, fmt.Errorf("record %v in view %d, replica in view %d: %w", m.ID, m.View, s.view, ErrWrongView)
	case s.sealed:
		return false, fmt.Errorf("record %v: view %d: %w", m.ID, s.view, ErrSealed)
	}
	s.seen.Raise(m.ID.Client, m.Floor)
	_, collected := s.recent[m.ID]
	if _, ok := s.index[m.ID]; ok || collected || s.seen.Done(m.ID) {
		// A retry, or a copy that arrives after the leader collected the
		// record (the paper's footnote): held or ordered already.
		return true, nil
	}
	if s.held >= s.ringMax {
		return false, fmt.Errorf("record %v: %d entries unordered: %w", m.ID, s.held, ErrRingFull)
	}
	s.index[m.ID] = len(s.ring)
	s.ring = append(s.ring, m)
	s.held++
	return false, nil
}

// Unordered returns up to max entries from the front of the ring, in
// local order: the next batch the leader orders. The slice is a copy.
func (s *Sequencer) Unordered(max int) []Meta {
	out := make([]Meta, 0, min(max, s.held))
	for i := s.head; i < len(s.ring) && len(out) < max; i++ {
		if m := s.ring[i]; m.ID.Valid() {
			out = append(out, m)
		}
	}
	return out
}

// GC tells a sequencing replica that positions [From, End) are ordered and
// on the shards: the records IDs hold them, so it drops them from its ring
// and remembers them for good. Dropped are records the batch took from
// the ring without a position (their shard was finalized): the replica
// drops them too, and forgets them.
type GC struct {
	View, From, End uint64
	IDs             []RecordID
	Dropped         []RecordID
}

// Collect applies a garbage collection. It is idempotent: a GC the
// replica applied already (End <= Ordered) changes nothing. A GC of another
// view, of a sealed view, or one that skips positions (From > Ordered) is
// refused.
func (s *Sequencer) Collect(gc GC) error {
	switch {
	case gc.View != s.view:
		return fmt.Errorf("collect [%d, %d) of view %d in view %d: %w", gc.From, gc.End, gc.View, s.view, ErrWrongView)
	case s.sealed:
		return fmt.Errorf("collect [%d, %d): view %d: %w", gc.From, gc.End, s.view, ErrSealed)
	case gc.End < gc.From || uint64(len(gc.IDs)) > gc.End-gc.From:
		return fmt.Errorf("collect [%d, %d) of %d records: %w", gc.From, gc.End, len(gc.IDs), ErrBadInput)
	case gc.End > s.ordered && gc.From != s.ordered:
		return fmt.Errorf("collect [%d, %d) while ordered up to %d: %w", gc.From, gc.End, s.ordered, ErrBadInput)
	case gc.End <= s.ordered:
		s.settle(min(gc.From, s.ordered))
		s.dropAll(gc.Dropped)
		return nil
	}
	s.dropAll(gc.Dropped)
	for i, id := range gc.IDs {
		s.drop(id)
		s.recent[id] = gc.From + uint64(i)
	}
	// The leader collects a batch only once the one before is stable:
	// everything below gc.From is.
	s.settle(gc.From)
	s.ordered = gc.End
	s.compact()
	return nil
}

// settle remembers for good the collected records below stable.
func (s *Sequencer) settle(stable uint64) {
	for id, pos := range s.recent {
		if pos < stable {
			s.seen.Mark(id)
			delete(s.recent, id)
		}
	}
}

func (s *Sequencer) dropAll(ids []RecordID) {
	for _, id := range ids {
		s.drop(id)
	}
	s.compact()
}

func (s *Sequencer) drop(id RecordID) {
	i, ok := s.index[id]
	if !ok {
		return
	}
	delete(s.index, id)
	s.ring[i] = Meta{}
	s.held--
}

// compact moves the head past collected entries and reclaims the space
// once the dead front outweighs the live rest.
func (s *Sequencer) compact() {
	for s.head < len(s.ring) && !s.ring[s.head].ID.Valid() {
		s.head++
	}
	if s.head == len(s.ring) {
		s.ring, s.head = s.ring[:0], 0
		return
	}
	if s.head > len(s.ring)/2 {
		live := s.ring[:0]
		for _, m := range s.ring[s.head:] {
			if m.ID.Valid() {
				s.index[m.ID] = len(live)
				live = append(live, m)
			}
		}
		clear(s.ring[len(live):])
		s.ring, s.head = live, 0
	}
}

// SealReply is a sealed replica's answer to the control plane: its
// ordered end and its unordered entries in local order. Nothing commits in
// the view after any replica sealed (an append needs every replica), so
// the reply of any one replica holds every acknowledged append the view
// has not ordered yet.
type SealReply struct {
	View    uint64
	Ordered uint64
	Entries []Meta
	// Amnesiac says the replica lost its ring in a restart (or never ran
	// the view): it cannot be the recovery replica.
	Amnesiac bool
}

// Seal seals the replica in view (or in its own view, if view is newer:
// a replica that missed views seals what it has). Sealing is idempotent; a
// seal of an older view is refused.
func (s *Sequencer) Seal(view uint64) (SealReply, error) {
	if view < s.view {
		return SealReply{}, fmt.Errorf("seal view %d in view %d: %w", view, s.view, ErrWrongView)
	}
	s.sealed = true
	return SealReply{View: s.view, Ordered: s.ordered, Entries: s.Unordered(s.held), Amnesiac: s.amnesiac}, nil
}

// StartView opens a view on a replica of its configuration: the flush of
// the sealed view ordered everything below Ordered, and Flushed names the
// records it ordered, which the replica remembers for good. The ring is
// cleared: what it held is ordered, or was never acknowledged.
type StartView struct {
	View    uint64
	Ordered uint64
	// From is where the flush started (the recovery replica's ordered
	// end): positions below it kept their binding, those from it on were
	// bound again (to Flushed).
	From    uint64
	Flushed []RecordID
	// Leader and Replicas are the new configuration: the leader runs the
	// orderer of the view.
	Leader   ReplicaID
	Replicas []ReplicaID
	// Shards is one past the shard ids the view change's table knew: the
	// new leader's orderer waits for a table at least as new
	// (Orderer.AtLeast), since a shard it knew may have placed the flush,
	// and a shard must miss no batch.
	Shards cut.ShardID
}

// Start applies a StartView and says whether it started the view.
// Starting the view the replica runs already changes nothing (the control
// plane repeats a start until the replica's probe answer shows it
// running); an older view is refused, and so is the view the replica
// sealed (or lost in a restart): a sealed view never reopens, or appends
// could commit in it after its flush.
func (s *Sequencer) Start(sv StartView) (started bool, err error) {
	switch {
	case sv.View < s.view:
		return false, fmt.Errorf("start view %d in view %d: %w", sv.View, s.view, ErrWrongView)
	case sv.View == s.view && !s.sealed:
		return false, nil
	case sv.View == s.view:
		return false, fmt.Errorf("start view %d: %w", sv.View, ErrSealed)
	}
	// What this replica collected from the flush's start on was bound
	// again: the records the recovery replica held are in Flushed, the
	// others were never acknowledged and may come again.
	s.settle(sv.From)
	clear(s.recent)
	for _, id := range sv.Flushed {
		s.seen.Mark(id)
	}
	clear(s.ring)
	clear(s.index)
	s.ring, s.head, s.held = s.ring[:0], 0, 0
	s.view, s.ordered, s.sealed, s.amnesiac = sv.View, sv.Ordered, false, false
	return true, nil
}
