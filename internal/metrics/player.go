package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The player's metrics, labelled by target name.
var (
	// PlayerEntriesSent counts entries (empty ones included) written to a
	// target's stream.
	PlayerEntriesSent = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_player_entries_sent_total",
		Help: "Entries the player wrote to a target, empty entries included.",
	}, []string{"target"})
	// PlayerBatchesAcked counts batches a target acknowledged.
	PlayerBatchesAcked = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_player_batches_acked_total",
		Help: "Batches a target acknowledged as applied.",
	}, []string{"target"})
	// PlayerTargetDowns counts the times a target was suspended.
	PlayerTargetDowns = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_player_target_downs_total",
		Help: "Times the player suspended a target (disconnect, silence, full queue).",
	}, []string{"target"})
	// PlayerRecoveries counts recovery fetches started for a target.
	PlayerRecoveries = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "augur_player_recoveries_total",
		Help: "Recovery fetches the player started for a returning target.",
	}, []string{"target"})
	// PlayerLag is the main stream's current index minus the target's last
	// acknowledged index.
	PlayerLag = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "augur_player_target_lag_entries",
		Help: "Log entries between the main stream's position and the target's last applied index.",
	}, []string{"target"})
	// PlayerTargetUp is 1 while a target is connected.
	PlayerTargetUp = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "augur_player_target_up",
		Help: "1 while the player has a stream open to the target.",
	}, []string{"target"})
	// PlayerCurrentIndex is the index of the last main-stream entry
	// dispatched.
	PlayerCurrentIndex = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "augur_player_current_index",
		Help: "Index (position+1) of the last main-stream entry the player dispatched.",
	})
)
