// Package metrics declares augur's Prometheus metrics. They live in the
// default registry, labelled by server id, so one process can run a whole dev
// cluster; the CLI exposes them on a cluster file's metrics_addr.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	// RecordsStored counts records written to a server's stores, as
	// primary or backup.
	RecordsStored = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_records_stored_total",
		Help: "Records written to this server's segment stores.",
	}, []string{"server"})
	// RecordsOrdered counts records that received a global position here.
	RecordsOrdered = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_records_ordered_total",
		Help: "Records given a global position by a committed cut.",
	}, []string{"server"})
	// AppendsRejected counts appends answered with an error code.
	AppendsRejected = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_appends_rejected_total",
		Help: "Appends refused (invalid, finalized shard, expired retry).",
	}, []string{"server", "code"})
	// CutsCommitted counts cuts applied by an ordering replica.
	CutsCommitted = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_cuts_committed_total",
		Help: "Global cuts applied from the Raft log.",
	}, []string{"replica"})
	// PredeterminedCuts counts the cuts, among CutsCommitted, that lease
	// windows predetermined (speculative mode); the others are eager cuts,
	// which the leader makes while fills would cost more than
	// speculation saves.
	PredeterminedCuts = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_predetermined_cuts_total",
		Help: "Global cuts applied that a lease window predetermined (speculative mode; the rest are eager cuts).",
	}, []string{"replica"})
	// CutProposals counts cuts proposed by a leader.
	CutProposals = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_cut_proposals_total",
		Help: "Cut proposals submitted to Raft while leading.",
	}, []string{"replica"})
	// ShardFailures counts shards this replica proposed to finalize as failed.
	ShardFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_shard_failures_total",
		Help: "Shard reconfigurations proposed after replica failures (one that removes every replica finalizes the shard).",
	}, []string{"replica"})
	// LagFixes counts lag-fixes a leader started (speculative mode).
	LagFixes = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_lag_fixes_total",
		Help: "Lag-fixes the ordering leader sent to lagging shards.",
	}, []string{"replica"})
	// QuotaChanges counts shard quotas a leader changed between windows.
	QuotaChanges = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_quota_changes_total",
		Help: "Per-shard quota changes announced with a new lease window.",
	}, []string{"replica"})
	// ViewChanges counts whole-shard failures applied (speculative mode).
	ViewChanges = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_view_changes_total",
		Help: "View changes applied after whole-shard failures.",
	}, []string{"replica"})
	// Noops counts no-op entries a shard primary filled.
	Noops = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_noops_total",
		Help: "No-op entries filled to meet quotas (speculative mode).",
	}, []string{"server"})
	// Leader is 1 on the ordering replica that leads.
	Leader = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "augur_ordering_leader",
		Help: "1 if this ordering replica is the Raft leader.",
	}, []string{"replica"})
	// DamagedRecords is how many stored records of a shard this storage
	// server found damaged on disk and refuses to serve until repaired.
	DamagedRecords = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "augur_damaged_records",
		Help: "Records of a shard found damaged on this storage server's disk; reads of them are refused.",
	}, []string{"server", "shard"})
	// CatchUpRemaining is how many local indexes of a shard this storage
	// server's catch-up (repair) still has to copy from a live replica.
	CatchUpRemaining = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "augur_catchup_remaining_records",
		Help: "Entries of a shard this storage server still has to copy from a live replica to repair its copy.",
	}, []string{"server", "shard"})
	// ReplicaLost is 1 while a storage server's copy of a shard missed
	// records the shard ordered, so it serves none of the shard.
	ReplicaLost = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "augur_replica_lost",
		Help: "1 if this storage server's copy of the shard missed ordered records and is not served.",
	}, []string{"server", "shard"})
	// Tail is the next global position, as this server last saw it.
	Tail = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "augur_tail_position",
		Help: "Next global position to be assigned.",
	}, []string{"server"})
)
