package order

import (
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/spec"
)

// Spec is the speculative (fix-ante) ordering policy around
// spec.Sequencer: announce the next lease window when due, release the
// predetermined cuts every shard satisfied, tell shards that hold a cut
// back to catch up, and suspect those that ignore it.
type Spec struct {
	cfg spec.Config
	seq *spec.Sequencer
	st  *control.State
	// window tracks the announcement awaiting commit, under the one key
	// windowSlot: the policy does not know the command ids the Leader
	// gives its proposals, so a window that commits after its slot
	// expired frees the slot of the next one early.
	window Inflight
	// released is the furthest release proposed: with several in flight,
	// the next must reach further.
	released uint64
	// eager cuts between windows when the sequencer found fills too dear
	// for the rates (spec.Config.EagerAbove).
	eager *Eager
}

var _ Policy = (*Spec)(nil)

// windowSlot is the key of the one window announcement in flight.
const windowSlot = "window"

// NewSpec returns the speculative policy with cfg.
func NewSpec(cfg spec.Config) *Spec {
	return &Spec{cfg: cfg, seq: spec.NewSequencer(cfg), window: NewInflight(windowsInflightMax), eager: NewEager(cfg.Interval)}
}

// Observe implements Policy.
func (p *Spec) Observe(st *control.State, now time.Time) {
	p.st = st
	p.seq.Observe(st, now)
	p.eager.Observe(st, now)
	if len(st.Spec.Windows) > 0 {
		// An eager cut still in flight when a window was announced
		// commits nothing: after the window, its lengths must be cut
		// again.
		p.eager.Forget()
	}
}

// Report implements Policy; spec.Sequencer.Report says what is news, and
// between windows the eager policy too.
func (p *Spec) Report(r Report, now time.Time) bool {
	news := p.seq.Report(r.Shard, r.Length, r.Records, r.Backlog, now)
	return p.eager.Report(r, now) && p.seq.Eager() || news
}

// CutsInflightMax implements Policy.
func (p *Spec) CutsInflightMax() int { return releasesInflightMax }

// Committed implements Policy. A window, even one the state refused, frees
// the window slot: a refused window was planned on a state that changed
// since, so the policy must plan again now.
func (p *Spec) Committed(cmd control.Command) bool {
	if cmd.Window == nil {
		return false
	}
	p.window.Done(windowSlot)
	return true
}

// Forget implements Policy.
func (p *Spec) Forget() {
	p.released = 0
	p.eager.Forget()
}

// Step implements Policy.
func (p *Spec) Step(now time.Time, free int) Plan {
	var plan Plan
	p.window.Expire(now)
	if p.window.Free() > 0 {
		if w, ok := p.seq.PlanWindow(now); ok {
			p.window.Take(windowSlot, now)
			plan.Propose = append(plan.Propose, control.Command{Window: w})
		}
	}
	last := p.st.LastCut.Index
	if through := last + p.seq.Releasable(now); through > max(last, p.released) && free > 0 {
		p.released = through
		plan.Propose = append(plan.Propose, control.Command{Cut: &control.CutCommand{ReleaseThrough: through}})
	}
	if p.seq.Eager() && len(plan.Propose) == 0 {
		// Eager's at-once test counts its own bound of cuts in flight.
		ep := p.eager.Step(now, free-(releasesInflightMax-cutsInflightMax))
		plan.Propose, plan.Wake = ep.Propose, ep.Wake
		return plan
	}
	plan.LagFixes = p.seq.LagFixes(now)
	plan.Suspects = p.seq.Suspects(now)
	plan.Stats.LagFixes, plan.Stats.QuotaChanges = p.seq.TakeStats()
	if p.seq.Waiting() {
		// Time alone moves a waiting cut towards a lag-fix and an
		// unanswered lag-fix towards a suspect.
		plan.Wake = p.cfg.Interval / 2
	}
	return plan
}
