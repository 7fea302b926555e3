package order

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
)

// Leader is the ordering leader's soft state: one mode's Policy, the
// failure Detector and the Inflight tracker of cut proposals. The ordering
// server creates one when its replica gains leadership and drops it when
// the replica loses it; nothing carries over from one term to the next.
// It is not safe for concurrent use: the caller serializes every call (and
// the applies that change the state it watches).
type Leader struct {
	policy Policy
	det    *Detector
	cuts   Inflight
	st     *control.State
	// idPrefix and ids name the commands Step returns: idPrefix, then
	// their count. The cut slots are tracked by these ids.
	idPrefix string
	ids      uint64
	// reported is the longest length of each shard this leader passed to
	// its policy, whatever the configuration: a cut may order that much.
	reported map[cut.ShardID]uint64
	// joins are the Joins in flight (see Rejoin).
	joins map[cut.ShardID]joining
	// confirms are the shards whose primary vouched for its pending
	// replicas, and when this leader proposed the Confirm (see Rejoin).
	confirms map[cut.ShardID]joining
	// barrier is the id of the empty command this leader proposed at
	// barrierAt, settled once it applied: then every entry an earlier
	// leader left in the Raft log applied before it (see Settled).
	barrier   string
	barrierAt time.Time
	settled   bool
}

// NewLeader returns the leader state of a replica that starts leading at
// now with the committed state st. failureTimeout is how long a storage
// server may stay silent before it is taken out of its shards. idPrefix starts
// the id of every command Step returns: the caller picks one that no
// other command ever bore (not even one of an earlier Leader's), and by
// which it recognizes these commands as its own when they are applied.
func NewLeader(p Policy, failureTimeout time.Duration, st *control.State, now time.Time, idPrefix string) *Leader {
	l := &Leader{policy: p, det: NewDetector(failureTimeout, st, now), cuts: NewInflight(p.CutsInflightMax()), st: st, idPrefix: idPrefix,
		reported: map[cut.ShardID]uint64{}, joins: map[cut.ShardID]joining{}, confirms: map[cut.ShardID]joining{}}
	p.Observe(st, now)
	return l
}

// Applied takes the control state st after cmd was applied, whether the
// state accepted it or refused it; own says this leader proposed cmd. It
// returns whether Step may now propose something it could not before.
func (l *Leader) Applied(st *control.State, cmd control.Command, own bool, now time.Time) (news bool) {
	if own && !l.settled && cmd.ID == l.barrier {
		l.settled = true
		news = true
	}
	if own {
		// Even a refused cut frees its slot; it only repeated what an
		// earlier one ordered. A cut whose slot expired frees nothing.
		if cmd.Cut != nil && l.cuts.Done(cmd.ID) {
			news = true
		}
		if l.policy.Committed(cmd) {
			news = true
		}
	}
	l.Observe(st, now)
	l.settleJoins(cmd, now)
	return news
}

// Observe takes the control state after a restored snapshot (Applied
// covers applied commands).
func (l *Leader) Observe(st *control.State, now time.Time) {
	l.st = st
	l.policy.Observe(st, now)
	l.det.Observe(st, now)
}

// Beat records a heartbeat of storage server server, running as
// incarnation, at now.
func (l *Leader) Beat(server string, incarnation uint64, now time.Time) {
	l.det.Beat(server, incarnation, now)
}

// Settled says the leader heard its first own command applied: every
// command an earlier leader left in the Raft log is applied by then. Until
// it is, it takes no report: a cut it proposed from one could commit after
// a Join an earlier leader proposed, and order entries the joined replica
// lacks. It asks for that command itself (Step).
func (l *Leader) Settled() bool { return l.settled }

// Report takes one shard's report and says whether to step now. A report
// made in another configuration than the shard's current one is dropped:
// an old primary, fenced by a reconfiguration it has not heard of yet,
// may report what the new configuration's replicas do not all hold. So is
// one of a configuration a Join in flight replaces (see Rejoin).
func (l *Leader) Report(r Report, now time.Time) (news bool) {
	if !l.settled {
		return false
	}
	if sh := l.st.Shard(r.Shard); sh == nil || sh.Epoch != r.Epoch || l.joinBlocks(r.Shard, r.Epoch, now) {
		return false
	}
	l.reported[r.Shard] = max(l.reported[r.Shard], r.Length)
	due := l.vouched(r.Shard, r.Epoch)
	return l.policy.Report(r, now) || due
}

// Reported is the longest length of shard this leader took from a report.
func (l *Leader) Reported(shard cut.ShardID) uint64 { return l.reported[shard] }

// Broken records that server's copy of shard is broken, as reported in
// configuration epoch (see Detector.Broken). The caller steps the
// detector now (Detect) rather than at its next tick.
func (l *Leader) Broken(shard cut.ShardID, server string, epoch uint64) {
	l.det.Broken(shard, server, epoch)
}

// GoingAway records that storage server server, running as incarnation,
// announced a clean stop. The caller steps the detector now (Detect).
func (l *Leader) GoingAway(server string, incarnation uint64) {
	l.det.GoingAway(server, incarnation)
}

// Registered says that a shard with replicas reps was registered; see
// Detector.Registered.
func (l *Leader) Registered(reps []control.Replica) {
	l.det.Registered(reps)
}

// Detect runs the failure detector at now and returns the new
// configurations to propose, without the replicas taken for failed (one
// without any replica finalizes its shard); they count as proposed from
// now on.
func (l *Leader) Detect(now time.Time) []control.Command {
	var out []control.Command
	for _, rc := range l.det.Detect(now) {
		out = append(out, control.Command{Reconfig: &rc})
	}
	return out
}

// Failed says that proposing cmd, which Step returned, failed. A failed
// cut frees its slot, and the policy forgets what the cuts in flight
// carried, so the next step proposes it again. Other commands are left to
// time out: a window after proposalStaleAfter, a finalize after the
// failure timeout.
func (l *Leader) Failed(cmd control.Command) {
	if cmd.Cut == nil || !l.cuts.Done(cmd.ID) {
		return
	}
	l.policy.Forget()
}

// Output is what one Step decided.
type Output struct {
	// Propose lists the commands to propose, in this order, without
	// waiting for one to commit before proposing the next, and outside
	// any lock held across Step. Each carries its id (see NewLeader):
	// propose it under that id, and report a proposal Raft refused with
	// Failed.
	Propose []control.Command
	// LagFixes go to each shard's primary, on the heartbeat stream of that
	// storage server. A fix that cannot be sent at once may be dropped:
	// the policy asks again while the shard still holds a cut back.
	LagFixes []LagFix
	// Suspects are the shards whose primary the policy took for failed;
	// Propose already holds a ReconfigCommand without it for each
	// (logging only).
	Suspects []cut.ShardID
	// Stats counts what the policy did since the last Step (metrics only).
	Stats Stats
	// Wake is how soon to step again if no news comes first; 0: only on
	// news (a report, an applied command, a leadership change).
	Wake time.Duration
}

// LagFix is the lag-fixes for the shards whose primary is Server.
type LagFix struct {
	Server  string
	Lengths []cut.Length
}

// Step decides what to propose, send and wait for at now.
func (l *Leader) Step(now time.Time) Output {
	if l.cuts.Expire(now) {
		l.policy.Forget()
	}
	if !l.settled {
		// First an empty command: it changes nothing, but once it
		// applied so did whatever an earlier leader proposed before it.
		if l.barrier != "" && now.Sub(l.barrierAt) <= proposalStaleAfter {
			return Output{Wake: proposalStaleAfter - now.Sub(l.barrierAt)}
		}
		l.ids++
		l.barrier, l.barrierAt = l.idPrefix+strconv.FormatUint(l.ids, 10), now
		return Output{Propose: []control.Command{{ID: l.barrier}}, Wake: proposalStaleAfter}
	}
	plan := l.policy.Step(now, l.cuts.Free())
	out := Output{Propose: plan.Propose, Stats: plan.Stats, Wake: plan.Wake}
	out.Propose = append(out.Propose, l.confirmDue(now)...)
	for _, id := range plan.Suspects {
		if rc, ok := l.det.Suspect(id, now); ok {
			out.Suspects = append(out.Suspects, id)
			out.Propose = append(out.Propose, control.Command{Reconfig: &rc})
		}
	}
	for i := range out.Propose {
		c := &out.Propose[i]
		l.ids++
		c.ID = l.idPrefix + strconv.FormatUint(l.ids, 10)
		if c.Cut != nil {
			l.cuts.Take(c.ID, now)
		}
	}
	out.LagFixes = l.route(plan.LagFixes)
	return out
}

// route groups lag-fixes by the storage server that is each shard's
// primary, in the order of the servers' ids.
func (l *Leader) route(fixes []cut.Length) []LagFix {
	var out []LagFix
	for _, f := range fixes {
		sh := l.st.Shard(f.Shard)
		if sh == nil || len(sh.Replicas) == 0 {
			continue
		}
		server := sh.Replicas[0].ID
		i := slices.IndexFunc(out, func(g LagFix) bool { return g.Server == server })
		if i < 0 {
			i = len(out)
			out = append(out, LagFix{Server: server})
		}
		out[i].Lengths = append(out[i].Lengths, f)
	}
	slices.SortFunc(out, func(a, b LagFix) int { return strings.Compare(a.Server, b.Server) })
	return out
}
