package sim

import (
	"flag"
	"strings"
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
			n := min(*flagSeeds, raceSeedsMax)
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
				t.Errorf("seed %d (%s):\n  %s\nreplay: %s", r.Seed, r.Scenario, strings.Join(r.Errs, "\n  "), r.Replay())
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
			// Some seeds fall back to eager cuts between windows (the
			// leader's spec.Config.EagerAbove), and some never do.
			if m == Spec && n >= 40 && (tally.EagerSeeds == 0 || tally.EagerSeeds == tally.Seeds) {
				t.Errorf("eager cuts between windows in %d seeds of %d", tally.EagerSeeds, tally.Seeds)
			}
			// Restarted and fenced replicas rejoin their shards in eager
			// and speculative order; that path must not drop out of the
			// mix either.
			if (m == Eager || m == Spec) && faults.Crash && n >= 40 && tally.Rejoins == 0 {
				t.Errorf("no replica rejoined its shard: %v", tally)
			}
			// Some seeds run group commit, and in some a fsync ends
			// before its notice reaches the core while a batch comes in.
			if (m == Eager || m == Spec) && n >= 40 && (tally.GroupSeeds == 0 || tally.RaisedInReplicated == 0) {
				t.Errorf("group commit in %d seeds, %d acknowledgements raised inside Replicated", tally.GroupSeeds, tally.RaisedInReplicated)
			}
			if m == Lazy {
				// Every kind of lazy fault happens in some seed: the
				// sequencing leader and followers crash (view changes
				// follow), shard replicas and clients crash, shard
				// primaries fail over, data that never comes turns into
				// no-ops, full sequencing rings push appends back,
				// ordering replicas crash or their leader is cut off from
				// the others, shards of three run, replicas taken out
				// rejoin (their source dying mid-copy, the primary right
				// after the join), shards are added mid-run and every
				// replica of a shard dies for good.
				if faults.Crash && n >= 40 && (tally.LeaderCrashes == 0 || tally.SeqCrashes == tally.LeaderCrashes ||
					tally.Views == 0 || tally.Crashes == 0 || tally.ClientCrashes == 0 || tally.Noops == 0 || tally.RingFull == 0 || tally.Failovers == 0 ||
					tally.RaftCrashes == 0 || tally.CutOffLeaders == 0 || tally.ThreeServers == 0 ||
					tally.Rejoins == 0 || tally.SourceDeaths == 0 || tally.PrimaryDeathsOnJoin == 0 || tally.ShardsAdded == 0 || tally.ShardFailed == 0) {
					t.Errorf("some lazy fault never struck: %v", tally)
				}
				return
			}
			// Likewise for the crashes: storage servers crash, some
			// losing unsynced writes, and ordering replicas crash.
			if faults.Crash && n >= 40 && (tally.LostTails == 0 || tally.RaftCrashes == 0) {
				t.Errorf("no seed crashed a storage server that lost unsynced writes, or an ordering replica: %v", tally)
			}
			// And some crashes take one server of a shard, which fails
			// over to the other instead of being finalized.
			if faults.Crash && n >= 40 && tally.Failovers == 0 {
				t.Errorf("no seed failed a shard over to its other server: %v", tally)
			}
			// Shards of two and of three servers both run; in shards of
			// three, two servers crash at once, and the survivors join
			// the configurations that leave the crashed ones out.
			if n >= 40 && (tally.ThreeServers == 0 || tally.ThreeServers == tally.Seeds) {
				t.Errorf("the seeds did not run shards of both two and three servers: %v", tally)
			}
			if faults.Crash && n >= 40 && (tally.PairCrashes == 0 || tally.Joins == 0) {
				t.Errorf("no seed crashed two servers of three at once, or joined a backup to a new configuration: %v", tally)
			}
			// And some restart with a damaged file and repair it from the
			// other copy, some losing their source mid-copy.
			if faults.Crash && n >= 40 && (tally.Repairs == 0 || tally.SourceDeaths == 0) {
				t.Errorf("no seed repaired a damaged file, or lost a repair's source mid-copy: %v", tally)
			}
			// And the player runs in some seeds, through target crashes
			// and its own restarts.
			if n >= 40 && (tally.Player == 0 || faults.Crash && (tally.TargetCrashes == 0 || tally.PlayerRestarts == 0)) {
				t.Errorf("no seed ran the player through target crashes and player restarts: %v", tally)
			}
		})
	}
}

// TestSeedsFoundBeyondTheSweep replays seeds past TestSeeds' range that
// once failed, each on a bug since fixed, so the fixes stay in the mix:
//   - eager 2997: a Join to a shard that was leaving;
//   - spec 2880, 3113 and 3269: checks that counted a failed shard's
//     positions past its void point;
//   - spec 1473: the filler of a failed shard's slots failed in turn
//     without handing them on, and every subscriber waited at the first;
//   - spec 2724: a shard finalized while its recovered primary could not
//     speculate, whose placed entries no copy streamed;
//   - spec 4403: a Join decided for a copy committed after its server
//     restarted, and took the new run in holding less than was ordered;
//   - spec 6715 and 7986: a configuration that names an earlier run of a
//     server taken as leaving its copy out, whose tail it then distrusted
//     (appends of a finalized shard stayed unresolved).
func TestSeedsFoundBeyondTheSweep(t *testing.T) {
	faults, err := ParseFaults(*flagFaults)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode  Mode
		seeds []uint64
	}{{Eager, []uint64{2997}}, {Spec, []uint64{1473, 2724, 2880, 3113, 3269, 4403, 6715, 7986, 8785, 8998}}} {
		for _, seed := range c.seeds {
			r := RunSeeds(Options{Mode: c.mode, Faults: faults}, seed, 1)[0]
			if r.Failed() {
				t.Errorf("%s seed %d (%s):\n  %s\nreplay: %s", c.mode, seed, r.Scenario, strings.Join(r.Errs, "\n  "), r.Replay())
			}
		}
	}
}

// TestLazySeedReplays shows a lazy seed replays exactly: the same seed
// takes the same steps, to the same trace.
func TestLazySeedReplays(t *testing.T) {
	run := func() (Result, string) {
		var b strings.Builder
		r := Run(7, Options{Mode: Lazy, Faults: AllFaults(), Trace: func(s string) { b.WriteString(s + "\n") }})
		return r, b.String()
	}
	r1, t1 := run()
	r2, t2 := run()
	if r1.Steps != r2.Steps || r1.Summary != r2.Summary || t1 != t2 {
		t.Fatalf("seed 7 ran twice differently:\n%s\n%s", r1.Summary, r2.Summary)
	}
	if r1.Steps == 0 || !strings.Contains(t1, "orders [") {
		t.Fatalf("seed 7 did nothing: %s", r1.Summary)
	}
}
