package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/augur-log/augur/internal/sim"
)

// simShowMax is how many failing seeds `augur sim` details per mode.
const simShowMax = 5

func newSimCmd() *cobra.Command {
	var (
		modes  string
		seeds  int
		first  uint64
		seed   int64
		trace  bool
		faults string
		// replicas is the servers per shard (0: the seed chooses).
		replicas int
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the seeded whole-cluster simulation and check its invariants",
		Long: `Run the seeded whole-cluster simulation: the ordering replicas (Raft), the
storage servers' shard replicas (a primary and one or two backups, on logs
that lose what was not synced in a crash; --replicas, or by default even
seeds 2 and odd seeds 3 servers per shard; lazy order's 2), clients, subscribers and, in some seeds, a
player with its targets, of one cluster in one goroutine on a simulated
clock and network, with the faults --faults selects, through a safety
phase and a heal phase that must converge. Each seed's history is checked
against the invariants (no acknowledged append lost, one order for every
reader, real-time order and linearizability, confirmed speculation never
revised, retries stored once, every entry applied to each of its targets
exactly once and in order).

It prints a summary per mode and, for each failing seed, its violations and
the one command that replays it with a trace; it exits non-zero on any
violation.`,
		Example: `  augur sim --mode spec --seeds 5000
  augur sim --mode eager,spec --faults delay,loss
  augur sim --mode spec --seed 17 --trace`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ms []sim.Mode
			for _, name := range strings.Split(modes, ",") {
				m, err := sim.ParseMode(strings.TrimSpace(name))
				if err != nil {
					return err
				}
				ms = append(ms, m)
			}
			f, err := sim.ParseFaults(faults)
			if err != nil {
				return err
			}
			switch {
			case seeds < 1:
				return fmt.Errorf("--seeds must be at least 1, got %d", seeds)
			case trace && seed < 0:
				return errors.New("--trace needs --seed: a trace of many seeds is unreadable")
			}
			for _, m := range ms {
				if err := sim.CheckReplicas(m, replicas); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			bad := 0
			for _, m := range ms {
				o := sim.Options{Mode: m, Faults: f, Replicas: replicas}
				if seed >= 0 {
					if trace {
						o.Trace = func(line string) { fmt.Fprintln(out, line) }
					}
					r := sim.Run(uint64(seed), o)
					fmt.Fprintf(out, "%s seed %d (faults %s): %s\n%s\n", m, r.Seed, f, r.Scenario, r.Summary)
					if r.Failed() {
						bad++
						fmt.Fprintf(out, "FAIL:\n  %s\n", strings.Join(r.Errs, "\n  "))
					} else {
						fmt.Fprintln(out, "ok")
					}
					continue
				}
				start := time.Now()
				rs := sim.RunSeeds(o, first, seeds)
				tally := sim.Count(rs)
				fmt.Fprintf(out, "%s (faults %s): %v in %v\n", m, f, tally, time.Since(start).Round(time.Millisecond))
				shown := 0
				for _, r := range rs {
					if !r.Failed() {
						continue
					}
					bad++
					if shown == simShowMax {
						continue
					}
					shown++
					fmt.Fprintf(out, "FAIL seed %d (%s):\n  %s\n  replay: %s\n", r.Seed, r.Scenario, strings.Join(r.Errs, "\n  "), r.Replay())
				}
			}
			if bad > 0 {
				return fmt.Errorf("sim: %d failing seed(s)", bad)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&modes, "mode", "spec", "ordering modes to simulate, comma-separated: eager, spec, lazy")
	fl.IntVar(&seeds, "seeds", 1000, "how many seeds to run per mode")
	fl.Uint64Var(&first, "first", 0, "the first seed of --seeds")
	fl.Int64Var(&seed, "seed", -1, "run only this seed")
	fl.BoolVar(&trace, "trace", false, "print every step of the run (with --seed)")
	fl.IntVar(&replicas, "replicas", 0, "storage servers per shard, 2 or 3; 0: even seeds 2, odd seeds 3")
	fl.StringVar(&faults, "faults", "all", "faults to inject, comma-separated: delay, reorder, loss, partition, crash, pause; or all, none")
	return cmd
}
