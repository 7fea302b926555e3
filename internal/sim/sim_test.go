package sim

import (
	"flag"
	"testing"
)

var (
	flagSeeds  = flag.Int("sim.seeds", 1000, "how many seeds TestSeeds runs per mode")
	flagFaults = flag.String("sim.faults", "all", "the faults TestSeeds injects (see ParseFaults)")
	flagShow   = flag.Int("sim.show", 3, "how many failing seeds TestSeeds details")
)

// TestSeeds runs the seeds of every mode; a failing seed prints the one
// command that replays it with a trace.
func TestSeeds(t *testing.T) {
	faults, err := ParseFaults(*flagFaults)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range Modes() {
		t.Run(string(m), func(t *testing.T) {
			n := *flagSeeds
			if testing.Short() {
				n = min(n, 40)
			}
			rs := RunSeeds(Options{Mode: m, Faults: faults}, 0, n)
			tally := Count(rs)
			shown := 0
			for _, r := range rs {
				if !r.Failed() || shown == *flagShow {
					continue
				}
				shown++
				t.Errorf("seed %d (%s):\n  %s\nreplay: %s", r.Seed, r.Scenario, joinLines(r.Errs), r.Replay())
			}
			t.Logf("%s: %v", m, tally)
			if show := min(2, n-1); show >= 0 {
				t.Logf("seed %d: %s", show, rs[show].Scenario)
				t.Logf("seed %d: %s", show, rs[show].Summary)
			}
			// The seeds are fixed, so this holds or fails the same way
			// every run; it keeps the sole-holder case from silently
			// dropping out of the mix.
			if m == Spec && n >= 40 && tally.SoleHolder == 0 {
				t.Errorf("no seed failed a shard while it held the only quota")
			}
		})
	}
}

func joinLines(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += "\n  "
		}
		out += s
	}
	return out
}
