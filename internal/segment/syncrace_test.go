package segment

import (
	"os"
	"sync"
	"testing"
)

// TestRolloverDuringSyncFsyncsItself: a Sync takes the dirty segment and
// fsyncs it outside the write lock. A rollover in between must not count
// the segment's records as synced on the strength of that fsync, which
// has not happened yet: it fsyncs the segment itself before SyncedLen
// covers them.
func TestRolloverDuringSyncFsyncsItself(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), SegmentBytesMax: 1, Sync: SyncGroup})
	defer mustClose(t, s)
	appendTest(t, s, 3, 3) // fills the first segment
	first := s.active().f

	var mu sync.Mutex
	held, fsyncs := false, 0 // fsyncs: of the first segment, past the held one
	entered, release := make(chan struct{}), make(chan struct{})
	fsyncHook = func(f *os.File) {
		mu.Lock()
		if f == first && !held {
			held = true
			mu.Unlock()
			close(entered)
			<-release // the Sync's fsync has not begun
			return
		}
		if f == first {
			fsyncs++
		}
		mu.Unlock()
	}
	defer func() { fsyncHook = nil }()

	done := make(chan error)
	go func() { done <- s.SyncRecords() }()
	<-entered
	appendTest(t, s, 1, 1) // rolls over to a new segment
	mu.Lock()
	n := fsyncs
	mu.Unlock()
	if synced := s.SyncedLen(); synced >= 3 && n == 0 {
		t.Errorf("SyncedLen %d covers the first segment's 3 records, which nothing fsynced yet", synced)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
