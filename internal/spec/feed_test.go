package spec

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/augur-log/augur/internal/segment"
)

// feedLog is a log of records (payload "r<local>") and no-op runs whose
// first ordered entries cuts placed at cutPos[local].
type feedLog struct {
	start   uint64
	entries []segment.Entry // one per local index; a run's first holds its length
	cutPos  map[uint64]uint64
	ordered uint64
	damaged bool
}

func (l *feedLog) Start() uint64   { return l.start }
func (l *feedLog) Ordered() uint64 { return l.ordered }
func (l *feedLog) GlobalOf(local uint64) (uint64, bool) {
	if local < l.start {
		return 0, false
	}
	p, ok := l.cutPos[local]
	return p, ok
}

func (l *feedLog) Scan(from uint64, fn func(uint64, segment.Entry) bool) error {
	if l.damaged {
		return segment.ErrDamaged
	}
	from = max(from, l.start)
	for i := uint64(0); i < uint64(len(l.entries)); {
		e := l.entries[i]
		n := max(e.Noops, 1)
		if i+n > from {
			at := max(i, from)
			if e.Noops > 0 {
				e.Noops = i + n - at
			}
			if !fn(at, e) {
				return nil
			}
		}
		i += n
	}
	return nil
}

// newFeedLog holds records at 0-1, a run of 3 no-ops at 2-4 and records at
// 5-6; cuts placed 0-2 at positions 10-12.
func newFeedLog() *feedLog {
	l := &feedLog{cutPos: map[uint64]uint64{0: 10, 1: 11, 2: 12}, ordered: 3}
	rec := func(s string) segment.Entry { return segment.Entry{Payload: []byte(s)} }
	l.entries = []segment.Entry{rec("r0"), rec("r1"), {Noops: 3}, {}, {}, rec("r5"), rec("r6")}
	return l
}

type sent struct {
	pos  uint64
	what string
}

func collect(out *[]sent) func(uint64, segment.Entry) {
	return func(pos uint64, e segment.Entry) {
		what := string(e.Payload)
		if e.Noops > 0 {
			what = "noop"
		}
		*out = append(*out, sent{pos, what})
	}
}

func TestFeedSendsWhatCutsAndWindowsPlaceInOrder(t *testing.T) {
	l := newFeedLog()
	var f Feed
	var got []sent
	// Windows predict up to local 3 only: the feed stops in the run.
	predict := func(local uint64) (uint64, bool) { return 20 + local, local < 4 }
	if err := f.Send(l, predict, 7, math.MaxInt, collect(&got)); err != nil {
		t.Fatal(err)
	}
	want := []sent{{10, "r0"}, {11, "r1"}, {12, "noop"}, {23, "noop"}}
	if !slices.Equal(got, want) || f.Next != 4 {
		t.Fatalf("sent %v, next %d; want %v and 4", got, f.Next, want)
	}
	// The next window places the rest: the feed goes on inside the run.
	got = nil
	predict = func(local uint64) (uint64, bool) { return 20 + local, true }
	if err := f.Send(l, predict, 7, math.MaxInt, collect(&got)); err != nil {
		t.Fatal(err)
	}
	want = []sent{{24, "noop"}, {25, "r5"}, {26, "r6"}}
	if !slices.Equal(got, want) || f.Next != 7 {
		t.Fatalf("sent %v, next %d; want %v and 7", got, f.Next, want)
	}
}

func TestFeedStopsAtTheLimitInsideARun(t *testing.T) {
	l := newFeedLog()
	f := Feed{Next: 2}
	var got []sent
	// Without windows only cuts place entries: 2 only.
	if err := f.Send(l, nil, 7, math.MaxInt, collect(&got)); err != nil {
		t.Fatal(err)
	}
	if want := []sent{{12, "noop"}}; !slices.Equal(got, want) || f.Next != 3 {
		t.Fatalf("sent %v, next %d; want %v and 3", got, f.Next, want)
	}
	got = nil
	predict := func(local uint64) (uint64, bool) { return 20 + local, true }
	if err := f.Send(l, predict, 4, math.MaxInt, collect(&got)); err != nil {
		t.Fatal(err)
	}
	if want := []sent{{23, "noop"}}; !slices.Equal(got, want) || f.Next != 4 {
		t.Fatalf("sent %v, next %d; want %v and 4", got, f.Next, want)
	}
}

func TestFeedReadsAtLeastOneEntryPerBudget(t *testing.T) {
	l := newFeedLog()
	var f Feed
	var got []sent
	predict := func(local uint64) (uint64, bool) { return 20 + local, true }
	if err := f.Send(l, predict, 7, 1, collect(&got)); err != nil {
		t.Fatal(err)
	}
	if want := []sent{{10, "r0"}}; !slices.Equal(got, want) || f.Next != 1 {
		t.Fatalf("sent %v, next %d; want %v and 1", got, f.Next, want)
	}
}

func TestFeedSaysATrimOrAFailedReadAndSendsNothing(t *testing.T) {
	predict := func(local uint64) (uint64, bool) { return 20 + local, true }
	l := newFeedLog()
	l.start = 2
	f := Feed{Next: 1}
	var got []sent
	if err := f.Send(l, predict, 7, math.MaxInt, collect(&got)); !errors.Is(err, ErrFeedTrimmed) || len(got) > 0 || f.Next != 1 {
		t.Fatalf("err %v, sent %v, next %d; want the trim, nothing and 1", err, got, f.Next)
	}
	l = newFeedLog()
	l.damaged = true
	f = Feed{}
	if err := f.Send(l, predict, 7, math.MaxInt, collect(&got)); !errors.Is(err, segment.ErrDamaged) || len(got) > 0 || f.Next != 0 {
		t.Fatalf("err %v, sent %v, next %d; want the damage, nothing and 0", err, got, f.Next)
	}
}

func TestFeedLimit(t *testing.T) {
	for _, c := range []struct {
		primary, final             bool
		durable, ordered, finalLen uint64
		want                       uint64
		why                        string
	}{
		{true, false, 9, 5, 0, 9, "a live primary serves what every replica holds"},
		{true, false, 3, 5, 0, 5, "and what cuts ordered, where its count of holdings lags"},
		{false, false, 9, 5, 0, 5, "a backup serves what cuts ordered"},
		{true, true, 9, 7, 6, 6, "a finalized shard serves up to its final length"},
		{false, true, 9, 5, 6, 5, "and no more than a copy's cuts ordered"},
	} {
		if got := FeedLimit(c.primary, c.durable, c.ordered, c.final, c.finalLen); got != c.want {
			t.Errorf("%s: %d, want %d", c.why, got, c.want)
		}
	}
}

// TestFeedSendsALongLogInRounds places a log longer than one round's
// slots: 100 records, then a run of 10,000 no-ops, then 100 records, every
// one predicted.
func TestFeedSendsALongLogInRounds(t *testing.T) {
	l := &feedLog{cutPos: map[uint64]uint64{}}
	for i := range 100 {
		l.entries = append(l.entries, segment.Entry{Payload: []byte{byte(i)}})
	}
	l.entries = append(l.entries, segment.Entry{Noops: 10_000})
	l.entries = append(l.entries, make([]segment.Entry, 10_000-1)...)
	for i := range 100 {
		l.entries = append(l.entries, segment.Entry{Payload: []byte{byte(i)}})
	}
	var f Feed
	var got []sent
	predict := func(local uint64) (uint64, bool) { return 1000 + local, true }
	if err := f.Send(l, predict, uint64(len(l.entries)), math.MaxInt, collect(&got)); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(l.entries) || f.Next != uint64(len(l.entries)) {
		t.Fatalf("sent %d slots, next %d; want %d", len(got), f.Next, len(l.entries))
	}
	for i, s := range got {
		noop := i >= 100 && i < 10_100
		if s.pos != 1000+uint64(i) || (s.what == "noop") != noop {
			t.Fatalf("slot %d: %v, want position %d (no-op %v)", i, s, 1000+i, noop)
		}
	}
}
