// Package order is the ordering leader's protocol core: what to propose
// through Raft, which shards to tell to catch up, which shards to take for
// failed, and when to look again. It is pure: committed control state,
// storage reports and the current time come in as arguments; proposals,
// lag-fixes and wake-ups go out. The ordering server only moves bytes, runs
// the timers and proposes what a Leader says; the simulator drives the very
// same Leader.
//
// A Leader composes one mode's Policy (Eager cuts from reported lengths,
// Spec releases of fix-ante windows) with what every mode shares: the
// failure Detector and the Inflight tracker of cut proposals.
package order

import (
	"time"

	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
)

// Bounds.
const (
	// cutsInflightMax is how many eager cut proposals may await commit at
	// once, so that a cut every ordering interval keeps going while a slow
	// Raft round commits the one before.
	cutsInflightMax = 3
	// releasesInflightMax is how many speculative releases may await
	// commit at once. Releases are idempotent and each reaches further
	// than the last, so they pipeline through Raft: a cut satisfied while
	// one is in flight need not wait for its commit.
	releasesInflightMax = 4
	// windowsInflightMax is how many window announcements may await
	// commit at once: one, as the next window is planned on the state the
	// last one left.
	windowsInflightMax = 1
	// proposalStaleAfter frees an in-flight slot whose proposal Raft
	// dropped without a word (a leader change in between, a lost entry).
	proposalStaleAfter = 200 * time.Millisecond
)

// Report is one shard's report, sent by its primary on the heartbeat
// stream.
type Report struct {
	Shard cut.ShardID
	// Epoch is the shard configuration its primary reports in.
	Epoch uint64
	// Length is how many entries every replica of the shard holds.
	Length uint64
	// Records is how many of them are real records (not no-ops).
	Records uint64
	// Backlog is how many entries the primary holds beyond Length.
	Backlog uint64
}

// Policy is one ordering mode's leader policy: it turns the committed state
// and the shards' reports into proposals. It is soft state: a new leader
// starts a fresh one and learns everything again from the committed state
// and the next reports. A Leader calls every method under one lock, with
// times that never go backwards.
type Policy interface {
	// Observe takes the control state once when the leader starts, after
	// every applied command (accepted or refused) and after a restored
	// snapshot. The policy may keep st and read it until the next
	// Observe; it never changes it.
	Observe(st *control.State, now time.Time)
	// Report takes one shard's report and says whether Step may now have
	// something new to propose (the caller then steps without waiting for
	// the wake-up Step asked for).
	Report(r Report, now time.Time) (news bool)
	// Step decides what to propose at now. free is how many more cut
	// commands may go in flight: the policy proposes at most that many.
	// Every Cut it proposes is in flight until Committed or Forget.
	Step(now time.Time, free int) Plan
	// CutsInflightMax is how many of the policy's cut commands may await
	// commit at once.
	CutsInflightMax() int
	// Committed says that the policy's own proposal cmd was applied,
	// whether the state accepted it or refused it, and returns whether
	// Step may now propose something it could not before.
	Committed(cmd control.Command) (news bool)
	// Forget says that the cuts in flight may never commit (one failed to
	// propose, or none committed for proposalStaleAfter): whatever they
	// carried must be proposed again.
	Forget()
}

// Plan is what a Policy's Step decided.
type Plan struct {
	// Propose lists the commands to propose, in this order.
	Propose []control.Command
	// LagFixes are the lengths shards must reach now.
	LagFixes []cut.Length
	// Suspects are shards whose primary the policy takes for failed.
	Suspects []cut.ShardID
	// Stats counts what the policy did since the last Step.
	Stats Stats
	// Wake is how soon to step again if nothing else happens; 0: only on
	// news.
	Wake time.Duration
}

// Stats counts a policy's mechanisms for the metrics; a policy without
// one leaves its count zero.
type Stats struct {
	// LagFixes counts lag-fixes started (not repeated ones).
	LagFixes uint64
	// QuotaChanges counts shard quotas changed between windows.
	QuotaChanges uint64
}
