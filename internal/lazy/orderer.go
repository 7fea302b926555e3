package lazy

import (
	"fmt"
	"slices"

	"github.com/augur-log/augur/internal/cut"
)

// ReplicaID names a sequencing replica (its server's node id).
type ReplicaID = uint64

// Mapping binds positions to records: position From+i holds Records[i]
// (record id and shard). The orderer sends every batch to every shard's
// primary: each orders its own records by it and keeps the whole table of
// which shard holds which position, for readers to locate positions.
type Mapping struct {
	// View is the sequencing view the mapping belongs to. A mapping of a
	// newer view may rebind positions at or above stable-gp that an older
	// one bound (the flush of a view change); nothing rebinds below.
	View, From uint64
	Records    []Meta
}

// End is the first position past the mapping.
func (m Mapping) End() uint64 { return m.From + uint64(len(m.Records)) }

// MappingAck is a shard's answer to a mapping: every replica of the shard
// holds the mapping's placement (records with their data, or no-ops) up
// to End.
type MappingAck struct {
	Shard cut.ShardID
	View  uint64
	End   uint64
}

// Collected is a sequencing replica's answer to a GC: it dropped every
// record below End and set its ordered end there.
type Collected struct {
	Replica ReplicaID
	View    uint64
	End     uint64
}

// StableGP tells the shards that every position below Stable is final in
// View: they serve reads below it at once.
type StableGP struct {
	View, Stable uint64
}

// OrdererConfig bounds the orderer.
type OrdererConfig struct {
	// BatchMax is the most positions one batch binds; 0 means
	// BatchMaxDefault.
	BatchMax int
}

// OrdererOutput is what one call of the orderer asks its shell to send.
// Each message goes out as one (the shell resends Pending's after a
// timeout: any of them may be lost).
type OrdererOutput struct {
	// Map goes to the primary of every shard the orderer waits for.
	Map *Mapping
	// GC goes to every sequencing replica of the view, the leader's own
	// Sequencer included (the shell calls Sequencer.Collect and then
	// Orderer.Collected for it).
	GC *GC
	// Stable goes to every replica of every shard.
	Stable *StableGP
}

// Orderer is the sequencing leader's background ordering, one batch at a
// time, in the paper's order of steps: bind positions from the ordered
// end in the leader's local order and send the mapping to the shards;
// once every shard holds it, garbage-collect it on every sequencing
// replica; once every replica collected it, advance stable-gp and tell
// the shards. Advancing stable-gp only after every replica collected is
// what makes any replica safe to recover from: none holds an unordered
// copy of a position a reader may have seen.
type Orderer struct {
	batchMax int
	view     uint64
	shards   []cut.ShardID
	replicas []ReplicaID
	// ordered is the end of the positions bound (in flight included),
	// stable the end of those final.
	ordered, stable uint64

	// The batch in flight, if any, and who has answered for it.
	batch     *Mapping
	ids       []RecordID
	mapAcked  map[cut.ShardID]bool
	collected map[ReplicaID]bool
	gc        *GC
	// nextShards, when not nil, replaces shards once the batch is done.
	nextShards []cut.ShardID
}

// NewOrderer returns the orderer of a leader starting view at position
// ordered (every position below it is bound and final: the new view's
// StartView.Ordered), over the given shards and sequencing replicas.
func NewOrderer(cfg OrdererConfig, view, ordered uint64, shards []cut.ShardID, replicas []ReplicaID) *Orderer {
	if cfg.BatchMax <= 0 {
		cfg.BatchMax = BatchMaxDefault
	}
	return &Orderer{
		batchMax: cfg.BatchMax, view: view,
		shards: slices.Clone(shards), replicas: slices.Clone(replicas),
		ordered: ordered, stable: ordered,
	}
}

// Stable returns the stable end: every position below it is final.
func (o *Orderer) Stable() uint64 { return o.stable }

// Busy reports whether a batch is in flight; Order takes the next one only
// when it is not.
func (o *Orderer) Busy() bool { return o.batch != nil }

// BatchMax returns how many entries Order takes at most.
func (o *Orderer) BatchMax() int { return o.batchMax }

// Order binds entries, the front of the leader's ring in local order (at
// most BatchMax; Sequencer.Unordered(o.BatchMax())), to the next
// positions. It does nothing while a batch is in flight or when entries is
// empty.
func (o *Orderer) Order(entries []Meta) (OrdererOutput, error) {
	if o.batch != nil || len(entries) == 0 {
		return OrdererOutput{}, nil
	}
	if len(entries) > o.batchMax {
		return OrdererOutput{}, fmt.Errorf("order %d entries, at most %d: %w", len(entries), o.batchMax, ErrBadInput)
	}
	m := &Mapping{View: o.view, From: o.ordered, Records: slices.Clone(entries)}
	o.batch = m
	o.ids = make([]RecordID, len(entries))
	for i, e := range entries {
		o.ids[i] = e.ID
	}
	o.ordered = m.End()
	o.mapAcked = map[cut.ShardID]bool{}
	o.collected = map[ReplicaID]bool{}
	o.gc = nil
	return OrdererOutput{Map: m}, nil
}

// MapAcked takes a shard's answer. Once every shard holds the batch it
// asks for its garbage collection.
func (o *Orderer) MapAcked(a MappingAck) OrdererOutput {
	if o.batch == nil || o.gc != nil || a.View != o.view || a.End < o.batch.End() || !slices.Contains(o.shards, a.Shard) {
		return OrdererOutput{}
	}
	o.mapAcked[a.Shard] = true
	if len(o.mapAcked) < len(o.shards) {
		return OrdererOutput{}
	}
	o.gc = &GC{View: o.view, From: o.batch.From, End: o.batch.End(), IDs: o.ids}
	return OrdererOutput{GC: o.gc}
}

// Collected takes a sequencing replica's answer. Once every replica
// collected the batch, stable-gp advances to its end and the batch is
// done.
func (o *Orderer) Collected(c Collected) OrdererOutput {
	if o.gc == nil || c.View != o.view || c.End < o.gc.End || !slices.Contains(o.replicas, c.Replica) {
		return OrdererOutput{}
	}
	o.collected[c.Replica] = true
	if len(o.collected) < len(o.replicas) {
		return OrdererOutput{}
	}
	o.stable = o.gc.End
	o.batch, o.ids, o.gc, o.mapAcked, o.collected = nil, nil, nil, nil, nil
	if o.nextShards != nil {
		o.shards, o.nextShards = o.nextShards, nil
	}
	return OrdererOutput{Stable: &StableGP{View: o.view, Stable: o.stable}}
}

// Pending returns what to send again after a timeout: the batch's mapping
// to the shards that have not answered (Missing says which), its GC to the
// replicas that have not, and stable-gp to every shard.
func (o *Orderer) Pending() OrdererOutput {
	out := OrdererOutput{Stable: &StableGP{View: o.view, Stable: o.stable}}
	switch {
	case o.gc != nil:
		out.GC = o.gc
	case o.batch != nil:
		out.Map = o.batch
	}
	return out
}

// MissingShards lists the shards that have not acknowledged the batch in
// flight; MissingReplicas the replicas that have not collected it.
func (o *Orderer) MissingShards() []cut.ShardID {
	var out []cut.ShardID
	for _, s := range o.shards {
		if o.batch != nil && o.gc == nil && !o.mapAcked[s] {
			out = append(out, s)
		}
	}
	return out
}

// MissingReplicas: see MissingShards.
func (o *Orderer) MissingReplicas() []ReplicaID {
	var out []ReplicaID
	for _, r := range o.replicas {
		if o.gc != nil && !o.collected[r] {
			out = append(out, r)
		}
	}
	return out
}

// SetShards replaces the shards the orderer maps to, when the cluster
// adds one; it takes effect with the next batch (a batch in flight waits
// for the shards it started with).
func (o *Orderer) SetShards(shards []cut.ShardID) {
	if o.batch != nil {
		o.nextShards = slices.Clone(shards)
		return
	}
	o.shards = slices.Clone(shards)
}
