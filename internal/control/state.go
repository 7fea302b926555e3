// Package control is the ordering layer's replicated state: the committed
// cuts, the shard table, the trim point. Every ordering replica applies the
// same commands in Raft log order and so holds the same state. It is pure:
// commands in, events out, no I/O, clocks or goroutines.
package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
	"github.com/augur-log/augur/internal/lazy"
)

// ShardState is a shard's place in its lifecycle.
type ShardState int

const (
	// Live shards take appends and appear in cuts.
	Live ShardState = iota
	// Finalizing shards still appear in cuts up to FinalCut.
	Finalizing
	// Finalized shards never grow again; their records stay readable.
	Finalized
)

func (s ShardState) String() string {
	switch s {
	case Live:
		return "live"
	case Finalizing:
		return "finalizing"
	case Finalized:
		return "finalized"
	}
	return fmt.Sprintf("ShardState(%d)", int(s))
}

// Replica is one storage server of a shard.
type Replica struct {
	ID          string `json:"id"`
	Addr        string `json:"addr"`
	Incarnation uint64 `json:"inc"`
	// Pending marks a replica that joined in speculative order and that
	// the primary has not vouched for yet: its primary may have
	// acknowledged entries (streamed to subscribers) that this replica
	// does not hold yet. It is no survivor of the primary's failure until
	// a Confirm clears it (see ReconfigCommand).
	Pending bool `json:"pending,omitempty"`
}

// FirstEpoch numbers a shard's configuration at registration.
const FirstEpoch = 1

// Shard is one row of the shard table. Replicas is the shard's current
// configuration, numbered by Epoch; Replicas[0] is the primary.
type Shard struct {
	ID       cut.ShardID `json:"id"`
	Group    string      `json:"group"`
	Replicas []Replica   `json:"replicas"`
	// Epoch numbers the configurations: 1 at registration, one more with
	// every ReconfigCommand that changes it. A storage server refuses
	// replication, acknowledgements and reports of an older epoch, which
	// fences a replica taken out of the configuration.
	Epoch uint64 `json:"epoch"`
	// Out lists the replicas taken out of the configuration (failed,
	// stopped, restarted). They hold no new records; one may rejoin
	// after it caught up from a replica of the configuration.
	Out   []Replica  `json:"out,omitempty"`
	State ShardState `json:"state"`
	// AddedCut is the first cut that may order the shard's records.
	AddedCut uint64 `json:"added"`
	// FinalCut is the last cut that may order them, once not Live.
	FinalCut uint64 `json:"finalCut,omitempty"`
	// FinalLength is the shard's length in FinalCut, once Finalized.
	FinalLength uint64 `json:"finalLen,omitempty"`
	// Failed is set when a replica failure finalized the shard.
	Failed bool `json:"failed,omitempty"`
	// Quota is the per-cut quota the shard asked for when it joined
	// (speculative mode; 0 lets the leader choose).
	Quota uint64 `json:"quota,omitempty"`
}

// State is the replicated control state.
type State struct {
	ClusterID string `json:"cluster"`
	// EventSeq numbers applied state changes densely from 1.
	EventSeq uint64  `json:"seq"`
	LastCut  cut.Cut `json:"cut"`
	// Shards is sorted by id.
	Shards            []Shard     `json:"shards"`
	NextShardID       cut.ShardID `json:"nextShard"`
	MembershipVersion uint64      `json:"mv"`
	Trim              uint64      `json:"trim"`
	// Spec is set in speculative mode, where lease windows predetermine
	// every cut; nil in eager mode.
	Spec *Spec `json:"spec,omitempty"`
	// Lazy is the sequencing configuration of a cluster in lazy order
	// (its view, replicas, leader and the stable end the view started
	// at); nil until the first view is recorded, and in other modes.
	Lazy *lazy.SeqConfig `json:"lazy,omitempty"`
	// LazyClaim is the newest view a view change of the sequencing layer
	// claimed, and which control plane (an ordering leader's term) owns
	// it; a view's configuration is recorded only under its claim.
	LazyClaim *lazy.Claim `json:"lazyClaim,omitempty"`
	// LazyFlush is the newest view change's flush, recorded under its
	// claim before any shard sees it: a later view change of the same
	// sealed view flushes it again.
	LazyFlush *lazy.Mapping `json:"lazyFlush,omitempty"`
}

// New returns the state of a fresh cluster.
func New(clusterID string) *State {
	return &State{ClusterID: clusterID}
}

// Command is one proposal to the ordering layer. Exactly one field is set.
type Command struct {
	// ID lets the proposing replica match the applied command to its waiter.
	ID       string           `json:"id,omitempty"`
	Cut      *CutCommand      `json:"cut,omitempty"`
	Register *RegisterCommand `json:"reg,omitempty"`
	Finalize *FinalizeCommand `json:"fin,omitempty"`
	Trim     *TrimCommand     `json:"trim,omitempty"`
	Window   *WindowCommand   `json:"win,omitempty"`
	Reconfig *ReconfigCommand `json:"cfg,omitempty"`
	// SeqConfig records a sequencing configuration (lazy order): the
	// control plane's view change, or the first view.
	SeqConfig *lazy.SeqConfig `json:"seqcfg,omitempty"`
	// SeqClaim claims the next view of the sequencing layer for one view
	// change, before it seals the current one.
	SeqClaim *lazy.Claim `json:"seqclaim,omitempty"`
	// SeqFlush records the flush of the claimed view change.
	SeqFlush *lazy.Mapping `json:"seqflush,omitempty"`
}

// CutCommand proposes the next cut from reported lengths. Force asks for a
// cut even when nothing grew, so finalizing shards reach their final cut.
// In speculative mode a non-zero ReleaseThrough commits the predetermined
// cuts up to that index, which the leader found satisfied; a repeated or
// stale release (a proposal of an old leader) commits nothing twice.
// Lengths are read there only between windows (Spec.Eager, the leader's
// eager fallback); a cut of lengths that finds a window announced commits
// nothing.
type CutCommand struct {
	Lengths        []cut.Length `json:"l,omitempty"`
	Force          bool         `json:"f,omitempty"`
	ReleaseThrough uint64       `json:"r,omitempty"`
}

// RegisterCommand adds a shard served by Replicas (the first is primary).
// Every shard not finalized whose configuration names one of the replicas
// with another incarnation is reconfigured first without it, as a
// ReconfigCommand would: that server restarted, and it rejoins only after
// catching up. A shard left with no replica is finalized as failed.
// In speculative mode the new shard fills the slots of every failed shard
// that no live shard fills (Void.Orphaned).
type RegisterCommand struct {
	Group    string    `json:"group"`
	Replicas []Replica `json:"replicas"`
	Quota    uint64    `json:"quota,omitempty"`
}

// FinalizeCommand stops a shard. With Failed, the shard ends at its length in
// the last committed cut; otherwise GraceCuts more cuts may still order its
// records.
type FinalizeCommand struct {
	Shard     cut.ShardID `json:"shard"`
	GraceCuts uint64      `json:"grace"`
	Failed    bool        `json:"failed,omitempty"`
}

// ReconfigCommand commits a new configuration of a shard's replicas at
// Epoch+1. Epoch is the configuration the proposer decided on: if the
// shard has moved past it (or is finalized), the command changes nothing.
// Remove takes servers out of the configuration (into Out); if the primary
// is among them, the first surviving replica in configuration order
// becomes primary: it holds every record a report ever covered, since a
// report covers only what every replica of the configuration holds.
// Removing every replica finalizes the shard as failed (in speculative
// mode, a view change) and keeps its last configuration for readers.
// Join adds a replica that caught up as the last backup (leaving Out);
// Held is how many of the shard's entries it holds. A Join whose replica
// holds fewer entries than the last committed cut orders changes nothing:
// it would serve, and might become primary of, a shard it cannot vouch
// for. (The leader refuses one that holds less than was reported, too:
// see order.Leader.Rejoin.) A Remove naming a server outside the
// configuration, or a Join of one inside it, makes the whole command
// change nothing. So does a Join to a shard that is no longer live: the
// leader stops holding back its reports once it finalizes (its grace
// cuts must come), so a cut may order entries past Held before the Join
// commits.
//
// In speculative order a primary acknowledges an append once every
// replica of its configuration holds it, not once a cut orders it, so it
// may acknowledge entries past Held between the leader's decision and
// the Join's commit; the new primary's join resends them. A joined
// replica is therefore Pending: if the primary fails, only a replica that
// is not pending may take over (none left: the shard failed, as it would
// have without the join). Confirm (alone, in the same Epoch, which it
// does not change) clears Pending once the primary reported in that
// configuration: it reports only when every replica holds everything it
// ever acknowledged (see shard.Replica.Report).
//
// In lazy order (once its first sequencing view is recorded: before it,
// no append was acknowledged) a joined replica is Pending too: the
// configuration acknowledged appends between its copy and its join. It
// catches up under its primary before a Confirm naming it (Vouched)
// clears it alone (see lazy's rejoin notes).
// ReplicasMax is the most replicas a shard's configuration holds, the
// largest storage group a cluster file may list (config.GroupServersMax):
// a Join past it changes nothing. A server that replaces one of a full
// group joins once the detector took the one it replaces out.
const ReplicasMax = 3

type ReconfigCommand struct {
	Shard   cut.ShardID `json:"shard"`
	Epoch   uint64      `json:"epoch"`
	Remove  []string    `json:"rm,omitempty"`
	Join    *Replica    `json:"join,omitempty"`
	Held    uint64      `json:"held,omitempty"`
	Confirm bool        `json:"confirm,omitempty"`
	Vouched string      `json:"vouched,omitempty"`
}

// TrimCommand moves the trim point up to Position, which must not pass
// the log's final end: the last committed cut's, or in lazy order, which
// commits no cuts, Stable, the stable-gp the proposer learned from the
// sequencing leader (positions below it never change).
type TrimCommand struct {
	Position uint64 `json:"pos"`
	Stable   uint64 `json:"stable,omitempty"`
}

// Encode serializes a command for the Raft log.
func (c Command) Encode() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("control: encode command: %v", err))
	}
	return b
}

// DecodeCommand parses a Raft log entry.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if err := decodeStrict(b, &c); err != nil {
		return Command{}, fmt.Errorf("decode command: %w", err)
	}
	return c, nil
}

// decodeStrict parses JSON that this version of augur wrote. A field it does
// not know can only come from a newer version (a rolling upgrade): applying
// what it understands and dropping the rest would let the replicas of the
// two versions diverge in silence, so the field is an error.
func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w (written by a newer version of augur?)", err)
	}
	if d.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}

// Event describes one applied change. Cut is set when a cut was committed;
// MembershipChanged when the shard table changed; Registered names the shard a
// RegisterCommand created.
type Event struct {
	Seq               uint64
	Cut               *cut.Cut
	MembershipChanged bool
	Registered        cut.ShardID
	Trim              uint64
	// Window is a newly announced lease window (speculative mode).
	Window *fixante.Window
	// View is set when a whole-shard failure started a new view.
	View *ViewChange
	// Cuts holds every cut a multi-cut release committed, Cut the last.
	Cuts []cut.Cut
	// LazyChanged says a new sequencing configuration was recorded.
	LazyChanged bool
	// Fallback says the leader fell back to eager cuts (Spec.Fallback).
	Fallback bool
}

// Apply applies one committed command. It returns the event and whether the
// state changed at all; a command that changes nothing (a stale cut, a
// repeated finalize) yields no event and no sequence number.
func (s *State) Apply(c Command) (Event, bool) {
	var ev Event
	switch {
	case c.Cut != nil && s.Spec != nil && c.Cut.ReleaseThrough > 0:
		ev = s.applyReleases(c.Cut.ReleaseThrough)
	case c.Cut != nil && s.Spec != nil:
		// Between windows, a speculative cluster cuts as an eager one
		// does (the leader's fallback where fills would cost more than
		// speculation saves); once a window is announced, its
		// predetermined cuts alone may follow.
		if s.Spec.Eager() {
			ev = s.applyCut(*c.Cut)
		}
	case c.Cut != nil:
		ev = s.applyCut(*c.Cut)
	case c.Window != nil:
		if w, err := s.applyWindow(*c.Window); err == nil {
			ev.Window, ev.Fallback = w, w == nil
		}
	case c.Register != nil:
		ev = s.applyRegister(*c.Register)
	case c.Finalize != nil:
		ev.MembershipChanged, ev.View = s.stop(c.Finalize.Shard, c.Finalize.GraceCuts, c.Finalize.Failed)
	case c.Reconfig != nil:
		ev.MembershipChanged, ev.View = s.applyReconfig(*c.Reconfig)
	case c.Trim != nil:
		if c.Trim.Position > s.Trim && c.Trim.Position <= s.FinalEnd(c.Trim.Stable) {
			s.Trim = c.Trim.Position
			ev.Trim = s.Trim
		}
	case c.SeqConfig != nil:
		ev.LazyChanged = s.applySeqConfig(*c.SeqConfig)
	case c.SeqClaim != nil:
		s.applySeqClaim(*c.SeqClaim)
	case c.SeqFlush != nil:
		s.applySeqFlush(*c.SeqFlush)
	}
	if ev.Cut == nil && !ev.MembershipChanged && ev.Trim == 0 && ev.Window == nil && !ev.LazyChanged && !ev.Fallback {
		return Event{}, false
	}
	if ev.MembershipChanged {
		s.MembershipVersion++
	}
	s.EventSeq++
	ev.Seq = s.EventSeq
	ev.Trim = s.Trim
	return ev, true
}

// applySeqConfig records a sequencing configuration of a newer view; a
// configuration of the recorded view or an older one (a stale proposal of
// an old leader) changes nothing, and stable-gp never moves back. After
// the first view, a view is recorded only under its claim, the newest: a
// deposed leader's view change, overtaken by a newer claim, never records.
func (s *State) applySeqConfig(c lazy.SeqConfig) bool {
	if s.Lazy != nil && (c.View <= s.Lazy.View || c.Stable < s.Lazy.Stable) {
		return false
	}
	if s.Lazy != nil && (s.LazyClaim == nil || s.LazyClaim.View != c.View) {
		return false
	}
	if len(c.Replicas) == 0 || !slices.Contains(c.Replicas, c.Leader) {
		return false
	}
	c.Replicas = slices.Clone(c.Replicas)
	s.Lazy = &c
	return true
}

// applySeqFlush records the flush of the claimed view change: one per
// sealed view (the first one recorded after the view was recorded), from
// at or above its stable end, under the newest claim.
func (s *State) applySeqFlush(m lazy.Mapping) {
	if s.Lazy == nil || s.LazyClaim == nil || m.View != s.LazyClaim.View || m.From < s.Lazy.Stable {
		return
	}
	if f := s.LazyFlush; f != nil && f.View > s.Lazy.View {
		return
	}
	m.Records = slices.Clone(m.Records)
	s.LazyFlush = &m
}

// applySeqClaim records a claim of a view newer than every view recorded
// or claimed; the first view needs none.
func (s *State) applySeqClaim(c lazy.Claim) {
	if s.Lazy == nil || c.View <= s.Lazy.View || (s.LazyClaim != nil && c.View <= s.LazyClaim.View) || c.Owner == "" {
		return
	}
	s.LazyClaim = &c
}

func (s *State) applyCut(c CutCommand) Event {
	proposed := make([]cut.Length, 0, len(c.Lengths))
	for _, l := range c.Lengths {
		sh := s.Shard(l.Shard)
		// Only shards the table admits to the next cut may grow.
		if sh == nil || sh.State == Finalized || sh.AddedCut > s.LastCut.Index+1 {
			continue
		}
		proposed = append(proposed, l)
	}
	next, grew := cut.Next(s.LastCut, proposed, func(id cut.ShardID) (uint64, bool) {
		sh := s.Shard(id)
		if sh != nil && sh.State == Finalized {
			return sh.FinalLength, true
		}
		return 0, false
	})
	finalizing := false
	for _, sh := range s.Shards {
		if sh.State == Finalizing {
			finalizing = true
		}
	}
	if !grew && !(c.Force && finalizing) {
		return Event{}
	}
	assert(cut.CheckSuccessor(s.LastCut, next) == nil, "cut.Next built an invalid successor")
	s.LastCut = next
	ev := Event{Cut: &next}
	for i := range s.Shards {
		sh := &s.Shards[i]
		if sh.State == Finalizing && sh.FinalCut <= next.Index {
			sh.State = Finalized
			sh.FinalLength = next.Len(sh.ID)
			ev.MembershipChanged = true
		}
	}
	return ev
}

func (s *State) applyRegister(r RegisterCommand) Event {
	ev := Event{MembershipChanged: true}
	for _, rep := range r.Replicas {
		for i := range s.Shards {
			sh := &s.Shards[i]
			if sh.State == Finalized {
				continue
			}
			for _, old := range sh.Replicas {
				if old.ID == rep.ID && old.Incarnation != rep.Incarnation {
					if _, v := s.applyReconfig(ReconfigCommand{Shard: sh.ID, Epoch: sh.Epoch, Remove: []string{old.ID}}); v != nil {
						ev.View = v
					}
					break
				}
			}
		}
	}
	id := s.NextShardID
	s.NextShardID++
	s.Shards = append(s.Shards, Shard{
		ID:       id,
		Group:    r.Group,
		Replicas: slices.Clone(r.Replicas),
		Epoch:    FirstEpoch,
		State:    Live,
		AddedCut: s.LastCut.Index + 1,
		Quota:    r.Quota,
	})
	if s.Spec != nil {
		s.adoptOrphans(id)
	}
	ev.Registered = id
	return ev
}

// applyReconfig commits a new configuration (see ReconfigCommand); it
// reports whether the shard changed and, in speculative mode, the view
// change a removal of every replica caused.
func (s *State) applyReconfig(c ReconfigCommand) (bool, *ViewChange) {
	sh := s.Shard(c.Shard)
	if sh == nil || sh.State == Finalized || c.Epoch != sh.Epoch || (len(c.Remove) == 0 && c.Join == nil) == !c.Confirm {
		return false, nil
	}
	if c.Confirm {
		changed := false
		for i := range sh.Replicas {
			if c.Vouched != "" && sh.Replicas[i].ID != c.Vouched {
				continue
			}
			changed = changed || sh.Replicas[i].Pending
			sh.Replicas[i].Pending = false
		}
		return changed, nil
	}
	in := func(id string) bool {
		return slices.ContainsFunc(sh.Replicas, func(r Replica) bool { return r.ID == id })
	}
	for _, id := range c.Remove {
		if !in(id) {
			return false, nil
		}
	}
	if c.Join != nil && (sh.State != Live || c.Join.ID == "" || in(c.Join.ID) || slices.Contains(c.Remove, c.Join.ID) || c.Held < s.LastCut.Len(sh.ID) ||
		len(sh.Replicas)-len(c.Remove) >= ReplicasMax) {
		return false, nil
	}
	var kept, out []Replica
	for _, r := range sh.Replicas {
		if slices.Contains(c.Remove, r.ID) {
			out = append(out, r)
		} else {
			kept = append(kept, r)
		}
	}
	if len(kept) > 0 && kept[0].ID != sh.Replicas[0].ID && kept[0].Pending {
		// The primary left: the first replica vouched for takes over
		// (in lazy order one confirmed alone may follow one pending);
		// none: no replica holds everything the primary acknowledged.
		if i := slices.IndexFunc(kept, func(r Replica) bool { return !r.Pending }); i > 0 {
			first := kept[i]
			kept = append([]Replica{first}, slices.Delete(kept, i, i+1)...)
		} else {
			kept = nil
		}
	}
	if len(kept) == 0 && c.Join == nil {
		// No replica holds the shard's records any more.
		return s.stop(sh.ID, 0, true)
	}
	if len(kept) == 0 {
		// A joining replica caught up from a configuration that no
		// longer exists; it cannot vouch for what that one made durable.
		return false, nil
	}
	sh.Out = slices.DeleteFunc(sh.Out, func(r Replica) bool {
		return slices.ContainsFunc(out, func(o Replica) bool { return o.ID == r.ID }) || (c.Join != nil && r.ID == c.Join.ID)
	})
	sh.Out = append(sh.Out, out...)
	if c.Join != nil {
		rep := *c.Join
		rep.Pending = s.Spec != nil || s.Lazy != nil
		kept = append(kept, rep)
	}
	sh.Replicas = kept
	sh.Epoch++
	return true, nil
}

// stop finalizes a shard in either mode; it reports whether the shard
// changed and, in speculative mode, the view change a failure caused.
func (s *State) stop(id cut.ShardID, grace uint64, failed bool) (bool, *ViewChange) {
	sh := s.Shard(id)
	if sh == nil || sh.State == Finalized {
		return false, nil
	}
	if s.Spec == nil {
		return s.finalize(id, grace, failed), nil
	}
	v, changed := s.finalizeSpec(sh, grace, failed)
	if changed {
		s.handOffFills(id)
	}
	return changed, v
}

// applyReleases commits the predetermined cuts through index through,
// stopping at the first that is not announced.
func (s *State) applyReleases(through uint64) Event {
	var ev Event
	for s.LastCut.Index < through {
		one, err := s.applyRelease()
		if err != nil {
			break
		}
		ev.Cuts = append(ev.Cuts, *one.Cut)
		ev.Cut = one.Cut
		ev.MembershipChanged = ev.MembershipChanged || one.MembershipChanged
	}
	return ev
}

// finalize reports whether it changed the shard.
func (s *State) finalize(id cut.ShardID, grace uint64, failed bool) bool {
	sh := s.Shard(id)
	if sh == nil || sh.State == Finalized {
		return false
	}
	if failed || grace == 0 {
		// The last committed cut already decided what is ordered; nothing
		// after it ever will be.
		sh.State = Finalized
		sh.FinalCut = s.LastCut.Index
		sh.FinalLength = s.LastCut.Len(id)
		sh.Failed = failed
		return true
	}
	if sh.State == Finalizing {
		return false
	}
	sh.State = Finalizing
	sh.FinalCut = s.LastCut.Index + grace
	return true
}

// Shard returns the table row for id, or nil.
func (s *State) Shard(id cut.ShardID) *Shard {
	i, ok := slices.BinarySearchFunc(s.Shards, id, func(sh Shard, id cut.ShardID) int {
		return int(int64(sh.ID) - int64(id))
	})
	if !ok {
		return nil
	}
	return &s.Shards[i]
}

// Primary reports whether server is the primary of a shard not finalized:
// one that acknowledges appends when cuts commit.
func (s *State) Primary(server string) bool {
	for _, sh := range s.Shards {
		if sh.State != Finalized && len(sh.Replicas) > 0 && sh.Replicas[0].ID == server {
			return true
		}
	}
	return false
}

// Tail is the number of ordered records: the next position to be assigned.
func (s *State) Tail() uint64 { return s.LastCut.End }

// FinalEnd is the end of the positions that never change: the last
// committed cut's end, or in lazy order stable, the stable-gp the caller
// learned from the sequencing leader (at least the recorded view's).
func (s *State) FinalEnd(stable uint64) uint64 {
	if s.Lazy == nil {
		return s.LastCut.End
	}
	return max(s.LastCut.End, s.Lazy.Stable, stable)
}

// Snapshot serializes the state.
func (s *State) Snapshot() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("control: snapshot: %v", err))
	}
	return b
}

// Restore replaces the state with a snapshot.
func (s *State) Restore(b []byte) error {
	var n State
	if err := decodeStrict(b, &n); err != nil {
		return fmt.Errorf("restore control state: %w", err)
	}
	*s = n
	return nil
}

// Clone returns a deep copy, for readers outside the applying goroutine.
func (s *State) Clone() *State {
	n := *s
	n.LastCut.Lengths = slices.Clone(s.LastCut.Lengths)
	n.Shards = make([]Shard, len(s.Shards))
	for i, sh := range s.Shards {
		sh.Replicas = slices.Clone(sh.Replicas)
		sh.Out = slices.Clone(sh.Out)
		n.Shards[i] = sh
	}
	if s.Spec != nil {
		sp := *s.Spec
		sp.Windows = make([]fixante.Window, len(s.Spec.Windows))
		for i, w := range s.Spec.Windows {
			w.Quotas = slices.Clone(w.Quotas)
			sp.Windows[i] = w
		}
		sp.Void = make([]Void, len(s.Spec.Void))
		for i, v := range s.Spec.Void {
			v.Slots = slices.Clone(v.Slots)
			sp.Void[i] = v
		}
		n.Spec = &sp
	}
	lz := s.LazyControl()
	n.Lazy, n.LazyClaim, n.LazyFlush = lz.Config, lz.Claim, lz.Flush
	return &n
}

// LazyControl is what lazy order's control plane reads from the state:
// copies of the sequencing configuration, claim and flush, and the shards
// a view change's flush goes to. A finalized shard is not one of them: it
// never grows again (nor holds a position of a later flush), and a failed
// one has no replica left to acknowledge the flush.
func (s *State) LazyControl() lazy.ControlState {
	var st lazy.ControlState
	if s.Lazy != nil {
		c := *s.Lazy
		c.Replicas = slices.Clone(s.Lazy.Replicas)
		st.Config = &c
	}
	if s.LazyClaim != nil {
		c := *s.LazyClaim
		st.Claim = &c
	}
	if s.LazyFlush != nil {
		f := *s.LazyFlush
		f.Records = slices.Clone(s.LazyFlush.Records)
		st.Flush = &f
	}
	for _, sh := range s.Shards {
		if sh.State != Finalized {
			st.Shards = append(st.Shards, sh.ID)
		}
	}
	st.NextShard = s.NextShardID
	return st
}

func assert(ok bool, msg string) {
	if !ok {
		panic("control: invariant violated: " + msg)
	}
}
