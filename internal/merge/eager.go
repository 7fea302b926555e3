package merge

import (
	"fmt"
	"slices"

	pb "github.com/augur-log/augur/api/augurpb"
)

// Eager merges eager order: each shard sends its share of every committed
// cut as a CutBatch, and a cut is released, in position order, once the
// runs of the batches gathered cover all its positions. Its horizon is the
// end of the last complete cut: it never delivers past it, so every
// delivery is final and it emits Deliver events only.
type Eager struct {
	// oneShard: the batches come from a single shard's stream; the other
	// shards' runs are never waited for, so each cut is released with the
	// followed shard's batch alone.
	oneShard bool
	// next is the first position not yet released: the end of the last
	// cut released, or the start position.
	next uint64
	// cuts holds the cuts ending after next by cut index, each with the
	// batches gathered so far.
	cuts map[uint64]*pendingCut
	// sorted is scratch space for ordering one cut's records.
	sorted []*pb.LogEntry
	out    []Event
	head   int
	// err, once set, is the broken rule; the merger releases nothing more.
	err error
}

// pendingCut gathers one cut's batches from the shards that contribute.
type pendingCut struct {
	end     uint64
	batches map[uint32]*pb.CutBatch
}

// NewEager returns an eager merger of every shard's stream, delivering
// positions from from on.
func NewEager(from uint64) *Eager {
	return &Eager{next: from, cuts: map[uint64]*pendingCut{}}
}

// NewEagerShard returns an eager merger of one shard's stream from from
// on: it delivers each batch's records as the batch comes.
func NewEagerShard(from uint64) *Eager {
	m := NewEager(from)
	m.oneShard = true
	return m
}

// Step takes a stream's cut batches. A cut whose batches cover more
// positions than it holds is an error.
func (m *Eager) Step(_ uint32, resp *pb.SubscribeResponse) error {
	if m.err != nil {
		return m.err
	}
	for _, b := range resp.Batches {
		if b.RunCount == 0 || b.CutEnd <= m.next {
			continue
		}
		pc := m.cuts[b.Cut]
		if pc == nil {
			pc = &pendingCut{end: b.CutEnd, batches: map[uint32]*pb.CutBatch{}}
			m.cuts[b.Cut] = pc
		}
		// A reconnecting stream sends a batch again: it replaces itself.
		pc.batches[b.Shard] = b
	}
	m.err = m.release()
	return m.err
}

// Observe does nothing: in eager order the streams carry every cut.
func (m *Eager) Observe(*pb.StatusResponse) {}

// release delivers every complete cut at the head of the order.
func (m *Eager) release() error {
	for {
		var head uint64
		var pc *pendingCut
		for idx, c := range m.cuts {
			if c.end <= m.next {
				delete(m.cuts, idx)
				continue
			}
			if pc == nil || idx < head {
				head, pc = idx, c
			}
		}
		if pc == nil {
			return nil
		}
		var covered uint64
		m.sorted = m.sorted[:0]
		for _, b := range pc.batches {
			if end := b.RunStart + b.RunCount; end > m.next {
				covered += end - max(b.RunStart, m.next)
			}
			for _, e := range b.Records {
				if e.Position >= m.next {
					m.sorted = append(m.sorted, e)
				}
			}
		}
		if covered < pc.end-m.next && !m.oneShard {
			return nil
		}
		if covered > pc.end-m.next {
			return fmt.Errorf("augur: cut %d covers %d positions from %d but ends at %d", head, covered, m.next, pc.end)
		}
		slices.SortFunc(m.sorted, func(a, b *pb.LogEntry) int {
			switch {
			case a.Position < b.Position:
				return -1
			case a.Position > b.Position:
				return 1
			}
			return 0
		})
		for _, e := range m.sorted {
			m.out = append(m.out, Event{Kind: EventDeliver, Pos: e.Position, Shard: e.Shard, Rec: e.Record})
		}
		clear(m.sorted)
		m.next = pc.end
		delete(m.cuts, head)
	}
}

// Next pops the next event, if any.
func (m *Eager) Next() (Event, bool) {
	if m.head == len(m.out) {
		return Event{}, false
	}
	ev := m.out[m.head]
	m.out[m.head] = Event{}
	m.head++
	if m.head == len(m.out) {
		m.out, m.head = m.out[:0], 0
	}
	return ev, true
}

// Resume is the first position not released yet.
func (m *Eager) Resume() uint64 { return m.next }

// Waiting tells whether a cut waits for batches.
func (m *Eager) Waiting() bool { return len(m.cuts) > 0 }
