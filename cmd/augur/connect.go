package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/config"
)

// defaultTimeout bounds one client command's calls.
const defaultTimeout = 10 * time.Second

// connFlags name the cluster a client command talks to: a cluster file, or
// ordering addresses and a cluster id.
type connFlags struct {
	configPath string
	ordering   []string
	clusterID  string
	timeout    time.Duration
	// placement is the client's placement policy (not a flag).
	placement client.Placement
}

func (f *connFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.configPath, "config", "", "cluster file naming the cluster to talk to")
	fs.StringSliceVar(&f.ordering, "ordering", nil, "ordering replica addresses ADDR[,ADDR] (instead of --config; needs --cluster)")
	fs.StringVar(&f.clusterID, "cluster", "", "cluster id (with --ordering)")
	fs.DurationVar(&f.timeout, "timeout", defaultTimeout, "how long to wait for the cluster")
}

// target is what a client command needs to know about its cluster.
type target struct {
	cfg client.Config
	// file is the cluster file, nil when the cluster was named by flags.
	file *config.Cluster
}

// resolve checks the flags and loads the cluster file; it contacts nobody.
func (f *connFlags) resolve() (*target, error) {
	if f.timeout <= 0 {
		return nil, fmt.Errorf("--timeout must be positive, got %v", f.timeout)
	}
	switch {
	case f.configPath != "" && len(f.ordering) > 0:
		return nil, errors.New("give either --config or --ordering with --cluster, not both")
	case f.configPath != "" && f.clusterID != "":
		return nil, errors.New("--cluster goes with --ordering; with --config the cluster file names the cluster")
	case f.configPath != "":
		c, err := config.Load(f.configPath)
		if err != nil {
			return nil, err
		}
		return &target{
			cfg:  client.Config{ClusterID: c.ClusterID, Ordering: c.OrderingAddrs(), RecordBytesMax: c.RecordBytesMax},
			file: c,
		}, nil
	case len(f.ordering) > 0:
		if f.clusterID == "" {
			return nil, errors.New("--ordering needs --cluster ID as well")
		}
		for _, a := range f.ordering {
			if strings.TrimSpace(a) == "" || !strings.Contains(a, ":") {
				return nil, fmt.Errorf("--ordering: %q is not host:port", a)
			}
		}
		return &target{cfg: client.Config{ClusterID: f.clusterID, Ordering: f.ordering}}, nil
	}
	return nil, errors.New("name the cluster with --config FILE, or with --ordering ADDR[,ADDR] --cluster ID")
}

// dial resolves the flags and connects.
func (f *connFlags) dial(ctx context.Context) (*client.Client, *target, error) {
	t, err := f.resolve()
	if err != nil {
		return nil, nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	t.cfg.Placement = f.placement
	cl, err := client.Dial(dctx, t.cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to cluster %q at %s: %w", t.cfg.ClusterID, strings.Join(t.cfg.Ordering, ","), err)
	}
	return cl, t, nil
}

// call dials the cluster and runs fn with the client, bounded by --timeout.
func (f *connFlags) call(ctx context.Context, fn func(context.Context, *client.Client) error) error {
	cl, _, err := f.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	return fn(ctx, cl)
}

// recordBytesMax is the payload limit the commands check before sending.
func (t *target) recordBytesMax() int {
	if t.file != nil {
		return t.file.RecordBytesMax
	}
	return config.DefaultRecordBytesMax
}
