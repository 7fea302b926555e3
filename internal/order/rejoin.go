package order

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
)

// # Rejoin
//
// A replica out of its shard's configuration (restarted, fenced, or a
// server new to the group) catches up from a replica of the configuration
// and then asks the leader to add it back (Rejoin). The leader decides:
//
//   - only for a live shard, and only for the configuration the replica
//     caught up from (Epoch): once that one changed, what it copied may
//     not be what the shard holds;
//   - only if the replica holds every entry any cut may order: what the
//     last committed cut orders, and what any report this leader passed
//     to its policy says (a cut proposed from such a report may commit
//     after the join). The control state checks the first again when the
//     join applies, which covers the cuts of an earlier leader still in
//     the Raft log;
//   - while the join is in flight, the shard's reports of the old
//     configuration go nowhere, so no cut proposed meanwhile orders what
//     the joining replica may lack. From the new configuration on, the
//     primary reports only what every replica, the joined one too, holds.
//   - in speculative order the primary acknowledges (and streams) what
//     every replica holds, so it may acknowledge entries past Held while
//     the join is in flight, for the new primary's join to resend. The
//     joined replica is Pending, no survivor of its primary, until the
//     primary reported in the new configuration: it reports only once
//     every replica holds everything it acknowledged. The leader then
//     proposes a Confirm (confirmDue).

// RejoinRequest is a storage server's ask to add its copy of Shard back
// to the shard's configuration.
type RejoinRequest struct {
	Shard   cut.ShardID
	Replica control.Replica
	// Epoch is the configuration the copy caught up from.
	Epoch uint64
	// Held is how many of the shard's entries the copy holds.
	Held uint64
}

// Why a rejoin is refused; the errors Rejoin returns wrap these.
var (
	// ErrRejoinStale: the shard is in another configuration than the one
	// the copy caught up from, or not live; catch up again.
	ErrRejoinStale = errors.New("stale rejoin")
	// ErrRejoinBehind: the copy lacks entries the shard may order; catch
	// up further.
	ErrRejoinBehind = errors.New("rejoining copy is behind")
	// ErrRejoinBusy: another join of the shard is in flight; ask again.
	ErrRejoinBusy = errors.New("a join of the shard is in flight")
)

// joining is a Join this leader proposed and has not seen applied.
type joining struct {
	epoch uint64
	at    time.Time
}

// Rejoin decides a rejoin request at now (see the notes above). It returns
// the command to propose, or member when the copy is in the configuration
// already (a repeated request), or why it is refused.
func (l *Leader) Rejoin(req RejoinRequest, now time.Time) (cmd control.Command, member bool, err error) {
	sh := l.st.Shard(req.Shard)
	switch {
	case sh == nil:
		return control.Command{}, false, fmt.Errorf("rejoin: unknown shard %d", req.Shard)
	case req.Replica.ID == "" || req.Replica.Addr == "":
		return control.Command{}, false, fmt.Errorf("rejoin shard %d: the replica's id and address are required", req.Shard)
	case sh.State != control.Live:
		return control.Command{}, false, fmt.Errorf("rejoin shard %d: it is %s: %w", req.Shard, sh.State, ErrRejoinStale)
	}
	if i := slices.IndexFunc(sh.Replicas, func(r control.Replica) bool { return r.ID == req.Replica.ID }); i >= 0 {
		if sh.Replicas[i].Incarnation == req.Replica.Incarnation {
			return control.Command{}, true, nil
		}
		// The configuration still names an earlier run of the server;
		// the detector takes it out first.
		return control.Command{}, false, fmt.Errorf("rejoin shard %d: configuration %d still holds %s as incarnation %d: %w",
			req.Shard, sh.Epoch, req.Replica.ID, sh.Replicas[i].Incarnation, ErrRejoinStale)
	}
	if len(sh.Replicas) >= control.ReplicasMax {
		return control.Command{}, false, fmt.Errorf("rejoin shard %d: configuration %d holds %d replicas, the most a shard has; %s joins once one is taken out: %w",
			req.Shard, sh.Epoch, len(sh.Replicas), req.Replica.ID, ErrRejoinStale)
	}
	if req.Epoch != sh.Epoch {
		return control.Command{}, false, fmt.Errorf("rejoin shard %d: caught up from configuration %d, the shard is in %d: %w", req.Shard, req.Epoch, sh.Epoch, ErrRejoinStale)
	}
	if !l.settled {
		return control.Command{}, false, fmt.Errorf("rejoin shard %d: the leader has not applied what earlier leaders proposed yet: %w", req.Shard, ErrRejoinBusy)
	}
	if j, ok := l.joins[req.Shard]; ok && now.Sub(j.at) < l.det.timeout {
		return control.Command{}, false, fmt.Errorf("rejoin shard %d: %w", req.Shard, ErrRejoinBusy)
	}
	if want := max(l.st.LastCut.Len(req.Shard), l.reported[req.Shard]); req.Held < want {
		return control.Command{}, false, fmt.Errorf("rejoin shard %d: the copy holds %d entries, the shard may order %d: %w", req.Shard, req.Held, want, ErrRejoinBehind)
	}
	l.joins[req.Shard] = joining{epoch: sh.Epoch, at: now}
	rep := req.Replica
	cmd = control.Command{Reconfig: &control.ReconfigCommand{Shard: req.Shard, Epoch: sh.Epoch, Join: &rep, Held: req.Held}}
	l.ids++
	cmd.ID = l.idPrefix + fmt.Sprint(l.ids)
	return cmd, false, nil
}

// joinBlocks says whether a join in flight holds back a report of shard
// in configuration epoch at now.
func (l *Leader) joinBlocks(shard cut.ShardID, epoch uint64, now time.Time) bool {
	j, ok := l.joins[shard]
	if !ok {
		return false
	}
	if now.Sub(j.at) >= l.det.timeout {
		// The proposal was lost: the configuration lives on.
		delete(l.joins, shard)
		return false
	}
	return j.epoch == epoch
}

// settleJoins forgets the joins whose shard left the configuration they
// were decided on (the join applied, or something else did first), and
// tells the detector about replicas that joined.
func (l *Leader) settleJoins(cmd control.Command, now time.Time) {
	if rc := cmd.Reconfig; rc != nil && rc.Join != nil {
		if sh := l.st.Shard(rc.Shard); sh != nil && sh.Epoch == rc.Epoch+1 &&
			slices.ContainsFunc(sh.Replicas, func(r control.Replica) bool { return r.ID == rc.Join.ID }) {
			l.det.Joined(rc.Shard, rc.Join.ID, now)
		}
	}
	for id, j := range l.joins {
		if sh := l.st.Shard(id); sh == nil || sh.Epoch != j.epoch || sh.State != control.Live {
			delete(l.joins, id)
		}
	}
}

// vouched records that shard's primary reported in configuration epoch:
// every replica of it holds what the primary acknowledged. It says
// whether a Confirm became due.
func (l *Leader) vouched(shard cut.ShardID, epoch uint64) bool {
	if sh := l.st.Shard(shard); sh != nil && sh.Epoch == epoch && slices.ContainsFunc(sh.Replicas, func(r control.Replica) bool { return r.Pending }) {
		if c, ok := l.confirms[shard]; !ok || c.epoch != epoch {
			l.confirms[shard] = joining{epoch: epoch}
			return true
		}
	}
	return false
}

// confirmDue returns the Confirms to propose at now: one for each shard
// whose primary vouched for its pending replicas, again after the failure
// timeout if the last one did not apply.
func (l *Leader) confirmDue(now time.Time) []control.Command {
	var out []control.Command
	for id, c := range l.confirms {
		sh := l.st.Shard(id)
		if sh == nil || sh.Epoch != c.epoch || sh.State != control.Live || !slices.ContainsFunc(sh.Replicas, func(r control.Replica) bool { return r.Pending }) {
			delete(l.confirms, id)
			continue
		}
		if !c.at.IsZero() && now.Sub(c.at) < l.det.timeout {
			continue
		}
		l.confirms[id] = joining{epoch: c.epoch, at: now}
		out = append(out, control.Command{Reconfig: &control.ReconfigCommand{Shard: id, Epoch: c.epoch, Confirm: true}})
	}
	slices.SortFunc(out, func(a, b control.Command) int { return int(a.Reconfig.Shard) - int(b.Reconfig.Shard) })
	return out
}

// ConfirmRejoin decides a pending replica's word that it caught up under
// its primary in configuration epoch (lazy order, where the joiner itself
// tracks its catch-up against the primary's mark: see lazy's rejoin
// notes). It returns the Confirm that clears that replica's Pending, or
// done when it is not pending any more, or why it is refused.
func (l *Leader) ConfirmRejoin(shard cut.ShardID, replica string, epoch uint64) (cmd control.Command, done bool, err error) {
	sh := l.st.Shard(shard)
	switch {
	case sh == nil:
		return control.Command{}, false, fmt.Errorf("confirm rejoin: unknown shard %d", shard)
	case sh.State != control.Live || sh.Epoch != epoch:
		return control.Command{}, false, fmt.Errorf("confirm rejoin of %s to shard %d: caught up in configuration %d, the shard is %s in %d: %w",
			replica, shard, epoch, sh.State, sh.Epoch, ErrRejoinStale)
	}
	i := slices.IndexFunc(sh.Replicas, func(r control.Replica) bool { return r.ID == replica })
	switch {
	case i < 0:
		return control.Command{}, false, fmt.Errorf("confirm rejoin: %s is not in configuration %d of shard %d: %w", replica, epoch, shard, ErrRejoinStale)
	case !sh.Replicas[i].Pending:
		return control.Command{}, true, nil
	}
	cmd = control.Command{Reconfig: &control.ReconfigCommand{Shard: shard, Epoch: epoch, Confirm: true, Vouched: replica}}
	l.ids++
	cmd.ID = l.idPrefix + fmt.Sprint(l.ids)
	return cmd, false, nil
}
