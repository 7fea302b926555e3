package bench

import (
	"errors"
	"fmt"

	"github.com/augur-log/augur/internal/config"
)

// checkLoad checks the appenders' parameters and, when the workload has
// downstream consumers, the subscribers' and the speculative flags'.
func checkLoad(p Params, consumers bool) error {
	var errs []error
	if p.Clients < 1 || p.Clients > clientsMax {
		errs = append(errs, fmt.Errorf("clients must be in [1, %d], got %d", clientsMax, p.Clients))
	} else if err := CheckRate(p.Rate, p.Clients, p.Duration); err != nil {
		errs = append(errs, err)
	}
	if p.Rate == 0 && (p.Inflight < 1 || p.Inflight > inflightMax) {
		errs = append(errs, fmt.Errorf("inflight must be in [1, %d] in closed loop, got %d", inflightMax, p.Inflight))
	}
	recordMax := config.DefaultRecordBytesMax
	if p.Cluster != nil {
		recordMax = p.Cluster.RecordBytesMax
	}
	recordMin := 1
	if consumers {
		// Consumers read each record's start time and identity from its
		// header.
		recordMin = headerBytes
	}
	if p.RecordBytes < recordMin || p.RecordBytes > recordMax {
		errs = append(errs, fmt.Errorf("record bytes must be in [%d, %d] (the cluster's record_bytes_max), got %d", recordMin, recordMax, p.RecordBytes))
	}
	if consumers {
		if p.Subscribers < 1 || p.Subscribers > subscribersMax {
			errs = append(errs, fmt.Errorf("subscribers must be in [1, %d], got %d", subscribersMax, p.Subscribers))
		}
		if len(p.Compute) == 0 {
			errs = append(errs, errors.New("name at least one compute time (0 for none)"))
		}
		if p.Follow != FollowShards && p.Follow != FollowLog {
			errs = append(errs, fmt.Errorf("follow must be %s or %s, got %q", FollowShards, FollowLog, p.Follow))
		}
		errs = append(errs, checkSpecFlags(p))
	} else if len(p.Compute) > 0 {
		errs = append(errs, errors.New("compute applies to workloads with downstream consumers, and this one has none"))
	}
	return errors.Join(errs...)
}

// The ways a downstream task follows the log (Params.Follow).
const (
	// FollowShards gives each task one subscription per live shard
	// (client.OnShard), taking each shard's records as soon as that shard
	// delivers them, as SpecLog's downstream tasks do (§4.1). The run's
	// shards must stay the same.
	FollowShards = "shards"
	// FollowLog gives each task one subscription of the whole log, in
	// position order: a record also waits for every earlier position.
	FollowLog = "log"
)

// needFollowLog rejects FollowShards for a workload that changes the
// shards during the run.
func needFollowLog(name string, p Params) error {
	if p.Follow == FollowShards {
		return fmt.Errorf("%s changes the shards during the run, so its tasks must follow the log (--follow %s)", name, FollowLog)
	}
	return nil
}

// checkSpecFlags rejects the flags of speculative modes unless one of the
// modes is speculative.
func checkSpecFlags(p Params) error {
	var errs []error
	if len(p.Window) > 0 {
		errs = append(errs, needSpeculative("--window (the speculation lease window)", p))
	}
	if p.NoLagFix {
		errs = append(errs, needSpeculative("--no-lagfix", p))
	}
	if p.NoQuotaChange {
		errs = append(errs, needSpeculative("--no-quota-change", p))
	}
	if p.NoStagger {
		errs = append(errs, needSpeculative("--no-stagger", p))
	}
	return errors.Join(errs...)
}

// needEmbedded rejects a running cluster for a workload that needs the
// embedded one; why says what the workload does with it.
func needEmbedded(name, why string, p Params) error {
	if p.Cluster != nil {
		return fmt.Errorf("%s %s, so it needs the embedded cluster; drop --cluster", name, why)
	}
	return nil
}
