package order

import (
	"slices"
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
// mode. A replica of a shard's configuration is taken for failed when it
// stays silent longer than the failure timeout, comes back with a newer
// incarnation (it restarted and lost its volatile state), announced that
// it goes away (a clean stop), or, as the primary, reported its copy
// broken. For each shard with failed replicas the leader proposes a new
// configuration without them (control.ReconfigCommand); one without any
// replica finalizes the shard. Silence counts only while this leader
// observes: from when it first saw the replica in the shard's
// configuration (when it started leading, or later) and from when it last
// ran again after being stopped. A new or resumed leader has heard nobody
// yet, and a new replica gets a full timeout to start its heartbeats.
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
	// seenAt is when each replica first appeared to this leader in its
	// shard's configuration, and configAt when each configuration did.
	seenAt   map[member]time.Time
	configAt map[config]time.Time
	beats    map[string]beat
	// broken holds the copies reported broken, with the configuration
	// the report was made in (0: any).
	broken map[member]uint64
	// leaving holds the incarnation of each server that announced a
	// clean stop.
	leaving map[string]uint64
	// proposed is when this leader last proposed to reconfigure each
	// configuration (shard and epoch): it proposes again only after a
	// failure timeout, in case that proposal was lost.
	proposed map[config]time.Time
}

// member is one replica of one shard.
type member struct {
	shard  cut.ShardID
	server string
}

// config is one configuration of one shard.
type config struct {
	shard cut.ShardID
	epoch uint64
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
		seenAt:     map[member]time.Time{},
		configAt:   map[config]time.Time{},
		beats:      map[string]beat{},
		broken:     map[member]uint64{},
		leaving:    map[string]uint64{},
		proposed:   map[config]time.Time{},
		lastDetect: now,
	}
	d.st = st
	for _, sh := range st.Shards {
		// Configurations older than this leader are not new to anyone.
		d.configAt[config{sh.ID, sh.Epoch}] = time.Time{}
	}
	d.see(now)
	return d
}

func (d *Detector) configured(c config) bool {
	_, ok := d.configAt[c]
	return ok
}

// Observe takes the control state after an applied command or a restored
// snapshot; replicas it shows in a configuration for the first time are
// seen at now.
func (d *Detector) Observe(st *control.State, now time.Time) {
	d.st = st
	if st.MembershipVersion == d.mv {
		// Only a changed shard table brings new replicas; a cut does not.
		return
	}
	d.see(now)
}

func (d *Detector) see(now time.Time) {
	d.mv = d.st.MembershipVersion
	for _, sh := range d.st.Shards {
		if c := (config{sh.ID, sh.Epoch}); !d.configured(c) {
			d.configAt[c] = now
		}
		for _, r := range sh.Replicas {
			m := member{sh.ID, r.ID}
			if _, ok := d.seenAt[m]; !ok {
				d.seenAt[m] = now
			}
		}
	}
}

// Beat records a heartbeat of server, running as incarnation, at now. A
// server's incarnations grow with each restart (the storage server's is
// its start time), so a beat of an older incarnation than one heard is a
// late message of a past life, and forgotten.
func (d *Detector) Beat(server string, incarnation uint64, now time.Time) {
	if b, ok := d.beats[server]; ok && b.incarnation > incarnation {
		return
	}
	d.beats[server] = beat{at: now, incarnation: incarnation}
}

// Broken records that server's copy of shard is broken, as reported in
// configuration epoch: by the server itself (its store failed; epoch 0,
// whatever the configuration), or by the primary of epoch that cannot
// replicate to it. The next Detect takes that replica for failed, unless
// the shard moved to another configuration since: a primary's late word
// about a backup says nothing about the backup's place in a newer one.
func (d *Detector) Broken(shard cut.ShardID, server string, epoch uint64) {
	d.broken[member{shard, server}] = epoch
}

// GoingAway records that server, running as incarnation, stops cleanly:
// the next Detect takes it for failed in every shard, without waiting for
// its silence.
func (d *Detector) GoingAway(server string, incarnation uint64) {
	d.leaving[server] = incarnation
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

// Joined says that server joined shard's configuration at now: it gets a
// full timeout to be heard in it, and what was said of its copy before
// (broken) is forgotten, as it caught up since.
func (d *Detector) Joined(shard cut.ShardID, server string, now time.Time) {
	m := member{shard, server}
	delete(d.broken, m)
	d.seenAt[m] = now
}

// Detect returns the reconfigurations to propose at now: for each shard
// with failed replicas, its configuration without them. Each counts as
// proposed from now on, so that it is not proposed again within a failure
// timeout. The caller runs it at least every DetectInterval; a longer gap
// is taken for a stop of the leader itself.
func (d *Detector) Detect(now time.Time) []control.ReconfigCommand {
	if now.Sub(d.lastDetect) > stoppedDetectIntervals*DetectInterval(d.timeout) {
		d.resumedAt = now
	}
	d.lastDetect = now
	var out []control.ReconfigCommand
	for i := range d.st.Shards {
		sh := &d.st.Shards[i]
		if failed := d.failed(sh, now); len(failed) > 0 && !d.failingWhole(sh, failed, now) && d.propose(sh, now) {
			out = append(out, control.ReconfigCommand{Shard: sh.ID, Epoch: sh.Epoch, Remove: failed})
		}
	}
	return out
}

// failingWhole says that sh's replicas other than failed have all been
// silent for half the failure timeout at now, so the shard is likely
// failing as a whole: the failed ones are taken out with them, once their
// silence reaches the timeout too (at most half a timeout later), or
// alone once one of them is heard again. Taken out a detection earlier,
// a replica that merely fell silent first (its server heartbeated a
// moment before the other died) would be fenced, and drop the tail the
// configuration left to its dead peers alone: entries every replica held,
// which the finalization then orders with no replica to serve them.
func (d *Detector) failingWhole(sh *control.Shard, failed []string, now time.Time) bool {
	if len(failed) == len(sh.Replicas) {
		return false
	}
	for _, r := range sh.Replicas {
		if !slices.Contains(failed, r.ID) && now.Sub(d.heard(sh.ID, r)) <= d.timeout/2 {
			return false
		}
	}
	return true
}

// failed returns the replicas of sh's configuration taken for failed at
// now, in configuration order.
func (d *Detector) failed(sh *control.Shard, now time.Time) []string {
	var out []string
	for _, r := range sh.Replicas {
		m := member{sh.ID, r.ID}
		if e, ok := d.broken[m]; ok && (e == 0 || e == sh.Epoch) {
			out = append(out, r.ID)
			continue
		}
		if inc, ok := d.leaving[r.ID]; ok && inc == r.Incarnation {
			out = append(out, r.ID)
			continue
		}
		// A newer incarnation restarted and lost what it held.
		if b, ok := d.beats[r.ID]; ok && b.incarnation > r.Incarnation {
			out = append(out, r.ID)
			continue
		}
		if now.Sub(d.heard(sh.ID, r)) > d.timeout {
			out = append(out, r.ID)
		}
	}
	return out
}

// heard is when replica r of shard was last heard, as far as silence
// counts: the latest of when it was first seen in the configuration, when
// the leader resumed, and its last heartbeat. A beat of an older
// incarnation is the life before the restart that the member rejoined
// from: heard before it restarted, or late; it says nothing about the
// member, whose silence counts from its join.
func (d *Detector) heard(shard cut.ShardID, r control.Replica) time.Time {
	last := maxTime(d.seenAt[member{shard, r.ID}], d.resumedAt)
	if b, ok := d.beats[r.ID]; ok && b.incarnation == r.Incarnation {
		last = maxTime(last, b.at)
	}
	return last
}

// Suspect says that the policy takes shard's primary for failed at now
// (it ignored a lag-fix), and returns the reconfiguration without it, if
// one is to be proposed (see propose). A configuration younger than the
// failure timeout is spared: its primary may have been promoted while the
// lag-fix waited, and gets a full timeout to catch up, as a new replica
// gets one to start its heartbeats. If replicas of the configuration are
// taken for failed already (a backup that stopped, say, which keeps the
// primary from making anything durable), they are taken out instead: they
// explain the lag, and taking out the primary would leave the shard to
// them.
func (d *Detector) Suspect(shard cut.ShardID, now time.Time) (control.ReconfigCommand, bool) {
	sh := d.st.Shard(shard)
	if sh == nil || len(sh.Replicas) == 0 || now.Sub(d.configAt[config{sh.ID, sh.Epoch}]) < d.timeout {
		return control.ReconfigCommand{}, false
	}
	remove := d.failed(sh, now)
	if len(remove) == 0 {
		remove = []string{sh.Replicas[0].ID}
	} else if d.failingWhole(sh, remove, now) {
		// As in Detect: the others are falling silent too, and go out
		// together with these.
		return control.ReconfigCommand{}, false
	}
	if !d.propose(sh, now) {
		return control.ReconfigCommand{}, false
	}
	return control.ReconfigCommand{Shard: sh.ID, Epoch: sh.Epoch, Remove: remove}, true
}

// propose reports whether to propose a new configuration of sh at now,
// whatever the reason: unless it is finalized already, or this leader
// proposed one for its current epoch within a failure timeout, since that
// proposal may yet commit (after a timeout, it was lost). If so, the
// configuration counts as being replaced from now on.
func (d *Detector) propose(sh *control.Shard, now time.Time) bool {
	if sh.State == control.Finalized {
		return false
	}
	c := config{sh.ID, sh.Epoch}
	if t, ok := d.proposed[c]; ok && now.Sub(t) < d.timeout {
		return false
	}
	d.proposed[c] = now
	return true
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
