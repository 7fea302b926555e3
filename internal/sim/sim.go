// Package sim is the seeded whole-cluster simulator: three ordering
// replicas (etcd raft RawNodes, driven deterministically, with leader
// failovers, crashes and restarts from their persisted storage) whose
// leader runs the order.Leader core the ordering server runs; shards of
// two or three storage servers each, a primary and its backups, running
// the storage server's replica core (shard.Replica) over in-memory logs
// (shard.MemLog) that lose what was not synced, and sometimes tear the
// write in flight, when their server crashes; shards that join, leave,
// burst, straggle, fail, crash and get cut off; clients that append and
// retry, answered only by the cores; and subscribers that merge the
// shards' streams with the client's mergers. Every per-mode part comes
// from the cluster's mode.Mode. All of it runs in one goroutine on a
// simulated clock and network, driven by one seed. Each run ends with the
// invariant checkers of package check over its history; a failing seed
// replays exactly.
//
// A run has a safety phase with faults until the scenario's heal time and
// a heal phase that must converge: every append ordered and delivered, no
// speculation pending.
package sim

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Mode is an ordering mode the simulator runs.
type Mode string

const (
	// Eager is Scalog's order: cuts of the lengths shards report.
	Eager Mode = "eager"
	// Spec is speculative (fix-ante) order: predetermined cuts of lease
	// windows, speculative delivery, view changes on whole-shard failure.
	Spec Mode = "spec"
)

// Modes lists every mode the simulator runs.
func Modes() []Mode { return []Mode{Eager, Spec, Lazy} }

// ParseMode returns the mode named s.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes() {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("sim: unknown mode %q (want eager, spec or lazy)", s)
}

// Faults selects the network faults the scenario generator may inject;
// shard failures, stragglers, leaves and leader failovers are part of
// every scenario.
type Faults struct {
	// Delay makes delay spikes on every link more frequent (some seeds
	// delay one message in 20 by up to 3 ms, rather than one in 100).
	Delay bool
	// Reorder widens every delay, so messages on different streams (a
	// shard's watch and lag-fix streams, reports and control events)
	// overtake each other; each stream stays FIFO, as gRPC streams are.
	Reorder bool
	// Loss drops and repeats messages on the lossy channels: lag-fixes,
	// reports and heartbeats, status polls; subscription streams
	// reconnect and repeat what they sent.
	Loss bool
	// Partition cuts shards off from the ordering leader for a while
	// during the safety phase, both ways or one way only.
	Partition bool
	// Crash crashes and restarts storage servers (a log keeps only what
	// was synced, and maybe part of the write in flight) and ordering
	// replicas (a minority at a time), during the safety phase.
	Crash bool
	// Pause stops storage servers without a crash, mostly for longer
	// than the failure timeout, and runs them again on their stale state
	// (eager and speculative order; see pause.go).
	Pause bool
}

// AllFaults enables every fault.
func AllFaults() Faults {
	return Faults{Delay: true, Reorder: true, Loss: true, Partition: true, Crash: true, Pause: true}
}

// ParseFaults reads a comma-separated list of delay, reorder, loss,
// partition, crash, pause, or "all" or "none".
func ParseFaults(s string) (Faults, error) {
	var f Faults
	for _, w := range strings.Split(s, ",") {
		switch strings.TrimSpace(w) {
		case "all":
			f = AllFaults()
		case "none", "":
		case "delay":
			f.Delay = true
		case "reorder":
			f.Reorder = true
		case "loss":
			f.Loss = true
		case "partition":
			f.Partition = true
		case "crash":
			f.Crash = true
		case "pause":
			f.Pause = true
		default:
			return Faults{}, fmt.Errorf("sim: unknown fault %q (want delay, reorder, loss, partition, crash, pause, all or none)", w)
		}
	}
	return f, nil
}

func (f Faults) String() string {
	var on []string
	for _, x := range []struct {
		on   bool
		name string
	}{{f.Delay, "delay"}, {f.Reorder, "reorder"}, {f.Loss, "loss"}, {f.Partition, "partition"}, {f.Crash, "crash"}, {f.Pause, "pause"}} {
		if x.on {
			on = append(on, x.name)
		}
	}
	switch len(on) {
	case 0:
		return "none"
	case 6:
		return "all"
	}
	return strings.Join(on, ",")
}

// Options configure runs.
type Options struct {
	Mode   Mode
	Faults Faults
	// Replicas is how many storage servers each shard has, 2 or 3 (the
	// group sizes of a cluster file); 0 lets the seed choose: even seeds
	// run 2, odd ones 3.
	Replicas int
	// Trace, when set, receives every step of the run.
	Trace func(string)
	// plant makes the run misbehave on purpose, so that the tests show
	// the checks catch it.
	plant bug
	// powerLoss fails the power of a shard's servers as the first cut
	// after 50 ms that orders its entries commits, before they hear of it
	// (with the durable default): what bugSkipSync loses, and a correct
	// run keeps.
	powerLoss bool
	// syncOptOut runs the storage servers under the opt-out fsync
	// policy (fsync: interval, an entry held once written) instead of the
	// durable default; with powerLoss, a run may then lose acknowledged
	// appends, as the README says the opt-out risks.
	syncOptOut bool
	// groupCommit runs the storage servers under group commit, the
	// configuration's default, whatever the seed chose.
	groupCommit bool
	// raftPowerLoss fails the power of every ordering replica at once as
	// the first cut after 50 ms commits halfway or later between two of
	// the opt-out's writebacks; raftSyncOptOut runs them under
	// the raft_fsync opt-out (the WAL reaches the disk only by the
	// kernel's writeback, every raftWritebackEvery), under which that can
	// lose committed cuts.
	raftPowerLoss, raftSyncOptOut bool
}

// optOutSyncEvery is the fsync interval of Options.syncOptOut: the
// default fsync_interval of a cluster file.
const optOutSyncEvery = 10 * time.Millisecond

// bug is a mistake a test plants in a run.
type bug int

const (
	noBug bug = iota
	// bugSwap: a shard streams two of its records in each other's place.
	bugSwap
	// bugDrop: a shard streams one of its records as a no-op.
	bugDrop
	// bugRetryTwice: a client retries an append that was ordered, and a
	// shard stores it again.
	bugRetryTwice
	// bugRevise: a subscriber fails a position it had confirmed.
	bugRevise
	// bugEarlyAck: a shard answers an append as soon as it stores it, at
	// the position it will get, before the cut that orders it commits.
	bugEarlyAck
	// bugSkipSync: the storage servers carry out their cores' outputs
	// (acknowledge, report, answer) without the fsync the durable default
	// demands first; the run loses power on a whole shard's servers
	// (Options.powerLoss).
	bugSkipSync
	// bugApplyTwice: a player's target applies an entry twice.
	bugApplyTwice
	// bugTargetStalls: a player's target drops, unanswered, every batch
	// with a record that reaches it from 50 ms before the appends stop:
	// the player waits for it for good, which the run's drain must not
	// hide.
	bugTargetStalls
	// bugFinalizeOnReplicaFailure: the crash of one server of a shard
	// finalizes the shard, though the other holds everything durable (the
	// behaviour before shards failed over).
	bugFinalizeOnReplicaFailure
	// bugCopyUnchecked: a catch-up's source serves a record it read
	// without checking its frame (altered, with a checksum that matches
	// the altered bytes), and the repaired copy stores it.
	bugCopyUnchecked
	// bugLazyAckEarly: a lazy client returns once one sequencing replica
	// (not every one) holds the metadata.
	bugLazyAckEarly
	// bugLazyEarlyStable: the lazy orderer advances stable-gp once the
	// shards hold a batch, before every sequencing replica collected it
	// (the incorrect protocol of the paper's §4.5).
	bugLazyEarlyStable
	// bugLazyReadAhead: a lazy shard replica answers a read above
	// stable-gp from the placement it holds, rather than holding it.
	bugLazyReadAhead
	// bugDurableOnOneBackup: a primary counts an entry durable once one
	// of its backups holds it, not every one (with two servers per shard
	// the same thing): the crash of the primary and that backup loses
	// what the third never got, though the cuts ordered it.
	bugDurableOnOneBackup
	// bugLazyOutStaysIn: a lazy shard primary taken out of its
	// configuration does not leave it: it follows stable-gp over the
	// placements the promoted backup's order replaced.
	bugLazyOutStaysIn
	// bugLazyTrustProposal: the lazy control plane's shell takes its own
	// claims and records for committed, so a deposed ordering leader
	// seals, flushes, advances stable-gp and starts a view it never
	// recorded.
	bugLazyTrustProposal
	// bugLazyStableBeforeRecord: the lazy control plane advances
	// stable-gp to a view change's flush as it proposes the new
	// configuration, before Raft recorded it.
	bugLazyStableBeforeRecord
	// bugLazyJoinerCounts: a lazy shard replica that rejoins counts as
	// soon as it joins, before it caught up under its primary.
	bugLazyJoinerCounts
	// bugLazyNoDataFence: a lazy shard replica takes data a client sent
	// to an older configuration of the shard (one without a replica that
	// joined since).
	bugLazyNoDataFence
	// bugLazyMapFinalized: the lazy orderer takes a finalized shard for
	// one that may still grow: it maps every batch to it and waits for
	// its acknowledgement, which never comes once every replica is gone.
	bugLazyMapFinalized
	// bugTrustReplacedTail: a storage server does not tell a copy it
	// restarted with that a configuration left it out, so the copy
	// orders a tail its shard never made durable, which the new primary
	// replaced.
	bugTrustReplacedTail
	// bugAckOnlySynced: under group commit a backup acknowledges only
	// the raises of its durable length that a fsync's notice makes, not
	// one a replicated batch makes when a fsync ended before its notice
	// (the storage server's lost acknowledgement, which hung appends
	// until a later write).
	bugAckOnlySynced
	// bugBackupSkipsSync: a backup acknowledges what it wrote without
	// the fsync the durable default demands first (the primary fsyncs as
	// it should).
	bugBackupSkipsSync
	// bugRejoinBehind: a storage server asks to rejoin its copy's shard
	// without catching up, saying it holds what the configuration's
	// replica holds.
	bugRejoinBehind
	// bugSpecJoinUnvouched: in speculative order the leader confirms a
	// joined replica together with its Join, without waiting for its
	// primary to vouch that it holds everything acknowledged.
	bugSpecJoinUnvouched
	// bugGuessBetweenWindows: between windows (the leader's eager
	// fallback) a speculative feed streams the durable entries no cut
	// placed yet at a guessed position: right after the last cut it
	// knows, as if the next eager cut held its shard alone.
	bugGuessBetweenWindows
)

// Result is the outcome of one seed.
type Result struct {
	Seed   uint64
	Mode   Mode
	Faults Faults
	// Replicas is how many storage servers each shard had.
	Replicas int
	// Scenario says what the seed chose; Summary what happened.
	Scenario, Summary string
	// Errs lists the violations found (at most errorsMax).
	Errs []string
	// ShardFailed says the scenario failed a whole shard, SoleHolder
	// while it held the newest window's only quota; Fails counts the
	// Fail events subscribers saw.
	ShardFailed, SoleHolder bool
	Fails                   uint64
	Steps                   uint64
	// Adopted says a shard that registered took over a failed shard's
	// slots that no live shard filled (every other shard was leaving or
	// failed).
	Adopted bool
	// Crashes counts the storage servers that crashed, LostTails those
	// whose logs lost unsynced writes in the crash, RaftCrashes the
	// ordering replicas that crashed.
	Crashes, LostTails, RaftCrashes uint64
	// Failovers counts the shards that moved to a new primary; Joins the
	// backups that joined a new configuration of their shard (a shard
	// of three that lost one server), PairCrashes the crashes of two
	// servers of a shard of three at once.
	Failovers, Joins, PairCrashes uint64
	// Damaged counts the storage servers that restarted with a damaged
	// file, Repairs the ranges repaired from the other copy, and
	// SourceDeaths the repairs whose source died mid-copy.
	Damaged, Repairs, SourceDeaths uint64
	// Rejoins counts the copies taken back into their shard's
	// configuration after catching up, and PrimaryDeathsOnJoin the
	// primaries crashed as a copy was taken back in.
	Rejoins, PrimaryDeathsOnJoin uint64
	// Pauses counts the storage servers paused without a crash.
	Pauses uint64
	// GroupCommit says the storage servers ran group commit;
	// RaisedInReplicated counts the backups' durable lengths a replicated
	// batch raised (a fsync ended before its notice reached the core).
	GroupCommit        bool
	RaisedInReplicated uint64
	// ShardsAdded counts the shards a lazy run added mid-run.
	ShardsAdded uint64
	// EagerCuts counts the cuts a speculative cluster made between
	// windows (its leader's eager fallback).
	EagerCuts uint64
	// Player says the seed ran the exactly-once player; TargetCrashes and
	// PlayerRestarts count its faults.
	Player                        bool
	TargetCrashes, PlayerRestarts uint64
	// SeqCrashes, LeaderCrashes and ClientCrashes count a lazy run's
	// crashes of sequencing replicas (leaders among them) and clients;
	// Views its view changes, Noops the no-ops its shards bound, RingFull
	// the appends a full sequencing ring pushed back.
	SeqCrashes, LeaderCrashes, ClientCrashes, Views, Noops, RingFull uint64
	// CutOffLeaders counts a lazy run's ordering leaders cut off from the
	// other ordering replicas (RaftCrashes its ordering replicas'
	// crashes).
	CutOffLeaders uint64
	// planted says the bug a test planted struck; rejoinsBehind counts
	// the copies taken back that asked behind (bugRejoinBehind).
	planted       bool
	rejoinsBehind uint64
}

// Failed reports whether the run found a violation.
func (r Result) Failed() bool { return len(r.Errs) > 0 }

// Replay returns the one command that replays this seed with a trace.
func (r Result) Replay() string {
	return fmt.Sprintf("go run ./cmd/augur sim --mode %s --faults %s --replicas %d --seed %d --trace", r.Mode, r.Faults, r.Replicas, r.Seed)
}

// replicasOf is how many storage servers each shard of seed's run has.
func replicasOf(seed uint64, o Options) int {
	if o.Replicas != 0 {
		return o.Replicas
	}
	return copiesMin + int(seed%2)
}

// CheckReplicas checks a shard size given to Options.Replicas in mode m.
func CheckReplicas(m Mode, n int) error {
	switch {
	case n != 0 && (n < copiesMin || n > copiesMax):
		return fmt.Errorf("sim: %d servers per shard; a storage group has %d or %d", n, copiesMin, copiesMax)
	}
	return nil
}

// Run runs one seed.
func Run(seed uint64, o Options) Result {
	if o.Mode == "" {
		o.Mode = Spec
	}
	if err := CheckReplicas(o.Mode, o.Replicas); err != nil {
		panic(err)
	}
	if o.Mode == Lazy {
		return runLazy(seed, o)
	}
	s := newCluster(seed, o.Mode, o.Faults, replicasOf(seed, o), o.Trace, o.plant)
	if s.powerLoss = o.powerLoss || o.plant == bugSkipSync; s.powerLoss {
		s.sc.sync = syncAlways // the durable default, which survives it
	}
	if o.plant == bugBackupSkipsSync {
		s.sc.sync = syncAlways // the setting whose promise it breaks
	}
	s.raftPowerLoss, s.raftSyncOptOut = o.raftPowerLoss, o.raftSyncOptOut
	if o.raftSyncOptOut {
		s.after(raftWritebackEvery, s.ld.writeback)
	}
	if o.syncOptOut {
		s.sc.sync, s.sc.syncEvery = syncInterval, optOutSyncEvery
	}
	if o.groupCommit || o.plant == bugAckOnlySynced {
		s.sc.sync = syncGroup
	}
	s.run(s.start.Add(s.sc.runFor))
	s.verify()
	if s.player != nil && len(s.errs) == 0 {
		// The cluster's checks hold at the end of the run; the player
		// may take longer to drain.
		s.player.drain()
		s.player.verify()
	}
	res := Result{
		Seed: seed, Mode: o.Mode, Faults: o.Faults, Replicas: s.sc.replicas, Joins: s.stats.joins, PairCrashes: s.stats.pairCrashes,
		Scenario: s.sc.String(), Summary: s.summary(), Errs: s.errs,
		ShardFailed: s.failed != nil, SoleHolder: s.failedSoleHolder, Fails: s.stats.fails, Steps: s.steps,
		Adopted: s.adopted, Crashes: s.stats.crashes, LostTails: s.stats.lostTails, RaftCrashes: s.stats.raftCrashes, Failovers: s.stats.failovers,
		Damaged: s.stats.damaged, Repairs: s.stats.repairs, SourceDeaths: s.stats.sourceDeaths, Rejoins: s.stats.rejoins, PrimaryDeathsOnJoin: s.stats.primaryDeathsOnJoin,
		Pauses: s.stats.pauses, GroupCommit: s.sc.sync == syncGroup, RaisedInReplicated: s.stats.raisedInReplicated,
		planted: s.planted, rejoinsBehind: s.stats.rejoinsBehind, EagerCuts: s.stats.eagerCuts,
	}
	if p := s.player; p != nil {
		res.Player, res.TargetCrashes, res.PlayerRestarts = true, p.stats.targetCrashes, p.stats.restarts
	}
	return res
}

// RunSeeds runs seeds first, first+1, ... first+n-1 on every processor
// and returns their results in seed order. o.Trace is ignored.
func RunSeeds(o Options, first uint64, n int) []Result {
	o.Trace = nil
	results := make([]Result, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = Run(first+uint64(i), o)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}

// Tally sums up the results of many seeds.
type Tally struct {
	Seeds, Failing          int
	ShardFailed, SoleHolder int
	// Adopted counts the runs of Result.Adopted.
	Adopted      int
	Fails, Steps uint64
	// Crashes, LostTails, RaftCrashes and Failovers sum the results'; so
	// do Damaged, Repairs and SourceDeaths, and Joins and PairCrashes.
	// ThreeServers counts the seeds whose shards had three servers.
	Crashes, LostTails, RaftCrashes, Failovers uint64
	Joins, PairCrashes                         uint64
	ThreeServers                               int
	Damaged, Repairs, SourceDeaths             uint64
	Rejoins, PrimaryDeathsOnJoin, Pauses       uint64
	// GroupSeeds counts the seeds that ran group commit;
	// RaisedInReplicated sums the results'.
	GroupSeeds         int
	RaisedInReplicated uint64
	// EagerCuts sums the results'; EagerSeeds counts the seeds with any.
	EagerCuts  uint64
	EagerSeeds int
	// Player counts the seeds that ran the player; TargetCrashes and
	// PlayerRestarts sum their faults.
	Player                        int
	TargetCrashes, PlayerRestarts uint64
	// SeqCrashes, LeaderCrashes, ClientCrashes, Views and Noops sum a
	// lazy run's, and RingFull.
	SeqCrashes, LeaderCrashes, ClientCrashes, Views, Noops, RingFull uint64
	CutOffLeaders                                                    uint64
	// ShardsAdded sums the lazy runs'.
	ShardsAdded uint64
	// Lazy counts the seeds of lazy order, whose tally reads differently.
	Lazy int
	// FailingSeeds lists the failing seeds, lowest first.
	FailingSeeds []uint64
}

// Count sums rs up.
func Count(rs []Result) Tally {
	var t Tally
	for _, r := range rs {
		t.Seeds++
		t.Steps += r.Steps
		t.Fails += r.Fails
		t.Crashes += r.Crashes
		t.LostTails += r.LostTails
		t.RaftCrashes += r.RaftCrashes
		t.Failovers += r.Failovers
		t.Joins += r.Joins
		t.PairCrashes += r.PairCrashes
		if r.Replicas == 3 {
			t.ThreeServers++
		}
		t.Damaged += r.Damaged
		t.Repairs += r.Repairs
		t.SourceDeaths += r.SourceDeaths
		t.Rejoins += r.Rejoins
		t.EagerCuts += r.EagerCuts
		if r.EagerCuts > 0 {
			t.EagerSeeds++
		}
		t.PrimaryDeathsOnJoin += r.PrimaryDeathsOnJoin
		t.Pauses += r.Pauses
		if r.GroupCommit {
			t.GroupSeeds++
		}
		t.RaisedInReplicated += r.RaisedInReplicated
		t.SeqCrashes += r.SeqCrashes
		t.LeaderCrashes += r.LeaderCrashes
		t.ClientCrashes += r.ClientCrashes
		t.Views += r.Views
		t.Noops += r.Noops
		t.RingFull += r.RingFull
		t.ShardsAdded += r.ShardsAdded
		t.CutOffLeaders += r.CutOffLeaders
		if r.Mode == Lazy {
			t.Lazy++
		}
		if r.ShardFailed {
			t.ShardFailed++
		}
		if r.SoleHolder {
			t.SoleHolder++
		}
		if r.Adopted {
			t.Adopted++
		}
		if r.Player {
			t.Player++
			t.TargetCrashes += r.TargetCrashes
			t.PlayerRestarts += r.PlayerRestarts
		}
		if r.Failed() {
			t.Failing++
			t.FailingSeeds = append(t.FailingSeeds, r.Seed)
		}
	}
	slices.Sort(t.FailingSeeds)
	return t
}

func (t Tally) String() string {
	if t.Lazy > 0 {
		return fmt.Sprintf("%d seeds (%d with 3 servers per shard), %d failing, %d steps; %d sequencing replica crashes (%d leaders), %d view changes, %d shard replica crashes (%d primaries failed over; %d rejoins, %d copies lost their source mid-copy, %d primaries died as a replica rejoined), %d client crashes, %d no-ops, %d appends pushed back by a full ring; %d ordering replica crashes, %d ordering leaders cut off; %d shards added, %d shards whose every replica died",
			t.Seeds, t.ThreeServers, t.Failing, t.Steps, t.SeqCrashes, t.LeaderCrashes, t.Views, t.Crashes, t.Failovers, t.Rejoins, t.SourceDeaths, t.PrimaryDeathsOnJoin, t.ClientCrashes, t.Noops, t.RingFull, t.RaftCrashes, t.CutOffLeaders, t.ShardsAdded, t.ShardFailed)
	}
	return fmt.Sprintf("%d seeds (%d with 3 servers per shard), %d failing; %d with a whole-shard failure (%d of the sole quota holder), %d whose void slots a later shard adopted, %d Fail events, %d steps; %d storage server crashes (%d lost unsynced writes, %d of two servers of three at once; %d failovers, %d backups joined a new configuration; %d restarted with a damaged file: %d ranges repaired, %d catch-ups lost their source mid-copy; %d rejoins, %d primaries died as a copy rejoined), %d storage servers paused, %d ordering replica crashes; %d with a player (%d target crashes, %d player restarts); %d eager cuts between windows in %d seeds; %d seeds with group commit (%d acknowledgements raised inside Replicated)",
		t.Seeds, t.ThreeServers, t.Failing, t.ShardFailed, t.SoleHolder, t.Adopted, t.Fails, t.Steps, t.Crashes, t.LostTails, t.PairCrashes, t.Failovers, t.Joins, t.Damaged, t.Repairs, t.SourceDeaths, t.Rejoins, t.PrimaryDeathsOnJoin, t.Pauses, t.RaftCrashes, t.Player, t.TargetCrashes, t.PlayerRestarts, t.EagerCuts, t.EagerSeeds, t.GroupSeeds, t.RaisedInReplicated)
}

func (s *cluster) summary() string {
	st := s.stats
	var lead time.Duration
	var leadN uint64
	for _, sb := range s.subs {
		sum, n := sb.specLead()
		lead += sum
		leadN += n
	}
	if leadN > 0 {
		lead /= time.Duration(leadN)
	}
	var player string
	if s.player != nil {
		player = s.player.summary()
	}
	return fmt.Sprintf("%d steps, %d cuts (%d proposals), %d windows planned; %d records, %d no-ops in %d runs (%.1f%% of entries); "+
		"%d reports (%d lost), %d lag-fixes started (%d messages, %d lost), %d quota changes (largest quota %d); %d views, %d reroutes; "+
		"%d deliveries (%d speculative, mean %v before confirmation), %d fails, %d stream repeats, %d status polls lost",
		s.steps, s.cutCount, st.proposals, st.windows, st.records, st.noops, st.noopRuns, 100*float64(st.noops)/float64(max(1, st.noops+st.records)),
		st.reports, st.lostReports, st.lagFixes, st.lagFixMsgs, st.lostLagFix, st.quotaChanges, st.maxQuota, len(s.views), s.reroutes,
		st.delivered, st.specDeliveries, lead, st.fails, st.dupResends, st.lostPolls) + player
}
