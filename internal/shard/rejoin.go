package shard

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/augur-log/augur/internal/segment"
)

// # Rejoin
//
// A copy out of its shard's configuration (recovered at start-up, or
// fenced) while the shard lives goes back into it in three steps, each
// decided here:
//
//  1. PrepareRejoin, once the copy heard of a configuration that leaves
//     it out: it drops the tail the shard may have replaced (from
//     replacedFrom on: entries no cut ordered here, which a newer primary
//     may have stored otherwise) and says what to fetch, from the
//     replicas of that configuration (RejoinSources): everything past its
//     length (a Tail gap, up to where the source's log ends), and the
//     positions (runs) the source assigned
//     from this copy's ordered end on (AssignFetched). A source whose log
//     starts past the copy's length (the cluster trimmed what lies
//     between; a new copy, made empty, always starts at 0) serves from
//     its start: the copy starts its log over there (CatchUp's Rebase
//     write) and takes the positions of the run across it from there
//     on. The trim point may move on while the copy runs: a fetch the
//     source can no longer serve ends, and the next round starts over at
//     the source's new start.
//
//     A copy whose log starts at a trimmed point holds no append below
//     it, so it cannot tell a client's retry of one apart from a new
//     append: once it is primary, such a retry (a client that never got
//     its answer while the cluster trimmed past it) is stored again, at a
//     new position. That is no second copy for any reader: every server
//     refuses positions below the trim point, whatever its segments still
//     hold, so the log readers see holds the append once, at the position
//     the retry's answer gives. Every trimmed replica promoted to primary
//     is in the same place (its retry memory reads back only what its log
//     holds).
//  2. Cuts that order entries the copy does not hold yet are kept
//     (pendingCutsMax of them) and applied once it holds them, rather
//     than making it lost: its log is the shard's up to its length.
//     RejoinReady says when it holds every entry the cuts it heard of
//     order; then the owner syncs it and asks the ordering leader to add
//     it (order.Leader.Rejoin) with what RejoinReady returns.
//  3. Once the configuration that adds it commits, the copy becomes a
//     backup of it (Reconfigure, or Join when its new primary reaches it
//     first), and the primary's join resends what it still lacks.
//
// A newer configuration that still leaves it out, heard of meanwhile,
// makes the catch-up stale (distrustTail again): the owner starts over.

// ErrRejoined refuses a catch-up's write to a copy that rejoined its
// shard's configuration meanwhile: its primary sends it what it lacks.
var ErrRejoined = errors.New("the copy rejoined its shard's configuration")

// pendingCutsMax bounds the cuts a rejoining copy keeps for entries it
// does not hold yet; older ones are dropped, and the positions fetched
// from the source cover them.
const pendingCutsMax = 4096

// RejoinPlan is what a copy fetches to rejoin: Gaps from a replica of
// configuration Epoch, then that replica's runs from local index RunsFrom.
type RejoinPlan struct {
	Epoch    uint64
	Gaps     []Gap
	RunsFrom uint64
}

// RejoinSources orders the replicas of a configuration (primary first)
// as a rejoining copy asks them: the backups first, so the catch-up reads
// the primary's disk only when no backup serves.
func RejoinSources(config []string, self string) []string {
	var out []string
	for i := 1; i < len(config); i++ {
		if config[i] != self {
			out = append(out, config[i])
		}
	}
	if len(config) > 0 && config[0] != self {
		out = append(out, config[0])
	}
	return out
}

// Rejoining says the copy is out of its shard's configuration and should
// catch up to rejoin it: it heard of a configuration (its owner gave one)
// that leaves it out, the shard is not final, and no catch-up from that
// configuration is under way.
func (r *Replica[W]) Rejoining() bool {
	role := r.Role()
	return (role == RoleRecovered || role == RoleFenced) && r.outEpoch > 0 && r.outEpoch == r.cfgEpoch && !r.finalized.Load() && r.rejoinFrom != r.cfgEpoch
}

// PrepareRejoin starts a catch-up from the configuration the copy last
// heard of (see the notes above).
func (r *Replica[W]) PrepareRejoin() (RejoinPlan, error) {
	role := r.Role()
	if role != RoleRecovered && role != RoleFenced || r.outEpoch == 0 || r.outEpoch != r.cfgEpoch || r.finalized.Load() {
		return RejoinPlan{}, fmt.Errorf("shard %d: a %v copy in configuration %d (left out of %d) does not rejoin", r.id, role, r.cfgEpoch, r.outEpoch)
	}
	keep := min(r.replacedFrom.Load(), r.log.Len())
	if err := r.log.Truncate(keep); err != nil {
		return RejoinPlan{}, fmt.Errorf("shard %d: drop the tail the shard may have replaced: %w", r.id, err)
	}
	// What it holds now is the shard's, as copied from this configuration.
	// An ask in this configuration stays good: the copy only grows by
	// what a replica of it holds.
	r.replacedFrom.Store(math.MaxUint64)
	if r.rejoinFrom != r.cfgEpoch {
		r.asked.Store(0)
	}
	r.rejoinFrom = r.cfgEpoch
	// Damaged ranges are the owner's to repair as for any copy (Gaps);
	// RejoinReady waits for them.
	plan := RejoinPlan{Epoch: r.cfgEpoch, RunsFrom: r.log.Ordered(),
		Gaps: []Gap{{First: r.log.Len(), End: math.MaxUint64, Tail: true}}}
	return plan, nil
}

// AssignFetched gives the copy's entries the positions a source assigned
// them (runs, in order, from a catch-up of PrepareRejoin). Runs the copy
// assigned already are skipped; a run that does not follow the copy's
// ordered end, or orders entries it does not hold, is refused (bad
// source) and the runs before it stay.
func (r *Replica[W]) AssignFetched(runs []segment.Run, out *Output[W]) error {
	// A catch-up write may start the log over meanwhile (Repair holds
	// replMu): the ordered end read here must stay the log's.
	r.replMu.Lock()
	defer r.replMu.Unlock()
	for _, run := range runs {
		ordered := r.log.Ordered()
		if run.LocalStart+run.Count <= ordered {
			continue
		}
		run = clipToStart(run, ordered, r.log.Start())
		if run.LocalStart != ordered || run.LocalStart+run.Count > r.log.Len() {
			return fmt.Errorf("shard %d: fetched run %+v does not extend local [0, %d) within the %d entries held", r.id, run, ordered, r.log.Len())
		}
		if err := r.log.Assign(run); err != nil {
			return fmt.Errorf("shard %d: assign fetched positions: %w", r.id, err)
		}
		out.UnsyncedRuns = true
		out.Changed = true
		r.lastCut = max(r.lastCut, run.Cut)
	}
	r.applyPendingLocked(out)
	return nil
}

// clipToStart returns the part of run from local index ordered on, when
// run reaches below it and the log starts there: a copy whose log starts
// at its source's trimmed start (Log.Rebase) takes the positions of the
// run across that start from there on, as its source trimmed the rest.
// Any other run comes back whole, for the caller to check.
func clipToStart(run segment.Run, ordered, start uint64) segment.Run {
	if ordered != start || run.LocalStart >= ordered || run.LocalStart+run.Count <= ordered {
		return run
	}
	d := ordered - run.LocalStart
	run.LocalStart += d
	run.GlobalStart += d
	run.Count -= d
	return run
}

// RejoinReady says whether a rejoining copy holds every entry the cuts
// it heard of order (and nothing damaged), and if so with what to ask the
// ordering leader to add it: the configuration it caught up from and how
// many entries it holds (with HeldWhenSynced, synced: the owner syncs
// first). It marks the copy as having asked in that configuration, so
// that the next one's primary may join it.
func (r *Replica[W]) RejoinReady() (epoch, held uint64, ok bool) {
	role := r.Role()
	if role != RoleRecovered && role != RoleFenced || r.rejoinFrom == 0 || r.rejoinFrom != r.cfgEpoch {
		return 0, 0, false
	}
	if r.log.Ordered() < r.orderWant || len(r.log.Damaged()) > 0 {
		return 0, 0, false
	}
	r.lost.Store(false)
	r.asked.Store(r.rejoinFrom)
	return r.rejoinFrom, r.held(), true
}

// becomeBackupLocked makes a copy that asked to rejoin in configuration
// epoch-1 a backup of configuration epoch, if it did; r.replMu is held.
func (r *Replica[W]) becomeBackupLocked(epoch uint64) bool {
	role := r.Role()
	if role != RoleRecovered && role != RoleFenced || r.asked.Load() == 0 || epoch != r.asked.Load()+1 {
		return false
	}
	for {
		e := r.epoch.Load()
		if epoch <= e || r.epoch.CompareAndSwap(e, epoch) {
			break
		}
	}
	r.replacedFrom.Store(math.MaxUint64)
	r.lost.Store(false)
	r.durable.Store(r.held())
	r.asked.Store(0)
	r.role.Store(int32(RoleBackup))
	return true
}

// queueing says cuts that order entries the copy does not hold yet wait
// for them (see the notes above).
func (r *Replica[W]) queueing() bool {
	role := r.Role()
	return r.rejoinFrom != 0 && (role == RoleRecovered || role == RoleFenced) || len(r.pending) > 0
}

// queueCut keeps c for when the copy holds its entries.
func (r *Replica[W]) queueCut(c Cut) {
	if len(r.pending) == pendingCutsMax {
		r.pending = slices.Delete(r.pending, 0, 1)
	}
	r.pending = append(r.pending, c)
	r.pendingCount.Store(int32(len(r.pending)))
}

// applyPending assigns the positions of the kept cuts whose entries the
// copy holds now, in order.
func (r *Replica[W]) applyPending(out *Output[W]) {
	r.replMu.Lock()
	defer r.replMu.Unlock()
	r.applyPendingLocked(out)
}

// applyPendingLocked is applyPending with r.replMu held, so that no
// catch-up write starts the log over between reading its ordered end and
// assigning there.
func (r *Replica[W]) applyPendingLocked(out *Output[W]) {
	n := 0
	for ; n < len(r.pending); n++ {
		c := r.pending[n]
		sl := c.Slice
		ordered := r.log.Ordered()
		if sl.LocalStart+sl.Count <= ordered {
			continue // fetched positions covered it
		}
		run := clipToStart(segment.Run{Cut: c.Index, CutStart: c.Start, CutEnd: c.End,
			LocalStart: sl.LocalStart, GlobalStart: sl.GlobalStart, Count: sl.Count}, ordered, r.log.Start())
		if run.LocalStart != ordered || run.LocalStart+run.Count > r.log.Len() {
			break
		}
		if err := r.log.Assign(run); err != nil {
			out.Problems = append(out.Problems, fmt.Errorf("shard %d: assign positions: %w", r.id, err))
			r.lost.Store(true)
			r.pending = r.pending[:0]
			r.pendingCount.Store(0)
			return
		}
		out.UnsyncedRuns = true
		out.Ordered += run.Count
		out.Changed = true
	}
	r.pending = slices.Delete(r.pending, 0, n)
	defer func() { r.pendingCount.Store(int32(len(r.pending))) }()
	if len(r.pending) > 0 && r.Role() == RoleBackup && r.pending[0].Slice.LocalStart > r.log.Ordered() {
		// A member cannot fetch positions any more: the cuts between are
		// gone for good.
		out.Problems = append(out.Problems, fmt.Errorf("shard %d: rejoined copy missed the positions of local [%d, %d)", r.id, r.log.Ordered(), r.pending[0].Slice.LocalStart))
		r.lost.Store(true)
		r.pending = r.pending[:0]
	}
}

// PendingCuts says the copy keeps cuts for entries it does not hold yet:
// the owner calls Tick once more arrive. Safe for concurrent use.
func (r *Replica[W]) PendingCuts() bool { return r.pendingCount.Load() > 0 }
