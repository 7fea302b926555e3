package player

import (
	"fmt"
	"testing"
)

// BenchmarkDispatch measures the core's cost per main-stream entry with 10
// targets and 3 targets per entry, each batch written and acknowledged at
// once: the event loop's share of the player delay.
func BenchmarkDispatch(b *testing.B) {
	cfg := Config{Route: RouteTags}.WithDefaults()
	for t := range 10 {
		cfg.Targets = append(cfg.Targets, fmt.Sprintf("t%d", t))
	}
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	c.Step(PlayerRestart{LastApplied: map[TargetID]Index{0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: 0, 6: 0, 7: 0, 8: 0, 9: 0}})
	entries := make([]Entry, 10)
	for i := range entries {
		entries[i] = Entry{Key: "k", Payload: make([]byte, 100),
			Tags: []string{TargetTagPrefix + cfg.Targets[i], TargetTagPrefix + cfg.Targets[(i+3)%10], TargetTagPrefix + cfg.Targets[(i+7)%10]}}
	}
	var sent []Send
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e := entries[i%10]
		e.Index = Index(i + 1)
		out := c.Step(EntryFetched{Stream: Main, Entry: e})
		sent = append(sent[:0], out.Sends...)
		for _, s := range sent {
			c.Step(WriteDone{Target: s.Target, Term: s.Term})
			c.Step(AckReceived{Target: s.Target, Term: s.Term, Index: s.Batch.Last()})
		}
	}
}
