package ptimer

import (
	"testing"
	"time"
)

func TestFiresAfterDeadline(t *testing.T) {
	tm := New()
	defer tm.Close()
	for _, d := range []time.Duration{200 * time.Microsecond, 2 * time.Millisecond} {
		start := time.Now()
		tm.Reset(d)
		select {
		case <-tm.C:
		case <-time.After(5 * time.Second):
			t.Fatalf("timer of %v never fired", d)
		}
		if got := time.Since(start); got < d {
			t.Fatalf("timer of %v fired after %v", d, got)
		}
	}
}

func TestResetReplacesAndStopDisarms(t *testing.T) {
	tm := New()
	defer tm.Close()
	tm.Reset(time.Hour)
	start := time.Now()
	tm.Reset(time.Millisecond)
	<-tm.C
	if time.Since(start) > time.Minute {
		t.Fatal("Reset did not replace the earlier deadline")
	}
	tm.Reset(20 * time.Millisecond)
	tm.Stop()
	select {
	case <-tm.C:
		t.Fatal("a stopped timer fired")
	case <-time.After(60 * time.Millisecond):
	}
	tm.Reset(0)
	select {
	case <-tm.C:
	default:
		t.Fatal("Reset(0) did not fire at once")
	}
}

func TestCloseIsIdempotentAndQuiet(t *testing.T) {
	tm := New()
	tm.Reset(time.Millisecond)
	tm.Close()
	tm.Close()
	tm.Reset(time.Millisecond) // after Close: does nothing, must not panic
	tm.Stop()
}
