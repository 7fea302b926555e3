package spec

import (
	"errors"
	"fmt"

	"github.com/augur-log/augur/internal/segment"
)

// FeedLog is what a speculative feed reads of the copy of a shard it
// serves from: a storage server's segment store, the simulator's log.
type FeedLog interface {
	// Start is the first local index not trimmed.
	Start() uint64
	// Ordered is how many entries committed cuts placed.
	Ordered() uint64
	// GlobalOf is the position a committed cut gave the entry at local.
	GlobalOf(local uint64) (uint64, bool)
	// Scan calls fn with the entries from local index from on, a run of
	// no-ops as one entry (from the index asked for when the scan
	// starts inside it), until fn returns false. fn must not call the
	// log.
	Scan(from uint64, fn func(local uint64, e segment.Entry) bool) error
}

// ErrFeedTrimmed says the entries a feed was to send next were trimmed
// while it lagged.
var ErrFeedTrimmed = errors.New("spec: the entries the feed sends next were trimmed")

// Feed is where one speculative stream of a shard's entries stands: it
// sends each entry, in log order, as soon as the copy it reads may serve
// it (FeedLimit) and a committed cut or the windows place it.
type Feed struct {
	// Next is the local index of the next entry to send.
	Next uint64
}

// FeedLimit is how far a copy may serve a speculative stream: a live
// shard's primary what every replica holds or a cut ordered (an eager cut
// between windows places entries the primary's count of what every
// replica holds may lag behind, after a backup rejoined); any other copy
// only what cuts ordered (a backup cannot know what the primary's other
// backups hold), and of a finalized shard no more than its final length.
func FeedLimit(primary bool, durable, ordered uint64, final bool, finalLen uint64) uint64 {
	if primary && !final {
		return max(durable, ordered)
	}
	if final {
		return min(ordered, finalLen)
	}
	return ordered
}

// Send places the slots of a round before it reads them: feedSlotsFirst in
// the first round, twice as many in each next one, up to feedSlotsMax. A
// stream that keeps up sends a few entries per call and places no more
// than those; one that catches up reads in large scans; and a long run of
// no-ops is placed a piece at a time.
const (
	feedSlotsFirst = 64
	feedSlotsMax   = 4096
)

// feedEntryOverhead is what an entry costs a batch beside its key and
// payload.
const feedEntryOverhead = 32

// Send calls emit, in order, with the position and the entry of each slot
// from f.Next on, below limit, that a committed cut placed or predict
// places (predict may be nil), one call per slot (a run of n no-ops makes
// n calls), and moves f.Next past it. It stops at the first slot without a
// position (none yet between windows: an eager cut will place it), or
// once it read budget bytes of records (at least one entry). An entry's
// position does not depend on what it holds, so a slot without one is not
// read. A read that fails sends nothing of what it read.
func (f *Feed) Send(log FeedLog, predict func(local uint64) (uint64, bool), limit uint64, budget int, emit func(pos uint64, e segment.Entry)) error {
	position := func(local uint64) (uint64, bool) {
		if pos, ok := log.GlobalOf(local); ok {
			return pos, true
		}
		if predict == nil {
			return 0, false
		}
		return predict(local)
	}
	type read struct {
		local uint64
		e     segment.Entry
	}
	for slots := feedSlotsFirst; f.Next < limit && budget > 0; slots = min(2*slots, feedSlotsMax) {
		// A trimmed entry has no position any more: without this, the
		// stream would wait for one forever.
		if f.Next < log.Start() {
			return ErrFeedTrimmed
		}
		// The positions are taken before the read: a trim meanwhile may
		// drop those cuts gave.
		var positions []uint64
		for end := f.Next; end < limit && len(positions) < slots; end++ {
			pos, ok := position(end)
			if !ok {
				break
			}
			positions = append(positions, pos)
		}
		if len(positions) == 0 {
			return nil
		}
		end := f.Next + uint64(len(positions))
		var got []read
		at, trimmed := f.Next, false
		err := log.Scan(f.Next, func(l uint64, e segment.Entry) bool {
			if l != at {
				// Scan starts at the log's start: the entries from at
				// on were trimmed meanwhile.
				trimmed = true
				return false
			}
			if e.Noops > 0 {
				e.Noops = min(e.Noops, end-l)
				at += e.Noops
			} else {
				at++
				budget -= len(e.Payload) + len(e.Key) + feedEntryOverhead
			}
			got = append(got, read{l, e})
			return at < end && budget > 0
		})
		if trimmed {
			return ErrFeedTrimmed
		}
		if err != nil {
			return err
		}
		if at < end && budget > 0 {
			return fmt.Errorf("spec: the log lacks entries %d to %d, which it may serve", at, end)
		}
		first := f.Next
		for _, g := range got {
			for range max(g.e.Noops, 1) {
				emit(positions[f.Next-first], g.e)
				f.Next++
			}
		}
	}
	return nil
}
