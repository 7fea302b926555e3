//go:build !race

package sim

// The planted-bug searches run hundreds of seeds one after another, each in
// one goroutine: the race detector can find nothing in them that TestSeeds
// does not exercise (RunSeeds' sharing of results), at ten times their
// cost, which made them most of CI's time. They run without it, in
// parallel with one another: most search seed after seed in one goroutine.

import (
	"slices"
	"strings"
	"testing"
)

// TestPlantedBugs plants, in seeds that pass without it, the mistakes the
// checks exist to catch, and shows that every run the bug struck fails
// with a violation of the invariant it breaks.
func TestPlantedBugs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		mode  Mode
		plant bug
		// want is the invariant a violation must name.
		want string
		// missable is how many struck runs may pass: an early answer
		// shows only where a later append got a lower position, which
		// a quiet stretch of a run may not produce.
		missable int
	}{
		{"a shard swaps two records", Spec, bugSwap, "invariant 1", 0},
		{"a shard swaps two records (eager)", Eager, bugSwap, "invariant 1", 0},
		{"a shard drops an acknowledged record", Spec, bugDrop, "invariant 1", 0},
		{"a shard drops an acknowledged record (eager)", Eager, bugDrop, "invariant 1", 0},
		{"a retry is stored twice", Eager, bugRetryTwice, "invariant 5", 0},
		{"a retry is stored twice (spec)", Spec, bugRetryTwice, "invariant 5", 0},
		{"a confirmed position is revised", Spec, bugRevise, "invariant 4", 0},
		{"appends are answered before they are ordered", Eager, bugEarlyAck, "invariant 3", 1},
		{"appends are answered before they are ordered (spec)", Spec, bugEarlyAck, "invariant 3", 1},
		// The first cut orders records no copy fsynced; had that check
		// not caught it, the power loss would take them from every copy,
		// and the clients whose answers it cut off could never resolve
		// them (TestPowerLossLosesAcknowledgedAppendsOnlyWithTheOptOut
		// shows that for the opt-out).
		{"servers answer and acknowledge before they fsync", Eager, bugSkipSync, "fsynced only below", 0},
		// A backup that acknowledges before its fsync loses nothing to a
		// power loss while the primary's copy survives, so the check at
		// each cut (every copy fsynced what it orders) catches it.
		{"a backup acknowledges before it fsyncs", Eager, bugBackupSkipsSync, "fsynced only below", 0},
		// Under group commit a fsync may end before the core hears of
		// it, and a batch replicated meanwhile raises the durable
		// length: acknowledging only on the fsync's notice leaves the
		// primary short of what the backup holds.
		{"a backup acknowledges only on a fsync's notice", Eager, bugAckOnlySynced, "no core call said", 0},
		{"a backup acknowledges only on a fsync's notice (spec)", Spec, bugAckOnlySynced, "no core call said", 0},
		// A target of the player applies one entry twice: the player's
		// check over the targets' applied sequences catches it.
		{"a player's target applies an entry twice", Eager, bugApplyTwice, "invariant 6", 0},
		{"a player's target applies an entry twice (spec)", Spec, bugApplyTwice, "invariant 6", 0},
		// A target that stops applying stalls the player: the run lets
		// a player that still applies drain past its end, and must stop
		// waiting for one that does not.
		{"a player's target stops applying", Eager, bugTargetStalls, "invariant 6", 0},
		{"a player's target stops applying (spec)", Spec, bugTargetStalls, "invariant 6", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const seeds = 5
			struck, caught := 0, 0
			for seed := range uint64(seeds) {
				// The faults a plant brings pass without the bug.
				if r := Run(seed, Options{Mode: c.mode, powerLoss: c.plant == bugSkipSync, groupCommit: c.plant == bugAckOnlySynced}); r.Failed() {
					t.Fatalf("seed %d fails without a planted bug: %v", seed, r.Errs)
				}
				r := Run(seed, Options{Mode: c.mode, plant: c.plant})
				if !r.planted {
					continue // the run never gave the bug its chance
				}
				struck++
				for _, e := range r.Errs {
					if strings.Contains(e, c.want) {
						caught++
						if caught == 1 {
							t.Logf("seed %d: %s", seed, e)
						}
						break
					}
				}
			}
			if struck < seeds-1 || caught < struck-c.missable {
				t.Errorf("the planted bug struck in %d of %d seeds and was caught in %d", struck, seeds, caught)
			}
		})
	}
}

// TestPlantedFinalizeOnReplicaFailure plants the behaviour before shards
// failed over: the crash of one server of a shard finalizes it. Every
// seed the plant strikes must fail the check that a shard keeps its id
// and stays live while one server survives, and in speculative mode the
// check that no view change comes without a whole-shard failure. The same
// seeds pass without the plant. Lazy order's shards never finalized on a
// crash (a sequencing view change replaces a lost replica), so the plant
// has nothing to undo there: the test runs the modes that fail over.
func TestPlantedFinalizeOnReplicaFailure(t *testing.T) {
	t.Parallel()
	for _, m := range []Mode{Eager, Spec} {
		t.Run(string(m), func(t *testing.T) {
			const seeds = 16
			opts := Options{Mode: m, Faults: Faults{Crash: true}}
			struck, live, views := 0, 0, 0
			for seed := range uint64(seeds) {
				if r := Run(seed, opts); r.Failed() {
					t.Fatalf("seed %d fails without a planted bug: %v", seed, r.Errs)
				}
				bad := opts
				bad.plant = bugFinalizeOnReplicaFailure
				r := Run(seed, bad)
				if !r.planted {
					continue
				}
				struck++
				for _, e := range r.Errs {
					if strings.Contains(e, "lost one server, and was finalized") {
						live++
						if live == 1 {
							t.Logf("seed %d: %s", seed, e)
						}
						break
					}
				}
				for _, e := range r.Errs {
					if strings.Contains(e, "no whole shard failed, but the leader started view") {
						views++
						break
					}
				}
			}
			if struck < seeds/4 || live != struck || (m == Spec && views == 0) {
				t.Errorf("the plant struck in %d of %d seeds; the live-shard check caught %d, the view check %d", struck, seeds, live, views)
			}
			t.Logf("the plant struck in %d of %d seeds; the live-shard check caught %d, the view check %d", struck, seeds, live, views)
		})
	}
}

// TestPowerLossLosesAcknowledgedAppendsOnlyWithTheOptOut fails the power
// of a whole shard's servers at once, as a cut that orders its entries
// commits. Under the durable default no acknowledged append is lost (the
// checks pass); under the fsync opt-out (fsync: interval, an entry held
// once written) the loss checks must fire, as the README says the opt-out
// risks.
func TestPowerLossLosesAcknowledgedAppendsOnlyWithTheOptOut(t *testing.T) {
	t.Parallel()
	lossOnlyWithOptOut(t, "acknowledged appends",
		Options{Mode: Eager, powerLoss: true},
		Options{Mode: Eager, powerLoss: true, syncOptOut: true},
		"completion", "invariant 1")
}

// lossOnlyWithOptOut runs five seeds with durable options, which must
// pass, and with the opt-out, which must lose what (an error naming one of
// marks) in all seeds but one.
func lossOnlyWithOptOut(t *testing.T, what string, durable, optOut Options, marks ...string) {
	t.Helper()
	const seeds = 5
	lost := 0
	for seed := range uint64(seeds) {
		if r := Run(seed, durable); r.Failed() {
			t.Fatalf("seed %d loses %s under the durable default: %v", seed, what, r.Errs)
		}
		r := Run(seed, optOut)
		for _, e := range r.Errs {
			if slices.ContainsFunc(marks, func(m string) bool { return strings.Contains(e, m) }) {
				lost++
				if lost == 1 {
					t.Logf("seed %d under the opt-out: %s", seed, e)
				}
				break
			}
		}
	}
	if lost < seeds-1 {
		t.Errorf("the power loss lost %s in %d of %d runs under the opt-out, want at least %d", what, lost, seeds, seeds-1)
	}
}

// TestPlantedBadCopyIsCaught plants, in seeds where a storage server
// restarts with a damaged file and repairs it from the other copy, a
// source that serves an altered record with a checksum over the altered
// bytes (as one that skipped its own frame check would): the repaired
// copy then reads a record the shard never stored there, and the copies'
// check must say so. The same seeds pass without the bug.
func TestPlantedBadCopyIsCaught(t *testing.T) {
	t.Parallel()
	const want = 3
	found := 0
	for seed := uint64(0); seed < 100 && found < want; seed++ {
		o := Options{Mode: Eager, Faults: AllFaults()}
		r := Run(seed, o)
		if r.Repairs == 0 {
			continue
		}
		if r.Failed() {
			t.Fatalf("seed %d fails without a planted bug: %v", seed, r.Errs)
		}
		o.plant = bugCopyUnchecked
		r = Run(seed, o)
		if !r.planted {
			continue
		}
		found++
		caught := false
		for _, e := range r.Errs {
			if strings.Contains(e, "invariant 2") {
				caught = true
				t.Logf("seed %d: %s", seed, e)
				break
			}
		}
		if !caught {
			t.Errorf("seed %d: a repair stored an altered record, and no check said so: %v", seed, r.Errs)
		}
	}
	if found < want {
		t.Errorf("only %d seeds of 100 repaired a damaged file with the bug planted, want %d", found, want)
	}
}

// TestRaftPowerLossLosesCommittedCutsOnlyWithTheOptOut fails the power of
// every ordering replica at once as a cut commits. Under the durable
// default (raft_fsync: true) every committed entry survives on a quorum
// and the run passes; under the raft_fsync opt-out the entries written
// since the kernel's last writeback are lost, and the new leader commits
// other cuts at their indexes: the check must say so.
func TestRaftPowerLossLosesCommittedCutsOnlyWithTheOptOut(t *testing.T) {
	t.Parallel()
	lossOnlyWithOptOut(t, "committed cuts",
		Options{Mode: Eager, raftPowerLoss: true},
		Options{Mode: Eager, raftPowerLoss: true, raftSyncOptOut: true},
		"where a committed entry was lost")
}

// TestLazyPlantedBugs plants lazy order's mistakes in seeds that pass
// without them and shows the checks catch them. Each needs a fault at the
// wrong moment, so it strikes in some seeds only (a read above stable-gp
// shows only when a view change rebinds that very position): the test
// runs seeds until one catches it, and fails if none of the first 200
// does.
func TestLazyPlantedBugs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		plant bug
		want  string
	}{
		// A client that returns once one sequencing replica holds the
		// metadata loses the append when that replica crashes, or when
		// the leader never gets it.
		{"an append returns before every sequencing replica holds it", bugLazyAckEarly, "invariant 1"},
		// stable-gp advanced before every sequencing replica collected
		// the batch, and the leader crashed before its GC went out: the
		// recovery replica's flush would rebind positions readers may
		// have seen. The shards refuse it, so the view change never
		// completes and the appends the recovery replica held are never
		// ordered.
		{"stable-gp advances before garbage collection", bugLazyEarlyStable, "invariant 1"},
		// A replica that serves positions above stable-gp from the
		// placement it holds exposes bindings a view change then
		// rebinds: a later reader sees another record there.
		{"a shard serves reads above stable-gp", bugLazyReadAhead, "invariant 2"},
		// A primary taken out that goes on following stable-gp serves, as
		// final, its own placement of the mapping in flight, which the
		// promoted backup placed anew (with a no-op where the data had
		// not come, or in another view's order).
		{"a shard primary taken out stays in", bugLazyOutStaysIn, "invariant 2"},
		// The control plane's shell takes its own claims and records for
		// committed: an ordering leader cut off from the others, deposed
		// without knowing it, seals, flushes, advances stable-gp and
		// starts a view it never recorded. Since flushes are recorded
		// through Raft and a later view change flushes the recorded one
		// again, the new leader no longer binds positions differently
		// first: the replicas run a view the control state never
		// recorded, whose seal the new leader cannot make, and the heal
		// check finds them there.
		{"a deposed ordering leader starts a view it never recorded", bugLazyTrustProposal, "which the control state never recorded"},
		// stable-gp advances to a flush's end as its configuration is
		// proposed: when the proposal never commits (its leader was
		// deposed), the next view change's flush would rebind positions
		// readers may have seen; the shards refuse it, and the control
		// plane stays in its view change.
		{"stable-gp advances before the flush is recorded through Raft", bugLazyStableBeforeRecord, "is still changing the view"},
		// A shard replica that rejoins and counts at once (not pending
		// until it caught up under its primary) lacks appends the
		// configuration acknowledged between its copy and its join; the
		// primary dies right after the join, the joiner takes over, and
		// those appends are gone.
		{"a rejoined shard replica counts before it caught up", bugLazyJoinerCounts, "invariant 1"},
		// A replica that takes data sent to an older configuration
		// acknowledges, after a replica joined and copied up to its
		// primary's mark, an append the joiner never gets: the client
		// knew the configuration without it. The joiner, caught up by
		// the mark, takes over when the primary dies, and the append is
		// gone.
		{"a shard replica takes data sent to an older configuration", bugLazyNoDataFence, "invariant 1"},
		// The orderer maps every batch to every shard of the table, a
		// finalized one too: once every replica of a shard died, no
		// batch is ever acknowledged again and the order stops for the
		// whole cluster.
		{"the orderer waits for a finalized shard", bugLazyMapFinalized, "liveness"},
	}
	const seeds = 200
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			caught := 0
			for seed := range uint64(seeds) {
				o := Options{Mode: Lazy, Faults: AllFaults()}
				if r := Run(seed, o); r.Failed() {
					t.Fatalf("seed %d fails without a planted bug: %v", seed, r.Errs)
				}
				o.plant = c.plant
				r := Run(seed, o)
				for _, e := range r.Errs {
					if strings.Contains(e, c.want) {
						caught++
						if caught == 1 {
							t.Logf("seed %d: %s", seed, e)
						}
						break
					}
				}
				if caught > 0 {
					return
				}
			}
			t.Errorf("the planted bug was caught in %d of %d seeds", caught, seeds)
		})
	}
}

// TestPlantedTrustedReplacedTail: in some speculative seeds with all
// faults a primary crashes holding a tail its shard never made durable,
// the shard fails over and stores other entries at those indexes, and the
// old primary's server restarts. Told of the configuration that left its
// copy out, the copy orders nothing past what it ordered by then, and the
// seeds pass; planted, the server does not tell it, the copy may order
// its stale tail (where the new primary stored other entries there), and
// the copies' check must say so. The plant strikes only where the stale
// tail differs, so the test runs seeds until it has caught it twice.
func TestPlantedTrustedReplacedTail(t *testing.T) {
	t.Parallel()
	const want, seeds = 2, 300
	caught := 0
	for seed := uint64(0); seed < seeds && caught < want; seed++ {
		o := Options{Mode: Spec, Faults: AllFaults()}
		if r := Run(seed, o); r.Failed() {
			t.Fatalf("seed %d fails without a planted bug: %v", seed, r.Errs)
		}
		o.plant = bugTrustReplacedTail
		r := Run(seed, o)
		for _, e := range r.Errs {
			if strings.Contains(e, "invariant 2") && strings.Contains(e, "(recovered)") {
				caught++
				t.Logf("seed %d: %s", seed, e)
				break
			}
		}
	}
	if caught < want {
		t.Errorf("the planted stale tail was caught in %d of the first %d seeds, want %d", caught, seeds, want)
	}
}

// TestPlantedDurableOnOneBackup plants, in seeds with three servers per
// shard, a primary that counts an entry durable once one backup holds it:
// when the primary and that backup crash together, the third copy lacks
// entries the cuts ordered, and the checks must say so. Without the plant
// the same seeds pass: a cut orders only what every copy of the
// configuration holds, so the crash of two copies of three loses nothing.
// The plant strikes only where such a pair crash follows such an entry,
// so the test runs seeds until it has caught it twice.
func TestPlantedDurableOnOneBackup(t *testing.T) {
	t.Parallel()
	const want, seeds = 2, 120
	caught, struck := 0, 0
	for seed := uint64(0); seed < seeds && caught < want; seed++ {
		o := Options{Mode: Eager, Faults: Faults{Crash: true}, Replicas: 3}
		if seed%2 == 1 {
			o.Mode = Spec
		}
		if r := Run(seed, o); r.Failed() {
			t.Fatalf("seed %d fails without a planted bug: %v", seed, r.Errs)
		}
		o.plant = bugDurableOnOneBackup
		r := Run(seed, o)
		if !r.planted {
			continue
		}
		struck++
		for _, e := range r.Errs {
			if strings.Contains(e, "invariant 1") || strings.Contains(e, "completion") {
				caught++
				t.Logf("%s seed %d: %s", o.Mode, seed, e)
				break
			}
		}
	}
	t.Logf("the planted bug struck in %d seeds and was caught in %d", struck, caught)
	if caught < want {
		t.Errorf("the planted bug struck in %d seeds and was caught in %d of the first %d, want %d", struck, caught, seeds, want)
	}
}

// TestPlantedRejoinBehindIsCaught plants a storage server that asks to
// rejoin its copy's shard without catching up, saying it holds what the
// configuration's replica holds: the leader's and the control state's
// checks take its word, and the rejoin check must say, each time the
// configuration takes such a copy back, that it was added back without
// the entries the cuts ordered. A lie that no configuration took up (the
// leader refused it as the configuration moved on, the proposal was lost,
// or the copy crashed before the join applied) added nobody back and is
// not a strike. The seeds that struck pass without the bug.
func TestPlantedRejoinBehindIsCaught(t *testing.T) {
	t.Parallel()
	const seeds, want = 40, 3
	struck := 0
	for seed := uint64(0); seed < seeds; seed++ {
		o := Options{Mode: Eager, Faults: AllFaults(), plant: bugRejoinBehind}
		r := Run(seed, o)
		caught := uint64(0)
		for _, e := range r.Errs {
			if strings.Contains(e, "was added back to the configuration holding") {
				caught++
			}
		}
		if r.rejoinsBehind == 0 {
			continue
		}
		struck++
		if caught < r.rejoinsBehind && len(r.Errs) < errorsMax {
			t.Errorf("seed %d: %d copies were added back behind, the rejoin check caught %d: %v", seed, r.rejoinsBehind, caught, r.Errs)
		}
		o.plant = noBug
		if r := Run(seed, o); r.Failed() {
			t.Fatalf("seed %d fails without a planted bug: %v", seed, r.Errs)
		}
	}
	t.Logf("copies were added back behind in %d of %d seeds", struck, seeds)
	if struck < want {
		t.Errorf("copies were added back behind in only %d of %d seeds, want %d", struck, seeds, want)
	}
}

// TestPlantedSpecJoinUnvouchedIsCaught plants, in speculative seeds where
// a copy rejoins its shard, a leader that confirms the joined copy with
// its Join instead of waiting for its primary to vouch that the copy holds
// everything the primary acknowledged. Where the primary then dies
// before it resent what the copy lacks, the copy takes over without
// acknowledged appends, and the invariant checks must say so. The same
// seeds pass without the bug.
func TestPlantedSpecJoinUnvouchedIsCaught(t *testing.T) {
	t.Parallel()
	const want = 2
	found := 0
	try := func(seed uint64) {
		o := Options{Mode: Spec, Faults: AllFaults()}
		r := Run(seed, o)
		if r.Rejoins == 0 || r.PrimaryDeathsOnJoin == 0 {
			return
		}
		if r.Failed() {
			t.Fatalf("seed %d fails without a planted bug: %v", seed, r.Errs)
		}
		o.plant = bugSpecJoinUnvouched
		if r = Run(seed, o); r.planted && r.Failed() {
			found++
			t.Logf("seed %d: %s", seed, r.Errs[0])
		}
	}
	// The plant strikes in most seeds with a rejoin, but the primary
	// dies at the moment that shows it in few: two to four of the first
	// 1600 (168 and 540 as of the eager fallback; 168 and 1566 once half
	// the durable seeds ran group commit; 805 and 1566 now). Those found
	// last go first, so the test sweeps (two minutes here) only once a
	// change to the simulator moved them.
	known := []uint64{805, 1566}
	for _, seed := range known {
		try(seed)
	}
	for seed := uint64(0); seed < 1600 && found < want; seed++ {
		if !slices.Contains(known, seed) {
			try(seed)
		}
	}
	if found < want {
		t.Errorf("the checks caught a copy confirmed without its primary's word in only %d seeds, want %d", found, want)
	}
}

// TestPlantedGuessBetweenWindowsIsCaught plants, in the leader's eager
// fallback, a speculative feed that guesses positions for entries no cut
// placed yet (bugGuessBetweenWindows): between windows only the eager
// cuts place entries, so a guess delivers records at positions the cuts
// give others, and the run must fail. A guess is right where the next
// cut holds that shard's entries alone, so one struck seed may pass. The
// seeds fall back (their scenario's eager cuts above the default or 0.01
// fills per record) and pass without the plant.
func TestPlantedGuessBetweenWindowsIsCaught(t *testing.T) {
	t.Parallel()
	struck, caught := 0, 0
	for _, seed := range []uint64{0, 1, 3, 4, 5} {
		if r := Run(seed, Options{Mode: Spec}); r.Failed() || r.EagerCuts == 0 {
			t.Fatalf("seed %d: fails without the plant, or made no eager cut (%d): %v", seed, r.EagerCuts, r.Errs)
		}
		r := Run(seed, Options{Mode: Spec, plant: bugGuessBetweenWindows})
		if !r.planted {
			continue
		}
		struck++
		if r.Failed() {
			caught++
			t.Logf("seed %d: %s", seed, r.Errs[0])
		}
	}
	if struck < 4 || caught < struck-1 {
		t.Errorf("the planted guess struck in %d seeds and was caught in %d", struck, caught)
	}
}
