package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/augur-log/augur/internal/bench"
	"github.com/augur-log/augur/internal/config"
)

// benchFlagSet names the groups of flags a workload command takes.
type benchFlagSet uint

const (
	// flagsLoad: --record-bytes --rate --clients --inflight.
	flagsLoad benchFlagSet = 1 << iota
	// flagsConsumers: --subscribers --compute --window.
	flagsConsumers
	// flagsSeries: --interval.
	flagsSeries
	// flagsExtra: --extra-rate.
	flagsExtra
	flagsNoLagFix
	flagsNoQuotaChange
	flagsFailureTimeout
	// flagsEmulate: --emulate.
	flagsEmulate
	flagsNoStagger
	// flagsPlayer: --targets --targets-per-entry.
	flagsPlayer
)

// benchWorkload describes one `augur bench` subcommand.
type benchWorkload struct {
	name  string
	short string
	long  string
	flags benchFlagSet
}

const benchConsumerFlags = flagsLoad | flagsConsumers

var benchWorkloads = []benchWorkload{
	{name: "append", flags: flagsLoad,
		short: "Append through the SDK: append latency and throughput (SpecLog Fig. 9, Scalog §6.3)",
		long: `Drive appends through the SDK from --clients clients, open loop at --rate
appends/s in total, or closed loop (--rate 0, the default) with --inflight
appends in flight per client. Latency runs from an append's start (in open
loop, the time it was due) to its acknowledgement; cpu_seconds is this
process's user+system time over the measured window (the servers' too when
the cluster is embedded). --shards 2,4,10 sweeps the cluster size.`},
	{name: "lazy-append", flags: flagsLoad,
		short: "Lazy vs eager appends: latency and throughput beside the gRPC floor (LazyLog Fig. 6-8)",
		long: `Append open loop at --rate (2000/s) of --record-bytes (4096; try 100) from
--clients clients, with no consumers, once per mode of --modes (eager,lazy), on
each --shards (1,3), under each --durability setting (default: fsync group and
raft_fsync true; optout: fsync interval and raft_fsync false, the paper's
setting). Every result carries grpc_floor_us, an empty gRPC call's round trip
on loopback in the same run; the comparison lines give append_p50 as eager ÷
lazy. A lazy append returns once its data is on every replica of its shard and
its metadata on every sequencing replica: one round trip to four servers at
once with the defaults.`},
	{name: "lazy-reads", flags: flagsLoad,
		short: "Reads of a lazy cluster by readers lagging 0, 1 and 3 ms: latency, fast and slow path (LazyLog Fig. 9)",
		long: `Append open loop at --rate to a lazy cluster while three readers each learn
the durable tail (CheckTail), wait 0, 1 or 3 ms, and read the last durable
position. A read below stable-gp is served at once (fast path); one above it
waits for stable-gp (slow path). Prints, per lag, {"lag_ms","read_latency_us",
"fast","slow","fast_percent"} under "lazy_reads".`},
	{name: "lazy-reconfig", flags: flagsLoad | flagsSeries,
		short: "Lazy appends over time across a crash of the sequencing leader (LazyLog §6.10)",
		long: `Append open loop at --rate to a lazy cluster; at a third of the window the
sequencing leader stops (the ordering layer seals its view, flushes the
survivor's ring and starts a view without it), at two thirds it restarts and
rejoins in a later view. Prints the usual result with a time series of
throughput and append latency and the events.`},
	{name: "e2e", flags: benchConsumerFlags,
		short: "Delivery and end-to-end latency with downstream compute (SpecLog Fig. 7, 8)",
		long: `Append open loop at --rate while --subscribers downstream tasks follow the
log; each task takes everything delivered since its last batch as one batch and
"computes" over it for --compute (by waiting, so the cores stay with the
cluster). Reports delivery latency (append start to first delivery), e2e latency
(append start until computed over and, when speculative, confirmed) and its
breakdown. --compute 0.5ms,1.5ms,4ms sweeps the compute time (Fig. 8). A
speculative run reports predetermined_cuts_percent, the share of its cuts that
lease windows predetermined: 0 says its leader made eager cuts throughout,
because filling the shards' empty slots would have cost more than speculation
saves at that load.`},
	{name: "burst", flags: benchConsumerFlags | flagsSeries | flagsExtra | flagsNoLagFix,
		short: "A burst of extra load on one shard mid-run: e2e latency over time (SpecLog Fig. 10)",
		long: `The e2e workload plus --extra-rate appends/s (default: half of --rate) sent to the
first shard during the middle third of the window, with a time series of
throughput and e2e latency. Eager order is the baseline; --no-lagfix needs
mode spec.`},
	{name: "ratechange", flags: benchConsumerFlags | flagsSeries | flagsExtra | flagsNoQuotaChange,
		short: "Sustained extra load on one shard: R and R+N throughput and e2e latency (SpecLog Fig. 11; needs mode spec)",
		long: `The e2e workload plus --extra-rate appends/s sent to the first shard from a
third of the window to its end, with a time series. It studies quota changes,
so it needs a speculative mode.`},
	{name: "window", flags: benchConsumerFlags,
		short: "Lease-window sweep: e2e and append latency (SpecLog Fig. 12; needs mode spec)",
		long:  `The e2e workload at each --window size (cuts per speculation lease window).`},
	{name: "elastic", flags: benchConsumerFlags | flagsSeries,
		short: "Add two shards, then finalize them, mid-run: throughput and e2e latency over time (SpecLog Fig. 13, Scalog Fig. 3)",
		long: `The e2e workload; a third into the window two shards are added through the
SDK (AddShard, on the live shards' groups in turn), two thirds in they are
finalized (FinalizeShard, 10 cuts of grace), with a time series.`},
	{name: "scale", flags: benchConsumerFlags | flagsEmulate | flagsNoStagger,
		short: "Throughput and latency vs number of shards, real or emulated (SpecLog Fig. 14, Scalog Fig. 5)",
		long: `The e2e workload, closed loop by default, on an embedded cluster of each
--shards size (default 1,2,4).

--emulate 10,20,40 sweeps emulated shards instead (SpecLog §6.8, Scalog §6.3):
the embedded cluster is 3 ordering replicas and no storage, and this process
plays each shard as a fake storage server that registers, heartbeats on its own
stream, and reports like a primary whose storage is instant: in eager mode its
length at most once per ordering interval, in spec mode at quota boundaries,
with no-op fills and lag-fixes. Records arrive open loop at --rate per second
over all shards (required), split evenly. The JSON reports ordered records/s
(throughput_rps), cuts_per_s, order_latency_us (arrival to the commit of the
cut that orders it, as the leader's Watch stream delivers it), noop_rps,
lag_fixes, predetermined_cuts_percent and stagger_groups for spec. --no-stagger puts every shard in every
cut of a spec lease window (by default more than 6 are split into groups).`},
	{name: "straggler", flags: benchConsumerFlags | flagsSeries,
		short: "Delay one shard's reports mid-run: e2e latency over time (SpecLog Fig. 15; needs mode spec)",
		long: `The e2e workload on the embedded cluster; from a third to two thirds of the
window, the first shard's primary holds its reports to the ordering layer
back by 30 ms, as a straggling server's would be. A time series shows e2e
latency while the leader gives the straggler quota 0, probes it with a quota
of 1, and lets it back once it keeps up. Needs mode spec (the eager baseline
runs alongside with --modes eager,spec).`},
	{name: "failure", flags: benchConsumerFlags | flagsSeries | flagsFailureTimeout,
		short: "Stop a shard replica, then the ordering leader: throughput and e2e latency over time (SpecLog Fig. 17, Scalog Fig. 4)",
		long: `The e2e workload on the embedded cluster; at 20% of the window one storage
server of the first shard stops (the shard goes on without it), at 45% the
ordering leader stops (cuts pause until a new one is elected), at 70% both
restart. A time series shows throughput and e2e latency. With --kill-replica
only the first shard's primary stops, at a third of the window: the shard
fails over to a backup, and "failover" in the JSON sets throughput and e2e
p50 before the stop against after the recovery, with the pause and the
misspeculations after the stop.`},
	{name: "player", flags: benchConsumerFlags | flagsPlayer,
		short: "The exactly-once player: apply and player delay to 2-20 targets (LogPlayer)",
		long: `Append open loop at --rate, each record tagged for --targets-per-entry of
--targets targets, while an in-process player delivers the log to that many
target SDK servers (loopback gRPC, in-memory stores) and --subscribers
confirmed subscribers follow the log. Reports apply_latency_us (append start
until a target applied the record), player_latency_us (the player's fetch of
the record until a target applied it) and the subscribers' delivery latency
of the same run. --targets 2,10,20 and --targets-per-entry 1,5,10 sweep.
--faults stops a target at 10% of the window and restarts it at 25%, then
restarts the player at 50%, and reports how long each took to catch up.`},
	{name: "idle",
		short: "Let an embedded cluster sit idle and report its CPU use",
		long: `Start an embedded cluster, wait --warmup, then measure this process's CPU
time over --duration of idleness and print
{"workload":"idle","cpu_percent_of_one_core",...}.`},
}

func newBenchCmd() *cobra.Command {
	var names []string
	for _, w := range benchWorkloads {
		names = append(names, w.name)
	}
	cmd := &cobra.Command{
		Use:   "bench WORKLOAD",
		Short: "Run a benchmark workload and print its results as JSON lines",
		Long: `Run a benchmark workload against an embedded cluster (or, where the workload
allows, a running one named by --cluster FILE) and print, for each point of
the sweep (--shards, --compute, --window lists), one JSON object per mode of
--modes, then, with two or more modes, one comparison object per candidate
mode: {"workload","baseline","candidate","ratios":{"delivery_p50","e2e_p50",
"e2e_p99","append_p50","throughput"}}, latency ratios baseline ÷ candidate and
the throughput ratio candidate ÷ baseline. Under a --durability or --security
sweep each mode is compared with the baseline mode under the same setting.
--plot FILE.svg|FILE.png draws the paper-style figure. Latencies are in µs as {"mean","p50","p90","p99","p999","max"}.

Workloads:
  ` + strings.Join(names, ", ") + `
"all --out DIR" runs a short version of each and writes DIR/REPORT.md.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("name a workload: one of %s, or all", strings.Join(names, ", "))
			}
			if _, err := bench.Lookup(args[0]); err != nil {
				return err
			}
			return fmt.Errorf("workload %q has no command here", args[0])
		},
	}
	for _, w := range benchWorkloads {
		cmd.AddCommand(newBenchWorkloadCmd(w))
	}
	cmd.AddCommand(newBenchAllCmd())
	cmd.AddCommand(newBenchMatrixCmd())
	return cmd
}

// benchFlags hold one workload command's flags until they become Params.
type benchFlags struct {
	w           benchWorkload
	p           bench.Params
	modes       string
	durability  string
	security    string
	shards      string
	compute     string
	window      string
	emulate     string
	targets     string
	perEntry    string
	clusterPath string
	cpuProfile  string
	plot        string
}

func newBenchWorkloadCmd(w benchWorkload) *cobra.Command {
	defaults, err := bench.DefaultParams(w.name)
	if err != nil {
		panic(err) // every command names a registered workload
	}
	b := &benchFlags{w: w, p: defaults}
	cmd := &cobra.Command{
		Use:   w.name,
		Short: w.short,
		Long:  w.long,
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return b.run(cmd) },
	}
	b.register(cmd, defaults)
	return cmd
}

func (b *benchFlags) register(cmd *cobra.Command, d bench.Params) {
	fs := cmd.Flags()
	fs.StringVar(&b.modes, "modes", strings.Join(d.Modes, ","), "ordering modes to run, comma-separated; the first is the comparisons' baseline (available: "+strings.Join(bench.ModeNames(), ", ")+")")
	fs.StringVar(&b.shards, "shards", joinInts(d.Shards), "embedded cluster: storage groups, one shard each; a comma list sweeps")
	fs.IntVar(&b.p.Replicas, "replicas", d.Replicas, "embedded cluster: storage servers per group")
	fs.DurationVar(&b.p.OrderingInterval, "ordering-interval", d.OrderingInterval, "embedded cluster: cut interval")
	fs.DurationVar(&b.p.LazyBatchInterval, "lazy-batch-interval", 0, "embedded lazy cluster: least time between two batches of the sequencing leader (0: the cluster file's default, 500µs)")
	fs.StringVar(&b.p.Fsync, "fsync", d.Fsync, "embedded cluster: storage fsync policy (group, interval, never, always; default group)")
	fs.StringVar(&b.durability, "durability", strings.Join(d.Durability, ","), "embedded cluster: run every mode under each of these sync settings, side by side: default (fsync group, raft_fsync true), optout (fsync interval, raft_fsync false); e.g. default,optout")
	fs.StringVar(&b.security, "security", "", "embedded cluster: run every mode under each of these settings, side by side: insecure (plaintext, the default without this flag), tls (TLS on every connection, clients by certificate); e.g. insecure,tls")
	fs.BoolVar(&b.p.Stages, "stages", false, "embedded cluster: time each stage of the append path (on a lazy cluster, and of stable-gp's lag) over the window and report it as stages_us (the timing costs a little latency)")
	fs.DurationVar(&b.p.Duration, "duration", d.Duration, "measured window of each run")
	fs.DurationVar(&b.p.Warmup, "warmup", d.Warmup, "unmeasured load before the window")
	fs.Uint64Var(&b.p.Seed, "seed", d.Seed, "seed of the payload bytes and record stamps")
	fs.StringVar(&b.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the whole run to this file")
	fs.StringVar(&b.plot, "plot", "", "draw the workload's figure to FILE.svg or FILE.png")
	fs.StringVar(&b.clusterPath, "cluster", "", "cluster file of a running cluster to target instead of an embedded one")
	fs.StringVar(&b.clusterPath, "config", "", "same as --cluster")
	f := b.w.flags
	if f&flagsLoad != 0 {
		fs.IntVar(&b.p.RecordBytes, "record-bytes", d.RecordBytes, "payload bytes per record")
		fs.IntVar(&b.p.Rate, "rate", d.Rate, "offered appends/s over all clients (0: closed loop)")
		fs.IntVar(&b.p.Clients, "clients", d.Clients, "SDK clients driving the load")
		fs.IntVar(&b.p.Inflight, "inflight", d.Inflight, "closed loop: appends in flight per client")
	}
	if f&flagsConsumers != 0 {
		fs.IntVar(&b.p.Subscribers, "subscribers", d.Subscribers, "downstream tasks following the log")
		fs.StringVar(&b.p.Follow, "follow", d.Follow, "how each task follows the log: shards (one subscription per shard, records as each shard delivers them) or log (one subscription in log order)")
		fs.StringVar(&b.compute, "compute", joinDurations(d.Compute), "downstream compute per batch (e.g. 1.5ms); a comma list sweeps")
		fs.StringVar(&b.window, "window", joinInts(d.Window), "speculation lease window in cuts (speculative modes); a comma list sweeps")
	}
	if f&flagsSeries != 0 {
		fs.DurationVar(&b.p.Interval, "interval", d.Interval, "time-series interval (0: about 50 points over --duration)")
	}
	if f&flagsExtra != 0 {
		fs.IntVar(&b.p.ExtraRate, "extra-rate", d.ExtraRate, "added appends/s on one shard (0: half of --rate)")
	}
	if f&flagsNoLagFix != 0 {
		fs.BoolVar(&b.p.NoLagFix, "no-lagfix", false, "speculative modes: turn lag-fix off (SpecLog's no-lf)")
	}
	if f&flagsNoQuotaChange != 0 {
		fs.BoolVar(&b.p.NoQuotaChange, "no-quota-change", false, "speculative modes: turn quota changes off (SpecLog's no-qc)")
	}
	if f&flagsEmulate != 0 {
		fs.StringVar(&b.emulate, "emulate", "", "emulated shards on a real ordering layer instead of real shards, e.g. 10,20,40 (a comma list sweeps; needs --rate)")
	}
	if f&flagsNoStagger != 0 {
		fs.BoolVar(&b.p.NoStagger, "no-stagger", false, "speculative modes: every shard in every cut of a lease window, however many (stagger_above 0)")
	}
	if f&flagsPlayer != 0 {
		fs.StringVar(&b.targets, "targets", joinInts(d.PlayerTargets), "player targets; a comma list sweeps")
		fs.StringVar(&b.perEntry, "targets-per-entry", joinInts(d.TargetsPerEntry), "targets each record goes to; a comma list sweeps")
		fs.BoolVar(&b.p.PlayerFaults, "faults", false, "stop and restart a target, then restart the player, during the window; report the catch-up times")
	}
	if f&flagsFailureTimeout != 0 {
		fs.DurationVar(&b.p.FailureTimeout, "failure-timeout", config.DefaultFailureTimeout, "embedded cluster: silence after which a storage server is taken out of its shards")
		fs.BoolVar(&b.p.KillReplica, "kill-replica", false, "failure: stop only the first shard's primary at a third of the window (SpecLog Fig. 17(a); use --modes spec --replicas 3) and summarize the failover")
	}
}

// params turns the flags into Params, loading --cluster's file.
func (b *benchFlags) params(cmd *cobra.Command) (bench.Params, error) {
	p := b.p
	var errs []error
	var err error
	if p.Modes, err = parseList(b.modes, "--modes", func(s string) (string, error) { return s, nil }); err != nil {
		errs = append(errs, err)
	}
	if p.Durability, err = parseList(b.durability, "--durability", func(s string) (string, error) { return s, nil }); err != nil {
		errs = append(errs, err)
	}
	if p.Security, err = parseList(b.security, "--security", func(s string) (string, error) { return s, nil }); err != nil {
		errs = append(errs, err)
	}
	if p.Shards, err = parseList(b.shards, "--shards", strconv.Atoi); err != nil {
		errs = append(errs, err)
	}
	if p.Compute, err = parseList(b.compute, "--compute", time.ParseDuration); err != nil {
		errs = append(errs, err)
	}
	if p.Window, err = parseList(b.window, "--window", strconv.Atoi); err != nil {
		errs = append(errs, err)
	}
	if p.Emulate, err = parseList(b.emulate, "--emulate", strconv.Atoi); err != nil {
		errs = append(errs, err)
	}
	if p.PlayerTargets, err = parseList(b.targets, "--targets", strconv.Atoi); err != nil {
		errs = append(errs, err)
	}
	if p.TargetsPerEntry, err = parseList(b.perEntry, "--targets-per-entry", strconv.Atoi); err != nil {
		errs = append(errs, err)
	}
	if len(p.Emulate) > 0 {
		// Emulated shards store nothing and have no clients or subscribers.
		for _, f := range []string{"shards", "replicas", "fsync", "record-bytes", "clients", "inflight", "subscribers", "follow", "compute"} {
			if fl := cmd.Flags().Lookup(f); fl != nil && fl.Changed {
				errs = append(errs, fmt.Errorf("--%s applies to real shards; --emulate runs emulated ones", f))
			}
		}
		p.Compute, p.Subscribers = nil, 0
	}
	if b.plot != "" {
		if err := bench.CheckPlotPath(b.plot); err != nil {
			errs = append(errs, err)
		}
	}
	if b.clusterPath != "" {
		for _, f := range []string{"shards", "replicas", "ordering-interval", "lazy-batch-interval", "fsync", "failure-timeout"} {
			if fl := cmd.Flags().Lookup(f); fl != nil && fl.Changed {
				errs = append(errs, fmt.Errorf("--%s shapes the embedded cluster; with --cluster the cluster file decides", f))
			}
		}
		if cmd.Flags().Changed("cluster") && cmd.Flags().Changed("config") {
			errs = append(errs, errors.New("give --cluster or --config, not both"))
		}
		c, err := config.Load(b.clusterPath)
		if err != nil {
			errs = append(errs, err)
		} else {
			p.Cluster = c
			p.Shards = nil
		}
	}
	p.Logger = slog.Default()
	return p, errors.Join(errs...)
}

// run checks the flags, runs the workload, prints its JSON lines and draws
// its figure.
func (b *benchFlags) run(cmd *cobra.Command) error {
	p, err := b.params(cmd)
	if err != nil {
		return err
	}
	// Check before anything starts: bench.Run checks again, but a bad flag
	// should not even start an embedded cluster.
	if _, err := bench.Check(b.w.name, p); err != nil {
		return err
	}
	sizes := len(p.Shards)
	if len(p.Emulate) > 0 {
		sizes = len(p.Emulate)
	}
	if runs := len(p.Modes) * max(len(p.Durability), 1) * max(sizes, 1) * max(len(p.Compute), 1) * max(len(p.Window), 1) * max(len(p.PlayerTargets)*len(p.TargetsPerEntry), 1); runs > 1 {
		p.Progress = cmd.ErrOrStderr()
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
	rep, runErr := bench.Run(cmd.Context(), b.w.name, p)
	if rep != nil {
		if err := rep.WriteJSON(cmd.OutOrStdout()); err != nil {
			return err
		}
		if b.plot != "" && len(rep.Points) > 0 && runErr == nil {
			if err := bench.WritePlot(b.plot, rep); err != nil {
				return err
			}
		}
	}
	if runErr != nil {
		if interrupted(cmd.Context(), runErr) {
			return errors.New("interrupted")
		}
		return runErr
	}
	return nil
}

// parseList splits a comma list and parses each element; an empty string
// is an empty list.
func parseList[T any](s, flag string, parse func(string) (T, error)) ([]T, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []T
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		v, err := parse(part)
		if err != nil || part == "" {
			return nil, fmt.Errorf("%s: %q is not a valid element of the list %q", flag, part, s)
		}
		out = append(out, v)
	}
	return out, nil
}

func joinInts(xs []int) string {
	var s []string
	for _, x := range xs {
		s = append(s, strconv.Itoa(x))
	}
	return strings.Join(s, ",")
}

func joinDurations(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.String())
	}
	return strings.Join(s, ",")
}
