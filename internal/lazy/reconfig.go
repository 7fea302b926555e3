package lazy

import (
	"fmt"
	"slices"

	"github.com/augur-log/augur/internal/cut"
)

// SeqConfig is a sequencing configuration as the control state (Raft)
// records it: the view, its replicas and leader, and the stable end it
// started at. Positions below Stable never change; a view change moves it
// only forward.
type SeqConfig struct {
	View     uint64
	Replicas []ReplicaID
	Leader   ReplicaID
	Stable   uint64
	// From is where the view's flush started: a replica that missed the
	// view's start is started from the recorded configuration.
	From uint64
}

// Seal asks every replica of View to seal it and answer with a
// SealReply.
type Seal struct{ View uint64 }

// ReconfigOutput is what one step of a view change asks its shell (the
// ordering leader) to do.
type ReconfigOutput struct {
	// Seal goes to every replica of the old view that has not answered.
	Seal *Seal
	// Flush is the flush to record in the control state before it goes
	// to the shards: call FlushRecorded once it is applied.
	Flush *Mapping
	// Map goes to the primary of every shard of the view change: the
	// flush of the recovery replica's unordered entries. Shards answer
	// with MappingAck.
	Map *Mapping
	// Record is the new configuration: propose it to the control state,
	// and call Recorded once it is committed.
	Record *SeqConfig
	// Stable goes to every replica of every shard.
	Stable *StableGP
	// Start goes to every replica of the new view; the view change is
	// complete (the new leader runs NewOrderer(view, Start.Ordered, ...)
	// once it starts).
	Start *StartView
}

// Reconfig is one view change of the sequencing layer, run by the
// control plane (the ordering layer's Raft leader), in the paper's steps:
// seal the old view on its replicas; take the first surviving replica that
// answers as the recovery replica; flush its unordered entries to the
// shards from its ordered end; record the new configuration; advance
// stable-gp and tell the shards; start the new view on its replicas.
// Recording the configuration before stable-gp advances keeps a
// partitioned old replica from rebinding positions a reader may see.
//
// The flush is recorded too, before any shard sees it, and a later view
// change of the same sealed view (its control plane crashed or was
// deposed before recording the view) flushes the recorded one again
// instead of recovering anew. Replicas answer the seal with different
// ordered ends (one collected a batch another had not): a second flush
// from a higher end than the first left the first's rebinding below it on
// the shards that got the first, one position bound to two shards and a
// record the second did not carry unbound.
type Reconfig struct {
	old    SeqConfig
	next   SeqConfig
	failed []ReplicaID
	shards []cut.ShardID
	step   reconfigStep
	flush  *Mapping
	// adopted is an earlier view change's recorded flush, sent once the
	// seal is answered.
	adopted *Mapping
	ids     []RecordID
	acked   map[cut.ShardID]bool
	// from and end bound the flush: the recovery replica's ordered end,
	// and the new view's stable end.
	from, end uint64
	// nextShard is one past the shard ids the control state gave, as the
	// view change knows it; sealed is a recovery replica's answer that
	// waits for a table that knows its records' shards.
	nextShard cut.ShardID
	sealed    *sealedBy
}

type sealedBy struct {
	from ReplicaID
	rep  SealReply
}

type reconfigStep int

const (
	stepSeal reconfigStep = iota
	stepRecordFlush
	stepFlush
	stepRecord
	stepDone
)

// NewReconfig starts the view change of cur that drops the failed
// replicas and adds the added ones (with empty rings), over the cluster's
// shards that may still grow (a finalized one is left out: it would never
// acknowledge the flush, and the view would stay sealed). Its first output
// seals cur's view.
func NewReconfig(cur SeqConfig, failed, added []ReplicaID, shards []cut.ShardID) (*Reconfig, ReconfigOutput, error) {
	var members []ReplicaID
	for _, r := range cur.Replicas {
		if !slices.Contains(failed, r) {
			members = append(members, r)
		}
	}
	for _, r := range added {
		if !slices.Contains(members, r) {
			members = append(members, r)
		}
	}
	if len(members) == 0 {
		return nil, ReconfigOutput{}, fmt.Errorf("view %d: no sequencing replica left: %w", cur.View, ErrBadInput)
	}
	rc := &Reconfig{
		old: cur, failed: slices.Clone(failed), shards: slices.Clone(shards),
		next: SeqConfig{View: cur.View + 1, Replicas: members},
	}
	for _, s := range shards {
		rc.nextShard = max(rc.nextShard, s+1)
	}
	return rc, ReconfigOutput{Seal: &Seal{View: cur.View}}, nil
}

// View returns the view being started.
func (rc *Reconfig) View() uint64 { return rc.next.View }

// Sealed takes a replica's SealReply. The first one from a replica of the
// old view that did not fail, ran the view (not amnesiac) and is part of
// the new configuration makes it the recovery replica and the new leader.
func (rc *Reconfig) Sealed(from ReplicaID, rep SealReply) ReconfigOutput {
	if rc.step == stepSeal && rc.adopted != nil && rep.View == rc.old.View && slices.Contains(rc.old.Replicas, from) {
		return rc.flushAdopted(from)
	}
	if rc.step != stepSeal || rc.adopted != nil || rep.View != rc.old.View || rep.Amnesiac ||
		!slices.Contains(rc.old.Replicas, from) || !slices.Contains(rc.next.Replicas, from) {
		return ReconfigOutput{}
	}
	if rep.Ordered < rc.old.Stable {
		panic(fmt.Sprintf("lazy: replica %d ordered to %d below the view's stable %d", from, rep.Ordered, rc.old.Stable))
	}
	if rc.sealed != nil && rc.sealed.from != from {
		return ReconfigOutput{}
	}
	// A record of a shard the control state has not shown this view
	// change yet (added a moment ago) waits for a table that has it
	// (SetShards): dropping it would lose an acknowledged append.
	for _, m := range rep.Entries {
		if m.Shard >= rc.nextShard {
			rc.sealed = &sealedBy{from: from, rep: rep}
			return ReconfigOutput{}
		}
	}
	rc.sealed = nil
	rc.next.Leader = from
	// A record of a finalized shard gets no position: that shard never
	// grows again, and when it failed no replica is left to hold or
	// acknowledge it.
	entries := slices.DeleteFunc(slices.Clone(rep.Entries), func(m Meta) bool { return !slices.Contains(rc.shards, m.Shard) })
	rc.from, rc.end = rep.Ordered, rep.Ordered+uint64(len(entries))
	if len(entries) == 0 {
		rc.step = stepRecord
		return rc.record()
	}
	rc.flush = &Mapping{View: rc.next.View, From: rep.Ordered, Records: entries}
	rc.ids = make([]RecordID, len(entries))
	for i, e := range entries {
		rc.ids[i] = e.ID
	}
	rc.step = stepRecordFlush
	return ReconfigOutput{Flush: rc.flush}
}

// FlushRecorded says the control state holds the flush: it goes to the
// shards.
func (rc *Reconfig) FlushRecorded() ReconfigOutput {
	if rc.step != stepRecordFlush {
		return ReconfigOutput{}
	}
	rc.acked = map[cut.ShardID]bool{}
	rc.step = stepFlush
	return ReconfigOutput{Map: rc.flush}
}

// Adopt takes the flush an earlier view change of the same sealed view
// recorded (and may have sent to some shards) in place of a recovery: it
// holds every append the view acknowledged and did not order (it came from
// a sealed replica, and nothing commits after a seal). The view is still
// sealed first (a replica may have started it since, and its orderer must
// stop); the first answer then sends the recorded flush under this view.
func (rc *Reconfig) Adopt(f Mapping) ReconfigOutput {
	if rc.step != stepSeal || f.View <= rc.old.View || f.From < rc.old.Stable {
		return ReconfigOutput{}
	}
	rc.adopted = &Mapping{View: rc.next.View, From: f.From, Records: slices.Clone(f.Records)}
	return ReconfigOutput{Seal: &Seal{View: rc.old.View}}
}

// flushAdopted answers the seal of an adopted flush's view change.
func (rc *Reconfig) flushAdopted(from ReplicaID) ReconfigOutput {
	rc.next.Leader = rc.next.Replicas[0]
	if slices.Contains(rc.next.Replicas, from) {
		rc.next.Leader = from
	}
	f := rc.adopted
	rc.from, rc.end = f.From, f.End()
	if len(f.Records) == 0 {
		rc.step = stepRecord
		return rc.record()
	}
	rc.flush = f
	rc.ids = make([]RecordID, len(f.Records))
	for i, e := range f.Records {
		rc.ids[i] = e.ID
	}
	rc.step = stepRecordFlush
	return rc.FlushRecorded()
}

func (rc *Reconfig) record() ReconfigOutput {
	rc.next.Stable, rc.next.From = rc.end, rc.from
	c := rc.next
	c.Replicas = slices.Clone(c.Replicas)
	return ReconfigOutput{Record: &c}
}

// MapAcked takes a shard's answer to the flush.
func (rc *Reconfig) MapAcked(a MappingAck) ReconfigOutput {
	if rc.step != stepFlush || a.View != rc.next.View || a.End < rc.flush.End() || !slices.Contains(rc.shards, a.Shard) {
		return ReconfigOutput{}
	}
	rc.acked[a.Shard] = true
	return rc.flushed()
}

// flushed records the new configuration once every shard of the view
// change holds the flush.
func (rc *Reconfig) flushed() ReconfigOutput {
	for _, s := range rc.shards {
		if !rc.acked[s] {
			return ReconfigOutput{}
		}
	}
	rc.step = stepRecord
	return rc.record()
}

// SetShards takes the shard table, as NewReconfig's shards and as
// Orderer.SetShards: live are the shards that may still grow, every id
// below next was given. One finalized since the view change began gets no
// flush and is not waited for (its replicas may all be gone for good); one
// added since gets the flush too, so that its position table has no gap,
// and a recovery replica's answer that waited for it goes on. An older
// table than one taken before changes nothing.
func (rc *Reconfig) SetShards(live []cut.ShardID, next cut.ShardID) ReconfigOutput {
	for _, s := range live {
		next = max(next, s+1)
	}
	if next < rc.nextShard || rc.step >= stepRecord {
		return ReconfigOutput{}
	}
	rc.nextShard, rc.shards = next, slices.Clone(live)
	switch {
	case rc.sealed != nil && rc.step == stepSeal:
		return rc.Sealed(rc.sealed.from, rc.sealed.rep)
	case rc.step == stepFlush:
		return rc.flushed()
	}
	return ReconfigOutput{}
}

// Recorded says the control state committed the new configuration:
// stable-gp advances to the flush's end and the new view starts.
func (rc *Reconfig) Recorded() ReconfigOutput {
	if rc.step != stepRecord {
		return ReconfigOutput{}
	}
	rc.step = stepDone
	return ReconfigOutput{
		Stable: &StableGP{View: rc.next.View, Stable: rc.end},
		Start: &StartView{View: rc.next.View, Ordered: rc.end, From: rc.from, Flushed: rc.ids,
			Leader: rc.next.Leader, Replicas: slices.Clone(rc.next.Replicas), Shards: rc.nextShard},
	}
}

// Pending returns what to send again after a timeout: the current step's
// messages.
func (rc *Reconfig) Pending() ReconfigOutput {
	switch rc.step {
	case stepSeal:
		return ReconfigOutput{Seal: &Seal{View: rc.old.View}}
	case stepRecordFlush:
		return ReconfigOutput{Flush: rc.flush}
	case stepFlush:
		return ReconfigOutput{Map: rc.flush}
	case stepRecord:
		return rc.record()
	}
	return ReconfigOutput{}
}
