package shard

import (
	"fmt"
	"time"

	"github.com/augur-log/augur/internal/segment"
)

// # Catch-up
//
// A copy catches up by copying, from a live replica of its shard, the
// entries at the local indexes it lacks: ranges its log holds damaged
// (put back in place with Log.Repair, as one piece) and, for a copy that
// lost its tail or starts empty, everything from its length on (appended
// batch by batch). Replicas of a shard hold the same entries at the same
// local indexes, so a range is asked for by local index, from any
// replica.
//
// CatchUp decides what to ask whom, checks what comes back and says what
// to store; its owner runs the fetches (one stream at a time), stores,
// and waits where it says. The rules:
//
//   - Every entry comes with the checksum the source computed
//     (segment.Checksum) over what it read, and its source only reads
//     frames whose stored checksum verified; an entry whose checksum does
//     not match, or a batch that does not start where the copy stands or
//     runs past the range, is refused and ends that source's stream.
//   - A source that fails mid-copy (its stream breaks, it stops) costs
//     nothing verified: the next source carries on from the first entry
//     still missing.
//   - A source that answers that it does not hold the range (it is
//     trimmed there, damaged too, or shorter), or that sent bad data, is
//     not asked for that range again. Once every source has so answered,
//     the range is lost: Lost lists it, and the copy keeps refusing it,
//     rather than serve wrong data or wait forever.
//   - When every source that has not so answered failed since the last
//     progress, the catch-up stalls: the owner retries after a while
//     (Retry), as a source may come back.
//   - An open (Tail) gap is a rejoining copy's tail, and the source
//     serves it from where its own log starts if that is past the gap's
//     first index (the cluster trimmed the rest): its first batch then
//     starts past the copy's length. Everything the copy holds lies below
//     it, so trimmed everywhere; the write that batch makes says Rebase,
//     and the copy starts its log over there (Replica.Repair).
//   - Reading is paced at BytesPerSecond (a token bucket of BurstBytes),
//     so that a catch-up leaves its source and its own disk to live
//     traffic: the owner reads the next batch no earlier than ReadyAt.

// Gap is a run of local indexes [First, End) a copy must fetch. InPlace
// says its log holds them damaged and takes them back with one
// Log.Repair; otherwise they start at the log's length and are appended.
// Tail says End is open (a rejoining copy's tail): the gap ends where the
// source's log does, when its stream ends (StreamEnded).
type Gap struct {
	First, End uint64
	InPlace    bool
	Tail       bool
}

// CatchUpConfig says what a CatchUp fetches and how fast.
type CatchUpConfig struct {
	Gaps []Gap
	// Sources is how many live replicas may serve the gaps; the owner
	// numbers them 0, 1, ... and CatchUp names them by number.
	Sources int
	// BytesPerSecond paces reading; 0 means unpaced. BurstBytes is how
	// much may be read at once after a pause (at least one batch).
	BytesPerSecond, BurstBytes int64
}

// Fetch asks source for the entries at local indexes [First, End).
type Fetch struct {
	Source     int
	First, End uint64
}

// Write is what to store: Entries at local index First, with Log.Repair
// if InPlace (the whole damaged range), else with Log.Append. Rebase says
// First may lie past the log's length: the source's log starts there, and
// the log starts over at First (Log.Rebase) before the append.
type Write struct {
	InPlace bool
	Rebase  bool
	First   uint64
	Entries []segment.Entry
}

// CatchUpProgress is what status shows of a catch-up.
type CatchUpProgress struct {
	// Fetched and Total count the local indexes copied and to copy.
	Fetched, Total uint64
	// Source is the source asked now, -1 when none is.
	Source int
	// Stalled says every source failed since the last progress.
	Stalled bool
	// Lost lists the gaps no source holds.
	Lost []Gap
}

// CatchUp is one copy's catch-up as a pure state machine (see the notes
// above). One goroutine calls its methods.
type CatchUp struct {
	gaps    []Gap // still to fetch; gaps[0] is being fetched
	sources int
	// next is the first local index of gaps[0] not fetched yet; pending
	// holds gaps[0]'s verified entries when it is fetched in place.
	next    uint64
	pending []segment.Entry
	// source is the source of the fetch in progress, -1 for none.
	source int
	// refused[i]: source i does not hold gaps[0] (or sent bad data).
	// failed[i]: source i failed since the last progress.
	refused, failed []bool
	lost            []Gap
	fetched, total  uint64

	rate, burst float64
	tokens      float64
	paced       time.Time // when tokens was last topped up
}

// NewCatchUp returns the catch-up of cfg's gaps, which must be ascending
// and disjoint, each non-empty.
func NewCatchUp(cfg CatchUpConfig) (*CatchUp, error) {
	c := &CatchUp{sources: cfg.Sources, source: -1, refused: make([]bool, cfg.Sources), failed: make([]bool, cfg.Sources),
		rate: float64(cfg.BytesPerSecond), burst: float64(max(cfg.BurstBytes, 1))}
	c.tokens = c.burst
	for i, g := range cfg.Gaps {
		if g.End <= g.First || i > 0 && g.First < cfg.Gaps[i-1].End {
			return nil, fmt.Errorf("catch-up: gap [%d, %d) is empty or not after the one before it", g.First, g.End)
		}
		if g.Tail && i != len(cfg.Gaps)-1 {
			return nil, fmt.Errorf("catch-up: the open gap from %d is not the last", g.First)
		}
		if !g.Tail {
			c.total += g.End - g.First
		}
	}
	c.gaps = append([]Gap(nil), cfg.Gaps...)
	if len(c.gaps) > 0 {
		c.next = c.gaps[0].First
	}
	return c, nil
}

// Next returns the fetch to run now. ok is false when there is none: the
// catch-up is done (Done), or it stalled (Retry later).
func (c *CatchUp) Next() (f Fetch, ok bool) {
	if len(c.gaps) == 0 {
		return Fetch{}, false
	}
	if c.source < 0 {
		c.source = c.pick()
		if c.source < 0 {
			return Fetch{}, false
		}
	}
	return Fetch{Source: c.source, First: c.next, End: c.gaps[0].End}, true
}

// pick returns the first source neither refused nor failed, -1 if none.
func (c *CatchUp) pick() int {
	for i := range c.sources {
		if !c.refused[i] && !c.failed[i] {
			return i
		}
	}
	return -1
}

// Fetching says a fetch Next returned is still in progress: its range is
// not complete.
func (c *CatchUp) Fetching() bool { return c.source >= 0 }

// Done says every gap was fetched or found lost.
func (c *CatchUp) Done() bool { return len(c.gaps) == 0 }

// Lost lists the gaps no source holds.
func (c *CatchUp) Lost() []Gap { return c.lost }

// Retry forgets the failures of a stalled catch-up, so Next asks again.
func (c *CatchUp) Retry() { clear(c.failed) }

// Progress says how far the catch-up is.
func (c *CatchUp) Progress() CatchUpProgress {
	return CatchUpProgress{Fetched: c.fetched, Total: c.total, Source: c.source,
		Stalled: len(c.gaps) > 0 && c.source < 0 && c.pick() < 0, Lost: c.lost}
}

// Received takes a batch of the fetch in progress: entries at local
// indexes from first, sums[i] the checksum the source sent with
// entries[i], bytes their size on the wire (for pacing). It returns what
// to store now, if anything. An error refuses the batch: the owner ends
// the stream and calls Ended(true).
func (c *CatchUp) Received(now time.Time, first uint64, entries []segment.Entry, sums []uint32, bytes int) (Write, bool, error) {
	if c.source < 0 || len(c.gaps) == 0 {
		return Write{}, false, fmt.Errorf("catch-up: a batch at %d arrived with no fetch in progress", first)
	}
	c.take(now, bytes)
	g := c.gaps[0]
	rebase := g.Tail && first > c.next
	if first != c.next && !rebase {
		return Write{}, false, fmt.Errorf("catch-up: batch starts at local index %d, want %d", first, c.next)
	}
	if len(sums) != len(entries) {
		return Write{}, false, fmt.Errorf("catch-up: batch of %d entries carries %d checksums", len(entries), len(sums))
	}
	at := first
	for i, e := range entries {
		n := max(e.Noops, 1)
		if n > g.End-at {
			return Write{}, false, fmt.Errorf("catch-up: entry at local index %d covers %d indexes, past the end %d of the range", at, n, g.End)
		}
		if got := segment.Checksum(e); got != sums[i] {
			return Write{}, false, fmt.Errorf("catch-up: entry at local index %d fails its checksum: sent %#08x, computed %#08x", at, sums[i], got)
		}
		at += n
	}
	if at > first {
		clear(c.failed) // progress: the others may be back too
	}
	c.fetched += at - first
	if g.Tail {
		c.total += at - first
	}
	c.next = at
	var w Write
	var ok bool
	if g.InPlace {
		c.pending = append(c.pending, entries...)
		if at == g.End {
			w, ok = Write{InPlace: true, First: g.First, Entries: c.pending}, true
			c.pending = nil
		}
	} else if len(entries) > 0 || rebase {
		w, ok = Write{First: first, Entries: entries, Rebase: rebase}, true
	}
	if at == g.End {
		c.nextGap()
	}
	return w, ok, nil
}

// Ended says the fetch in progress ended before its range did. lacks says
// its source answered that it does not hold the rest (its stream ended
// short, or it refused with such an answer), or sent a batch Received
// refused; otherwise the source failed (unreachable, or broke mid-copy).
// A fetch whose range Received completed has ended already.
func (c *CatchUp) Ended(lacks bool) {
	if c.source < 0 {
		return
	}
	if lacks {
		c.refused[c.source] = true
	} else {
		c.failed[c.source] = true
	}
	c.source = -1
	for i := range c.sources {
		if !c.refused[i] {
			return
		}
	}
	// Nobody holds the rest of this gap. What was fetched of it stays
	// fetched (appended, or lost with the rest when in place). An open
	// gap has no rest that the shard must hold: the copy's owner tells
	// whether what it has is enough.
	if c.gaps[0].Tail {
		c.nextGap()
		return
	}
	c.lost = append(c.lost, Gap{First: c.gaps[0].First, End: c.gaps[0].End, InPlace: c.gaps[0].InPlace})
	if !c.gaps[0].InPlace {
		c.lost[len(c.lost)-1].First = c.next
	}
	c.pending = nil
	c.nextGap()
}

// StreamEnded says the source's stream of the fetch in progress ended
// cleanly. It completes an open (Tail) gap at what was fetched: the
// source holds no more. Before the end of any other range, the source
// lacks the rest (Ended(true)).
func (c *CatchUp) StreamEnded() {
	if c.source < 0 || len(c.gaps) == 0 {
		return
	}
	if c.gaps[0].Tail {
		c.nextGap()
		return
	}
	c.Ended(true)
}

// nextGap moves on to the next gap with every source to ask again.
func (c *CatchUp) nextGap() {
	c.gaps = c.gaps[1:]
	c.source = -1
	clear(c.refused)
	if len(c.gaps) > 0 {
		c.next = c.gaps[0].First
	}
}

// take spends bytes of the pace's budget at now.
func (c *CatchUp) take(now time.Time, bytes int) {
	if c.rate <= 0 {
		return
	}
	if !c.paced.IsZero() {
		c.tokens = min(c.burst, c.tokens+c.rate*now.Sub(c.paced).Seconds())
	}
	c.paced = now
	c.tokens -= float64(bytes)
}

// ReadyAt is when the owner may read the next batch: at once (the zero
// time) while the budget lasts, later once it is spent.
func (c *CatchUp) ReadyAt() time.Time {
	if c.rate <= 0 || c.tokens >= 0 {
		return time.Time{}
	}
	return c.paced.Add(time.Duration(-c.tokens / c.rate * float64(time.Second)))
}
