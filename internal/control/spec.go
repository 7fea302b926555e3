package control

import (
	"fmt"
	"slices"

	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
)

// Spec is the replicated fix-ante state of a cluster in speculative mode
// (SpecLog): the lease windows that predetermine cuts, the view, and the
// failed shards whose remaining slots are no-ops.
type Spec struct {
	// WindowCuts is W, the number of cuts of every window.
	WindowCuts uint64 `json:"w"`
	// View counts whole-shard failures; speculation made in an older view
	// after ConfirmedGP is void.
	View uint64 `json:"view"`
	// ConfirmedGP is the end of the last cut released before the latest
	// view change: positions below it never change.
	ConfirmedGP uint64 `json:"cgp"`
	// Windows holds the current window and, once announced, the next one.
	// Empty means shards wait for a window before they can predict.
	Windows []fixante.Window `json:"windows,omitempty"`
	// NextWindow is the index the next created window takes.
	NextWindow uint64 `json:"nextWindow"`
	// Fallback says the leader plans no window for now (the rates made
	// fills cost more than speculation saves, spec.Config.EagerAbove):
	// once the announced windows are released, cuts are eager cuts of
	// reported lengths (Eager) until the next window is announced.
	Fallback bool `json:"fallback,omitempty"`
	// Void lists the failed shards that held slots, oldest first; it is
	// kept so that subscribers reading old positions learn the no-ops.
	Void []Void `json:"void,omitempty"`
}

// Void says that a failed shard's entries from local index From on are
// no-ops, delivered to subscribers by the live shard Filler. When no live
// shard is left, Filler is Shard itself (an orphaned void) until a shard
// registers and takes the slots over (adoptOrphans): only then can
// subscribers pass them.
type Void struct {
	Shard  cut.ShardID `json:"shard"`
	From   uint64      `json:"from"`
	Filler cut.ShardID `json:"filler"`
	View   uint64      `json:"view"`
	// ConfirmedGP is the end of the last cut released before the failure.
	ConfirmedGP uint64 `json:"cgp"`
	// Slots are the void positions: the failed shard's slots in the
	// windows announced when it failed (no later window holds it).
	Slots []fixante.Range `json:"slots,omitempty"`
}

// ViewChange is the event of a whole-shard failure in speculative mode.
type ViewChange struct {
	View        uint64
	ConfirmedGP uint64
	Void        Void
}

// WindowCommand announces the next lease window. Only Shard, PerCut and
// Group of each quota are read; the state fixes where the window starts.
// Fallback instead announces no window: the leader falls back to eager
// cuts once the announced windows are released (Spec.Fallback), until
// the next window.
type WindowCommand struct {
	Quotas   []fixante.Quota `json:"q"`
	Groups   int             `json:"g"`
	Fallback bool            `json:"fallback,omitempty"`
}

// NewSpec returns the state of a fresh cluster in speculative mode with
// windows of windowCuts cuts.
func NewSpec(clusterID string, windowCuts uint64) *State {
	s := New(clusterID)
	s.Spec = &Spec{WindowCuts: windowCuts}
	return s
}

// Window returns the window that holds cut index, if it is announced.
func (sp *Spec) Window(index uint64) (fixante.Window, bool) {
	for _, w := range sp.Windows {
		if index >= w.FirstCut && index < w.FirstCut+w.Cuts {
			return w, true
		}
	}
	return fixante.Window{}, false
}

// Eager reports whether cuts are eager cuts of reported lengths now: the
// leader fell back (Fallback) and the announced windows are released.
// Windows that run out without a fallback (every shard excluded, a slow
// plan) leave the shards waiting for the next window as before.
func (sp *Spec) Eager() bool { return sp.Fallback && len(sp.Windows) == 0 }

// VoidOf returns the void record of shard, if it failed holding slots.
func (sp *Spec) VoidOf(shard cut.ShardID) (Void, bool) {
	for _, v := range sp.Void {
		if v.Shard == shard {
			return v, true
		}
	}
	return Void{}, false
}

func (s *State) applyWindow(c WindowCommand) (*fixante.Window, error) {
	sp := s.Spec
	if sp == nil {
		return nil, fmt.Errorf("control: window in eager mode")
	}
	if c.Fallback {
		if sp.Fallback || len(c.Quotas) > 0 {
			return nil, fmt.Errorf("control: fallback already on, or with quotas")
		}
		sp.Fallback = true
		return nil, nil
	}
	if len(sp.Windows) >= 2 {
		return nil, fmt.Errorf("control: next window already announced")
	}
	w := fixante.Window{Index: sp.NextWindow, Cuts: sp.WindowCuts, Groups: c.Groups}
	var prev *fixante.Window
	if n := len(sp.Windows); n > 0 {
		prev = &sp.Windows[n-1]
		w.FirstCut = prev.FirstCut + prev.Cuts
		w.Start = prev.End()
	} else {
		w.FirstCut = s.LastCut.Index + 1
		w.Start = s.LastCut.End
	}
	for _, q := range c.Quotas {
		sh := s.Shard(q.Shard)
		if sh == nil || sh.State != Live {
			return nil, fmt.Errorf("control: window quota for shard %d, which is not live", q.Shard)
		}
		base := s.LastCut.Len(q.Shard)
		if prev != nil {
			if end, ok := prev.ShardEnd(q.Shard); ok {
				base = end
			}
		}
		w.Quotas = append(w.Quotas, fixante.Quota{Shard: q.Shard, PerCut: q.PerCut, Group: q.Group, Base: base})
	}
	slices.SortFunc(w.Quotas, func(a, b fixante.Quota) int { return int(int64(a.Shard) - int64(b.Shard)) })
	if err := w.Validate(); err != nil {
		return nil, err
	}
	sp.Windows = append(sp.Windows, w)
	sp.NextWindow++
	sp.Fallback = false
	return &w, nil
}

// applyRelease commits the next predetermined cut. The leader proposes it
// only once every shard the cut includes has reported its quota; failed
// shards' slots count as no-ops.
func (s *State) applyRelease() (Event, error) {
	sp := s.Spec
	if sp == nil {
		return Event{}, fmt.Errorf("control: release in eager mode")
	}
	idx := s.LastCut.Index + 1
	w, ok := sp.Window(idx)
	if !ok {
		return Event{}, fmt.Errorf("control: cut %d is in no announced window", idx)
	}
	j := idx - w.FirstCut
	next := cut.Cut{Index: idx, Start: s.LastCut.End}
	lens := map[cut.ShardID]uint64{}
	for _, l := range s.LastCut.Lengths {
		lens[l.Shard] = l.Length
	}
	for _, q := range w.Quotas {
		if n, ok := w.Length(q.Shard, j); ok {
			lens[q.Shard] = n
		}
	}
	var total uint64
	for id, n := range lens {
		next.Lengths = append(next.Lengths, cut.Length{Shard: id, Length: n})
		total += n
	}
	slices.SortFunc(next.Lengths, func(a, b cut.Length) int { return int(int64(a.Shard) - int64(b.Shard)) })
	next.End = next.Start + total - s.LastCut.Total()
	assert(cut.CheckSuccessor(s.LastCut, next) == nil, "release built an invalid successor")
	assert(next.End == w.CutStart(j+1), "release disagrees with the window's arithmetic")
	s.LastCut = next
	ev := Event{Cut: &next}
	if j == w.Cuts-1 {
		sp.Windows = sp.Windows[1:]
	}
	for i := range s.Shards {
		sh := &s.Shards[i]
		if sh.State == Finalizing && sh.FinalCut <= next.Index {
			sh.State = Finalized
			sh.FinalLength = next.Len(sh.ID)
			ev.MembershipChanged = true
		}
	}
	return ev, nil
}

// holds returns the last announced window that gives shard a quota.
func (sp *Spec) holds(shard cut.ShardID) (fixante.Window, bool) {
	for i := len(sp.Windows) - 1; i >= 0; i-- {
		if _, ok := sp.Windows[i].Quota(shard); ok {
			return sp.Windows[i], true
		}
	}
	return fixante.Window{}, false
}

// finalizeSpec stops a shard in speculative mode. A leaving shard keeps
// meeting its quotas until the last announced window that holds it ends. A
// failed shard that holds slots starts a new view: its slots after its
// length in the last cut become no-ops, filled by the lowest live shard of
// the windows. A shard that holds no slots is stopped as in eager order
// (with grace cuts while no window is announced).
func (s *State) finalizeSpec(sh *Shard, grace uint64, failed bool) (*ViewChange, bool) {
	sp := s.Spec
	w, held := sp.holds(sh.ID)
	if !held {
		if !sp.Eager() {
			// Only a window that gives it a quota can order what it
			// holds beyond the last cut.
			grace = 0
		}
		// Between windows cuts are eager: a leaving shard gets its
		// grace cuts as in eager order.
		return nil, s.finalize(sh.ID, grace, failed)
	}
	if !failed {
		if sh.State == Finalizing {
			return nil, false
		}
		sh.State = Finalizing
		sh.FinalCut = w.FirstCut + w.Cuts - 1
		return nil, true
	}
	s.finalize(sh.ID, 0, true)
	sp.View++
	sp.ConfirmedGP = s.LastCut.End
	v := Void{Shard: sh.ID, From: s.LastCut.Len(sh.ID), Filler: s.fillerFor(sh.ID, sh.ID), View: sp.View, ConfirmedGP: sp.ConfirmedGP}
	for _, win := range sp.Windows {
		v.Slots = append(v.Slots, win.Slots(sh.ID, v.From)...)
	}
	sp.Void = append(sp.Void, v)
	return &ViewChange{View: sp.View, ConfirmedGP: sp.ConfirmedGP, Void: v}, true
}

// handOffFills gives the slots an earlier failure left shard id to fill
// to another live shard, once id stops being live (it fails or leaves, with
// or without slots of its own): else nobody streams them once its servers
// are gone, and every subscriber waits at the first of them for good. The
// old filler's streams may have sent them already; a subscriber takes
// repeats.
func (s *State) handOffFills(id cut.ShardID) {
	for i := range s.Spec.Void {
		if v := &s.Spec.Void[i]; v.Filler == id && v.Shard != id {
			v.Filler = s.fillerFor(v.Shard, id)
		}
	}
}

// Orphaned reports whether no live shard fills v's slots: every other
// shard was leaving, gone or failed when v's filler was chosen, and none
// has registered since.
func (v Void) Orphaned() bool { return v.Filler == v.Shard }

// adoptOrphans hands every orphaned void to shard id, which just joined
// and so is live: its servers stream the slots as skips from then on, as
// a filler chosen at the failure would have. The slots themselves do not
// change, so no position does. The register event ships the new state
// to every server and, through the status, to subscribers.
func (s *State) adoptOrphans(id cut.ShardID) {
	for i := range s.Spec.Void {
		if v := &s.Spec.Void[i]; v.Orphaned() {
			v.Filler = id
		}
	}
}

// fillerFor picks the live shard that delivers failed's no-op slots: the
// lowest-id live shard other than failed and gone. It need not hold a quota:
// it only streams the slots as skips, and when the failed shard was the
// only one the windows give a quota (the others excluded as stragglers),
// nobody else would. It returns failed when there is none (an orphaned
// void, which the next shard to register adopts).
func (s *State) fillerFor(failed, gone cut.ShardID) cut.ShardID {
	best := failed
	for _, sh := range s.Shards {
		if sh.ID == failed || sh.ID == gone || sh.State != Live {
			continue
		}
		if best == failed || sh.ID < best {
			best = sh.ID
		}
	}
	return best
}
