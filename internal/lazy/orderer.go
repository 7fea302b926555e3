package lazy

import (
	"fmt"
	"slices"

	"github.com/augur-log/augur/internal/cut"
)

// ReplicaID names a sequencing replica (its server's node id).
type ReplicaID = uint64

// Mapping binds positions to records: position From+i holds Records[i]
// (record id and shard). The orderer sends every batch to the primary of
// every shard that may still grow: each orders its own records by it and
// keeps the table of which shard holds which position, for readers to
// locate positions. A finalized shard's table ends where it was
// finalized: readers locate later positions on the live shards.
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
	// Unplaced comes with the Stable that ends a batch: the batch's records
	// that got no readable position, for their shard was finalized before
	// placing them (dropped from the ring, or bound in a batch its shard
	// never acknowledged). Their appends failed: the shell tells whoever
	// waits for their positions.
	Unplaced []RecordID
	// WaitFor names a shard that a record at the ring's front names and
	// the orderer's table lacks (added after the table was read): the
	// batch stopped before that record (the records behind it wait, to
	// keep the ring's order). Read the table again and call SetShards.
	WaitFor *cut.ShardID
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
	// live are the shards that may still grow, as the table last said;
	// every id below next was given to a shard, so one of them that is not
	// live was finalized. shards are those the batch in flight waits for.
	live     []cut.ShardID
	next     cut.ShardID
	floor    cut.ShardID
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
	// unplaced are the batch's records of shards finalized before they
	// placed them.
	unplaced []RecordID
}

// NewOrderer returns the orderer of a leader starting view at position
// ordered (every position below it is bound and final: the new view's
// StartView.Ordered), over the given shards (those that may still grow)
// and sequencing replicas.
func NewOrderer(cfg OrdererConfig, view, ordered uint64, shards []cut.ShardID, replicas []ReplicaID) *Orderer {
	if cfg.BatchMax <= 0 {
		cfg.BatchMax = BatchMaxDefault
	}
	o := &Orderer{
		batchMax: cfg.BatchMax, view: view, replicas: slices.Clone(replicas),
		ordered: ordered, stable: ordered,
	}
	o.SetShards(shards, 0)
	return o
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
//
// A record of a finalized shard gets no position: that shard takes no
// mapping and gates no stable-gp any more (its replicas may all be gone
// for good), so it could never place it. The batch's GC drops it from
// every ring (GC.Dropped) and Unplaced reports it. A record of a shard the
// table does not have yet ends the batch before it (WaitFor): binding it
// would send its position to no replica of its shard, and skipping it
// would order the records behind it first.
func (o *Orderer) Order(entries []Meta) (OrdererOutput, error) {
	if o.batch != nil || len(entries) == 0 || o.next < o.floor {
		return OrdererOutput{}, nil
	}
	if len(entries) > o.batchMax {
		return OrdererOutput{}, fmt.Errorf("order %d entries, at most %d: %w", len(entries), o.batchMax, ErrBadInput)
	}
	var out OrdererOutput
	var records []Meta
	var dropped []RecordID
	for _, e := range entries {
		if slices.Contains(o.live, e.Shard) {
			records = append(records, e)
		} else if e.Shard < o.next {
			dropped = append(dropped, e.ID)
		} else {
			out.WaitFor = &e.Shard
			break
		}
	}
	if len(records) == 0 && len(dropped) == 0 {
		return out, nil
	}
	m := &Mapping{View: o.view, From: o.ordered, Records: records}
	o.batch = m
	o.ids = make([]RecordID, len(records))
	for i, e := range records {
		o.ids[i] = e.ID
	}
	o.ordered = m.End()
	o.shards = slices.Clone(o.live)
	o.mapAcked = map[cut.ShardID]bool{}
	o.collected = map[ReplicaID]bool{}
	o.gc = nil
	o.unplaced = dropped
	if len(records) == 0 {
		// Nothing to place: the rings drop the records at once.
		o.gc = &GC{View: o.view, From: m.From, End: m.End(), Dropped: dropped}
		out.GC = o.gc
		return out, nil
	}
	out.Map = m
	return out, nil
}

// MapAcked takes a shard's answer. Once every shard holds the batch it
// asks for its garbage collection.
func (o *Orderer) MapAcked(a MappingAck) OrdererOutput {
	if o.batch == nil || o.gc != nil || a.View != o.view || a.End < o.batch.End() || !slices.Contains(o.shards, a.Shard) {
		return OrdererOutput{}
	}
	o.mapAcked[a.Shard] = true
	return o.mapped()
}

// mapped asks for the batch's garbage collection once every shard it
// waits for holds it.
func (o *Orderer) mapped() OrdererOutput {
	for _, s := range o.shards {
		if !o.mapAcked[s] {
			return OrdererOutput{}
		}
	}
	o.gc = &GC{View: o.view, From: o.batch.From, End: o.batch.End(), IDs: o.ids, Dropped: o.unplaced}
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
	out := OrdererOutput{Stable: &StableGP{View: o.view, Stable: o.stable}, Unplaced: o.unplaced}
	o.batch, o.ids, o.gc, o.mapAcked, o.collected, o.unplaced = nil, nil, nil, nil, nil, nil
	return out
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

// AtLeast says the orderer's table must be at least as new as one that
// gave the shard ids below next (StartView.Shards): it orders nothing
// until SetShards brings one. An older table may lack a shard that placed
// the view change's flush, which must miss no batch.
func (o *Orderer) AtLeast(next cut.ShardID) { o.floor = max(o.floor, next) }

// SetShards takes the shard table: live are the shards that may still
// grow, and every id below next was given to a shard (0 means one past
// the largest live id). A table older than one taken before (a smaller
// next) changes nothing. A shard added takes mappings from the next batch
// on (it joins the position table there). A shard finalized takes none
// from now on, and the batch in flight no longer waits for it: its
// records in the batch keep their positions on the other shards' tables,
// but it never placed them, so they are Unplaced. The output is the GC
// the batch was waiting for, if that shard was the last to answer.
func (o *Orderer) SetShards(live []cut.ShardID, next cut.ShardID) OrdererOutput {
	for _, s := range live {
		next = max(next, s+1)
	}
	if next < o.next {
		// An older table (read from a replica that lags): it may lack a
		// shard that placed batches already, which must miss none.
		return OrdererOutput{}
	}
	o.live, o.next = slices.Clone(live), next
	if o.batch == nil || o.gc != nil {
		return OrdererOutput{}
	}
	gone := slices.DeleteFunc(slices.Clone(o.shards), func(s cut.ShardID) bool { return slices.Contains(live, s) })
	if len(gone) == 0 {
		return OrdererOutput{}
	}
	o.shards = slices.DeleteFunc(o.shards, func(s cut.ShardID) bool { return slices.Contains(gone, s) })
	for _, r := range o.batch.Records {
		if slices.Contains(gone, r.Shard) && !o.mapAcked[r.Shard] {
			o.unplaced = append(o.unplaced, r.ID)
		}
	}
	return o.mapped()
}
