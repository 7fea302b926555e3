package lazy

import (
	"slices"
	"time"

	"github.com/augur-log/augur/internal/cut"
)

// Claim reserves a view for one view change. The control plane records
// it through Raft before it seals the current view, and the control state
// records a view's configuration only under that view's claim, the
// newest. Two ordering replicas that both think they lead (one deposed
// and unaware of it) therefore never both complete a view change: the
// deposed one's claim or record never commits, or a newer claim overtakes
// it, and it never advances stable-gp or starts its view.
type Claim struct {
	View  uint64 `json:"view"`
	Owner string `json:"owner"`
}

// ReplicaStatus is a sequencing replica's answer to the control plane's
// probe.
type ReplicaStatus struct {
	View     uint64
	Sealed   bool
	Amnesiac bool
}

// ControlState is what the control plane reads from the control state
// (as applied on its ordering replica): the recorded configuration (nil
// before the first view), the newest claim, and the cluster's shards
// that may still grow (control.State.LazyControl builds it).
type ControlState struct {
	Config *SeqConfig
	Claim  *Claim
	// Flush is the newest flush recorded (under the claim of its view);
	// one of a view newer than Config's is an unfinished view change's,
	// which the next one flushes again.
	Flush  *Mapping
	Shards []cut.ShardID
	// NextShard is one past the shard ids the control state gave: a
	// shard below it that is not in Shards was finalized.
	NextShard cut.ShardID
}

// ControlConfig configures the control plane.
type ControlConfig struct {
	// Replicas are every sequencing replica of the cluster file, in its
	// order; the first view takes them all, the first leading.
	Replicas []ReplicaID
	// FailureTimeout is how long a replica of the view may stay silent
	// before the control plane drops it.
	FailureTimeout time.Duration
	// ResendAfter is how long a step waits for its answers before the
	// control plane sends it again.
	ResendAfter time.Duration
}

// ControlOutput is what one step of the control plane asks its shell (the
// leading ordering replica) to do.
type ControlOutput struct {
	// Claim, Flush and Record go to the control state through Raft; the
	// shell calls Applied once they are applied (whether they changed it
	// or not).
	Claim  *Claim
	Flush  *Mapping
	Record *SeqConfig
	// Seal goes to every replica of SealTo, who answer Sealed.
	Seal   *Seal
	SealTo []ReplicaID
	// Map goes to the primary of every shard of MapTo, who answer
	// MapAcked.
	Map   *Mapping
	MapTo []cut.ShardID
	// Stable goes to every replica of every shard.
	Stable *StableGP
	// Start goes to every replica of StartTo.
	Start   *StartView
	StartTo []ReplicaID
}

// Empty says the output asks for nothing.
func (o ControlOutput) Empty() bool {
	return o.Claim == nil && o.Flush == nil && o.Record == nil && o.Seal == nil && o.Map == nil && o.Stable == nil && o.Start == nil
}

// Control is the control plane of lazy order, as the leading ordering
// replica runs it for one term of leadership (owner names the term: no
// other term may bear the same name). It records the first view; watches
// the sequencing replicas through the shell's probes; and when a replica
// of the view failed, restarted, or the view was sealed (by an earlier
// leader's unfinished view change), or a replica outside the view came
// back, it claims the next view through Raft and runs a Reconfig under
// the claim: seal, flush, record, then stable-gp and the new view's
// start. A recorded view is started on each of its replicas until every
// one runs it.
//
// Nothing leaves the control plane on the strength of its own proposal:
// it seals only once its claim is applied, and advances stable-gp and
// starts a view only once the view's configuration is applied.
type Control struct {
	cfg   ControlConfig
	owner string
	st    ControlState
	// lastOK is when each replica last answered; status its last answer
	// since the configuration changed.
	lastOK map[ReplicaID]time.Time
	status map[ReplicaID]ReplicaStatus
	// claiming is the view this control plane claimed and waits to see
	// applied (0: none), for dropping failed and adding added.
	claiming      uint64
	failed, added []ReplicaID
	// claimed is the view whose claim is applied, waiting for a replica
	// that runs the recorded view before it seals it.
	claimed uint64
	rc      *Reconfig
	// sealing is when rc began sealing.
	sealing time.Time
	// starts is the start of the view this control plane recorded, with
	// what its flush bound, for the replicas still to start.
	starts *StartView
	// sentAt is when the pending step was last sent.
	sentAt time.Time
}

// NewControl returns the control plane of a new term of leadership.
func NewControl(cfg ControlConfig, owner string, now time.Time) *Control {
	c := &Control{cfg: cfg, owner: owner, lastOK: map[ReplicaID]time.Time{}, status: map[ReplicaID]ReplicaStatus{}}
	for _, id := range cfg.Replicas {
		c.lastOK[id] = now
	}
	return c
}

// Config returns the recorded configuration as this control plane last
// learned it (nil before the first view).
func (c *Control) Config() *SeqConfig { return c.st.Config }

// Changing says a view change is under way: claimed and not recorded yet.
func (c *Control) Changing() bool { return c.claiming != 0 || c.claimed != 0 || c.rc != nil }

// Applied takes the control state after an apply on the leading replica.
func (c *Control) Applied(st ControlState, now time.Time) ControlOutput {
	prev := c.st.Config
	c.st = st
	cur := st.Config
	if cur != nil && (prev == nil || prev.View != cur.View) {
		// A new configuration: the answers about the old one are stale,
		// and silence counts from now.
		clear(c.status)
		for id := range c.lastOK {
			c.lastOK[id] = now
		}
	}
	if c.rc != nil {
		if out := c.carry(c.rc.SetShards(st.Shards, st.NextShard)); !out.Empty() {
			c.sentAt = now
			return out
		}
	}
	mine := st.Claim != nil && st.Claim.Owner == c.owner
	switch {
	case c.rc != nil && cur != nil && cur.View >= c.rc.View():
		rc := c.rc
		c.rc = nil
		if cur.View != rc.View() || rc.step != stepRecord {
			return ControlOutput{}
		}
		c.sentAt = now
		return c.carry(rc.Recorded())
	case (c.rc != nil || c.claimed != 0) && !(mine && st.Claim.View == c.changeView()):
		// A newer claim took over: this view change never records.
		c.rc, c.claimed = nil, 0
	case c.rc != nil && c.rc.step == stepRecordFlush && st.Flush != nil && st.Flush.View == c.rc.View():
		c.sentAt = now
		return c.carry(c.rc.FlushRecorded())
	case c.claiming != 0 && mine && st.Claim.View == c.claiming && cur != nil:
		c.claimed, c.claiming = c.claiming, 0
		return c.begin(now)
	case c.claiming != 0 && ((st.Claim != nil && st.Claim.View >= c.claiming) || (cur != nil && cur.View >= c.claiming)):
		c.claiming = 0
	}
	return ControlOutput{}
}

// changeView is the view of the view change under way.
func (c *Control) changeView() uint64 {
	if c.rc != nil {
		return c.rc.View()
	}
	return c.claimed
}

// begin seals the recorded view under the applied claim, once some
// replica is known to run it (one that never ran could not recover it).
func (c *Control) begin(now time.Time) ControlOutput {
	cur := c.st.Config
	if !c.summary(now).ran {
		return ControlOutput{}
	}
	view := c.claimed
	c.claimed = 0
	rc, out, err := NewReconfig(*cur, c.failed, c.added, c.st.Shards)
	if err != nil {
		return ControlOutput{}
	}
	// Views may have been skipped (an earlier claim never recorded): the
	// new view is the claimed one.
	rc.next.View = view
	rc.SetShards(c.st.Shards, c.st.NextShard)
	c.rc = rc
	c.sentAt, c.sealing = now, now
	if f := c.st.Flush; f != nil && f.View > cur.View {
		return c.carry(rc.Adopt(*f))
	}
	return c.carry(out)
}

// Status takes a replica's answer to a probe, which came at now. An
// answer that came before the configuration changed is about the old one:
// it changes nothing.
func (c *Control) Status(id ReplicaID, st ReplicaStatus, now time.Time) {
	if last, ok := c.lastOK[id]; !ok || now.Before(last) {
		return
	}
	c.lastOK[id] = now
	c.status[id] = st
}

// viewSummary is what the probes tell of the recorded view.
type viewSummary struct {
	failed, added, behind []ReplicaID
	// sealed says a replica of the view is sealed (an earlier view
	// change never finished); ran that some replica runs or ran it.
	sealed, ran bool
}

func (c *Control) summary(now time.Time) viewSummary {
	cur := c.st.Config
	var v viewSummary
	for _, id := range c.cfg.Replicas {
		member := slices.Contains(cur.Replicas, id)
		st, heard := c.status[id]
		if member && heard && st.View == cur.View && !st.Amnesiac {
			v.ran = true
		}
		switch {
		case member && now.Sub(c.lastOK[id]) >= c.cfg.FailureTimeout:
			v.failed = append(v.failed, id)
		case !heard:
		case !member:
			v.added = append(v.added, id)
		case st.View < cur.View:
			v.behind = append(v.behind, id)
		case st.View == cur.View && st.Sealed && st.Amnesiac:
			// It restarted and lost its ring: it cannot run the view.
			v.failed = append(v.failed, id)
		case st.View == cur.View && st.Sealed:
			v.sealed = true
		}
	}
	return v
}

// Tick runs the control plane at now: it records the first view, sends a
// pending step again, starts the recorded view where it does not run, or
// decides from the probes' answers whether the view must change.
func (c *Control) Tick(now time.Time) ControlOutput {
	cur := c.st.Config
	due := now.Sub(c.sentAt) >= c.cfg.ResendAfter
	switch {
	case cur == nil:
		if !due || len(c.cfg.Replicas) == 0 {
			return ControlOutput{}
		}
		c.sentAt = now
		return ControlOutput{Record: &SeqConfig{View: 1, Replicas: slices.Clone(c.cfg.Replicas), Leader: c.cfg.Replicas[0]}}
	case c.claiming != 0:
		if !due {
			return ControlOutput{}
		}
		c.sentAt = now
		return ControlOutput{Claim: &Claim{View: c.claiming, Owner: c.owner}}
	case c.rc != nil && c.rc.step == stepSeal && now.Sub(c.sealing) >= c.cfg.FailureTimeout:
		// No replica of the new configuration could recover the view
		// (the detector dropped the one that could, after a delay, while
		// the others failed or restarted without their rings): the view
		// change is given up, which is safe before its flush, and decided
		// again below from the probes' fresh answers under a newer claim.
		// Waiting on would leave the view sealed for good.
		c.rc = nil
	case c.rc != nil:
		if !due {
			return ControlOutput{}
		}
		c.sentAt = now
		return c.carry(c.rc.Pending())
	}
	v := c.summary(now)
	if len(v.behind) > 0 {
		// The recorded view runs first (its leader may have fallen before
		// starting it): a view that never ran cannot be sealed and
		// changed, for no replica could recover it.
		sv := StartView{View: cur.View, Ordered: cur.Stable, From: cur.From, Leader: cur.Leader, Replicas: slices.Clone(cur.Replicas)}
		if s := c.starts; s != nil && s.View == cur.View {
			sv = *s
		}
		return ControlOutput{Start: &sv, StartTo: v.behind}
	}
	if c.claimed != 0 {
		return c.begin(now)
	}
	if !v.ran || (len(v.failed) == 0 && len(v.added) == 0 && !v.sealed) {
		return ControlOutput{}
	}
	left := len(v.added)
	for _, id := range cur.Replicas {
		if !slices.Contains(v.failed, id) {
			left++
		}
	}
	if left == 0 {
		// Every replica is gone: nothing can recover the view.
		return ControlOutput{}
	}
	c.claiming = cur.View + 1
	if cl := c.st.Claim; cl != nil && cl.View >= c.claiming {
		c.claiming = cl.View + 1
	}
	c.failed, c.added = v.failed, v.added
	c.sentAt = now
	return ControlOutput{Claim: &Claim{View: c.claiming, Owner: c.owner}}
}

// Sealed takes a replica's answer to Seal.
func (c *Control) Sealed(from ReplicaID, rep SealReply) ControlOutput {
	if c.rc == nil {
		return ControlOutput{}
	}
	return c.carry(c.rc.Sealed(from, rep))
}

// MapAcked takes a shard primary's answer to the flush.
func (c *Control) MapAcked(a MappingAck) ControlOutput {
	if c.rc == nil {
		return ControlOutput{}
	}
	return c.carry(c.rc.MapAcked(a))
}

func (c *Control) carry(o ReconfigOutput) ControlOutput {
	out := ControlOutput{Map: o.Map, Flush: o.Flush, Record: o.Record, Stable: o.Stable}
	if o.Map != nil {
		out.MapTo = slices.Clone(c.rc.shards)
	}
	if o.Seal != nil {
		out.Seal, out.SealTo = o.Seal, slices.Clone(c.rc.old.Replicas)
	}
	if o.Start != nil {
		sv := *o.Start
		c.starts = &sv
		out.Start, out.StartTo = o.Start, slices.Clone(o.Start.Replicas)
	}
	return out
}
