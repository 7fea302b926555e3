package lazy

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/augur-log/augur/internal/cut"
)

// How lazy order maps onto a shard's log: records are appended to the
// shard's log (shard.Log, segment.Store) in arrival order and are durable
// at once, as in every mode; nothing is rewritten when they are ordered.
// The order lives beside the log, in placements: each says which global
// positions of a mapping belong to this shard and which record (or no-op)
// each holds. A replica persists its placements in the order it applied
// them (a later one of a newer view may rebind positions at or above
// stable-gp, which a replay follows), and finds a record's local index
// through its record id.

// Run says that positions [From, End) all live on Shard.
type Run struct {
	From, End uint64
	Shard     cut.ShardID
}

// Slot is one of a shard's positions as its primary placed it: the record
// bound there, or a no-op (the record's data never came, or it was bound
// twice).
type Slot struct {
	Pos  uint64
	ID   RecordID
	Noop bool
}

// Placement is a shard primary's decision on one mapping, which it
// persists and replicates to its backups, who apply it verbatim: the
// position table of [From, End) and this shard's slots in it, ascending.
type Placement struct {
	// Seq numbers the primary's placements from 1: a backup applies them
	// in this order, each once, so that its history of rebinds is the
	// primary's (a late copy of an old placement changes nothing).
	Seq uint64
	// Term is the shard configuration epoch in which the placement's
	// primary became primary: one primary per term, so (Term, Seq) names
	// one decision. A backup takes placements of its term only, or a
	// base of a newer one.
	Term uint64
	// Base says the placement restates its primary's whole order from
	// From on, as a replica promoted to primary makes first: a backup
	// replaces its own placements from there (those are above stable-gp,
	// never acknowledged: the new primary holds every acknowledged one)
	// and numbers on from Seq.
	Base bool
	// Whole says the base restates its primary's whole position table,
	// from the table's start (for a backup that joined, rejoin.go): one
	// that placed nothing starts its table there.
	Whole           bool
	View, From, End uint64
	Runs            []Run
	Slots           []Slot
}

// Gone is the local index Accept returns for a record stored before and
// trimmed since: it is as durable as it will ever be.
const Gone = ^uint64(0)

// StoredRecord is a record a restarted replica finds in its log.
type StoredRecord struct {
	ID    RecordID
	Local uint64
	// View is the newest view the record was appended in (a retry in a
	// newer view counts), if the log keeps it; 0 if not: the replica then
	// never takes the record for an orphan, since a retry may have come in
	// a newer view than any it knows of.
	View uint64
}

// ShardState is what a replica restarts from, as its shell persisted it.
type ShardState struct {
	// Len is the length of the local log; Records are its records.
	Len     uint64
	Records []StoredRecord
	// Placements are the placements applied, in order.
	Placements []Placement
	// Stable and StableView are the last stable-gp heard, if persisted
	// (a replica that forgot hears it again from the leader). Persist no
	// more than Readable: a replica that rejoined drops the placements
	// above it (in memory) until its primary's base replaces them.
	Stable, StableView uint64
	// Trimmed is the trim point; Marks the dedup state of the records
	// trimmed, as Marks returned it when the shell trimmed.
	Trimmed uint64
	Marks   []ClientMark
}

// ShardConfig says what a shard replica is.
type ShardConfig struct {
	ID      cut.ShardID
	Primary bool
	// Epoch and Backups are the shard's configuration as the replica
	// starts: a primary's placements go to these backups (by server id),
	// and a mapping is acknowledged once each of them applied it.
	// Reconfigure follows later configurations.
	Epoch   uint64
	Backups []string
	// NoopAfter bounds how long a primary waits for a mapped record's data
	// before it binds a no-op in its place.
	NoopAfter time.Duration
	// HeldReadsMax bounds the reads held above stable-gp; 0 means
	// HeldReadsMaxDefault.
	HeldReadsMax int
}

// ReadAnswer answers a read of Pos. Shard is the shard that holds the
// position: if it is another one, the reader goes there. Otherwise Noop
// says the position holds no record (readers skip it), or Local is the
// record's index in this replica's log.
type ReadAnswer[W comparable] struct {
	Waiter W
	Pos    uint64
	Shard  cut.ShardID
	Noop   bool
	Local  uint64
}

// ShardOutput is what one call asks the shell to do, in field order.
type ShardOutput[W comparable] struct {
	// Place is a placement to persist; then, on a primary, to send to
	// every backup (persist before send).
	Place *Placement
	// Fetch, on a backup, names placed records whose data it lacks: fetch
	// them from the primary and hand them to Copy.
	Fetch []RecordID
	// Applied, on a backup, says it holds (persisted, with the data)
	// every placement up to number AppliedSeq of term AppliedTerm, which
	// place up to AppliedEnd: tell the primary AppliedTerm and AppliedSeq.
	Applied     bool
	AppliedTerm uint64
	AppliedSeq  uint64
	AppliedEnd  uint64
	// Ack, on a primary, goes to the sequencing leader: every replica
	// holds the placement of the mapping.
	Ack *MappingAck
	// Reads are read answers to send.
	Reads []ReadAnswer[W]
	// Voided lists the records bound to no-ops (for metrics and logs).
	Voided []RecordID
	// WakeAt is when to call Tick next (a no-op deadline); zero for none.
	WakeAt time.Time
}

// viewUnknown is the view of a record restored without one: newer than
// every view, so that the scrub never drops it.
const viewUnknown = ^uint64(0)

type storedRec struct {
	local, view uint64
	// placed says a slot binds the record (maybe above stable-gp).
	placed bool
}

type placedSlot struct {
	Slot
	local uint64
}

type heldRead[W comparable] struct {
	w   W
	pos uint64
}

// Shard is one replica of one shard in lazy order. Its primary turns the
// orderer's mappings into placements (waiting a bounded time for data that
// has not come, then binding no-ops), replicates them to the backups, and
// acknowledges the mapping once every replica holds it; every replica
// serves reads below stable-gp at once and holds reads above it.
type Shard[W comparable] struct {
	cfg ShardConfig

	len  uint64
	byID map[RecordID]*storedRec
	// voided maps the records bound to no-ops to their positions: their
	// late data is refused.
	voided map[RecordID]uint64
	seen   *Dedup

	// runs and slots cover [trimmed, placedEnd): the position table and
	// this shard's own positions, ascending.
	runs      []Run
	slots     []placedSlot
	trimmed   uint64
	placedEnd uint64
	// view is the newest view of a mapping or placement applied.
	view uint64
	// stable and stableView: the last stable-gp heard. markedEnd is how
	// far the dedup marks the records of slots below stable.
	stable, stableView uint64
	markedEnd          int

	// On a primary: the mapping waiting for data, the last placement and
	// what each backup of the current configuration applied.
	pending *pendingMap
	// sent holds the placements some backup may still lack (numbered
	// past the least backupAt), in order, for Resend; backupAt[b] is the
	// number of the last placement backup b applied. epoch is the
	// configuration whose backups backupAt lists.
	sent     []*Placement
	backupAt map[string]uint64
	epoch    uint64
	// placeSeq numbers the last placement applied; term is the term of
	// the primary whose placements this replica follows (its own, on a
	// primary; 0 on a backup that applied none).
	placeSeq, term uint64
	// out says the replica was taken out of its shard's configuration: it
	// takes no mapping or placement any more (Leave), until it rejoins.
	out bool
	// mark is a primary's catch-up mark for its epoch; joined lists the
	// backups that joined its configuration and have applied none of its
	// placements yet: they get its whole order first (rejoin.go).
	mark   CatchUpMark
	joined map[string]bool

	// trusted is how far stable-gp of a view whose order it applied
	// made its placements final (Stable).
	trusted uint64

	// On a backup: a placement waiting for fetched data.
	waiting *Placement
	missing map[RecordID]bool

	held []heldRead[W]
}

type pendingMap struct {
	m        Mapping
	deadline time.Time
	missing  map[RecordID]bool
}

// NewShard returns a replica restarted from st (the zero state for a new
// one).
func NewShard[W comparable](cfg ShardConfig, st ShardState) *Shard[W] {
	if cfg.HeldReadsMax <= 0 {
		cfg.HeldReadsMax = HeldReadsMaxDefault
	}
	s := &Shard[W]{
		cfg: cfg, len: st.Len,
		byID: map[RecordID]*storedRec{}, voided: map[RecordID]uint64{},
		seen:    NewDedup(st.Marks),
		trimmed: st.Trimmed, placedEnd: st.Trimmed,
		backupAt: map[string]uint64{}, epoch: cfg.Epoch,
	}
	for _, b := range cfg.Backups {
		s.backupAt[b] = 0
	}
	for _, r := range st.Records {
		view := r.View
		if view == 0 {
			view = viewUnknown
		}
		s.byID[r.ID] = &storedRec{local: r.Local, view: view}
	}
	for i := range st.Placements {
		p := &st.Placements[i]
		if p.Seq == 0 {
			p.Seq = s.placeSeq + 1
		}
		// A replica that joined a running order (joinAt) starts its
		// table where its first placement does, after a restart too.
		s.joinAt(p.From)
		s.apply(p)
		if cfg.Primary {
			// The backups will say what they hold; until then, they may
			// lack any of it since the last base.
			if p.Base {
				s.sent = nil
			}
			s.retain(p)
		}
	}
	if cfg.Primary && s.term == 0 {
		s.term = cfg.Epoch
	}
	if cfg.Primary {
		s.noteMark()
	}
	var out ShardOutput[W]
	s.Stable(StableGP{View: st.StableView, Stable: st.Stable}, &out)
	return s
}

// OpenShard returns a replica restarted from st under its shard's
// configuration cfg. A primary that opens with placements on disk of an
// older term than its configuration's epoch (it was promoted while it was
// down, or its configuration changed since): the placements are another
// term's (its backups may hold a longer tail of them), so it takes over as
// a promoted backup does, restating its order in a base of its own term,
// which out carries to persist and send before anything else. One whose
// placements are of its own term goes on with them: a base of the same
// term would not replace what its backups hold.
func OpenShard[W comparable](cfg ShardConfig, st ShardState, out *ShardOutput[W]) *Shard[W] {
	var term uint64
	for _, p := range st.Placements {
		term = max(term, p.Term)
	}
	if !cfg.Primary || len(st.Placements) == 0 || cfg.Epoch <= term {
		return NewShard[W](cfg, st)
	}
	epoch, backups := cfg.Epoch, cfg.Backups
	cfg.Primary, cfg.Epoch, cfg.Backups = false, 0, nil
	s := NewShard[W](cfg, st)
	s.Promote(epoch, backups, out)
	return s
}

// Follow brings the replica to its shard's configuration of epoch, whose
// members are in order, the primary first, by self's place in it: a
// replica taken out leaves, a backup that became primary is promoted (its
// primary was taken out), and any other follows the configuration's
// backups (a primary that stays no longer waits for one taken out).
func (s *Shard[W]) Follow(epoch uint64, members []string, self string, out *ShardOutput[W]) {
	switch i := slices.Index(members, self); {
	case i < 0:
		s.Leave(epoch)
	case s.out:
		// Taken back in (it caught up while out): as a backup, whatever
		// its place, for the control plane promotes no replica that
		// rejoined before it caught up.
		s.rejoin(epoch)
	case i == 0 && !s.Primary():
		s.Promote(epoch, slices.Clone(members[1:]), out)
	default:
		s.Reconfigure(epoch, slices.Clone(members[1:]), out)
	}
}

// StableEnd returns the stable end heard; Readable the end below which
// this replica serves reads (it may lag the stable end until it applied
// the placements).
func (s *Shard[W]) StableEnd() uint64 { return s.stable }
func (s *Shard[W]) Readable() uint64  { return min(s.stable, s.placedEnd) }

// PlacedEnd is the end of the positions placed (final or not).
func (s *Shard[W]) PlacedEnd() uint64 { return s.placedEnd }

// Unordered returns how many stored records no slot binds.
func (s *Shard[W]) Unordered() int {
	n := 0
	for _, r := range s.byID {
		if !r.placed {
			n++
		}
	}
	return n
}

// Accept takes a record's data from a client, appended in view. fresh
// says the shell must append the record to its log at local index local
// (the next one), then acknowledge once that is durable; otherwise the
// record is there already (a retry) at local, or Gone, and the shell
// acknowledges once local is durable. An error changes nothing: a view the
// sequencing layer left behind (ErrWrongView: it can no longer be
// acknowledged), a record whose position became a no-op (ErrLate), bad
// input.
func (s *Shard[W]) Accept(id RecordID, view uint64, out *ShardOutput[W]) (local uint64, fresh bool, err error) {
	if err := s.seen.Check(id); err != nil {
		return 0, false, err
	}
	if r, ok := s.byID[id]; ok && !s.isVoided(id) {
		// A retry in a newer view keeps the record from the scrub of
		// the views before it: its metadata may be ordered in this one.
		r.view = max(r.view, view)
		return r.local, false, nil
	}
	if s.seen.Done(id) {
		return Gone, false, nil
	}
	switch {
	case s.isVoided(id):
		return 0, false, fmt.Errorf("record %v on shard %d: %w", id, s.cfg.ID, ErrLate)
	case view < s.stableView:
		return 0, false, fmt.Errorf("record %v in view %d, shard %d in view %d: %w", id, view, s.cfg.ID, s.stableView, ErrWrongView)
	}
	return s.store(id, view, out), true, nil
}

// Copy takes a placed record's data fetched from the primary (a backup's
// Fetch): as Accept, but the record is bound already, so neither its view
// nor a no-op stands in its way.
func (s *Shard[W]) Copy(id RecordID, out *ShardOutput[W]) (local uint64, fresh bool, err error) {
	if !id.Valid() {
		return 0, false, fmt.Errorf("record id %v: %w", id, ErrBadInput)
	}
	if r, ok := s.byID[id]; ok {
		return r.local, false, nil
	}
	return s.store(id, s.stableView, out), true, nil
}

func (s *Shard[W]) isVoided(id RecordID) bool {
	_, ok := s.voided[id]
	return ok
}

func (s *Shard[W]) store(id RecordID, view uint64, out *ShardOutput[W]) uint64 {
	local := s.len
	s.len++
	s.byID[id] = &storedRec{local: local, view: view}
	if p := s.pending; p != nil && p.missing[id] {
		delete(p.missing, id)
		if len(p.missing) == 0 {
			s.finish(out)
		}
	}
	if s.waiting != nil && s.missing[id] {
		delete(s.missing, id)
		if len(s.missing) == 0 {
			// Checked again: a newer placement may have overtaken it
			// while its data was fetched.
			p := s.waiting
			s.waiting, s.missing = nil, nil
			_ = s.Place(*p, out)
		}
	}
	return local
}

// Map takes a mapping from the sequencing leader (primary only) at now.
// A mapping this replica placed already is acknowledged again (if every
// replica holds it) or ignored; one of an older view, one that leaves a
// gap, or one that would rebind a stable position is refused.
func (s *Shard[W]) Map(m Mapping, now time.Time, out *ShardOutput[W]) error {
	if s.cfg.Primary {
		s.joinAt(m.From)
	}
	switch {
	case s.out:
		return fmt.Errorf("mapping [%d, %d) sent to a replica taken out of shard %d: %w", m.From, m.End(), s.cfg.ID, ErrNotInConfig)
	case !s.cfg.Primary:
		return fmt.Errorf("mapping [%d, %d) sent to a backup of shard %d: %w", m.From, m.End(), s.cfg.ID, ErrBadInput)
	case m.View < s.view:
		return fmt.Errorf("mapping [%d, %d) of view %d, shard %d in view %d: %w", m.From, m.End(), m.View, s.cfg.ID, s.view, ErrWrongView)
	case m.View == s.view && m.End() <= s.placedEnd:
		s.maybeAck(out)
		return nil
	case m.From > s.placedEnd:
		return fmt.Errorf("mapping [%d, %d) after placing up to %d: %w", m.From, m.End(), s.placedEnd, ErrBadInput)
	case m.View == s.view && m.From < s.placedEnd:
		return fmt.Errorf("mapping [%d, %d) of view %d overlaps its own view's placements up to %d: %w", m.From, m.End(), m.View, s.placedEnd, ErrBadInput)
	case m.From < s.Readable():
		return fmt.Errorf("mapping [%d, %d) of view %d rebinds stable positions below %d: %w", m.From, m.End(), m.View, s.Readable(), ErrBadInput)
	}
	if p := s.pending; p != nil && p.m.View == m.View && p.m.From == m.From && p.m.End() == m.End() {
		return nil
	}
	for _, r := range m.Records {
		if !r.ID.Valid() {
			return fmt.Errorf("mapping [%d, %d): record id %v: %w", m.From, m.End(), r.ID, ErrBadInput)
		}
	}
	p := &pendingMap{m: m, deadline: now.Add(s.cfg.NoopAfter), missing: map[RecordID]bool{}}
	for _, r := range m.Records {
		if r.Shard != s.cfg.ID {
			continue
		}
		_, here := s.byID[r.ID]
		vpos, void := s.voided[r.ID]
		if !here && !s.seen.Done(r.ID) && !(void && vpos < m.From) {
			p.missing[r.ID] = true
		}
	}
	s.pending = p
	if len(p.missing) == 0 {
		s.finish(out)
		return nil
	}
	out.WakeAt = p.deadline
	return nil
}

// Tick binds no-ops for the records whose data did not come in time.
func (s *Shard[W]) Tick(now time.Time, out *ShardOutput[W]) {
	p := s.pending
	if p == nil {
		return
	}
	if now.Before(p.deadline) {
		out.WakeAt = p.deadline
		return
	}
	s.finish(out)
}

// finish turns the pending mapping into a placement: a record that is
// here is bound; one bound at an earlier position (or twice in the
// mapping) becomes a no-op, as does one whose data never came (whose late
// data is refused from now on).
func (s *Shard[W]) finish(out *ShardOutput[W]) {
	m := s.pending.m
	s.pending = nil
	if m.From < s.placedEnd {
		s.truncate(m.From)
	}
	p := &Placement{Seq: s.placeSeq + 1, Term: s.term, View: m.View, From: m.From, End: m.End()}
	bound := map[RecordID]bool{}
	for i, r := range m.Records {
		pos := m.From + uint64(i)
		if n := len(p.Runs); n > 0 && p.Runs[n-1].Shard == r.Shard {
			p.Runs[n-1].End = pos + 1
		} else {
			p.Runs = append(p.Runs, Run{From: pos, End: pos + 1, Shard: r.Shard})
		}
		if r.Shard != s.cfg.ID {
			continue
		}
		st, here := s.byID[r.ID]
		switch {
		case here && !st.placed && !bound[r.ID]:
			bound[r.ID] = true
			p.Slots = append(p.Slots, Slot{Pos: pos, ID: r.ID})
		case here, s.seen.Done(r.ID), bound[r.ID]:
			p.Slots = append(p.Slots, Slot{Pos: pos, ID: r.ID, Noop: true})
		default:
			p.Slots = append(p.Slots, Slot{Pos: pos, ID: r.ID, Noop: true})
			out.Voided = append(out.Voided, r.ID)
		}
	}
	s.apply(p)
	s.retain(p)
	out.Place = p
	s.maybeAck(out)
}

// retain keeps p for the backups.
func (s *Shard[W]) retain(p *Placement) { s.sent = append(s.sent, p) }

// maybeAck acknowledges the mapping once every backup applied every
// placement, and forgets the placements every backup holds.
func (s *Shard[W]) maybeAck(out *ShardOutput[W]) {
	least := s.placeSeq
	for _, b := range s.backupAt {
		least = min(least, b)
	}
	i := 0
	for i < len(s.sent) && s.sent[i].Seq <= least {
		i++
	}
	s.sent = slices.Delete(s.sent, 0, i)
	if least == s.placeSeq && s.placeSeq > 0 {
		out.Ack = &MappingAck{Shard: s.cfg.ID, View: s.view, End: s.placedEnd}
	}
}

// BackupApplied takes backup b's Applied: it applied every placement up
// to number seq of term (primary only). A server that is no backup of the
// current configuration counts for nothing, and so does an answer about
// another primary's placements (a backup that has not taken this one's
// base yet).
func (s *Shard[W]) BackupApplied(b string, term, seq uint64, out *ShardOutput[W]) {
	at, ok := s.backupAt[b]
	if !ok || term != s.term || seq > s.placeSeq || seq <= at {
		return
	}
	if s.joined[b] && (len(s.sent) == 0 && seq < s.placeSeq || len(s.sent) > 0 && s.sent[0].Seq > seq+1) {
		// A backup that joined answers for placements it held from
		// before: the next ones it lacks are forgotten here, so it
		// still gets the whole order (Resend).
		return
	}
	delete(s.joined, b)
	s.backupAt[b] = seq
	s.maybeAck(out)
}

// Reconfigure follows the shard's configuration of epoch, in which this
// replica stays what it was, and whose backups are backups (an epoch not
// newer than the current one changes nothing). On a primary: a lazy
// mapping needs every replica of the current configuration, so a backup
// taken out is no longer waited for, and a mapping it held up is
// acknowledged now. A backup that stays keeps what it applied; one that
// joins starts from nothing (bringing it the placements already
// forgotten is not built: its primary then waits).
func (s *Shard[W]) Reconfigure(epoch uint64, backups []string, out *ShardOutput[W]) {
	if s.out || epoch <= s.epoch {
		return
	}
	s.epoch = epoch
	if !s.cfg.Primary {
		return
	}
	next := make(map[string]uint64, len(backups))
	for _, b := range backups {
		at, ok := s.backupAt[b]
		if !ok {
			if s.joined == nil {
				s.joined = map[string]bool{}
			}
			s.joined[b] = true
		}
		next[b] = at
	}
	s.backupAt = next
	for b := range s.joined {
		if _, ok := next[b]; !ok {
			delete(s.joined, b)
		}
	}
	s.noteMark()
	s.maybeAck(out)
}

// Promote makes this backup the primary of the configuration of epoch,
// whose backups are backups: its primary was taken out. It holds every
// placement ever acknowledged (a mapping is acknowledged only once every
// replica of the configuration applied it), so its own order is the
// shard's from here: it restates it in a base placement from its readable
// end, to persist and send to every backup first, which replace what they
// hold above it (the old primary's unacknowledged tail) with it. The
// mapping in flight comes again from the orderer and is placed here.
func (s *Shard[W]) Promote(epoch uint64, backups []string, out *ShardOutput[W]) {
	if s.out || s.cfg.Primary || epoch <= s.epoch {
		return
	}
	s.cfg.Primary, s.epoch, s.term = true, epoch, epoch
	s.waiting, s.missing = nil, nil
	base := s.restate(s.Readable())
	base.Seq, base.Term, base.Base = s.placeSeq+1, s.term, true
	s.apply(base)
	s.sent = []*Placement{base}
	s.backupAt = make(map[string]uint64, len(backups))
	s.joined = make(map[string]bool, len(backups))
	for _, b := range backups {
		s.backupAt[b] = 0
		// One that joined and had not caught up may lack placements
		// below the base: until it applies one, it gets the whole order.
		s.joined[b] = true
	}
	out.Place = base
	s.noteMark()
	s.maybeAck(out)
}

// Leave takes this replica out of its shard's configuration of epoch: it
// takes no mapping or placement from now on (a primary that comes back
// from a partition must not acknowledge a mapping). It still serves the
// reads of final positions it holds.
func (s *Shard[W]) Leave(epoch uint64) {
	if s.out || epoch < s.epoch {
		return
	}
	s.out, s.epoch = true, epoch
	s.pending, s.waiting, s.missing, s.sent = nil, nil, nil, nil
	clear(s.backupAt)
}

// Out reports whether the replica was taken out of its configuration.
func (s *Shard[W]) Out() bool { return s.out }

// Primary reports whether the replica is its shard's primary.
func (s *Shard[W]) Primary() bool { return s.cfg.Primary && !s.out }

// restate returns the position table and this shard's slots from from to
// the placed end, as one placement (without number or term).
func (s *Shard[W]) restate(from uint64) *Placement {
	p := &Placement{View: s.view, From: from, End: max(from, s.placedEnd)}
	for _, r := range s.runs {
		if r.End <= from {
			continue
		}
		r.From = max(r.From, from)
		p.Runs = append(p.Runs, r)
	}
	i := sort.Search(len(s.slots), func(i int) bool { return s.slots[i].Pos >= from })
	for _, sl := range s.slots[i:] {
		p.Slots = append(p.Slots, sl.Slot)
	}
	return p
}

// clip returns p without its positions below from.
func clip(p Placement, from uint64) Placement {
	if from <= p.From {
		return p
	}
	q := p
	q.From, q.Runs, q.Slots = from, nil, nil
	for _, r := range p.Runs {
		if r.End <= from {
			continue
		}
		r.From = max(r.From, from)
		q.Runs = append(q.Runs, r)
	}
	for _, sl := range p.Slots {
		if sl.Pos >= from {
			q.Slots = append(q.Slots, sl)
		}
	}
	return q
}

// Epoch is the configuration the replica follows.
func (s *Shard[W]) Epoch() uint64 { return s.epoch }

// Resend returns what a primary sends backup b again after a timeout:
// the placements it has not acknowledged, in order (one message: a backup
// applies them in turn); nothing for a server that is no backup.
func (s *Shard[W]) Resend(b string) []Placement {
	at, ok := s.backupAt[b]
	if !ok {
		return nil
	}
	if s.joined[b] && s.placeSeq > 0 {
		// It joined: the placements it lacks may be forgotten here.
		return []Placement{*s.joinBase()}
	}
	var out []Placement
	for _, p := range s.sent {
		if p.Seq > at {
			out = append(out, *p)
		}
	}
	return out
}

// Place takes the primary's placement (backup only). The backup fetches
// the data of bound records it lacks, then applies and persists it. It
// follows one primary's placements at a time: those of its term, in
// order, or a newer primary's base, which replaces its placements from
// the base's start (those below its readable end are final, the same on
// every replica, and kept).
func (s *Shard[W]) Place(p Placement, out *ShardOutput[W]) error {
	// A backup that placed nothing yet starts its table where its
	// primary's does (a shard added to a running order): at the first
	// placement, at a whole restatement, or at the first one past an
	// empty base (its primary was promoted before it placed anything).
	if !s.cfg.Primary && (p.Whole || p.Seq == s.placeSeq+1 && (s.placeSeq == 0 || p.Term == s.term)) {
		s.joinAt(p.From)
	}
	// A base of a newer primary, or its primary's restatement for a
	// backup that joined (of its own term, past what the backup applied).
	rebase := p.Base && (p.Term > s.term || (p.Term == s.term && p.Seq > s.placeSeq))
	switch {
	case s.out:
		return fmt.Errorf("placement [%d, %d) sent to a replica taken out of shard %d: %w", p.From, p.End, s.cfg.ID, ErrNotInConfig)
	case s.cfg.Primary:
		return fmt.Errorf("placement [%d, %d) sent to the primary of shard %d: %w", p.From, p.End, s.cfg.ID, ErrBadInput)
	case p.Term < s.term:
		return fmt.Errorf("placement %d of term %d, shard %d follows term %d: %w", p.Seq, p.Term, s.cfg.ID, s.term, ErrStaleTerm)
	case rebase && p.From > s.placedEnd:
		return fmt.Errorf("base placement [%d, %d) after placing up to %d: %w", p.From, p.End, s.placedEnd, ErrBadInput)
	case rebase && p.End < s.Readable():
		return fmt.Errorf("base placement [%d, %d) ends below the readable end %d: %w", p.From, p.End, s.Readable(), ErrBadInput)
	case rebase:
		p = clip(p, s.Readable())
	case p.Term > s.term && s.placeSeq > 0:
		return fmt.Errorf("placement %d of term %d before its base (shard %d follows term %d): %w", p.Seq, p.Term, s.cfg.ID, s.term, ErrBadInput)
	case p.Seq <= s.placeSeq:
		// Applied already (a resend, or a late copy).
		out.Applied, out.AppliedTerm, out.AppliedSeq, out.AppliedEnd = true, s.term, s.placeSeq, s.placedEnd
		return nil
	case p.Seq > s.placeSeq+1:
		return fmt.Errorf("placement %d after applying %d: %w", p.Seq, s.placeSeq, ErrBadInput)
	case p.View < s.view:
		return fmt.Errorf("placement [%d, %d) of view %d, shard %d in view %d: %w", p.From, p.End, p.View, s.cfg.ID, s.view, ErrWrongView)
	case p.From > s.placedEnd:
		return fmt.Errorf("placement [%d, %d) after placing up to %d: %w", p.From, p.End, s.placedEnd, ErrBadInput)
	case p.From < s.Readable():
		return fmt.Errorf("placement [%d, %d) rebinds stable positions below %d: %w", p.From, p.End, s.Readable(), ErrBadInput)
	}
	s.waiting, s.missing = nil, nil
	missing := map[RecordID]bool{}
	for _, sl := range p.Slots {
		if _, ok := s.byID[sl.ID]; !ok && !sl.Noop {
			missing[sl.ID] = true
		}
	}
	if len(missing) > 0 {
		s.waiting, s.missing = &p, missing
		for id := range missing {
			out.Fetch = append(out.Fetch, id)
		}
		slices.SortFunc(out.Fetch, cmpID)
		return nil
	}
	s.applyBackup(&p, out)
	return nil
}

func cmpID(a, b RecordID) int {
	if a.Client != b.Client {
		return cmpU(a.Client, b.Client)
	}
	return cmpU(a.Seq, b.Seq)
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *Shard[W]) applyBackup(p *Placement, out *ShardOutput[W]) {
	s.apply(p)
	out.Place = p
	out.Applied, out.AppliedTerm, out.AppliedSeq, out.AppliedEnd = true, s.term, s.placeSeq, s.placedEnd
	s.release(out)
}

// apply binds p's slots (after unbinding what a newer view rebinds).
func (s *Shard[W]) apply(p *Placement) {
	if p.From < s.placedEnd {
		s.truncate(p.From)
	}
	s.view = max(s.view, p.View)
	s.runs = append(s.runs, p.Runs...)
	for _, sl := range p.Slots {
		ps := placedSlot{Slot: sl}
		if sl.Noop {
			// A no-op stands for a record whose data did not come in
			// time, unless the record is bound elsewhere (bound twice).
			// Its data may be in the log all the same (a copy the scrub
			// dropped, found again in a restart): it is refused.
			if r, here := s.byID[sl.ID]; (!here || !r.placed) && !s.seen.Done(sl.ID) {
				s.voided[sl.ID] = sl.Pos
			}
		} else if r, ok := s.byID[sl.ID]; ok {
			r.placed = true
			ps.local = r.local
		}
		s.slots = append(s.slots, ps)
	}
	s.placedEnd = p.End
	s.placeSeq = p.Seq
	s.term = max(s.term, p.Term)
}

// truncate unbinds every position from from on (above stable-gp only: a
// newer view's flush rebinds them).
func (s *Shard[W]) truncate(from uint64) {
	if from < s.Readable() {
		panic(fmt.Sprintf("lazy: shard %d truncates placements at %d below the readable end %d", s.cfg.ID, from, s.Readable()))
	}
	i := sort.Search(len(s.slots), func(i int) bool { return s.slots[i].Pos >= from })
	for _, sl := range s.slots[i:] {
		if vpos, ok := s.voided[sl.ID]; ok && sl.Noop && vpos == sl.Pos {
			delete(s.voided, sl.ID)
			continue
		}
		if r, ok := s.byID[sl.ID]; ok && !sl.Noop {
			r.placed = false
		}
	}
	s.slots = s.slots[:i]
	j := sort.Search(len(s.runs), func(j int) bool { return s.runs[j].End > from })
	if j < len(s.runs) && s.runs[j].From < from {
		s.runs[j].End = from
		j++
	}
	s.runs = s.runs[:j]
	s.placedEnd = from
}

// Stable takes stable-gp. Positions below it are final: the dedup
// remembers their records for good, and held reads below it are answered.
//
// A replica taken out of its configuration keeps the stable end it had:
// its placements above it may be a replaced primary's, which a newer
// primary's order overrode.
func (s *Shard[W]) Stable(st StableGP, out *ShardOutput[W]) {
	if s.out {
		return
	}
	if st.Stable > s.stable {
		s.stable = st.Stable
	}
	if st.View <= s.view {
		// Of a view whose order it applied. Stable-gp of a newer one
		// may cover positions it placed in an older view that the newer
		// view's flush rebound (it was taken out and has not heard
		// yet): a rejoin keeps no more than this (rejoin.go).
		s.trusted = max(s.trusted, min(st.Stable, s.placedEnd))
	}
	s.stableView = max(s.stableView, st.View)
	s.release(out)
}

// release marks the final records and answers the held reads that became
// readable.
func (s *Shard[W]) release(out *ShardOutput[W]) {
	end := s.Readable()
	for s.markedEnd < len(s.slots) && s.slots[s.markedEnd].Pos < end {
		if sl := s.slots[s.markedEnd]; !sl.Noop {
			s.seen.Mark(sl.ID)
		}
		s.markedEnd++
	}
	kept := s.held[:0]
	for _, h := range s.held {
		// A read held below where the replica's table starts (it joined
		// the order after the read came, joinAt) is not this replica's
		// to answer: it waits for its caller's deadline, and the reader
		// asks another shard.
		if h.pos < end && h.pos >= s.trimmed {
			out.Reads = append(out.Reads, s.answer(h.w, h.pos))
		} else {
			kept = append(kept, h)
		}
	}
	clear(s.held[len(kept):])
	s.held = kept
}

// ErrTrimmed: the position lies below the trim point.
var ErrTrimmed = fmt.Errorf("lazy: position trimmed")

// ErrBusy: the replica holds HeldReadsMax reads already.
var ErrBusy = fmt.Errorf("lazy: too many reads waiting for stable-gp")

// Read reads pos for w: below the readable end it is answered at once
// (the fast path, into out.Reads); above it, held until stable-gp passes
// it (the slow path) or the shell cancels it at its caller's deadline.
func (s *Shard[W]) Read(w W, pos uint64, out *ShardOutput[W]) error {
	switch {
	case pos < s.trimmed:
		return fmt.Errorf("read %d below trim point %d: %w", pos, s.trimmed, ErrTrimmed)
	case pos < s.Readable():
		out.Reads = append(out.Reads, s.answer(w, pos))
		return nil
	case len(s.held) >= s.cfg.HeldReadsMax:
		return fmt.Errorf("read %d above stable %d: %w", pos, s.stable, ErrBusy)
	}
	s.held = append(s.held, heldRead[W]{w: w, pos: pos})
	return nil
}

// Cancel forgets w's held read (its deadline passed).
func (s *Shard[W]) Cancel(w W) {
	s.held = slices.DeleteFunc(s.held, func(h heldRead[W]) bool { return h.w == w })
}

// Held returns how many reads wait.
func (s *Shard[W]) Held() int { return len(s.held) }

func (s *Shard[W]) answer(w W, pos uint64) ReadAnswer[W] {
	a := ReadAnswer[W]{Waiter: w, Pos: pos, Shard: s.owner(pos)}
	if a.Shard != s.cfg.ID {
		return a
	}
	i := sort.Search(len(s.slots), func(i int) bool { return s.slots[i].Pos >= pos })
	sl := s.slots[i]
	a.Noop, a.Local = sl.Noop, sl.local
	return a
}

func (s *Shard[W]) owner(pos uint64) cut.ShardID {
	j := sort.Search(len(s.runs), func(j int) bool { return s.runs[j].End > pos })
	return s.runs[j].Shard
}

// Locate returns the position table from from up to the readable end,
// at most max runs: what a client fetches and caches to find the shard of
// a position.
func (s *Shard[W]) Locate(from uint64, max int) []Run {
	end := s.Readable()
	var out []Run
	j := sort.Search(len(s.runs), func(j int) bool { return s.runs[j].End > from })
	for ; j < len(s.runs) && len(out) < max && s.runs[j].From < end; j++ {
		r := s.runs[j]
		r.From, r.End = maxU(r.From, from), min(r.End, end)
		out = append(out, r)
	}
	return out
}

func maxU(a, b uint64) uint64 { return max(a, b) }

// Scrub forgets the orphans: records stored unbound in a view before the
// stable view, whose metadata no flush bound (their appends were never
// acknowledged), once this replica applied every placement up to
// stable-gp. Later copies of them are refused (ErrWrongView). It returns
// their local indexes, for the shell to reclaim with the log's trim.
func (s *Shard[W]) Scrub() []uint64 {
	if s.placedEnd < s.stable {
		return nil
	}
	var out []uint64
	for id, r := range s.byID {
		if !r.placed && r.view < s.stableView && !(s.pending != nil && s.pending.missing[id]) {
			out = append(out, r.local)
			delete(s.byID, id)
		}
	}
	slices.Sort(out)
	return out
}

// Trim drops positions below pos (at most stable-gp): their records are
// remembered by the dedup alone. It returns the trim point.
func (s *Shard[W]) Trim(pos uint64) uint64 {
	pos = min(pos, s.Readable())
	if pos <= s.trimmed {
		return s.trimmed
	}
	i := sort.Search(len(s.slots), func(i int) bool { return s.slots[i].Pos >= pos })
	for _, sl := range s.slots[:i] {
		if !sl.Noop {
			s.seen.Mark(sl.ID)
			delete(s.byID, sl.ID)
		}
		delete(s.voided, sl.ID)
	}
	s.slots = slices.Delete(s.slots, 0, i)
	s.markedEnd = max(0, s.markedEnd-i)
	j := sort.Search(len(s.runs), func(j int) bool { return s.runs[j].End > pos })
	s.runs = slices.Delete(s.runs, 0, j)
	if len(s.runs) > 0 && s.runs[0].From < pos {
		s.runs[0].From = pos
	}
	s.trimmed = pos
	return pos
}

// Reclaimable returns the local index below which the log holds no
// record this replica still needs (trimmed or scrubbed ones only): the
// shell may delete what lies below it.
func (s *Shard[W]) Reclaimable() uint64 {
	floor := s.len
	for _, r := range s.byID {
		floor = min(floor, r.local)
	}
	return floor
}

// Marks returns the dedup state to persist with a trim.
func (s *Shard[W]) Marks() []ClientMark { return s.seen.Marks() }

// LocalOf returns the local index of a record this replica stores: a
// primary serves a backup's Fetch from it.
func (s *Shard[W]) LocalOf(id RecordID) (local uint64, ok bool) {
	r, ok := s.byID[id]
	if !ok {
		return 0, false
	}
	return r.local, true
}

// joinAt starts the position table of a replica that has placed nothing
// at from, its first mapping's (or, on a backup, its primary's first
// placement's) start: a shard added to a running cluster joins the order
// with the first batch the orderer sends it, and the positions before it
// belong to the shards that existed then. The orderer waits for every
// shard it maps to, so a shard that placed nothing missed no batch of its
// own.
func (s *Shard[W]) joinAt(from uint64) {
	if from <= s.placedEnd || len(s.runs) > 0 || len(s.slots) > 0 || s.pending != nil {
		return
	}
	s.trimmed, s.placedEnd = from, from
}
