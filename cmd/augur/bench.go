package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/augur-log/augur/internal/bench"
	"github.com/augur-log/augur/internal/config"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench WORKLOAD",
		Short: "Run a benchmark workload and print one JSON object",
		Long: `Run a benchmark workload against an embedded cluster (or, where the workload
allows, a running one named by --cluster FILE) and print its result as one
JSON object on stdout.

Workloads: append, idle.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("name a workload: one of %s", strings.Join(bench.Names(), ", "))
			}
			_, err := bench.Lookup(args[0])
			if err != nil {
				return err
			}
			return fmt.Errorf("workload %q has no command here", args[0])
		},
	}
	cmd.AddCommand(newBenchAppendCmd(), newBenchIdleCmd())
	return cmd
}

// benchCommon are the flags every workload shares.
type benchCommon struct {
	p           bench.Params
	clusterPath string
	cpuProfile  string
}

func (b *benchCommon) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.IntVar(&b.p.Shards, "shards", 2, "embedded cluster: storage groups (one shard each)")
	fs.IntVar(&b.p.Replicas, "replicas", 2, "embedded cluster: storage servers per group")
	fs.DurationVar(&b.p.OrderingInterval, "ordering-interval", config.DefaultOrderingInterval, "embedded cluster: cut interval")
	fs.DurationVar(&b.p.Duration, "duration", 10*time.Second, "measured window")
	fs.DurationVar(&b.p.Warmup, "warmup", 2*time.Second, "unmeasured time before the window")
	fs.StringVar(&b.p.Fsync, "fsync", "", "embedded cluster: storage fsync policy (never, interval, always; default interval)")
	fs.StringVar(&b.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the whole run to this file")
}

// registerCluster adds --cluster FILE (and its alias --config).
func (b *benchCommon) registerCluster(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&b.clusterPath, "cluster", "", "cluster file of a running cluster to target instead of an embedded one")
	fs.StringVar(&b.clusterPath, "config", "", "same as --cluster")
}

// run checks the flags, then runs workload and prints its result.
func (b *benchCommon) run(cmd *cobra.Command, workload string) error {
	if b.clusterPath != "" {
		for _, f := range []string{"shards", "replicas", "ordering-interval", "fsync"} {
			if cmd.Flags().Changed(f) {
				return fmt.Errorf("--%s shapes the embedded cluster; with --cluster the cluster file decides", f)
			}
		}
		if cmd.Flags().Changed("cluster") && cmd.Flags().Changed("config") {
			return errors.New("give --cluster or --config, not both")
		}
		c, err := config.Load(b.clusterPath)
		if err != nil {
			return err
		}
		b.p.Cluster = c
	}
	b.p.Logger = slog.Default()
	// Check before anything starts: bench.Run checks again, but a bad flag
	// should not even start an embedded cluster.
	if _, err := bench.Check(workload, b.p); err != nil {
		return err
	}
	if b.cpuProfile != "" {
		f, err := os.Create(b.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	r, err := bench.Run(cmd.Context(), workload, b.p)
	if err != nil {
		if interrupted(cmd.Context(), err) {
			return errors.New("interrupted")
		}
		return err
	}
	return r.WriteJSON(cmd.OutOrStdout())
}

func newBenchAppendCmd() *cobra.Command {
	var b benchCommon
	cmd := &cobra.Command{
		Use:   "append",
		Short: "Append through the SDK and report throughput, append latency and CPU",
		Long: `Drive appends through the SDK from --clients clients, open loop at --rate
appends/s in total, or closed loop (--rate 0) with --inflight appends in
flight per client, and print one JSON object:

  {"workload":"append","mode":"eager","shards","replicas","record_bytes","rate",
   "clients","duration_s","throughput_rps","append_latency_us":{"mean","p50",
   "p90","p99","p999","max"},"cpu_seconds"}

Latency runs from an append's start (in open loop, the time it was due) to its
acknowledgement; cpu_seconds is this process's user+system time over the
measured window (the servers' too when the cluster is embedded).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return b.run(cmd, "append") },
	}
	b.register(cmd)
	b.registerCluster(cmd)
	fs := cmd.Flags()
	fs.IntVar(&b.p.RecordBytes, "record-bytes", 4096, "payload bytes per record")
	fs.IntVar(&b.p.Rate, "rate", 0, "offered appends/s over all clients (0: closed loop)")
	fs.IntVar(&b.p.Clients, "clients", 4, "SDK clients driving the load")
	fs.IntVar(&b.p.Inflight, "inflight", 1, "closed loop: appends in flight per client")
	return cmd
}

func newBenchIdleCmd() *cobra.Command {
	var b benchCommon
	cmd := &cobra.Command{
		Use:   "idle",
		Short: "Let an embedded cluster sit idle and report its CPU use",
		Long: `Start an embedded cluster, wait --warmup, then measure this process's CPU
time over --duration of idleness and print
{"workload":"idle","cpu_percent_of_one_core",...}.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return b.run(cmd, "idle") },
	}
	b.register(cmd)
	return cmd
}
