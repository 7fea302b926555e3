package player

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// randomRun drives one seeded world with larger bounds than the
// exploration: a safety phase in which faults strike at random, then a heal
// phase without faults that must end with everything applied and the
// player's memory released. It returns the violation, if any, and the
// number of actions taken.
func randomRun(seed uint64, bg bug) (string, int) {
	rng := rand.New(rand.NewPCG(seed, 0x706c61796572))
	targets := 3 + rng.IntN(8)
	entries := 200 + rng.IntN(101)
	cfg := Config{
		Route:              Route(rng.IntN(3)),
		BatchEntriesMax:    1 + rng.IntN(8),
		BatchBytesMax:      8 + rng.IntN(64),
		QueueEntriesMax:    1 + rng.IntN(16),
		QueueBytesMax:      16 + rng.IntN(256),
		InflightBatchesMax: 1 + rng.IntN(4),
		EmptyEvery:         uint64(rng.IntN(9)),
	}
	for t := range targets {
		cfg.Targets = append(cfg.Targets, fmt.Sprintf("t%d", t))
	}
	log := make([]Entry, entries)
	for i := range log {
		e := Entry{Index: Index(i + 1), Key: fmt.Sprintf("k%d", rng.IntN(50)), Payload: make([]byte, rng.IntN(24))}
		// Under RouteTags an entry names up to all targets, sometimes
		// none, and sometimes a name that is no target.
		for range rng.IntN(targets + 1) {
			e.Tags = append(e.Tags, TargetTagPrefix+fmt.Sprintf("t%d", rng.IntN(targets+1)))
		}
		log[i] = e
	}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	m := newModel(cfg, log, 2+rng.IntN(12), true, bg)
	lastApplied := make([]Index, targets)
	for t := range lastApplied {
		if rng.IntN(4) == 0 {
			lastApplied[t] = Index(rng.IntN(entries / 4))
		}
	}
	w := m.start(lastApplied)
	faultEvery := 50 + rng.IntN(500)
	var acts, calm []action
	steps := 0
	for w.violation == "" {
		acts = w.actions(acts[:0])
		calm = calm[:0]
		var faults []action
		for _, a := range acts {
			if a.fault() {
				faults = append(faults, a)
			} else {
				calm = append(calm, a)
			}
		}
		if len(calm) == 0 {
			// Faults stop here: only they are left to happen.
			w.checkQuiet()
			break
		}
		a := calm[rng.IntN(len(calm))]
		if len(faults) > 0 && rng.IntN(faultEvery) == 0 {
			a = faults[rng.IntN(len(faults))]
		}
		w.do(a)
		steps++
	}
	return w.violation, steps
}

// TestRandomRuns runs many seeded worlds with hundreds of entries, 3 to 10
// targets, every route and random bounds, and up to 13 faults each; a
// failing seed replays exactly with randomRun(seed, bugNone).
func TestRandomRuns(t *testing.T) {
	seeds := 2000
	if testing.Short() || raceEnabled {
		seeds = 200
	}
	if *big {
		seeds = 20000
	}
	start := time.Now()
	total := 0
	for seed := range uint64(seeds) {
		v, steps := randomRun(seed, bugNone)
		if v != "" {
			t.Fatalf("seed %d: %s", seed, v)
		}
		total += steps
	}
	t.Logf("%d seeds, %d actions, in %v", seeds, total, time.Since(start).Round(time.Millisecond))
}

// TestRandomRunsFindPlantedBugs checks that the randomized runs, too, catch
// each planted bug within a few hundred seeds.
func TestRandomRunsFindPlantedBugs(t *testing.T) {
	for _, bg := range []bug{bugSkipPushTerm, bugSkipLastAckCheck, bugRecoverToBeforeCurrent, bugRestartFromMax} {
		found := false
		for seed := range uint64(300) {
			if v, _ := randomRun(seed, bg); v != "" {
				t.Logf("%s: seed %d: %s", bugNames[bg], seed, v)
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s: no seed found a violation", bugNames[bg])
		}
	}
}

var bugNames = map[bug]string{
	bugSkipPushTerm:           "push under an expired term",
	bugRecoverFromLastApplied: "recover from the last applied index",
	bugSkipLastAckCheck:       "dispatch what a target applied",
	bugRecoverToBeforeCurrent: "recovery ends before the current index",
	bugRestartFromMax:         "restart after the largest last applied",
}
