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
	"google.golang.org/grpc"

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

func newTargetKVCmd() *cobra.Command {
	var addr, dir string
	var history bool
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
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			store, err := kv.Open(filepath.Join(dir, "kv.db"), kv.Options{History: history})
			if err != nil {
				return err
			}
			defer store.Close()
			return serveTarget(cmd.Context(), "kv", addr, store)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", "", "address to serve the Target service on, HOST:PORT")
	fs.StringVar(&dir, "dir", "", "directory of the store's file")
	fs.BoolVar(&history, "history", false, "also keep every applied entry's index and key, to check delivery")
	return cmd
}

func newTargetPostgresCmd() *cobra.Command {
	var addr, dsn, table string
	var history bool
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
			store, err := postgres.Open(cmd.Context(), dsn, postgres.Options{Table: table, History: history})
			if err != nil {
				return err
			}
			defer store.Close()
			return serveTarget(cmd.Context(), "postgres", addr, store)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", "", "address to serve the Target service on, HOST:PORT")
	fs.StringVar(&dsn, "dsn", "", "PostgreSQL connection string, e.g. postgres://user@host:5432/db")
	fs.StringVar(&table, "table", postgres.DefaultTable, "key-value table; several targets may share a database under different tables")
	fs.BoolVar(&history, "history", false, "also keep every applied entry's index and key, to check delivery")
	return cmd
}

// serveTarget serves store's Target service on addr until ctx ends.
func serveTarget(ctx context.Context, kind, addr string, store targetsdk.Store) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("target %s: %w", kind, err)
	}
	g := grpc.NewServer()
	targetsdk.Register(g, store)
	slog.Info("target serving", "kind", kind, "addr", l.Addr().String())
	go func() {
		<-ctx.Done()
		g.GracefulStop()
	}()
	return g.Serve(l)
}
