package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/augur-log/augur/internal/bench"
)

func newBenchMatrixCmd() *cobra.Command {
	p, err := bench.DefaultParams("e2e")
	if err != nil {
		panic(err) // e2e is registered
	}
	p.Modes = []string{"eager", "spec"}
	p.Warmup, p.Duration = time.Second, 3*time.Second
	var (
		out, modes, shards, rates, durability string
		compute                               time.Duration
		repeat                                int
	)
	cmd := &cobra.Command{
		Use:   "spec-matrix --out DIR",
		Short: "Speculative against eager order over shards × rates: JSON rows, a ratios table and a figure",
		Long: `Run the e2e workload at every point of --shards × --rates: --repeat sweeps of
the baseline and the candidate mode of --modes (default eager,spec), the
candidate first in every other sweep, each run on a fresh embedded cluster.
Print each sweep's JSON lines as it completes (the results, the comparison),
then a row per point {"workload":"spec-matrix","shards","rate","runs",
"append_p50","append_p99","delivery_p50","e2e_p50","ranges","misspeculations",
"baseline_append_p50_over_floor","dropped","skipped"} with the median over the
sweeps of the candidate's latencies over the baseline's, and write
DIR/matrix.md (the table of those ratios, with their ranges) and DIR/matrix.svg
and DIR/matrix.png (the ratios against the rate, one line per shard count, the
targets dashed). A sweep where the baseline acknowledged less than 95% of the
offered rate, or had errors, does not count, and the row says why; a point
without a counted sweep is marked skipped.

Points are short by default (1 s warm-up, 3 s measured); --duration and
--warmup lengthen them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := bench.MatrixOptions{Out: out, Base: p, JSON: cmd.OutOrStdout(), Command: commandLine(cmd), Repeat: repeat}
			var errs []error
			var err error
			if o.Base.Modes, err = parseList(modes, "--modes", func(s string) (string, error) { return s, nil }); err != nil {
				errs = append(errs, err)
			}
			if o.Shards, err = parseList(shards, "--shards", strconv.Atoi); err != nil {
				errs = append(errs, err)
			}
			if o.Rates, err = parseList(rates, "--rates", strconv.Atoi); err != nil {
				errs = append(errs, err)
			}
			if durability != "" {
				o.Base.Durability = []string{durability}
			}
			o.Base.Compute = []time.Duration{compute}
			if err := errors.Join(errs...); err != nil {
				return err
			}
			if err := bench.CheckMatrix(o); err != nil {
				return err
			}
			o.Base.Logger = slog.Default()
			o.Base.Progress = cmd.ErrOrStderr()
			err = bench.RunMatrix(cmd.Context(), o)
			if err != nil && interrupted(cmd.Context(), err) {
				return errors.New("interrupted")
			}
			if err == nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s/matrix.md, matrix.svg, matrix.png\n", strings.TrimRight(out, "/"))
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&out, "out", "", "directory to write matrix.md, matrix.svg and matrix.png to")
	fs.StringVar(&modes, "modes", "eager,spec", "the baseline and the candidate mode")
	fs.StringVar(&shards, "shards", "1,2,4,8", "shard counts of the grid")
	fs.StringVar(&rates, "rates", "500,2000,8000", "offered appends/s of the grid")
	fs.IntVar(&repeat, "repeat", 3, "sweeps per point; the table holds the median of their ratios (one sweep's ratio moves by tens of percent on a shared machine)")
	fs.StringVar(&durability, "durability", "", "sync setting of every run: default (fsync group, raft_fsync true) or optout (fsync interval, raft_fsync false); empty: the cluster's defaults")
	fs.DurationVar(&compute, "compute", p.Compute[0], "downstream compute per batch")
	fs.IntVar(&p.Replicas, "replicas", p.Replicas, "storage servers per group")
	fs.DurationVar(&p.OrderingInterval, "ordering-interval", p.OrderingInterval, "cut interval")
	fs.IntVar(&p.RecordBytes, "record-bytes", p.RecordBytes, "payload bytes per record")
	fs.IntVar(&p.Clients, "clients", p.Clients, "SDK clients driving the load")
	fs.IntVar(&p.Subscribers, "subscribers", p.Subscribers, "downstream tasks following the log")
	fs.DurationVar(&p.Duration, "duration", p.Duration, "measured window of each run")
	fs.DurationVar(&p.Warmup, "warmup", p.Warmup, "unmeasured load before each window")
	fs.Uint64Var(&p.Seed, "seed", p.Seed, "seed of the payload bytes and record stamps")
	return cmd
}
