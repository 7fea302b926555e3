package segment

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
)

// TestReadersDuringWrites runs readers against a writer that appends,
// assigns and trims. Record contents and positions derive from the local
// index, so every successful read can be checked on its own; a read may
// only fail because Trim overtook it. With noops, the second half of every
// batch is a run of no-ops (appended as two entries, stored as one frame).
// Run it with -race.
func TestReadersDuringWrites(t *testing.T) {
	for _, noops := range []bool{false, true} {
		t.Run(fmt.Sprintf("noops=%v", noops), func(t *testing.T) { testReadersDuringWrites(t, noops) })
	}
}

func testReadersDuringWrites(t *testing.T, noops bool) {
	const (
		records = 3000
		batch   = 20
		readers = 4
	)
	want := testEntry
	if noops {
		want = func(local uint64) Entry {
			if i := local % batch; i >= batch/2 {
				return Entry{Noops: batch - i}
			}
			return testEntry(local)
		}
	}
	s := mustOpen(t, Options{Dir: t.TempDir(), SegmentBytesMax: 4000, Sync: SyncNever})
	defer s.Close()
	// run k covers one batch: locals [20k, 20k+20) at globals 40k.., so
	// global = 2*LocalStart + offset in the run.
	globalOf := func(local uint64) uint64 { return 2*(local/batch*batch) + local%batch }

	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- readLoop(s, uint64(r), &done, globalOf, want)
		}()
	}

	for k := uint64(0); k < records/batch; k++ {
		entries := testEntries(k*batch, batch)
		if noops {
			entries = append(entries[:batch/2], Entry{Noops: batch / 4}, Entry{Noops: batch - batch/2 - batch/4})
		}
		if _, err := s.Append(entries); err != nil {
			t.Fatal(err)
		}
		g := 2 * k * batch
		if err := s.Assign(Run{Cut: k, CutStart: g, CutEnd: g + 2*batch, LocalStart: k * batch, GlobalStart: g, Count: batch}); err != nil {
			t.Fatal(err)
		}
		if k%10 == 9 {
			if err := s.Trim(globalOf(k * batch / 2)); err != nil {
				t.Fatal(err)
			}
		}
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if s.Start() == 0 {
		t.Fatalf("the writer never trimmed anything")
	}
}

func readLoop(s *Store, seed uint64, done *atomic.Bool, globalOf func(uint64) uint64, want func(uint64) Entry) error {
	x := seed*0x9e3779b97f4a7c15 + 1
	rnd := func(n uint64) uint64 { // xorshift: cheap and deterministic per reader
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x % n
	}
	for !done.Load() {
		start, n := s.Start(), s.Len()
		if n == start {
			continue
		}
		l := start + rnd(n-start)
		e, err := s.Read(l)
		if err != nil && !errors.Is(err, ErrTrimmed) {
			return err
		}
		if err == nil && !reflect.DeepEqual(e, want(l)) {
			return errors.New("read returned the wrong record")
		}
		if g, ok := s.GlobalOf(l); ok && g != globalOf(l) {
			return errors.New("GlobalOf disagrees with the writer")
		}
		if back, ok := s.Locate(globalOf(l)); ok && back != l {
			return errors.New("Locate disagrees with the writer")
		}
		for _, r := range s.Runs(globalOf(l)) {
			if r.Count == 0 || globalOf(r.LocalStart) != r.GlobalStart {
				return errors.New("Runs returned a run the writer never assigned")
			}
		}
		next, stop := l, l+rnd(50)
		var bad error
		err = s.Scan(l, func(local uint64, e Entry) bool {
			if next == l && local > l {
				// Trim moved Start past l before the scan began.
				next = local
			}
			if local != next || !reflect.DeepEqual(e, want(local)) {
				bad = fmt.Errorf("scan from %d returned record %d (want %d): %+v", l, local, next, e)
				return false
			}
			next += max(e.Noops, 1)
			return next < stop
		})
		if bad != nil {
			return bad
		}
		if err != nil && !errors.Is(err, ErrTrimmed) {
			return err
		}
	}
	return nil
}
