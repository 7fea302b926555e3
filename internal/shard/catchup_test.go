package shard

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/segment"
)

// peerEntries returns what a live replica holds at [first, end): records
// at even indexes, one-index no-op runs at odd ones, with their checksums.
func peerEntries(first, end uint64) ([]segment.Entry, []uint32) {
	var es []segment.Entry
	var sums []uint32
	for i := first; i < end; i++ {
		e := segment.Entry{Noops: 1}
		if i%2 == 0 {
			e = segment.Entry{ClientID: 1, Seq: i, Payload: []byte(fmt.Sprintf("record %d", i))}
		}
		es = append(es, e)
		sums = append(sums, segment.Checksum(e))
	}
	return es, sums
}

func mustCatchUp(t *testing.T, cfg CatchUpConfig) *CatchUp {
	t.Helper()
	c, err := NewCatchUp(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantFetch(t *testing.T, c *CatchUp, want Fetch) {
	t.Helper()
	f, ok := c.Next()
	if !ok || f != want {
		t.Fatalf("Next() = %+v, %v; want %+v", f, ok, want)
	}
}

// TestCatchUpRepairsInPlaceAcrossASourceFailure fetches a damaged range
// in two batches; its first source dies after the first batch, and the
// second source carries on from where it stopped. The range is written
// once, whole, in place.
func TestCatchUpRepairsInPlaceAcrossASourceFailure(t *testing.T) {
	now := time.Unix(0, 0)
	c := mustCatchUp(t, CatchUpConfig{Gaps: []Gap{{First: 10, End: 20, InPlace: true}}, Sources: 2})
	wantFetch(t, c, Fetch{Source: 0, First: 10, End: 20})
	es, sums := peerEntries(10, 14)
	if _, ok, err := c.Received(now, 10, es, sums, 100); err != nil || ok {
		t.Fatalf("Received part of an in-place range = %v, %v; want nothing to write yet", ok, err)
	}
	c.Ended(false) // source 0 dies mid-copy
	wantFetch(t, c, Fetch{Source: 1, First: 14, End: 20})
	rest, restSums := peerEntries(14, 20)
	w, ok, err := c.Received(now, 14, rest, restSums, 100)
	if err != nil || !ok {
		t.Fatalf("Received the rest = %v, %v; want the write", ok, err)
	}
	all, _ := peerEntries(10, 20)
	if !w.InPlace || w.First != 10 || !reflect.DeepEqual(w.Entries, all) {
		t.Fatalf("write = %+v, want the whole range [10, 20) in place", w)
	}
	if !c.Done() || len(c.Lost()) != 0 {
		t.Fatalf("Done = %v, Lost = %v after the range was fetched", c.Done(), c.Lost())
	}
	if p := c.Progress(); p.Fetched != 10 || p.Total != 10 {
		t.Fatalf("progress = %+v, want 10 of 10", p)
	}
}

// TestCatchUpRefusesBadBatches checks that a batch with a wrong checksum,
// one that does not start where the copy stands, and one that runs past
// the range are refused, and that the source is then not asked again for
// that range.
func TestCatchUpRefusesBadBatches(t *testing.T) {
	now := time.Unix(0, 0)
	for _, tc := range []struct {
		name  string
		first uint64
		mess  func(es []segment.Entry, sums []uint32) ([]segment.Entry, []uint32)
	}{
		{"a flipped payload byte", 0, func(es []segment.Entry, sums []uint32) ([]segment.Entry, []uint32) {
			es[2].Payload = append([]byte(nil), es[2].Payload...)
			es[2].Payload[0] ^= 1
			return es, sums
		}},
		{"a batch that starts elsewhere", 1, func(es []segment.Entry, sums []uint32) ([]segment.Entry, []uint32) { return es, sums }},
		{"a no-op run past the end", 0, func(es []segment.Entry, sums []uint32) ([]segment.Entry, []uint32) {
			es[len(es)-1] = segment.Entry{Noops: 5}
			sums[len(sums)-1] = segment.Checksum(es[len(es)-1])
			return es, sums
		}},
		{"a checksum short", 0, func(es []segment.Entry, sums []uint32) ([]segment.Entry, []uint32) { return es, sums[1:] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCatchUp(t, CatchUpConfig{Gaps: []Gap{{First: 0, End: 6}}, Sources: 2})
			wantFetch(t, c, Fetch{Source: 0, First: 0, End: 6})
			es, sums := tc.mess(peerEntries(0, 6))
			if _, ok, err := c.Received(now, tc.first, es, sums, 10); err == nil || ok {
				t.Fatalf("Received a bad batch = %v, %v; want it refused", ok, err)
			}
			if p := c.Progress(); p.Fetched != 0 {
				t.Fatalf("a refused batch counted: %+v", p)
			}
			c.Ended(true)
			wantFetch(t, c, Fetch{Source: 1, First: 0, End: 6})
		})
	}
}

// TestCatchUpSaysWhatNoSourceHolds checks that a range every source says
// it lacks is listed as lost, and the catch-up goes on with the next
// range; an appended range is lost only from where the copying stopped.
func TestCatchUpSaysWhatNoSourceHolds(t *testing.T) {
	now := time.Unix(0, 0)
	c := mustCatchUp(t, CatchUpConfig{Gaps: []Gap{{First: 3, End: 5, InPlace: true}, {First: 8, End: 12}}, Sources: 2})
	wantFetch(t, c, Fetch{Source: 0, First: 3, End: 5})
	c.Ended(true)
	wantFetch(t, c, Fetch{Source: 1, First: 3, End: 5})
	c.Ended(true)
	// Both sources are asked again for the next range.
	wantFetch(t, c, Fetch{Source: 0, First: 8, End: 12})
	es, sums := peerEntries(8, 10)
	w, ok, err := c.Received(now, 8, es, sums, 10)
	if err != nil || !ok || w.InPlace || w.First != 8 || len(w.Entries) != 2 {
		t.Fatalf("Received of an appended range = %+v, %v, %v; want the batch appended at once", w, ok, err)
	}
	c.Ended(true)
	wantFetch(t, c, Fetch{Source: 1, First: 10, End: 12})
	c.Ended(true)
	if !c.Done() {
		t.Fatal("not done once every range was fetched or lost")
	}
	want := []Gap{{First: 3, End: 5, InPlace: true}, {First: 10, End: 12}}
	if !reflect.DeepEqual(c.Lost(), want) {
		t.Fatalf("Lost() = %+v, want %+v", c.Lost(), want)
	}
}

// TestCatchUpStallsAndRetries checks that a catch-up whose sources all
// failed stalls rather than giving the range up, and asks again after
// Retry.
func TestCatchUpStallsAndRetries(t *testing.T) {
	c := mustCatchUp(t, CatchUpConfig{Gaps: []Gap{{First: 0, End: 4, InPlace: true}}, Sources: 2})
	wantFetch(t, c, Fetch{Source: 0, First: 0, End: 4})
	c.Ended(false)
	wantFetch(t, c, Fetch{Source: 1, First: 0, End: 4})
	c.Ended(false)
	if f, ok := c.Next(); ok {
		t.Fatalf("Next() = %+v with every source failed, want a stall", f)
	}
	if p := c.Progress(); !p.Stalled || c.Done() || len(c.Lost()) != 0 {
		t.Fatalf("progress %+v, done %v, lost %v; want stalled, not done, nothing lost", p, c.Done(), c.Lost())
	}
	c.Retry()
	wantFetch(t, c, Fetch{Source: 0, First: 0, End: 4})
}

// TestCatchUpPaces checks the token bucket: reading is free within the
// burst, and past it the next read waits as long as the rate needs for
// the overdraft.
func TestCatchUpPaces(t *testing.T) {
	now := time.Unix(100, 0)
	c := mustCatchUp(t, CatchUpConfig{Gaps: []Gap{{First: 0, End: 100}}, Sources: 1, BytesPerSecond: 1000, BurstBytes: 500})
	wantFetch(t, c, Fetch{Source: 0, First: 0, End: 100})
	es, sums := peerEntries(0, 1)
	if _, _, err := c.Received(now, 0, es, sums, 400); err != nil {
		t.Fatal(err)
	}
	if at := c.ReadyAt(); !at.IsZero() {
		t.Fatalf("ReadyAt = %v within the burst, want at once", at)
	}
	es, sums = peerEntries(1, 2)
	if _, _, err := c.Received(now, 1, es, sums, 600); err != nil {
		t.Fatal(err)
	}
	// 500 bytes overdrawn at 1000 bytes/s: half a second.
	if at := c.ReadyAt(); !at.Equal(now.Add(500 * time.Millisecond)) {
		t.Fatalf("ReadyAt = %v, want %v", at, now.Add(500*time.Millisecond))
	}
	// After a second the bucket holds its burst again, not more.
	later := now.Add(2 * time.Second)
	es, sums = peerEntries(2, 3)
	if _, _, err := c.Received(later, 2, es, sums, 500); err != nil {
		t.Fatal(err)
	}
	if at := c.ReadyAt(); !at.IsZero() {
		t.Fatalf("ReadyAt = %v after a full refill, want at once", at)
	}
}

// appendHookLog is a MemLog that runs beforeAppend, once, when the next
// append comes.
type appendHookLog struct {
	*MemLog
	beforeAppend func()
}

func (l *appendHookLog) Append(entries []segment.Entry) (uint64, error) {
	if f := l.beforeAppend; f != nil {
		l.beforeAppend = nil
		f()
	}
	return l.MemLog.Append(entries)
}

// TestCatchUpWriteDoesNotInterleaveWithAJoin: a copy that asked to rejoin
// fetches one more batch (a second round, the first ask's answer lost)
// while the configuration that takes it in applies, and its primary joins
// it and sends what follows its length, on the replication stream. The
// join must come wholly before or wholly after the fetched write: one
// between the write's checks and its append would have the backup hold
// the fetched entry after the primary's, where the primary holds none.
// The test lets the join in just before the write's append whenever
// nothing keeps it out.
func TestCatchUpWriteDoesNotInterleaveWithAJoin(t *testing.T) {
	l := &appendHookLog{MemLog: NewMemLog()}
	if _, err := l.Append([]segment.Entry{rec(1, 1), rec(1, 2)}); err != nil {
		t.Fatal(err)
	}
	r := askedInThree(t, l)
	joined := false
	var joinLength uint64
	join := func() {
		joined = true
		n, _, err := r.Join(4)
		if err != nil {
			t.Fatalf("the primary of configuration 4 could not join: %v", err)
		}
		joinLength = n
		if _, err := r.Replicated(4, n, []segment.Entry{rec(2, 1)}); err != nil {
			t.Fatalf("the primary's batch was refused: %v", err)
		}
	}
	l.beforeAppend = func() {
		if r.replMu.TryLock() {
			r.replMu.Unlock()
			join()
		}
	}
	err := r.Repair(Write{First: l.MemLog.Len(), Entries: []segment.Entry{rec(1, 3)}})
	if !joined {
		if err != nil {
			t.Fatalf("the fetched write before the join failed: %v", err)
		}
		join()
	}
	if got, want := l.Len(), joinLength+1; got != want {
		t.Fatalf("the backup holds %d entries; the join found %d and the primary sent 1 (fetched write: %v)", got, joinLength, err)
	}
}
