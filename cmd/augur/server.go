package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/rpcopt"
)

func newServerCmd() *cobra.Command {
	var (
		path, id, metricsAddr string
	)
	cmd := &cobra.Command{
		Use:   "server --config FILE --id NAME",
		Short: "Run one server of a cluster file (an ordering replica or a storage server) until signalled",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return errors.New("--config is required")
			}
			if id == "" {
				return errors.New("--id is required")
			}
			c, err := config.Load(path)
			if err != nil {
				return err
			}
			role, err := c.Role(id)
			if err != nil {
				return err
			}
			addr, err := c.Addr(id)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("metrics-addr") {
				metricsAddr = c.MetricsAddrOf(id)
			}
			lg := slog.Default().With("server", id)

			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			defer l.Close()
			sec, err := c.ServerSecurity(id)
			if err != nil {
				return err
			}
			if sec.IsInsecure() {
				warnInsecure(cmd.ErrOrStderr(), lg)
			} else {
				stopReload := reloadOnSignal(cmd.Context(), sec, path, lg)
				defer stopReload()
			}
			srv, err := c.NewServer(id, lg, sec)
			if err != nil {
				return err
			}
			g := grpc.NewServer(append(rpcopt.ServerOptions(), sec.ServerOptions()...)...)
			srv.Register(g)
			if metricsAddr != "" {
				stopMetrics, err := serveMetrics(metricsAddr, sec.HTTPServerTLS())
				if err != nil {
					return err
				}
				defer stopMetrics()
			}
			serveErr := make(chan error, 1)
			go func() { serveErr <- g.Serve(l) }()
			srv.Start()
			fmt.Fprintf(cmd.ErrOrStderr(), "augur: %s server %s of cluster %q listening on %s (data in %s)\n",
				role, id, c.ClusterID, l.Addr(), c.ServerDir(id))
			var err2 error
			select {
			case <-cmd.Context().Done():
			case err2 = <-serveErr:
				err2 = fmt.Errorf("serve: %w", err2)
			}
			g.Stop()
			srv.Stop()
			return err2
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "cluster file")
	cmd.Flags().StringVar(&id, "id", "", "id of the server to run, as named in the cluster file")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics here (default: the cluster file's metrics_addr for this server)")
	return cmd
}
