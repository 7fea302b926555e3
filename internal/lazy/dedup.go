package lazy

import (
	"fmt"
	"maps"
	"slices"
)

// Dedup remembers which records a replica has seen for good (ordered, or
// placed), per client: a floor below which every sequence number is done,
// and the done ones above it. It survives garbage collection (the ring
// forgets, Dedup does not), restarts (the shell persists State and gives it
// back) and view changes.
//
// A per-client high-water mark alone would be wrong: a pipelining client's
// seq 5 may be ordered before its seq 4 reaches a replica, and a mark at 5
// would drop 4 as a duplicate although nothing ordered it.
type Dedup struct {
	clients map[uint64]*clientSeen
}

// clientSeen: every seq <= floor is done; above holds done seqs > floor.
type clientSeen struct {
	floor uint64
	above map[uint64]struct{}
}

// ClientMark is one client's dedup state as the shell persists it.
type ClientMark struct {
	Client uint64
	// Floor: every sequence number up to it is done.
	Floor uint64
	// Above lists the done sequence numbers above Floor, ascending.
	Above []uint64
}

// NewDedup returns the dedup state of marks (nil for none).
func NewDedup(marks []ClientMark) *Dedup {
	d := &Dedup{clients: map[uint64]*clientSeen{}}
	for _, m := range marks {
		c := d.client(m.Client)
		c.floor = max(c.floor, m.Floor)
		for _, s := range m.Above {
			if s > c.floor {
				c.above[s] = struct{}{}
			}
		}
		c.compact()
	}
	return d
}

func (d *Dedup) client(id uint64) *clientSeen {
	c := d.clients[id]
	if c == nil {
		c = &clientSeen{above: map[uint64]struct{}{}}
		d.clients[id] = c
	}
	return c
}

// Done reports whether id was seen for good.
func (d *Dedup) Done(id RecordID) bool {
	c := d.clients[id.Client]
	if c == nil {
		return false
	}
	if id.Seq <= c.floor {
		return true
	}
	_, ok := c.above[id.Seq]
	return ok
}

// Check says whether a new record id may be taken: not too far ahead of
// its client's floor.
func (d *Dedup) Check(id RecordID) error {
	if !id.Valid() {
		return fmt.Errorf("record id %v: %w", id, ErrBadInput)
	}
	c := d.clients[id.Client]
	var floor uint64
	if c != nil {
		floor = c.floor
	}
	if id.Seq > floor+ClientAheadMax {
		return fmt.Errorf("record %v, client floor %d: %w", id, floor, ErrTooFarAhead)
	}
	return nil
}

// Mark records id as done.
func (d *Dedup) Mark(id RecordID) {
	c := d.client(id.Client)
	if id.Seq <= c.floor {
		return
	}
	c.above[id.Seq] = struct{}{}
	c.compact()
}

// Raise takes a client's promise (Meta.Floor) that it sends nothing below
// floor again: every lower sequence number counts as done.
func (d *Dedup) Raise(client, floor uint64) {
	if floor <= 1 {
		return
	}
	c := d.client(client)
	if floor-1 <= c.floor {
		return
	}
	// Drop the done sequence numbers the floor passes: by number when
	// it moves less far than there are of them (a floor rises by a few
	// at a time while many above it may be done).
	if old := c.floor; floor-1-old < uint64(len(c.above)) {
		for s := old + 1; s <= floor-1; s++ {
			delete(c.above, s)
		}
	} else {
		for s := range c.above {
			if s <= floor-1 {
				delete(c.above, s)
			}
		}
	}
	c.floor = floor - 1
	c.compact()
}

func (c *clientSeen) compact() {
	for {
		if _, ok := c.above[c.floor+1]; !ok {
			return
		}
		delete(c.above, c.floor+1)
		c.floor++
	}
}

// Marks returns the state to persist, by client.
func (d *Dedup) Marks() []ClientMark {
	out := make([]ClientMark, 0, len(d.clients))
	for _, id := range slices.Sorted(maps.Keys(d.clients)) {
		c := d.clients[id]
		out = append(out, ClientMark{Client: id, Floor: c.floor, Above: slices.Sorted(maps.Keys(c.above))})
	}
	return out
}
