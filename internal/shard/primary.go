// Package shard holds one copy of one shard as a pure state machine
// (Replica): a primary admits appends, stores them through a Log, sends
// them to its backups, learns what every replica holds, reports it to the
// ordering leader as its ordering mode allows (Ordering), turns committed
// cuts into positions and answers the appends they order; a backup stores
// what its primary sends. Primary is the primary's append bookkeeping:
// which appends wait for a cut, which (client, sequence) pairs are already
// stored so a retry is not stored twice, and what to answer when a cut
// orders records or the shard is finalized. No sockets, clocks or
// goroutines: the storage server, the benchmark emulator and the simulator
// feed a Replica and carry out what it returns.
package shard

import (
	"fmt"
	"slices"

	"github.com/augur-log/augur/internal/cut"
)

// Bounds.
const (
	// DedupPerClientMax is how many recent sequence numbers are remembered
	// per client; a retry older than that is refused, never stored twice.
	DedupPerClientMax = 1 << 14
	// DedupClientsMax bounds the clients remembered in full.
	DedupClientsMax = 1 << 12
	// TombstonesMax bounds the clients forgotten in full whose highest
	// sequence number is still remembered, so their late retries are
	// refused rather than stored again.
	TombstonesMax = 1 << 16
)

// Verdict is what to do with an incoming append.
type Verdict int

const (
	// Store: new; write it, then call Stored.
	Store Verdict = iota
	// Ordered: a retry of a record that already has a position.
	Ordered
	// Waiting: a retry of a stored record still waiting for its cut; the
	// new waiter will be answered when it comes.
	Waiting
	// Expired: a retry older than the dedup window.
	Expired
	// Finalized: the shard takes no more records.
	Finalized
	// Abandoned: a stored record the shard was finalized before ordering;
	// it never gets a position (only in answers).
	Abandoned
	// Unavailable: the log could not store the record (only in answers).
	Unavailable
)

// Answer is an acknowledgement to send to waiter W.
type Answer[W comparable] struct {
	Waiter W
	Seq    uint64
	// Verdict is Ordered (Position is valid), Waiting, Expired, Finalized,
	// Abandoned or Unavailable.
	Verdict Verdict
	// Position is valid when Verdict is Ordered.
	Position uint64
}

type slot[W comparable] struct {
	waiter W
	seq    uint64
	set    bool
}

type clientSeqs struct {
	local      map[uint64]uint64
	order      []uint64
	evictedMax uint64
}

// Primary tracks one shard's appends on its primary. W identifies who
// waits for an answer (a client stream).
type Primary[W comparable] struct {
	// pending[i] waits for local index base+i; every stored record not yet
	// ordered has a slot.
	pending []slot[W]
	base    uint64
	dedup   map[uint64]*clientSeqs
	// tombstones holds, for clients evicted from dedup, the highest
	// sequence number they had stored.
	tombstones map[uint64]uint64
	// positions of ordered records: local -> global, consulted for retries.
	position  func(local uint64) (uint64, bool)
	finalized bool
}

// NewPrimary starts with stored records [0, length) all ordered or
// abandoned; position looks up the global position of an ordered record.
func NewPrimary[W comparable](length uint64, position func(local uint64) (uint64, bool)) *Primary[W] {
	return &Primary[W]{base: length, dedup: map[uint64]*clientSeqs{}, tombstones: map[uint64]uint64{}, position: position}
}

// Admit decides what to do with append (client, seq); for Ordered it also
// returns the position.
func (p *Primary[W]) Admit(client, seq uint64, w W) (Verdict, uint64) {
	// A retry is answered from what was stored even once the shard is
	// finalized: Finalized for an ordered record would make the client
	// store it a second time on another shard.
	cs := p.dedup[client]
	if cs == nil {
		if top, gone := p.tombstones[client]; gone && seq <= top {
			return Expired, 0
		}
		return p.storeOrFinalized(), 0
	}
	local, ok := cs.local[seq]
	if !ok {
		if seq <= cs.evictedMax {
			return Expired, 0
		}
		return p.storeOrFinalized(), 0
	}
	if pos, ordered := p.position(local); ordered {
		return Ordered, pos
	}
	if local < p.base {
		// Stored but abandoned by a finalization: it will never be ordered.
		return Finalized, 0
	}
	// A record a promoted primary adopted has no waiter until its retry.
	p.pending[local-p.base] = slot[W]{waiter: w, seq: seq, set: true}
	return Waiting, 0
}

func (p *Primary[W]) storeOrFinalized() Verdict {
	if p.finalized {
		return Finalized
	}
	return Store
}

// Next is the local index the next stored record gets.
func (p *Primary[W]) Next() uint64 { return p.base + uint64(len(p.pending)) }

// Noops records that n no-op entries were stored next: they take local
// indexes but answer no append.
func (p *Primary[W]) Noops(n uint64) {
	// One growth for the whole run: fills and lag-fixes add thousands.
	l := len(p.pending)
	p.pending = slices.Grow(p.pending, int(n))[:l+int(n)]
	clear(p.pending[l:])
}

// Stored records that append (client, seq) was written at local.
func (p *Primary[W]) Stored(client, seq, local uint64, w W) {
	if local != p.Next() {
		panic(fmt.Sprintf("shard: stored at local %d, expected %d", local, p.Next()))
	}
	p.pending = append(p.pending, slot[W]{waiter: w, seq: seq, set: true})
	p.remember(client, seq, local)
}

// Adopt records that append (client, seq) is stored at local by an earlier
// primary of the shard, whose client waits on it no more: a retry finds it
// (Ordered, or Waiting until its cut). Records at or past Next take the
// next index, and no waiter, until a retry comes.
func (p *Primary[W]) Adopt(client, seq, local uint64) {
	if local >= p.base {
		if local != p.Next() {
			panic(fmt.Sprintf("shard: adopted at local %d, expected %d", local, p.Next()))
		}
		p.pending = append(p.pending, slot[W]{})
	}
	p.remember(client, seq, local)
}

// remember enters (client, seq) at local in the retry memory.
func (p *Primary[W]) remember(client, seq, local uint64) {
	cs := p.dedup[client]
	if cs == nil {
		if len(p.dedup) >= DedupClientsMax {
			p.evictClient()
		}
		cs = &clientSeqs{local: map[uint64]uint64{}, evictedMax: p.tombstones[client]}
		delete(p.tombstones, client)
		p.dedup[client] = cs
	}
	cs.local[seq] = local
	cs.order = append(cs.order, seq)
	if len(cs.order) > DedupPerClientMax {
		old := cs.order[0]
		cs.order = cs.order[1:]
		delete(cs.local, old)
		cs.evictedMax = max(cs.evictedMax, old)
	}
}

// evictClient forgets an arbitrary client's window but keeps its highest
// sequence number, so its late retries are Expired, not stored twice. Past
// TombstonesMax an arbitrary tombstone goes too: a client silent through
// that many others' turnover is assumed gone.
func (p *Primary[W]) evictClient() {
	for k, cs := range p.dedup {
		top := cs.evictedMax
		for _, q := range cs.order {
			top = max(top, q)
		}
		delete(p.dedup, k)
		if len(p.tombstones) >= TombstonesMax {
			for t := range p.tombstones {
				delete(p.tombstones, t)
				break
			}
		}
		p.tombstones[k] = top
		return
	}
}

// Order applies a committed cut's slice for this shard and appends the
// answers for the records it orders to out (the caller's reused buffer:
// every cut answers, so a slice per cut would be garbage per cut).
func (p *Primary[W]) Order(sl cut.Slice, out []Answer[W]) []Answer[W] {
	end := sl.LocalStart + sl.Count
	if end > p.Next() {
		panic(fmt.Sprintf("shard: cut orders up to %d, only %d stored", end, p.Next()))
	}
	for local := max(sl.LocalStart, p.base); local < end; local++ {
		s := p.pending[local-p.base]
		if s.set {
			out = append(out, Answer[W]{Waiter: s.waiter, Seq: s.seq, Verdict: Ordered, Position: sl.GlobalStart + (local - sl.LocalStart)})
		}
	}
	if end > p.base {
		drop := end - p.base
		clear(p.pending[:drop])
		p.pending = p.pending[drop:]
		p.base = end
	}
	return out
}

// Finalize ends the shard at length: records stored at or after it are
// never ordered, and their waiters are told so. Records below length were
// ordered; unanswered counts those still waiting for their position because
// this copy never applied their cuts (a bug, or a copy that restored a
// snapshot). Their clients get no answer here, so the caller says so.
func (p *Primary[W]) Finalize(length uint64) (out []Answer[W], unanswered int) {
	for i, s := range p.pending {
		if !s.set {
			continue
		}
		if p.base+uint64(i) >= length {
			out = append(out, Answer[W]{Waiter: s.waiter, Seq: s.seq, Verdict: Abandoned})
		} else {
			unanswered++
		}
	}
	p.base += uint64(len(p.pending))
	p.pending = nil
	p.finalized = true
	return out, unanswered
}

// Waiting returns every pending answer's waiter and sequence, for failing
// them when the server stops.
func (p *Primary[W]) Waiting() []Answer[W] {
	var out []Answer[W]
	for _, s := range p.pending {
		if s.set {
			out = append(out, Answer[W]{Waiter: s.waiter, Seq: s.seq})
		}
	}
	return out
}
