package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/augur-log/augur/internal/bench"
	"github.com/augur-log/augur/internal/config"
)

func newBenchAllCmd() *cobra.Command {
	var (
		out   string
		modes string
		p     = bench.Params{
			Replicas:         2,
			OrderingInterval: config.DefaultOrderingInterval,
			RecordBytes:      4096,
			Rate:             2000,
			Subscribers:      1,
			Seed:             1,
			Warmup:           time.Second,
			Duration:         3 * time.Second,
		}
	)
	cmd := &cobra.Command{
		Use:   "all --out DIR",
		Short: "Run a short version of every workload; write DIR/*.json, *.svg, *.png and REPORT.md",
		Long: `Run a short version of every workload (each with its own sweep: e2e at 2 and 4
shards, compute at 0.5, 1.5 and 4 ms, append and scale at 1, 2 and 4 shards,
scale-emulated at 40 emulated shards taking 1000 records/s each; time series
twice --duration) on fresh embedded clusters, and write, for each,
DIR/NAME.json (its JSON lines), DIR/NAME.svg and DIR/NAME.png (its figure),
then DIR/REPORT.md, which lays each figure and its numbers next to the SpecLog
and Scalog papers' headline numbers. Workloads that need a mode not available
yet are listed there as not run.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out DIR is required")
			}
			var err error
			if p.Modes, err = parseList(modes, "--modes", func(s string) (string, error) { return s, nil }); err != nil {
				return err
			}
			// Check the common parameters as the e2e workload sees them,
			// before anything starts.
			check := p
			check.Shards, check.Compute = []int{2}, []time.Duration{0}
			check.Clients = 4
			check.Follow = bench.FollowShards
			if _, err := bench.Check("e2e", check); err != nil {
				return err
			}
			p.Logger = slog.Default()
			p.Progress = cmd.ErrOrStderr()
			err = bench.RunAll(cmd.Context(), bench.AllOptions{Out: out, Base: p, Command: commandLine(cmd)})
			if err != nil && interrupted(cmd.Context(), err) {
				return errors.New("interrupted")
			}
			if err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s/REPORT.md\n", strings.TrimRight(out, "/"))
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&out, "out", "", "directory to write the results, figures and REPORT.md to")
	fs.StringVar(&modes, "modes", "eager", "ordering modes to run, comma-separated; the first is the baseline")
	fs.IntVar(&p.Replicas, "replicas", p.Replicas, "embedded clusters: storage servers per group")
	fs.DurationVar(&p.OrderingInterval, "ordering-interval", p.OrderingInterval, "embedded clusters: cut interval")
	fs.StringVar(&p.Fsync, "fsync", "", "embedded clusters: storage fsync policy (group, interval, never, always; default group)")
	fs.IntVar(&p.RecordBytes, "record-bytes", p.RecordBytes, "payload bytes per record")
	fs.IntVar(&p.Rate, "rate", p.Rate, "offered appends/s of the open-loop workloads")
	fs.IntVar(&p.Subscribers, "subscribers", p.Subscribers, "downstream tasks following the log")
	fs.DurationVar(&p.Duration, "duration", p.Duration, "measured window of each run (time series: twice this)")
	fs.DurationVar(&p.Warmup, "warmup", p.Warmup, "unmeasured load before each window")
	fs.Uint64Var(&p.Seed, "seed", p.Seed, "seed of the payload bytes and record stamps")
	return cmd
}

// commandLine renders cmd with the flags that were set, for the report
// (of bench all or bench spec-matrix).
func commandLine(cmd *cobra.Command) string {
	parts := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		parts = append(parts, "--"+f.Name+" "+f.Value.String())
	})
	return strings.Join(parts, " ")
}
