package lazy

import (
	"errors"
	"fmt"
)

// # Rejoin of a shard replica
//
// A shard replica that failed (restarted, or cut off and taken out of its
// shard's configuration) comes back in three steps:
//
//  1. Copy, while out: it copies the records of a live member's log that
//     it lacks (CopyRecord; ordered and unordered alike), from a cursor
//     into that log, so that little is left for step 3.
//  2. Join: the control plane adds it to the configuration at the next
//     epoch as a *pending* backup (Follow takes it back in). From that
//     epoch on, clients send every record to it too; its primary counts
//     it for every placement (a mapping is acknowledged only once it
//     applied it) and restates its whole order for it in one base
//     placement (Resend), whose records' data it fetches as any backup.
//  3. Catch up, pending: clients may have had appends acknowledged by the
//     configuration before the join (the joiner was not in it; the
//     copy may have missed the newest), so the joiner is no survivor of
//     its primary yet. The primary notes, as it enters the epoch, how
//     long its log is and which placement it made last (CatchUpMark):
//     every append the older configurations acknowledged lies in its log
//     below that length (from the epoch on it takes data of that epoch
//     only: the shell refuses data a client sent to an older
//     configuration, FenceData), and every mapping they acknowledged is
//     placed by that placement. Once the joiner copied the primary's log
//     up to the length and applied the placements up to that one
//     (CaughtUp), it holds everything an acknowledgement ever promised,
//     and the control plane clears Pending. A pending replica is never
//     promoted: if the primary fails first, only a replica that is not
//     pending may take over (none: the shard failed, as it would have
//     without the join).
//
// The primary's own mark is of its epoch: if the configuration changes
// again (the primary fails and another takes over), the joiner catches up
// with the new primary's mark, from the start of its log.

// CatchUpMark is what a pending replica must hold before it counts: the
// primary's log length and last placement (by term and number) as it
// entered Epoch.
type CatchUpMark struct {
	Epoch, Term uint64
	Len, Seq    uint64
}

// ErrStaleConfig: data sent to an older configuration of the shard than
// the replica's (the client asks the shard table again and sends it to
// every replica of the current one).
var ErrStaleConfig = errors.New("lazy: data sent to an older configuration of the shard")

// CatchUpMark returns the primary's mark for its epoch; ok is false on a
// backup or a replica taken out.
func (s *Shard[W]) CatchUpMark() (m CatchUpMark, ok bool) {
	if !s.Primary() {
		return CatchUpMark{}, false
	}
	return s.mark, true
}

// noteMark records the primary's mark as it enters its epoch.
func (s *Shard[W]) noteMark() {
	s.mark = CatchUpMark{Epoch: s.epoch, Term: s.term, Len: s.len, Seq: s.placeSeq}
}

// CaughtUp says this pending backup holds what the primary's mark m
// names, having copied the primary's log below copied: it may count as a
// replica that holds every acknowledged append.
func (s *Shard[W]) CaughtUp(m CatchUpMark, copied uint64) bool {
	return !s.out && !s.cfg.Primary && s.epoch == m.Epoch && s.term == m.Term && s.placeSeq >= m.Seq && copied >= m.Len
}

// FenceData refuses data a client sent to configuration epoch of the
// shard, older than the replica's: the client did not send it to a
// replica that joined since, which may then never hold it (see the notes
// above). Data without an epoch (0, from an SDK older than rejoins) is
// refused too: it cannot say which configuration it went to.
func (s *Shard[W]) FenceData(epoch uint64) error {
	if epoch < s.epoch {
		return fmt.Errorf("data for configuration %d of shard %d, which is in %d: %w", epoch, s.cfg.ID, s.epoch, ErrStaleConfig)
	}
	return nil
}

// CopyRecord takes a record copied from a live member's log by a replica
// that rejoins: as Copy, for records bound or not. The scrub never takes
// it (or any record the replica held before it rejoined) for an orphan:
// a client may have appended it again in a newer view while the replica
// was out, which only the configuration it was out of heard of, and
// whose metadata that view then orders (a record's view raised after the
// copy passed it is in no catch-up mark). An orphan among them stays
// until the log is trimmed past it, as a record restored without its
// view does.
func (s *Shard[W]) CopyRecord(id RecordID, out *ShardOutput[W]) (local uint64, fresh bool, err error) {
	if !id.Valid() {
		return 0, false, fmt.Errorf("copied record %v: %w", id, ErrBadInput)
	}
	if r, ok := s.byID[id]; ok {
		r.view = viewUnknown
		return r.local, false, nil
	}
	return s.store(id, viewUnknown, out), true, nil
}

// rejoin takes a replica taken out back into the configuration of epoch
// as a backup (pending until it caught up, which the control plane
// records): it follows its primary's placements again from the base the
// primary restates for it.
func (s *Shard[W]) rejoin(epoch uint64) {
	if !s.out || epoch <= s.epoch {
		return
	}
	s.out, s.epoch, s.cfg.Primary = false, epoch, false
	s.pending, s.waiting, s.missing, s.sent, s.joined = nil, nil, nil, nil, nil
	clear(s.backupAt)
	for _, r := range s.byID {
		if !r.placed {
			r.view = viewUnknown
		}
	}
	// What it placed above its readable end may be a replaced primary's
	// or an older view's binding, which the shard's order overrode while
	// it was out: it goes, or the next stable-gp would make it readable
	// before the primary's base replaced it.
	// The placements it kept are numbered in an order it no longer
	// follows: it applies none of its primary's until the base that
	// restates them all.
	// So does what it placed above the stable-gp it heard in a view it
	// had applied: stable-gp of a newer view may have come while it was
	// out without knowing it, over an order that view rebound.
	keep := max(s.trimmed, min(s.Readable(), s.trusted))
	s.stable = min(s.stable, keep)
	if s.placedEnd > keep {
		s.truncate(keep)
		s.markedEnd = min(s.markedEnd, len(s.slots))
	}
	s.placeSeq = 0
}

// joinBase is what a primary sends a backup that joined its
// configuration first: its whole order from its trim point, restated in a
// base of its term numbered as its last placement, which the backup puts
// in place of everything it holds above its readable end.
func (s *Shard[W]) joinBase() *Placement {
	p := s.restate(s.trimmed)
	p.Seq, p.Term, p.Base, p.Whole = s.placeSeq, s.term, true, true
	return p
}
