package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/devcluster"
	"github.com/augur-log/augur/internal/mode"
)

// devReadyTimeout bounds how long a dev cluster may take to start.
const devReadyTimeout = 30 * time.Second

func newDevCmd() *cobra.Command {
	var (
		opts        devcluster.Options
		metricsAddr string
		insecure    bool
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a whole cluster in this process on loopback until Ctrl-C",
		Long: `Run a whole cluster — ordering replicas and storage groups — in this process
on 127.0.0.1 with ports chosen by the OS, print its endpoints and the cluster
file to use with the other commands, and keep it up until SIGINT or SIGTERM.

Without --data the data lives in a temporary directory removed on exit.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case opts.Shards < 1:
				return fmt.Errorf("--shards must be at least 1, got %d", opts.Shards)
			case opts.Replicas < config.GroupServersMin || opts.Replicas > config.GroupServersMax:
				return fmt.Errorf("--replicas must be %d or %d (the storage servers of a group), got %d", config.GroupServersMin, config.GroupServersMax, opts.Replicas)
			case opts.OrderingReplicas < 1:
				return fmt.Errorf("--ordering-replicas must be at least 1, got %d", opts.OrderingReplicas)
			case opts.OrderingInterval < 0:
				return fmt.Errorf("--ordering-interval must be positive, got %v", opts.OrderingInterval)
			}
			ctx := cmd.Context()
			opts.Logger = slog.Default()
			opts.TLS = !insecure
			if insecure {
				warnInsecure(cmd.ErrOrStderr(), opts.Logger)
			}
			dc, err := devcluster.Start(ctx, opts)
			if err != nil {
				return err
			}
			defer dc.Close()
			if metricsAddr != "" {
				stopMetrics, err := serveMetrics(metricsAddr, dc.MetricsTLS())
				if err != nil {
					return err
				}
				defer stopMetrics()
			}
			readyCtx, cancel := context.WithTimeout(ctx, devReadyTimeout)
			err = dc.WaitReady(readyCtx)
			cancel()
			if err != nil {
				if interrupted(ctx, err) {
					return nil
				}
				return err
			}
			cfg := dc.Config()
			path := filepath.Join(dc.Dir(), "cluster.yaml")
			if err := cfg.Save(path); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "augur dev: cluster %q is up (data in %s)\n\n", cfg.ClusterID, dc.Dir())
			fmt.Fprintf(out, "ordering replicas  %s\n", strings.Join(cfg.OrderingAddrs(), ","))
			for _, g := range cfg.Groups() {
				var servers []string
				for _, s := range cfg.Group(g) {
					servers = append(servers, s.ID+"@"+s.Addr)
				}
				fmt.Fprintf(out, "storage group %-4s %s\n", g, strings.Join(servers, " "))
			}
			if len(cfg.Sequencing) > 0 {
				var seqs []string
				for _, q := range cfg.Sequencing {
					seqs = append(seqs, q.ID+"@"+q.Addr)
				}
				fmt.Fprintf(out, "sequencing         %s\n", strings.Join(seqs, " "))
			}
			scheme := "https"
			if insecure {
				scheme = "http"
			}
			if metricsAddr != "" {
				fmt.Fprintf(out, "metrics            %s://%s/metrics\n", scheme, metricsAddr)
			}
			fmt.Fprintf(out, "\ncluster file       %s\n", path)
			printConnect(out, dc)
			fmt.Fprintln(out)
			fmt.Fprintf(out, "try:\n  echo hello | augur append --config %s\n  augur subscribe --config %s\n  augur status --config %s\n\nCtrl-C stops the cluster.\n", path, path, path)
			<-ctx.Done()
			fmt.Fprintln(cmd.ErrOrStderr(), "augur dev: stopping")
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&opts.Dir, "data", "", "data directory (default: a temporary one, removed on exit)")
	fs.IntVar(&opts.Shards, "shards", devcluster.DefaultShards, "storage groups (one shard each)")
	fs.IntVar(&opts.Replicas, "replicas", devcluster.DefaultReplicas, "storage servers per group")
	fs.IntVar(&opts.OrderingReplicas, "ordering-replicas", devcluster.DefaultOrderingReplicas, "ordering replicas")
	fs.DurationVar(&opts.OrderingInterval, "ordering-interval", 0, "cut interval (default 1ms)")
	fs.StringVar(&opts.ClusterID, "cluster-id", devcluster.DefaultClusterID, "cluster id")
	fs.StringVar(&opts.Mode, "mode", mode.EagerName, "ordering mode: eager, spec or lazy")
	fs.IntVar(&opts.SequencingReplicas, "sequencing-replicas", 0, "lazy: sequencing replicas (default 2)")
	fs.Uint64Var(&opts.WindowCuts, "window-cuts", 0, "spec: cuts per lease window (default 100)")
	fs.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics here")
	fs.BoolVar(&insecure, "insecure", false, "run plaintext, with no TLS and no authentication (default: TLS with certificates generated in the data dir)")
	return cmd
}
