package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/auth"
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
	// TLS files, each overriding the cluster file's; insecure dials
	// plaintext; tokenFile holds a bearer token.
	ca, cert, key string
	insecure      bool
	tokenFile     string
	// placement is the client's placement policy (not a flag).
	placement client.Placement
}

func (f *connFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.configPath, "config", "", "cluster file naming the cluster to talk to")
	fs.StringSliceVar(&f.ordering, "ordering", nil, "ordering replica addresses ADDR[,ADDR] (instead of --config; needs --cluster)")
	fs.StringVar(&f.clusterID, "cluster", "", "cluster id (with --ordering)")
	fs.DurationVar(&f.timeout, "timeout", defaultTimeout, "how long to wait for the cluster")
	fs.StringVar(&f.ca, "ca", "", "CA certificate of the cluster (default: the cluster file's)")
	fs.StringVar(&f.cert, "cert", "", "client certificate (default: the cluster file's tls.client)")
	fs.StringVar(&f.key, "cert-key", "", "private key of --cert")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding a bearer token to authenticate with (or set "+tokenEnv+")")
	fs.BoolVar(&f.insecure, "insecure", false, "dial plaintext, for a cluster run with insecure: true")
}

// tokenEnv may hold a bearer token instead of --token-file.
const tokenEnv = "AUGUR_TOKEN"

// security fills cfg's TLS, Insecure and Token from the flags and the
// cluster file c (nil when named by flags).
func (f *connFlags) security(cfg *client.Config, c *config.Cluster) error {
	if (f.cert == "") != (f.key == "") {
		return errors.New("--cert and --cert-key go together")
	}
	files := auth.Files{CA: f.ca, Cert: f.cert, Key: f.key}
	if c != nil {
		cf := c.ClientFiles()
		if files.CA == "" {
			files.CA = cf.CA
		}
		if files.Cert == "" {
			files.Cert, files.Key = cf.Cert, cf.Key
		}
	}
	plaintext := f.insecure || (c != nil && c.Insecure)
	switch {
	case plaintext && (f.ca != "" || f.cert != ""):
		return errors.New("--ca and --cert do not go with a plaintext cluster (--insecure or insecure: true)")
	case plaintext:
		if f.tokenFile != "" {
			return errors.New("a token is never sent over plaintext: --token-file needs TLS")
		}
		cfg.Insecure = true
		return nil
	case files.CA == "":
		return errors.New("no CA to verify the cluster with: give --ca FILE (or --config with a tls: block), or --insecure for a plaintext cluster")
	}
	m, err := auth.Load(files)
	if err != nil {
		return err
	}
	cfg.TLS = auth.ClientTLS(m)
	tok := os.Getenv(tokenEnv)
	if f.tokenFile != "" {
		data, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		tok = strings.TrimSpace(string(data))
	}
	cfg.Token = tok
	return nil
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
		t := &target{
			cfg:  client.Config{ClusterID: c.ClusterID, Ordering: c.OrderingAddrs(), RecordBytesMax: c.RecordBytesMax},
			file: c,
		}
		if err := f.security(&t.cfg, c); err != nil {
			return nil, err
		}
		return t, nil
	case len(f.ordering) > 0:
		if f.clusterID == "" {
			return nil, errors.New("--ordering needs --cluster ID as well")
		}
		for _, a := range f.ordering {
			if strings.TrimSpace(a) == "" || !strings.Contains(a, ":") {
				return nil, fmt.Errorf("--ordering: %q is not host:port", a)
			}
		}
		t := &target{cfg: client.Config{ClusterID: f.clusterID, Ordering: f.ordering}}
		if err := f.security(&t.cfg, nil); err != nil {
			return nil, err
		}
		return t, nil
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
