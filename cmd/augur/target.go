package main

import (
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
)

func newTargetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "target",
		Short: "Run a shipped target of the player",
	}
	cmd.AddCommand(newTargetKVCmd())
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
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("target kv: %w", err)
			}
			g := grpc.NewServer()
			targetsdk.Register(g, store)
			slog.Info("kv target serving", "addr", l.Addr().String(), "dir", dir)
			go func() {
				<-cmd.Context().Done()
				g.GracefulStop()
			}()
			return g.Serve(l)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", "", "address to serve the Target service on, HOST:PORT")
	fs.StringVar(&dir, "dir", "", "directory of the store's file")
	fs.BoolVar(&history, "history", false, "also keep every applied entry's index and key, to check delivery")
	return cmd
}
