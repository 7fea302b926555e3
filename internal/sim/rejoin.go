package sim

// Rejoin: a copy out of its live shard's configuration (its server
// restarted, or the configuration fenced it) catches up from the
// configuration's replica and asks the leader to add it back, through the
// same cores a storage server drives (internal/storage's rejoin.go): the
// shard core's PrepareRejoin, CatchUp, AssignFetched and RejoinReady, and
// the leader core's Rejoin. Once the Join commits, the primary joins the
// copy (Replica.Join, BackupJoined) and resends what it lacks. A scenario
// may crash the source mid-copy, or the catching-up copy itself.

import (
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/order"
	"github.com/augur-log/augur/internal/segment"
	core "github.com/augur-log/augur/internal/shard"
)

// errNoLeader refuses a request that finds no ordering leader.
var errNoLeader = errors.New("no ordering leader")

// rejoinAskAgainAfter is how long a copy that asked waits for the
// configuration that takes it in before it asks again (the proposal may
// have been lost with a leader).
const rejoinAskAgainAfter = 20 * time.Millisecond

// planRejoin chooses, from its own random source so that the rest of the
// scenario stays as the seed drew it, which crashes fail again during the
// rejoin that follows their restart: the source dies after the first
// batch (only under the durable default, where its crash loses nothing
// acknowledged), or the catching-up copy does, or (durable default too)
// the primary dies as the copy is taken back in, before it resent what
// the copy lacks (in speculative order the copy is then no survivor,
// control.Replica.Pending, and the shard fails as a whole; in eager order
// it holds everything a cut may order and takes over), or once the copy
// is confirmed (then it holds everything acknowledged and takes over).
func (sc *scenario) planRejoin(r *rand.Rand) {
	for i := range sc.crashes {
		x := &sc.crashes[i]
		switch r.IntN(6) {
		case 0:
			x.rejoinSourceDies = sc.sync.durable()
		case 1:
			x.diesRejoining = true
		case 2, 3:
			if sc.sync.durable() {
				x.primaryDies = primaryDiesAtJoin + primaryDeath(r.IntN(2))
			}
		}
	}
}

// maybeRejoin starts copy c's rejoin if its core says it should and none
// runs for its incarnation.
func (sh *shard) maybeRejoin(c *copyOf) {
	if !c.up || !c.r.Rejoining() || c.rejoinFor == c.inc+1 || sh.finalized || c.repairing {
		return
	}
	c.rejoinFor = c.inc + 1
	sh.rejoinRound(c)
}

// rejoinRound runs one round of c's rejoin: prepare, fetch the tail and
// the positions from the configuration's replica, then ask.
func (sh *shard) rejoinRound(c *copyOf) {
	s := sh.s
	inc := c.inc
	if !c.up || c.inc != inc || sh.finalized || sh.member[c.idx] {
		return
	}
	plan, err := c.r.PrepareRejoin()
	if err != nil {
		s.tracef("shard %d: %s does not rejoin: %v", sh.id, c.name(), err)
		return
	}
	again := func() {
		s.after(catchUpRetryEvery, func() {
			if c.inc == inc {
				sh.rejoinRound(c)
			}
		})
	}
	// The configuration's replicas, the primary first.
	var srcs []string
	if sh.member[sh.prim] {
		srcs = append(srcs, sh.copies[sh.prim].server)
	}
	for i, o := range sh.copies {
		if sh.member[i] && i != sh.prim {
			srcs = append(srcs, o.server)
		}
	}
	srcs = core.RejoinSources(srcs, c.server)
	if len(srcs) == 0 || sh.epoch != plan.Epoch {
		again()
		return
	}
	src := sh.copies[slices.IndexFunc(sh.copies, func(o *copyOf) bool { return o.server == srcs[0] })]
	if s.plant == bugRejoinBehind {
		sh.rejoinAsk(c, src, plan, inc)
		return
	}
	cu, err := core.NewCatchUp(core.CatchUpConfig{Gaps: plan.Gaps, Sources: 1})
	if err != nil {
		s.errorf("shard %d %s: %v", sh.id, c.name(), err)
		return
	}
	s.tracef("shard %d: %s catches up from %s to rejoin configuration %d (from local %d)", sh.id, c.name(), src.name(), plan.Epoch, plan.Gaps[0].First)
	var step func()
	step = func() {
		if c.inc != inc {
			return // c crashed again: its restart starts over
		}
		if cu.Done() {
			sh.rejoinAsk(c, src, plan, inc)
			return
		}
		f, ok := cu.Next()
		role := src.r.Role()
		if !ok || !src.running() || role != core.RolePrimary && role != core.RoleBackup {
			if ok {
				cu.Ended(false)
			}
			again()
			return
		}
		// The planted unchecked copy strikes repairs only (served 0 here):
		// a rejoiner may crash again before it serves what it copied.
		entries, sums := sh.fetchBatch(src, f, 0)
		if len(entries) == 0 {
			cu.StreamEnded() // the source holds no more
			s.after(0, step)
			return
		}
		srcInc := src.inc
		s.after(catchUpBatchDelay, func() {
			if c.inc != inc {
				return
			}
			if src.inc != srcInc {
				cu.Ended(false)
				step()
				return
			}
			w, ok, err := cu.Received(s.now, f.First, entries, sums, 0)
			if err != nil {
				s.tracef("shard %d: %s refuses a fetched batch: %v", sh.id, c.name(), err)
				cu.Ended(true)
				step()
				return
			}
			if ok {
				if err := c.r.Repair(w); errors.Is(err, core.ErrRejoined) {
					return // its primary sends it the rest
				} else if err != nil {
					s.errorf("shard %d %s: %v", sh.id, c.name(), err)
					return
				}
				c.unsynced()
				var out core.Output[int64]
				c.r.Tick(s.now, &out)
				sh.carry(c, &out)
			}
			if c.rejoinSourceDies && src.up {
				c.rejoinSourceDies = false
				s.stats.sourceDeaths++
				s.tracef("shard %d: the rejoin's source %s dies mid-copy", sh.id, src.name())
				sh.crash(src, 0, time.Duration(1+s.r.IntN(10))*time.Millisecond)
			}
			if c.diesRejoining {
				c.diesRejoining = false
				s.tracef("shard %d: %s dies while it catches up", sh.id, c.name())
				sh.crash(c, 0, time.Duration(1+s.r.IntN(10))*time.Millisecond)
				return
			}
			if cu.Fetching() && len(entries) < catchUpBatchMax {
				cu.StreamEnded()
			}
			step()
		})
	}
	s.after(0, step)
}

// rejoinAsk assigns the positions the source holds for c's entries and,
// once c holds every entry the cuts it heard of order, syncs it and asks
// the leader to add it back.
func (sh *shard) rejoinAsk(c, src *copyOf, plan core.RejoinPlan, inc int) {
	s := sh.s
	again := func(after time.Duration) {
		s.after(after, func() {
			if c.inc == inc {
				sh.rejoinRound(c)
			}
		})
	}
	if !src.running() {
		again(catchUpRetryEvery)
		return
	}
	var runs []segment.Run
	for _, run := range src.log.Runs(0) {
		if end := run.LocalStart + run.Count; end > plan.RunsFrom && end <= c.log.Len() {
			runs = append(runs, run)
		}
	}
	var out core.Output[int64]
	if err := c.r.AssignFetched(runs, &out); err != nil {
		s.tracef("shard %d: %s: %v", sh.id, c.name(), err)
	}
	sh.carry(c, &out)
	if s.plant != bugRejoinBehind {
		if err := c.log.Sync(); err != nil {
			s.errorf("shard %d %s: sync: %v", sh.id, c.name(), err)
			return
		}
	}
	epoch, held, ok := c.r.RejoinReady()
	if s.plant == bugRejoinBehind && !ok && c.r.Role() != core.RoleBackup {
		// A storage server that asks before its copy caught up, saying it
		// holds what its source holds.
		s.planted = true
		c.askedBehind = inc + 1
		epoch, held, ok = plan.Epoch, src.log.Len(), true
		c.r.RejoinReady()
	}
	if !ok {
		again(catchUpRetryEvery)
		return
	}
	var rep control.Replica
	if row := s.ld.st.Shard(sh.id); row != nil {
		for _, r := range row.Out {
			if r.ID == c.server {
				rep = r
			}
		}
	}
	if rep.ID == "" {
		again(catchUpRetryEvery)
		return
	}
	// The server asks as the incarnation it runs, which its heartbeats
	// carry: the configuration that takes it back names that one.
	rep.Incarnation = c.incarnation()
	s.ld.rejoin(order.RejoinRequest{Shard: sh.id, Replica: rep, Epoch: epoch, Held: held}, func(err error) {
		if c.inc != inc {
			return
		}
		if err != nil {
			s.tracef("shard %d: %s: rejoin refused: %v", sh.id, c.name(), err)
			again(catchUpRetryEvery)
			return
		}
		s.tracef("shard %d: %s asked to rejoin configuration %d holding %d", sh.id, c.name(), epoch, held)
		again(rejoinAskAgainAfter)
	})
}

// rejoin takes a storage server's rejoin request (the RejoinShard RPC)
// to the leader core, some network delay away, and answers done with its
// refusal, if any.
func (ld *leader) rejoin(req order.RejoinRequest, done func(error)) {
	s := ld.s
	s.after(s.netDelay(), func() {
		if ld.l == nil {
			done(errNoLeader)
			return
		}
		cmd, member, err := ld.l.Rejoin(req, s.now)
		switch {
		case err != nil:
			done(err)
		case member:
			done(nil)
		default:
			s.tracef("leader: propose join of %s to shard %d at epoch %d (holding %d)", req.Replica.ID, req.Shard, req.Epoch, req.Held)
			err := ld.propose(cmd)
			if err == nil && s.plant == bugSpecJoinUnvouched {
				s.planted = true
				ld.propose(control.Command{Reconfig: &control.ReconfigCommand{Shard: req.Shard, Epoch: req.Epoch + 1, Confirm: true}})
			}
			done(err)
		}
	})
}

// checkMembersHoldOrdered checks that every replica of a live shard's
// configuration that serves in it holds every entry the committed cuts
// order: a cut orders only what every replica reported holds, so a
// replica that lacks some was added back (rejoined) behind what a cut
// could order, and serves, or would become primary, without them.
func (sh *shard) checkMembersHoldOrdered() {
	if sh.finalized {
		return
	}
	ordered := sh.knownCut.Len(sh.id)
	for i, c := range sh.copies {
		role := c.r.Role()
		if !sh.member[i] || !c.up || role != core.RolePrimary && role != core.RoleBackup {
			continue
		}
		if n := c.log.Len(); n < ordered {
			sh.s.errorf("invariant 1: shard %d: %s, a replica of configuration %d, holds %d entries, but the cuts order %d", sh.id, c.name(), sh.epoch, n, ordered)
		}
	}
}

// checkRejoined is the check of a copy the configuration row takes back
// in: it must hold every entry a committed cut orders (it becomes primary
// if the other copy fails, and then serves them).
func (sh *shard) checkRejoined(c *copyOf, ordered uint64) {
	s := sh.s
	s.stats.rejoins++
	if c.up && c.askedBehind == c.inc+1 {
		s.stats.rejoinsBehind++
	}
	c.askedBehind = 0
	if n := c.log.Len(); c.up && n < ordered {
		s.errorf("invariant 1: shard %d: %s was added back to the configuration holding %d entries, but %d are ordered", sh.id, c.name(), n, ordered)
	}
	c.primaryDiesArmed = c.primaryDies != primaryLives
}

// primaryDiesOnJoin crashes the primary of a copy taken back in, as
// planned (see planRejoin).
func (sh *shard) primaryDiesOnJoin() {
	s := sh.s
	for i, c := range sh.copies {
		if !c.primaryDiesArmed || !sh.member[i] || c.primaryDies == primaryDiesAtConfirm && sh.pending[i] {
			continue
		}
		c.primaryDiesArmed = false
		if p := sh.primary(); p != c && p.up && p.r.Role() == core.RolePrimary {
			s.stats.primaryDeathsOnJoin++
			s.tracef("shard %d: the primary %s dies as %s is taken back in (pending %v)", sh.id, p.name(), c.name(), sh.pending[i])
			sh.crash(p, 0, time.Duration(1+s.r.IntN(10))*time.Millisecond)
		}
	}
}
