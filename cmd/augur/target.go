package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/augur-log/augur/internal/auth"
	targetsdk "github.com/augur-log/augur/target"
	"github.com/augur-log/augur/target/kv"
	"github.com/augur-log/augur/target/postgres"
)

func newTargetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "target",
		Short: "Run a shipped target of the player",
	}
	cmd.AddCommand(newTargetKVCmd(), newTargetPostgresCmd())
	return cmd
}

// targetTLS are the TLS flags of a target: its serving certificate, the CA
// whose client certificates (a player's, with data) it accepts, or
// --insecure.
type targetTLS struct {
	ca, cert, key string
	insecure      bool
}

func (f *targetTLS) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.ca, "ca", "", "CA certificate of the cluster whose players may apply (augur certs init)")
	fs.StringVar(&f.cert, "cert", "", "the target's certificate (augur certs issue target NAME --host HOST)")
	fs.StringVar(&f.key, "cert-key", "", "private key of --cert")
	fs.BoolVar(&f.insecure, "insecure", false, "serve plaintext to anyone, for players of an insecure: true cluster")
}

// security checks the flags and loads the material.
func (f *targetTLS) security() (*auth.Security, error) {
	if f.insecure {
		if f.ca != "" || f.cert != "" || f.key != "" {
			return nil, errors.New("--insecure does not go with --ca, --cert or --cert-key")
		}
		return auth.Insecure(), nil
	}
	if f.ca == "" || f.cert == "" || f.key == "" {
		return nil, errors.New("a target serves TLS: give --ca, --cert and --cert-key (or --insecure for plaintext)")
	}
	m, err := auth.Load(auth.Files{CA: f.ca, Cert: f.cert, Key: f.key})
	if err != nil {
		return nil, err
	}
	return auth.New(m, nil), nil
}

func newTargetKVCmd() *cobra.Command {
	var addr, dir string
	var history bool
	var tf targetTLS
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Run the embedded key-value target (a bbolt file in --dir)",
		Long: `Run the embedded key-value target: each entry the player delivers sets its
key to its payload (an empty payload deletes the key) in a bbolt file in
--dir, together with the index of the last applied entry, in one transaction.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" || dir == "" {
				return errors.New("--addr and --dir are required")
			}
			sec, err := tf.security()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			store, err := kv.Open(filepath.Join(dir, "kv.db"), kv.Options{History: history})
			if err != nil {
				return err
			}
			defer store.Close()
			return serveTarget(cmd.Context(), "kv", addr, store, sec)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", "", "address to serve the Target service on, HOST:PORT")
	fs.StringVar(&dir, "dir", "", "directory of the store's file")
	fs.BoolVar(&history, "history", false, "also keep every applied entry's index and key, to check delivery")
	tf.register(fs)
	return cmd
}

func newTargetPostgresCmd() *cobra.Command {
	var addr, dsn, table string
	var history bool
	var tf targetTLS
	cmd := &cobra.Command{
		Use:   "postgres",
		Short: "Run the PostgreSQL target (a key-value table in --dsn's database)",
		Long: `Run the PostgreSQL target: each entry the player delivers sets its key to its
payload (an empty payload deletes the key) in --table, together with the
index of the last applied entry (in TABLE_applied), in one transaction.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" || dsn == "" {
				return errors.New("--addr and --dsn are required")
			}
			sec, err := tf.security()
			if err != nil {
				return err
			}
			store, err := postgres.Open(cmd.Context(), dsn, postgres.Options{Table: table, History: history})
			if err != nil {
				return err
			}
			defer store.Close()
			return serveTarget(cmd.Context(), "postgres", addr, store, sec)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", "", "address to serve the Target service on, HOST:PORT")
	fs.StringVar(&dsn, "dsn", "", "PostgreSQL connection string, e.g. postgres://user@host:5432/db")
	fs.StringVar(&table, "table", postgres.DefaultTable, "key-value table; several targets may share a database under different tables")
	fs.BoolVar(&history, "history", false, "also keep every applied entry's index and key, to check delivery")
	tf.register(fs)
	return cmd
}

// serveTarget serves store's Target service on addr with sec until ctx
// ends.
func serveTarget(ctx context.Context, kind, addr string, store targetsdk.Store, sec *auth.Security) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("target %s: %w", kind, err)
	}
	if sec.IsInsecure() {
		warnInsecure(os.Stderr, slog.Default())
	}
	g := grpc.NewServer(sec.ServerOptions()...)
	targetsdk.Register(g, store)
	slog.Info("target serving", "kind", kind, "addr", l.Addr().String())
	go func() {
		<-ctx.Done()
		g.GracefulStop()
	}()
	return g.Serve(l)
}
