package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/credentials"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/auth"
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
status_addr serves /status (see 'augur player status') and /metrics: over
HTTPS when the cluster is secured, with the certificate status_cert names
(augur certs issue --config CLUSTER_FILE player NAME --host HOST); plaintext
only with an insecure: true cluster.`,
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
	statusFiles, err := f.StatusFiles(c)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var statusTLS *tls.Config
	if statusFiles.CA != "" {
		m, err := auth.Load(statusFiles)
		if err != nil {
			return fmt.Errorf("%s: status_cert: %w", path, err)
		}
		statusTLS = auth.ServerTLS(m, "h2", "http/1.1")
		stop := watchMaterial(ctx, m, nil, slog.Default())
		defer stop()
	}
	if ccfg.Insecure {
		warnInsecure(os.Stderr, slog.Default())
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
		stop, err := servePlayerHTTP(f.StatusAddr, statusTLS, srv)
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

// servePlayerHTTP serves /status and /metrics on addr, over HTTPS with
// tlsCfg unless it is nil (an insecure cluster).
func servePlayerHTTP(addr string, tlsCfg *tls.Config, srv *playerd.Server) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("player status: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/status", srv.StatusHandler())
	mux.Handle("/metrics", promhttp.Handler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: metricsReadHeaderTimeout}
	scheme := "http"
	if tlsCfg != nil {
		l, scheme = tls.NewListener(l, tlsCfg), "https"
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("player status server", "addr", addr, "err", err)
		}
	}()
	slog.Info("player status", "url", scheme+"://"+l.Addr().String()+"/status")
	return func() {
		hs.Close()
		<-done
	}, nil
}

func newPlayerStatusCmd() *cobra.Command {
	var path, addr, ca string
	var plaintext bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each target's state, term, last acknowledged index and lag",
		Long: `Ask a player for its status. With --config player.yaml it asks the file's
status_addr, over HTTPS verified with the CA of the file's cluster unless
that cluster is insecure: true. With --addr, give the cluster CA with --ca,
or --insecure for the player of a plaintext cluster.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var tlsCfg *tls.Config
			switch {
			case addr == "" && path == "":
				return errors.New("name the player with --config player.yaml or --addr HOST:PORT")
			case addr != "" && path != "":
				return errors.New("give either --config or --addr, not both")
			case path != "" && (ca != "" || plaintext):
				return errors.New("--ca and --insecure go with --addr; with --config the player's cluster file says how to connect")
			case addr != "" && (ca == "") == !plaintext:
				return errors.New("with --addr, give the cluster's CA with --ca FILE, or --insecure for the player of a plaintext cluster")
			case addr != "" && ca != "":
				m, err := auth.Load(auth.Files{CA: ca})
				if err != nil {
					return err
				}
				tlsCfg = auth.ClientTLS(m)
			case path != "":
				f, err := playerd.LoadFile(path)
				if err != nil {
					return err
				}
				if f.StatusAddr == "" {
					return fmt.Errorf("%s has no status_addr", path)
				}
				addr = f.StatusAddr
				if f.Cluster != "" {
					c, err := config.Load(f.Cluster)
					if err != nil {
						return err
					}
					if tlsCfg, err = c.ClientTLS(); err != nil {
						return err
					}
				}
			}
			if tlsCfg == nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "augur: WARNING: %s\n", insecureWarning)
			}
			st, err := getPlayerStatus(cmd.Context(), addr, tlsCfg, timeout)
			if err != nil {
				return err
			}
			printPlayerStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&path, "config", "", "player file whose status_addr to ask")
	fs.StringVar(&addr, "addr", "", "the player's status address HOST:PORT (instead of --config)")
	fs.StringVar(&ca, "ca", "", "with --addr: CA certificate of the player's cluster")
	fs.BoolVar(&plaintext, "insecure", false, "with --addr: ask over plaintext HTTP (a player of an insecure: true cluster)")
	fs.DurationVar(&timeout, "timeout", defaultTimeout, "how long to wait for the player")
	return cmd
}

// getPlayerStatus asks the player at addr for its status, over HTTPS with
// tlsCfg unless it is nil.
func getPlayerStatus(ctx context.Context, addr string, tlsCfg *tls.Config, timeout time.Duration) (*playerd.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/status", nil)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("player status: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("player status: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var st playerd.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("player status: %w", err)
	}
	return &st, nil
}

func printPlayerStatus(out io.Writer, st *playerd.Status) {
	fmt.Fprintf(out, "current index %d (as of %s)\n", st.CurrentIndex, st.Time.Format(time.RFC3339))
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "TARGET\tADDR\tSTATE\tUP\tTERM\tLAST ACK\tLAG\tQUEUED\tIN FLIGHT")
	for _, t := range st.Targets {
		fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%d\t%d\t%d\t%d\t%d\n", t.Name, t.Addr, t.State, t.Up, t.Term, t.LastAck, t.Lag, t.Queued, t.Inflight)
	}
	w.Flush()
}
