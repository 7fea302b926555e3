package merge

import (
	"fmt"

	pb "github.com/augur-log/augur/api/augurpb"
)

// Lazy merges lazy order. Every shard holds the whole position table, so
// each shard's stream covers every stable position in order: its own
// records, and skips that name the shard of every other position (or its
// own shard, for its no-ops and the records the filter dropped), with
// confirmed set to the end of what it sent. A position is released once
// the stream of the shard that holds it covered it; every position the
// streams carry is below stable-gp, so every delivery is final.
type Lazy struct {
	// oneShard: a single shard's stream; positions are released as it
	// covers them, its own records delivered and the rest skipped.
	oneShard bool
	next     uint64
	// owners are the shards of positions [next, ownersEnd), as runs in
	// position order, learned from whichever stream covered them first.
	owners    []ownerRun
	ownersEnd uint64
	// covered is each stream's confirmed end; recs the records waiting.
	covered map[uint32]uint64
	recs    map[uint64]Event
	out     []Event
	head    int
	err     error
}

type ownerRun struct {
	from, end uint64
	shard     uint32
}

// NewLazy returns a lazy merger of every shard's stream from from on.
func NewLazy(from uint64) *Lazy {
	return &Lazy{next: from, ownersEnd: from, covered: map[uint32]uint64{}, recs: map[uint64]Event{}}
}

// NewLazyShard returns a lazy merger of one shard's stream from from on.
func NewLazyShard(from uint64) *Lazy {
	m := NewLazy(from)
	m.oneShard = true
	return m
}

// Step takes one message of shard's stream.
func (m *Lazy) Step(shard uint32, resp *pb.SubscribeResponse) error {
	if m.err != nil {
		return m.err
	}
	for _, e := range resp.GetEntries() {
		n := max(e.GetSkip(), 1)
		if e.GetRecord() == nil && e.GetSkip() == 0 {
			m.err = fmt.Errorf("augur: shard %d sent an entry at %d with neither record nor skip", shard, e.GetPosition())
			return m.err
		}
		from, end := e.GetPosition(), e.GetPosition()+n
		if end <= m.next {
			continue
		}
		if from > m.ownersEnd && from > m.next {
			// A stream never leaves a gap: it sends every position.
			if c := m.covered[shard]; from > max(c, m.next) {
				m.err = fmt.Errorf("augur: shard %d skipped positions [%d, %d)", shard, max(c, m.next), from)
				return m.err
			}
		}
		if end > m.ownersEnd {
			start := max(from, m.ownersEnd)
			if k := len(m.owners); k > 0 && m.owners[k-1].shard == e.GetShard() && m.owners[k-1].end == start {
				m.owners[k-1].end = end
			} else {
				m.owners = append(m.owners, ownerRun{from: start, end: end, shard: e.GetShard()})
			}
			m.ownersEnd = end
		}
		if r := e.GetRecord(); r != nil && e.GetShard() == shard && from >= m.next {
			m.recs[from] = Event{Kind: EventDeliver, Pos: from, Shard: shard, Rec: r}
		}
	}
	if c := resp.GetConfirmed(); c > m.covered[shard] {
		m.covered[shard] = c
	}
	m.release(shard)
	return nil
}

// release delivers positions from next on whose holder covered them.
func (m *Lazy) release(stream uint32) {
	for len(m.owners) > 0 {
		run := &m.owners[0]
		if run.end <= m.next {
			m.owners = m.owners[1:]
			continue
		}
		holder := run.shard
		if m.oneShard {
			holder = stream
		}
		covered := m.covered[holder]
		if covered <= m.next {
			return
		}
		upto := min(run.end, covered)
		for p := max(m.next, run.from); p < upto; p++ {
			if ev, ok := m.recs[p]; ok {
				delete(m.recs, p)
				m.out = append(m.out, ev)
			}
		}
		m.next = upto
	}
}

// Observe does nothing: the streams carry the whole table.
func (m *Lazy) Observe(*pb.StatusResponse) {}

// Next pops the next event.
func (m *Lazy) Next() (Event, bool) {
	if m.head == len(m.out) {
		m.out, m.head = m.out[:0], 0
		return Event{}, false
	}
	ev := m.out[m.head]
	m.head++
	return ev, true
}

// Resume is the first position not delivered yet.
func (m *Lazy) Resume() uint64 { return m.next }

// Waiting says whether positions the streams sent wait for their holder.
func (m *Lazy) Waiting() bool { return m.ownersEnd > m.next }
