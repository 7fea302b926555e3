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
}

var _ Policy = (*Spec)(nil)

// windowSlot is the key of the one window announcement in flight.
const windowSlot = "window"

// NewSpec returns the speculative policy with cfg.
func NewSpec(cfg spec.Config) *Spec {
	return &Spec{cfg: cfg, seq: spec.NewSequencer(cfg), window: NewInflight(windowsInflightMax)}
}

// Observe implements Policy.
func (p *Spec) Observe(st *control.State, now time.Time) {
	p.st = st
	p.seq.Observe(st, now)
}

// Report implements Policy; spec.Sequencer.Report says what is news.
func (p *Spec) Report(r Report, now time.Time) bool {
	return p.seq.Report(r.Shard, r.Length, r.Records, r.Backlog, now)
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
func (p *Spec) Forget() { p.released = 0 }

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
