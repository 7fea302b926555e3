package bench

import (
	"context"
	"testing"
	"time"
)

// TestFloorProbeRecordsACallPastItsWindow: a probe whose connecting call
// ends after its window (a short warm-up on a loaded machine) still
// records one round trip, so the run reports a floor.
func TestFloorProbeRecordsACallPastItsWindow(t *testing.T) {
	f, err := startFloorProbe()
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.run(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if n := f.lat.Count(); n != 1 {
		t.Fatalf("a probe whose window had ended recorded %d calls, want 1", n)
	}
}
