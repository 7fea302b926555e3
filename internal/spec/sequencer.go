package spec

import (
	"math"
	"slices"
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
)

// Config tunes the ordering leader's fix-ante policy.
type Config struct {
	// Interval is T_ord: quotas aim at one report per shard per interval.
	Interval time.Duration
	// StaggerAbove is the largest number of shards that share every cut;
	// more are split into groups of at most this many (staggered cuts).
	StaggerAbove int
	// LagFix and QuotaChange switch those mechanisms (both on by default;
	// benchmarks turn them off to show what they buy).
	LagFix      bool
	QuotaChange bool
	// LagAfter is how long a cut that some shards satisfied may wait for
	// a shard that has entries on the way to it before that shard is told
	// to catch up. A shard that said it holds nothing beyond its last
	// report is told at once: waiting for it can only cost time.
	LagAfter time.Duration
	// LagAhead is how many cuts past the blocked one a shard must have
	// satisfied for the others to be told at once (a burst).
	LagAhead uint64
	// SuspectAfter is how long a shard may leave a lag-fix unanswered
	// before the leader takes the whole shard for failed.
	SuspectAfter time.Duration
	// StragglerDelay is how late, after every other shard of a cut, a
	// shard's report may come before it counts as a strike;
	// StragglerStrikes strikes between two window plans exclude it.
	StragglerDelay   time.Duration
	StragglerStrikes int
	// QuotaMax caps a rate-based quota.
	QuotaMax uint64
	// EagerAbove is how many no-op fills per record the measured rates
	// may cost before the leader stops announcing windows and cuts as
	// eager order does until they cost less (0: never). Where shards get
	// less than a record per interval, every record's cut waits for the
	// other shards' fills (a round trip through the leader and their
	// replication, and a fsync each): speculation then delivers little
	// earlier and acknowledges later. The switch takes effect only at a
	// window's end, and speculation made in a window stays exact.
	EagerAbove float64
}

// DefaultConfig is the policy for ordering interval t.
func DefaultConfig(t time.Duration) Config {
	return Config{
		Interval:         t,
		StaggerAbove:     6,
		LagFix:           true,
		QuotaChange:      true,
		LagAfter:         t,
		LagAhead:         2,
		SuspectAfter:     max(200*t, time.Second),
		StragglerDelay:   10 * t,
		StragglerStrikes: 3,
		QuotaMax:         1 << 16,
		EagerAbove:       EagerAboveDefault,
	}
}

// EagerAboveDefault is the default Config.EagerAbove: 0.3 fills per
// record. Two shards fall back below about 1.2 records per shard per
// interval, four below 2.3, eight below 3.2 (see fillsPerRecord): in
// bench spec-matrix, two shards at one record per shard per interval and
// four at two made speculative appends 1.4-3.3x eager's and end-to-end
// latency no better.
const EagerAboveDefault = 0.3

// stage is where a shard stands in straggler mitigation.
type stage int

const (
	stageNormal   stage = iota
	stageExcluded       // quota 0 for a window
	stageProbing        // a small quota, to see if it keeps up
)

type shardView struct {
	length, records uint64
	// backlog is how many entries the shard held beyond its last report;
	// heard says it reported to this leader at all (before that, its
	// backlog is unknown).
	backlog uint64
	heard   bool
	// rate estimation between two window plans: records and entries
	// (records and fills) at the last plan
	planRecords, planLength uint64
	planAt                  time.Time
	quota                   uint64
	// an outstanding lag-fix
	lagTarget    uint64
	lagFirstSent time.Time
	// filledAhead is the furthest length the shard was told to fill to
	// ahead of another shard's records (see heading): up to there its lead
	// is no burst.
	filledAhead uint64
	lagLastSent time.Time
	strikes     int
	stage       stage
	// reached remembers when the latest reports arrived, to time how late
	// a straggler reports a cut after the others.
	reached reportTimes
	// moving is set while the shard joins or leaves: the announced
	// windows are flushed with no-ops so that it can at the next one.
	moving bool
}

// Sequencer is the ordering leader's fix-ante policy: which predetermined
// cuts can be released, when to announce the next window and with what
// quotas, which shards to tell to catch up, and which shards look failed.
// Its state is soft: a new leader starts a fresh one from the replicated
// control state and the shards' next reports.
type Sequencer struct {
	cfg    Config
	st     *control.State
	shards map[cut.ShardID]*shardView

	// The first unreleased cut, since when some of its shards wait for
	// others, and, while only one shard holds it back, that shard and
	// since when. soleRun says that shard alone held back the cut
	// released before too (prevSole, when prevSoleOK).
	blockedCut   uint64
	waiting      bool
	waitingSince time.Time
	soleBlocker  cut.ShardID
	soleSince    time.Time
	hasSole      bool
	soleRun      bool
	prevSole     cut.ShardID
	prevSoleOK   bool

	lagFixes     uint64
	quotaChanges uint64

	// backoff is how many judgement periods the last fallback that the
	// measured fills decided holds; retryAt when it ends (see eager).
	backoff int
	retryAt time.Time

	// front caches the first blocked cut, its blockers and how far the
	// others are ahead of it; every leader step asks for them twice, and
	// only Observe and Report change them.
	front      frontier
	frontValid bool
}

type frontier struct {
	idx      uint64
	blockers []cut.ShardID
	furthest uint64
}

// TakeStats returns how many lag-fixes the sequencer started and how many
// quotas it changed since the last call.
func (q *Sequencer) TakeStats() (lagFixes, quotaChanges uint64) {
	lagFixes, quotaChanges = q.lagFixes, q.quotaChanges
	q.lagFixes, q.quotaChanges = 0, 0
	return lagFixes, quotaChanges
}

// NewSequencer returns a policy with cfg.
func NewSequencer(cfg Config) *Sequencer {
	return &Sequencer{cfg: cfg, shards: map[cut.ShardID]*shardView{}}
}

// Observe takes the control state after an applied change. The sequencer
// keeps st; the caller must not change it afterwards.
func (q *Sequencer) Observe(st *control.State, now time.Time) {
	q.st = st
	q.frontValid = false
	for _, sh := range st.Shards {
		v, ok := q.shards[sh.ID]
		if sh.State == control.Finalized {
			delete(q.shards, sh.ID)
			continue
		}
		if !ok {
			v = &shardView{quota: sh.Quota, length: st.LastCut.Len(sh.ID)}
			q.shards[sh.ID] = v
		}
		held := false
		if st.Spec != nil {
			for _, w := range st.Spec.Windows {
				if _, has := w.Quota(sh.ID); has {
					held = true
				}
			}
		}
		joining := sh.State == control.Live && !held && v.stage == stageNormal && st.Spec != nil && len(st.Spec.Windows) > 0
		v.moving = joining || sh.State == control.Finalizing
	}
}

// Report takes a shard's report: its length at a quota boundary, the real
// records it stores, and how many entries it holds beyond the report. It
// tells whether the leader has something new to act on: a longer length,
// or, for a shard without a quota in the announced windows, a backlog that
// appeared or went, which decides whether the others are asked to flush
// the windows for it. (A shard with a quota reports its records itself.)
func (q *Sequencer) Report(shard cut.ShardID, length, records, backlog uint64, now time.Time) (changed bool) {
	v, ok := q.shards[shard]
	if !ok {
		return false
	}
	q.frontValid = false
	// A backlog that appears is news for every shard: the others can be
	// told to fill the cut it heads for while its entries replicate.
	changed = length > v.length || backlog > 0 && v.backlog == 0 || (!q.held(shard) && (backlog > 0) != (v.backlog > 0))
	if length > v.length {
		v.length = length
		v.reached.add(length, now)
		if v.lagTarget > 0 {
			// It moves: a shard that reacts to lag-fixes, however
			// late, is not failed.
			v.lagFirstSent = now
		}
	}
	if records > v.records {
		v.records = records
	}
	v.backlog, v.heard = backlog, true
	if v.planAt.IsZero() {
		// Rates are measured from the first report a leader sees, not
		// over history it did not watch.
		v.planRecords, v.planLength, v.planAt = v.records, v.length, now
	}
	if v.lagTarget > 0 && v.length >= v.lagTarget {
		v.lagTarget = 0
	}
	return changed
}

// reported is what the leader knows shard holds durably; a failed shard's
// void slots count as held.
func (q *Sequencer) reported(shard cut.ShardID) uint64 {
	if _, void := q.st.Spec.VoidOf(shard); void {
		return ^uint64(0)
	}
	if v, ok := q.shards[shard]; ok {
		return v.length
	}
	return 0
}

// blockers returns the shards that have not reported enough for cut idx,
// and whether the cut is announced at all.
func (q *Sequencer) blockers(idx uint64) ([]cut.ShardID, bool) {
	w, ok := q.st.Spec.Window(idx)
	if !ok {
		return nil, false
	}
	j := idx - w.FirstCut
	var out []cut.ShardID
	for _, qu := range w.Quotas {
		if !w.Includes(qu.Shard, j) {
			continue
		}
		if need, _ := w.Length(qu.Shard, j); q.reported(qu.Shard) < need {
			out = append(out, qu.Shard)
		}
	}
	return out, true
}

// Releasable is how many cuts after the last released one are satisfied
// now. It also times the shard that alone holds a cut back, to spot
// stragglers.
func (q *Sequencer) Releasable(now time.Time) uint64 {
	if q.st == nil || q.st.Spec == nil {
		return 0
	}
	next := q.st.LastCut.Index + 1
	f := q.frontier()
	idx, blocked := f.idx, f.blockers
	n := idx - next
	if q.blockedCut < idx {
		if q.hasSole {
			// The shard that alone held a cut back has reported. If it
			// alone held back the cut before as well, it is late from
			// when every other shard had reported this one: a shard whose
			// every report comes late while the others run ahead releases
			// the cuts one by one, each blocked only briefly. A shard that
			// only now became the last one (the previous cut waited for
			// another group, or for several shards) could not have been
			// asked to catch up sooner.
			since := q.soleSince
			if done, ok := q.othersReached(q.blockedCut, q.soleBlocker); ok && q.soleRun && done.Before(since) {
				since = done
			}
			if now.Sub(since) > q.cfg.StragglerDelay {
				if v, ok := q.shards[q.soleBlocker]; ok {
					v.strikes++
				}
			}
		}
		q.prevSole, q.prevSoleOK = q.soleBlocker, q.hasSole
		q.hasSole = false
	}
	if len(blocked) > 0 {
		q.track(idx, f.furthest, blocked, now)
	} else {
		// Nothing announced waits: between windows, time changes nothing.
		q.waiting = false
	}
	return n
}

// frontier returns the first blocked cut, what blocks it, and how far the
// other shards are ahead of it.
func (q *Sequencer) frontier() frontier {
	if !q.frontValid {
		idx, blockers := q.firstBlocked()
		q.front = frontier{idx: idx, blockers: blockers}
		if len(blockers) > 0 {
			q.front.furthest = q.furthest(idx, blockers)
		}
		q.frontValid = true
	}
	return q.front
}

// furthest is how many cuts from idx on the shards other than blockers
// have data for: they wait for the blockers. A joining or leaving shard,
// or one with records but no quota (a straggler), waits for the end of the
// announced windows: only a new window can change its lot. A leaving shard
// that holds the cut back itself waits so too when nobody else is ahead:
// on an idle cluster no shard would fill its slots otherwise, and the leave
// would never end. (On a busy one it keeps meeting its quotas with
// records until the window ends.)
func (q *Sequencer) furthest(idx uint64, blockers []cut.ShardID) uint64 {
	var f uint64
	ws := q.st.Spec.Windows
	if len(ws) == 0 {
		return 0
	}
	windowsEnd := ws[len(ws)-1].FirstCut + ws[len(ws)-1].Cuts - idx
	for id, v := range q.shards {
		if slices.Contains(blockers, id) {
			continue
		}
		if v.moving || v.backlog > 0 && !q.held(id) {
			f = max(f, windowsEnd)
			continue
		}
		f = max(f, q.aheadOf(idx, id))
	}
	if f == 0 && slices.ContainsFunc(blockers, func(id cut.ShardID) bool { return q.shards[id] != nil && q.shards[id].moving }) {
		f = windowsEnd
	}
	return f
}

// firstBlocked returns the first cut after the last released one that is
// not satisfied, and the shards it waits for (none if it is not announced).
func (q *Sequencer) firstBlocked() (uint64, []cut.ShardID) {
	idx := q.st.LastCut.Index + 1
	for {
		b, ok := q.blockers(idx)
		if !ok || len(b) > 0 {
			return idx, b
		}
		idx++
	}
}

func (q *Sequencer) track(idx, furthest uint64, blockers []cut.ShardID, now time.Time) {
	if q.blockedCut != idx {
		q.blockedCut, q.waiting, q.hasSole = idx, false, false
	}
	if !q.waiting && furthest > 0 {
		q.waiting, q.waitingSince = true, now
	}
	if len(blockers) != 1 {
		q.hasSole = false
		return
	}
	if !q.hasSole || q.soleBlocker != blockers[0] {
		q.hasSole, q.soleBlocker, q.soleSince = true, blockers[0], now
		q.soleRun = q.prevSoleOK && q.prevSole == blockers[0]
	}
}

// othersReached returns when every shard of cut idx but except had reported
// it, or false when a report that old is forgotten.
func (q *Sequencer) othersReached(idx uint64, except cut.ShardID) (time.Time, bool) {
	w, ok := q.st.Spec.Window(idx)
	if !ok {
		return time.Time{}, false
	}
	j := idx - w.FirstCut
	var last time.Time
	for _, qu := range w.Quotas {
		if qu.Shard == except || !w.Includes(qu.Shard, j) {
			continue
		}
		v, ok := q.shards[qu.Shard]
		if !ok {
			return time.Time{}, false
		}
		at, ok := v.reached.at(qu.Base + w.Entries(qu.Shard, j))
		if !ok {
			return time.Time{}, false
		}
		if at.After(last) {
			last = at
		}
	}
	return last, !last.IsZero()
}

// reportTimesMax is how many reports of a shard the leader times; a
// straggler is judged within a few windows' worth of reports.
const reportTimesMax = 64

// reportTimes is a ring of a shard's latest report lengths, growing, and
// when each arrived.
type reportTimes struct {
	lengths [reportTimesMax]uint64
	ats     [reportTimesMax]time.Time
	n       int // reports added in all
}

func (r *reportTimes) add(length uint64, at time.Time) {
	r.lengths[r.n%reportTimesMax], r.ats[r.n%reportTimesMax] = length, at
	r.n++
}

// at returns when a report first reached length, or false when no
// remembered report did or an older, forgotten one may have.
func (r *reportTimes) at(length uint64) (time.Time, bool) {
	oldest := max(r.n-reportTimesMax, 0)
	for i := r.n - 1; i >= oldest; i-- {
		k := i % reportTimesMax
		if r.lengths[k] < length {
			if i == r.n-1 {
				return time.Time{}, false
			}
			k = (i + 1) % reportTimesMax
			return r.ats[k], true
		}
	}
	if oldest == 0 && r.n > 0 {
		// Every report is remembered and the first already reached it.
		return r.ats[0], true
	}
	return time.Time{}, false
}

// included is how many shards cut idx waits for.
func (q *Sequencer) included(idx uint64) int {
	w, ok := q.st.Spec.Window(idx)
	if !ok {
		return 0
	}
	n := 0
	for _, qu := range w.Quotas {
		if w.Includes(qu.Shard, idx-w.FirstCut) {
			n++
		}
	}
	return n
}

// held reports whether an announced window gives shard a quota.
func (q *Sequencer) held(shard cut.ShardID) bool {
	for _, w := range q.st.Spec.Windows {
		if _, ok := w.Quota(shard); ok {
			return true
		}
	}
	return false
}

// aheadOf is how many cuts from idx on shard has reported enough for,
// counting cuts without it, when it has reported anything not yet ordered.
func (q *Sequencer) aheadOf(idx uint64, shard cut.ShardID) uint64 {
	r := q.reported(shard)
	if r <= q.st.LastCut.Len(shard) {
		return 0
	}
	return aheadIn(q.st.Spec.Windows, idx, shard, r)
}

// aheadIn is aheadOf over windows ws for a shard that reported length r:
// counting from cut idx, the cuts up to the shard's last own cut that r
// satisfies, stopping at the first cut it does not. The leader asks this
// of every shard on every report, so it is arithmetic over the shard's
// cuts (every Groups-th from its Group), not a walk over the cuts.
func aheadIn(ws []fixante.Window, idx uint64, shard cut.ShardID, r uint64) uint64 {
	var ahead uint64
	next := idx // the first cut not looked at yet
	for _, w := range ws {
		if w.FirstCut+w.Cuts <= idx {
			continue
		}
		if w.FirstCut > next {
			return ahead // no window announces cut next
		}
		next = w.FirstCut + w.Cuts
		qu, has := w.Quota(shard)
		if !has {
			continue // the shard is in none of these cuts
		}
		from := max(idx, w.FirstCut) - w.FirstCut
		if r < qu.Base {
			return ahead // even the window's first cut needs more
		}
		g := uint64(w.Groups)
		mine := w.Capacity(shard) / qu.PerCut // the shard's cuts here
		done := (r - qu.Base) / qu.PerCut     // of which r satisfies
		if n := min(done, mine); n > 0 {
			if last := uint64(qu.Group) + (n-1)*g; last >= from {
				ahead = w.FirstCut + last - idx + 1
			}
		}
		if done < mine {
			// The first of its cuts r leaves short holds every later
			// cut back.
			return ahead
		}
	}
	return ahead
}

// lengthAt is shard's length once cut k is released.
func (q *Sequencer) lengthAt(shard cut.ShardID, k uint64) uint64 {
	n := q.st.LastCut.Len(shard)
	for _, w := range q.st.Spec.Windows {
		if w.FirstCut > k {
			break
		}
		if l, has := w.Length(shard, min(k, w.FirstCut+w.Cuts-1)-w.FirstCut); has {
			n = l
		}
	}
	return n
}

// LagFixes returns, for each shard holding back the first unreleased cut
// while others are done with it, the length it must reach now: as far as
// the furthest shard has gone. A shard that reported nothing beyond its
// last report is told at once; one with entries on the way only when the
// others are LagAhead cuts ahead or have waited LagAfter. It answers only
// when lag-fix is on.
func (q *Sequencer) LagFixes(now time.Time) []cut.Length {
	if !q.cfg.LagFix || q.st == nil || q.st.Spec == nil {
		return nil
	}
	f := q.frontier()
	idx, blockers := f.idx, f.blockers
	heading, headed := q.heading(idx)
	for id, v := range q.shards {
		// A shard that no longer holds the cut back, nor the cut another
		// shard's stored entries head for, owes nothing: it is neither
		// asked again nor suspected.
		if v.lagTarget > 0 && !slices.Contains(blockers, id) && !(headed && v.length < q.lengthAt(id, heading)) {
			v.lagTarget = 0
		}
	}
	if len(blockers) == 0 {
		return nil
	}
	furthest := f.furthest
	if furthest == 0 && !headed {
		// Nobody is waiting for anybody: nobody owes a catch-up.
		for _, v := range q.shards {
			v.lagTarget = 0
		}
		return nil
	}
	waited := q.waiting && q.blockedCut == idx && now.Sub(q.waitingSince) >= q.cfg.LagAfter
	// Others two cuts ahead are a burst, but not the shards that only
	// filled, as told below, the cut some shard's stored entries head
	// for: they run ahead of the records they wait for by design.
	burst := furthest > 0 && (waited || q.aheadUnfilled(idx, blockers) >= q.cfg.LagAhead)
	var out []cut.Length
	for id, v := range q.shards {
		// A shard with nothing beyond its last report cannot meet its
		// quota without a fill, so a cut another shard reached, or will
		// reach once its stored entries are durable, would wait for
		// nothing: it is told at once, while those entries replicate.
		idle := v.heard && v.backlog == 0
		targetCut, due := uint64(0), false
		if furthest > 0 && slices.Contains(blockers, id) && (burst || idle) {
			targetCut, due = idx+furthest-1, true
		}
		ahead := false
		if idle && headed && (!due || heading > targetCut) {
			targetCut, due, ahead = heading, true, true
		}
		if !due {
			continue
		}
		b := id
		target := q.lengthAt(b, targetCut)
		if target <= v.length {
			continue
		}
		if v.lagTarget >= target && now.Sub(v.lagLastSent) < q.cfg.Interval {
			continue
		}
		if v.lagTarget == 0 {
			v.lagFirstSent = now
			q.lagFixes++
		}
		v.lagTarget = max(v.lagTarget, target)
		v.lagLastSent = now
		if ahead {
			v.filledAhead = max(v.filledAhead, target)
		}
		out = append(out, cut.Length{Shard: b, Length: v.lagTarget})
	}
	slices.SortFunc(out, func(a, b cut.Length) int { return int(int64(a.Shard) - int64(b.Shard)) })
	return out
}

// aheadUnfilled is furthest without the shards whose lead is only the
// fill they were told to make ahead of another shard's records.
func (q *Sequencer) aheadUnfilled(idx uint64, blockers []cut.ShardID) uint64 {
	skip := slices.Clone(blockers)
	for id, v := range q.shards {
		if v.filledAhead > 0 && v.length <= v.filledAhead && !v.moving {
			skip = append(skip, id)
		}
	}
	if len(skip) == len(blockers) {
		return q.frontier().furthest
	}
	return q.furthest(idx, skip)
}

// heading returns the furthest cut, from idx on, that a shard's stored
// entries head for: the cut of the last entry a shard with a backlog
// holds, which it reports once its replicas hold it. Within the announced
// windows only; ok is false when no shard holds entries for such a cut.
func (q *Sequencer) heading(idx uint64) (cutIdx uint64, ok bool) {
	ws := q.st.Spec.Windows
	if len(ws) == 0 {
		return 0, false
	}
	last := ws[len(ws)-1].FirstCut + ws[len(ws)-1].Cuts - 1
	for id, v := range q.shards {
		if v.backlog == 0 || v.moving {
			continue
		}
		local := v.length + v.backlog - 1
		c, found := last, false
		for _, w := range ws {
			if _, j, in := w.Locate(id, local); in {
				c, found = w.FirstCut+j, true
				break
			}
		}
		if !found && !q.held(id) {
			continue // a straggler or a joiner: only a new window helps it
		}
		if c >= idx && (!ok || c > cutIdx) {
			cutIdx, ok = c, true
		}
	}
	return cutIdx, ok
}

// Suspects returns shards that were asked to catch up and reported no
// progress at all for SuspectAfter: the whole shard is taken for failed.
func (q *Sequencer) Suspects(now time.Time) []cut.ShardID {
	var out []cut.ShardID
	for id, v := range q.shards {
		if v.lagTarget > 0 && now.Sub(v.lagFirstSent) > q.cfg.SuspectAfter {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// PlanWindow returns the next window to announce, when one is due: at once
// when no window is announced, and halfway through the current one
// otherwise, so shards learn it long before they need it.
func (q *Sequencer) PlanWindow(now time.Time) (*control.WindowCommand, bool) {
	if q.st == nil || q.st.Spec == nil {
		return nil, false
	}
	ws := q.st.Spec.Windows
	switch len(ws) {
	case 0:
	case 1:
		if q.st.LastCut.Index+1 < ws[0].FirstCut+ws[0].Cuts/2 {
			return nil, false
		}
	default:
		return nil, false
	}
	if q.eager(now) {
		if q.st.Spec.Fallback {
			return nil, false
		}
		return &control.WindowCommand{Fallback: true}, true
	}
	var ids []cut.ShardID
	perCut := map[cut.ShardID]uint64{}
	for _, sh := range q.st.Shards {
		v, ok := q.shards[sh.ID]
		if sh.State != control.Live || !ok {
			continue
		}
		if p := q.quotaFor(sh.ID, v, now); p > 0 {
			ids = append(ids, sh.ID)
			perCut[sh.ID] = p
		}
	}
	if len(ids) == 0 {
		return nil, false
	}
	groups := 1
	if q.cfg.StaggerAbove > 0 && len(ids) > q.cfg.StaggerAbove {
		groups = (len(ids) + q.cfg.StaggerAbove - 1) / q.cfg.StaggerAbove
	}
	cmd := &control.WindowCommand{Groups: groups}
	for i, id := range ids {
		// A shard is in one cut of every groups: its quota covers that
		// many ordering intervals, or its records would queue.
		p := min(perCut[id]*uint64(groups), q.cfg.QuotaMax)
		cmd.Quotas = append(cmd.Quotas, fixante.Quota{Shard: id, PerCut: p, Group: i % groups})
	}
	return cmd, true
}

// Eager reports whether the leader cuts as eager order does now
// (control.Spec.Eager).
func (q *Sequencer) Eager() bool {
	return q.st != nil && q.st.Spec != nil && q.st.Spec.Eager()
}

// eager decides, at a window plan, whether fills cost more than
// Config.EagerAbove per record; then the leader falls back to eager cuts
// (control.Spec.Fallback) rather than plan a window. Two measures judge,
// over the stretch since the last plan (half a window at least; until
// then, and over a stretch without records, the leader keeps what it
// does):
//
//   - the fills the measured rates predict (fillsPerRecord): shards with
//     less than a record per interval need fills for most cuts. Once
//     fallen back, the leader speculates again only below half of
//     Config.EagerAbove, so that rates wobbling around the threshold do
//     not switch it at every judgement (each switch back costs a window
//     of fills while the quotas settle).
//   - the fills the windows actually cost, with two shards or more:
//     where durability comes in group commits, a shard's durable length
//     jumps by several cuts at once, and the others fill to match it (2
//     shards at 8,000/s filled a third of the positions and acknowledged
//     later than eager cuts). Eager cuts make no fills, so this measure
//     cannot tell when to speculate again: the leader tries a window
//     after a back-off that doubles, up to fallbackBackoffMax periods, at
//     every fallback it decides in a row.
//
// A stretch it judged restarts the measurement, so that the next
// judgement is on recent rates.
func (q *Sequencer) eager(now time.Time) bool {
	keep := q.st.Spec.Fallback
	if q.cfg.EagerAbove <= 0 {
		return false
	}
	if keep && now.Before(q.retryAt) {
		return true
	}
	period := q.cfg.Interval * time.Duration(max(q.st.Spec.WindowCuts/2, 1))
	var rates []float64
	var total float64
	var records, entries uint64
	for _, sh := range q.st.Shards {
		v, ok := q.shards[sh.ID]
		if sh.State != control.Live || !ok {
			continue
		}
		d := now.Sub(v.planAt)
		if v.planAt.IsZero() || d < period {
			return keep
		}
		r := float64(v.records-v.planRecords) / d.Seconds() * q.cfg.Interval.Seconds()
		rates = append(rates, r)
		total += r
		records += v.records - v.planRecords
		entries += v.length - v.planLength
	}
	if total == 0 {
		return keep
	}
	limit := q.cfg.EagerAbove
	if keep {
		limit /= 2
	}
	predicted := fillsPerRecord(rates) > limit
	// One shard's cuts wait for no other shard's fills.
	measured := !keep && len(rates) > 1 && entries > records && float64(entries-records) > q.cfg.EagerAbove*float64(records)
	switch {
	case !predicted && !measured:
		if !keep {
			q.backoff = 0
		}
		return false
	case measured && !predicted:
		q.backoff = min(max(2*q.backoff, 1), fallbackBackoffMax)
		q.retryAt = now.Add(period * time.Duration(q.backoff))
	}
	for _, v := range q.shards {
		v.planRecords, v.planLength, v.planAt = v.records, v.length, now
	}
	return true
}

// fallbackBackoffMax bounds the back-off of a fallback the measured fills
// decided, in judgement periods (half a window each): at most one half
// window in 64 speculates where speculation costs more than it saves.
const fallbackBackoffMax = 64

// fillsPerRecord is how many no-op fills a record's cut needs on average
// when shard i gets rates[i] records per interval (Poisson): each other
// shard j has none for the cut with probability exp(-rates[j]).
func fillsPerRecord(rates []float64) float64 {
	var empty, total, weighted float64
	for _, r := range rates {
		empty += math.Exp(-r)
		total += r
	}
	if total == 0 {
		return 0
	}
	for _, r := range rates {
		weighted += r * (empty - math.Exp(-r))
	}
	return weighted / total
}

// quotaFor decides a shard's per-cut quota for the next window, moving it
// through straggler exclusion and probing, and resets the measurements.
func (q *Sequencer) quotaFor(id cut.ShardID, v *shardView, now time.Time) uint64 {
	rate := 0.0
	if d := now.Sub(v.planAt); !v.planAt.IsZero() && d > 0 && v.records > v.planRecords {
		rate = float64(v.records-v.planRecords) / d.Seconds()
	}
	v.planRecords, v.planLength, v.planAt = v.records, v.length, now
	prev := v.quota
	strikes := v.strikes
	v.strikes = 0
	switch {
	case strikes >= q.cfg.StragglerStrikes || (v.stage == stageProbing && strikes > 0):
		v.stage = stageExcluded
		v.quota = 0
		return 0
	case v.stage == stageExcluded:
		v.stage = stageProbing
		v.quota = 1
		return 1
	case v.stage == stageProbing:
		v.stage = stageNormal
	}
	want := prev
	if want == 0 {
		want = 1
	}
	// A backlog is drained over the next window on top of the rate: what
	// the shard holds beyond the announced windows (entries stored, or
	// durable lengths reported, between windows). Entries it holds beyond
	// its report but inside the windows are in flight, which a busy shard
	// always has: the announced cuts place them, and draining them too
	// would set the quota above the rate, to be filled with no-ops.
	stored := v.length + v.backlog
	backlog := stored - min(stored, q.covered(id))
	if drain := backlog / max(q.st.Spec.WindowCuts, 1); q.cfg.QuotaChange && (rate > 0 || drain > 0) {
		// A quota grows at most fourfold per window: a rate measured over
		// a short or disturbed stretch must not flood the others with
		// no-ops for a whole window.
		r := fixante.RateQuota(rate, q.cfg.Interval) + drain
		r = min(r, q.cfg.QuotaMax, max(prev, 1)*4)
		// Small wobbles keep the quota: each change costs no-ops while
		// the rate estimate settles.
		if prev == 0 || r*4 > prev*5 || r*5 < prev*4 {
			want = r
		}
	}
	if prev != 0 && want != prev {
		q.quotaChanges++
	}
	v.quota = want
	return want
}

// covered is the shard's length once the announced windows are released:
// its end in the last window that holds it, else its length in the last
// cut.
func (q *Sequencer) covered(id cut.ShardID) uint64 {
	ws := q.st.Spec.Windows
	for i := len(ws) - 1; i >= 0; i-- {
		if end, ok := ws[i].ShardEnd(id); ok {
			return end
		}
	}
	return q.st.LastCut.Len(id)
}

// Waiting reports whether time alone can change the sequencer's answers:
// a cut some shards wait on, or a lag-fix not yet answered.
func (q *Sequencer) Waiting() bool {
	if q.waiting {
		return true
	}
	for _, v := range q.shards {
		if v.lagTarget > 0 {
			return true
		}
	}
	return false
}
