package spec

import "testing"

// TestConfirmerSendsOnlyEndsThatConfirmItsOwn: a stream sends a cut's end
// once it sent something the end has not confirmed yet, never an end it
// sent before or a smaller one, and nothing for cuts of other shards'
// positions only.
func TestConfirmerSendsOnlyEndsThatConfirmItsOwn(t *testing.T) {
	var c Confirmer
	if c.Confirm(4) {
		t.Fatal("a stream that sent nothing sent a cut's end")
	}
	c.Sent(2, 0)
	c.Sent(3, 0)
	for _, step := range []struct {
		end  uint64
		sent bool
	}{{6, true}, {6, false}, {9, false}, {5, false}} {
		if got := c.Confirm(step.end); got != step.sent {
			t.Fatalf("end %d sent %v, want %v", step.end, got, step.sent)
		}
	}
	// Skips count as sent: a filler's no-ops are confirmed like records.
	c.Sent(10, 3)
	if !c.Confirm(11) || !c.Confirm(14) || c.Confirm(20) {
		t.Fatal("the ends after skips at [10, 13): want 11 and 14 sent, then nothing")
	}
}
