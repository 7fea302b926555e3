package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/credentials"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/playerd"
)

func newPlayerCmd() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "player",
		Short: "Run the exactly-once player: deliver the log to its targets",
		Long: `Run the player: it reads the cluster's ordered log and applies each entry to
the targets it concerns, in log order and exactly once, across crashes of
the targets and of the player. The file (--config player.yaml) names the
cluster, the targets, the routing rule and the batch bounds; its
status_addr serves /status (see 'augur player status') and /metrics.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return errors.New("--config player.yaml is required")
			}
			return runPlayer(cmd.Context(), path)
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "player file (player.yaml)")
	cmd.AddCommand(newPlayerStatusCmd())
	return cmd
}

func runPlayer(ctx context.Context, path string) error {
	f, err := playerd.LoadFile(path)
	if err != nil {
		return err
	}
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	ccfg := client.Config{ClusterID: f.ClusterID, Ordering: f.Ordering}
	var c *config.Cluster
	if f.Cluster != "" {
		if c, err = config.Load(f.Cluster); err != nil {
			return err
		}
		ccfg = client.Config{ClusterID: c.ClusterID, Ordering: c.OrderingAddrs(), RecordBytesMax: c.RecordBytesMax}
	}
	// The player is a client of the log like any CLI command; without a
	// cluster file only an explicit insecure: true dials plaintext.
	if err := (&connFlags{insecure: f.Insecure}).security(&ccfg, c); err != nil {
		return err
	}
	// The player applies to its targets as the same client.
	if ccfg.TLS != nil {
		cfg.Creds = credentials.NewTLS(ccfg.TLS)
	}
	cl, err := client.Dial(ctx, ccfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	srv, err := playerd.New(cfg, playerd.ClientLog{C: cl})
	if err != nil {
		return err
	}
	if f.StatusAddr != "" {
		stop, err := servePlayerHTTP(f.StatusAddr, srv)
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := srv.Run(ctx); err != nil && !interrupted(ctx, err) {
		return err
	}
	return nil
}

// servePlayerHTTP serves /status and /metrics on addr.
func servePlayerHTTP(addr string, srv *playerd.Server) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("player status: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/status", srv.StatusHandler())
	mux.Handle("/metrics", promhttp.Handler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: metricsReadHeaderTimeout}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("player status server", "addr", addr, "err", err)
		}
	}()
	slog.Info("player status", "url", "http://"+l.Addr().String()+"/status")
	return func() {
		hs.Close()
		<-done
	}, nil
}

func newPlayerStatusCmd() *cobra.Command {
	var path, addr string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each target's state, term, last acknowledged index and lag",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case addr == "" && path == "":
				return errors.New("name the player with --config player.yaml or --addr HOST:PORT")
			case addr == "":
				f, err := playerd.LoadFile(path)
				if err != nil {
					return err
				}
				if f.StatusAddr == "" {
					return fmt.Errorf("%s has no status_addr", path)
				}
				addr = f.StatusAddr
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status", nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("player status: %w", err)
			}
			defer resp.Body.Close()
			var st playerd.Status
			if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
				return fmt.Errorf("player status: %w", err)
			}
			printPlayerStatus(&st)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&path, "config", "", "player file whose status_addr to ask")
	fs.StringVar(&addr, "addr", "", "the player's status address HOST:PORT (instead of --config)")
	fs.DurationVar(&timeout, "timeout", defaultTimeout, "how long to wait for the player")
	return cmd
}

func printPlayerStatus(st *playerd.Status) {
	fmt.Printf("current index %d (as of %s)\n", st.CurrentIndex, st.Time.Format(time.RFC3339))
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "TARGET\tADDR\tSTATE\tUP\tTERM\tLAST ACK\tLAG\tQUEUED\tIN FLIGHT")
	for _, t := range st.Targets {
		fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%d\t%d\t%d\t%d\t%d\n", t.Name, t.Addr, t.State, t.Up, t.Term, t.LastAck, t.Lag, t.Queued, t.Inflight)
	}
	w.Flush()
}
