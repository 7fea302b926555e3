package order

import (
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
)

// Bounds of the failure detector's rhythm.
const (
	// detectsPerTimeout is how often per failure timeout the leader runs
	// Detect: a silent replica's shard is finalized at most a quarter
	// timeout late.
	detectsPerTimeout = 4
	// stoppedDetectIntervals: two runs of Detect further apart than this
	// many DetectIntervals mean that the leader itself did not run in
	// between (SIGSTOP, a long GC stall, a frozen VM). It heard nothing
	// then, not even what was sent to it, and the storage servers may
	// have moved to another leader; so silence counts again from the
	// later run.
	stoppedDetectIntervals = 2
)

// DetectInterval is how often the leader must run Detect with a failure
// timeout of failureTimeout.
func DetectInterval(failureTimeout time.Duration) time.Duration {
	return failureTimeout / detectsPerTimeout
}

// Detector is the ordering leader's failure detector, the same in every
// mode. A shard is taken for failed when one of its replicas stays silent
// longer than the failure timeout, comes back with another incarnation
// (it restarted and lost its state), or its primary reports it broken.
// Silence counts only while this leader observes: from when it first saw
// the shard (when it started leading, or when the shard was registered
// later) and from when it last ran again after being stopped. A new or
// resumed leader has heard nobody yet, and a new shard's replicas get a
// full timeout to start their heartbeats.
type Detector struct {
	timeout time.Duration
	st      *control.State
	// lastDetect is when Detect last ran (at first, the leader's start);
	// resumedAt is when it ran after a gap that says the leader was
	// stopped (zero if never).
	lastDetect time.Time
	resumedAt  time.Time
	// mv is the shard table version seenAt was last brought up to.
	mv uint64
	// seenAt is when each shard first appeared to this leader: its start
	// for the shards it found, or the shard's registration.
	seenAt map[cut.ShardID]time.Time
	beats  map[string]beat
	// broken holds the shards a primary reported broken.
	broken map[cut.ShardID]bool
	// finalizing is when this leader last proposed to finalize a shard
	// as failed: it proposes again only after a failure timeout, in case
	// that proposal was lost.
	finalizing map[cut.ShardID]time.Time
}

// beat is the last heartbeat of one storage server.
type beat struct {
	at          time.Time
	incarnation uint64
}

// NewDetector returns the detector of a leader that starts at now with
// the committed state st; failureTimeout is how long a replica may stay
// silent.
func NewDetector(failureTimeout time.Duration, st *control.State, now time.Time) *Detector {
	d := &Detector{
		timeout:    failureTimeout,
		seenAt:     map[cut.ShardID]time.Time{},
		beats:      map[string]beat{},
		broken:     map[cut.ShardID]bool{},
		finalizing: map[cut.ShardID]time.Time{},
		lastDetect: now,
	}
	d.st, d.mv = st, st.MembershipVersion
	for _, sh := range st.Shards {
		d.seenAt[sh.ID] = now
	}
	return d
}

// Observe takes the control state after an applied command or a restored
// snapshot; shards it shows for the first time are seen at now.
func (d *Detector) Observe(st *control.State, now time.Time) {
	d.st = st
	if st.MembershipVersion == d.mv {
		// Only a changed shard table brings new shards; a cut does not.
		return
	}
	d.mv = st.MembershipVersion
	for _, sh := range st.Shards {
		if _, ok := d.seenAt[sh.ID]; !ok {
			d.seenAt[sh.ID] = now
		}
	}
}

// Beat records a heartbeat of server, running as incarnation, at now.
func (d *Detector) Beat(server string, incarnation uint64, now time.Time) {
	d.beats[server] = beat{at: now, incarnation: incarnation}
}

// Broken records that the primary of shard reported it broken; the next
// Detect takes it for failed.
func (d *Detector) Broken(shard cut.ShardID) {
	d.broken[shard] = true
}

// Registered says that a shard with replicas reps was registered: their
// incarnations are the ones to check from now on, so a heartbeat of
// another incarnation heard before is forgotten.
func (d *Detector) Registered(reps []control.Replica) {
	for _, r := range reps {
		if b, ok := d.beats[r.ID]; ok && b.incarnation != r.Incarnation {
			delete(d.beats, r.ID)
		}
	}
}

// Detect returns the shards to finalize as failed at now, and counts each
// as being finalized from now on, so that it is not proposed again within
// a failure timeout. The caller runs it at least every DetectInterval; a
// longer gap is taken for a stop of the leader itself.
func (d *Detector) Detect(now time.Time) []cut.ShardID {
	if now.Sub(d.lastDetect) > stoppedDetectIntervals*DetectInterval(d.timeout) {
		d.resumedAt = now
	}
	d.lastDetect = now
	var failed []cut.ShardID
	for i := range d.st.Shards {
		sh := &d.st.Shards[i]
		if d.failed(sh, now) && d.finalize(sh, now) {
			failed = append(failed, sh.ID)
		}
	}
	return failed
}

func (d *Detector) failed(sh *control.Shard, now time.Time) bool {
	if d.broken[sh.ID] {
		return true
	}
	for _, r := range sh.Replicas {
		// Silence counts from the latest of: the shard first seen, the
		// leader resumed, the replica last heard.
		last := maxTime(d.seenAt[sh.ID], d.resumedAt)
		if b, ok := d.beats[r.ID]; ok {
			if b.incarnation != r.Incarnation {
				return true
			}
			last = maxTime(last, b.at)
		}
		if now.Sub(last) > d.timeout {
			return true
		}
	}
	return false
}

// Suspect says that the policy takes shard for failed at now, and reports
// whether to propose finalizing it (see finalize).
func (d *Detector) Suspect(shard cut.ShardID, now time.Time) bool {
	sh := d.st.Shard(shard)
	return sh != nil && d.finalize(sh, now)
}

// finalize reports whether to propose finalizing sh as failed at now,
// whatever the reason: unless it is finalized already, or this leader
// proposed that within a failure timeout, since that proposal may yet
// commit (after a timeout, it was lost). If so, the shard counts as being
// finalized from now on.
func (d *Detector) finalize(sh *control.Shard, now time.Time) bool {
	if sh.State == control.Finalized {
		return false
	}
	if t, ok := d.finalizing[sh.ID]; ok && now.Sub(t) < d.timeout {
		return false
	}
	d.finalizing[sh.ID] = now
	return true
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
