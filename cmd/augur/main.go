// Command augur runs augur's servers and talks to a cluster: `augur demo`
// shows a whole cluster at work in one process, `augur dev` keeps one up for
// experiments, `augur server` runs one role of a real cluster from a cluster
// file, the client commands append, read, subscribe and administer, and
// `augur bench` measures.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	tuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "augur: %v\n", err)
		stop()
		os.Exit(1)
	}
}

// rootFlags are the flags every command shares.
type rootFlags struct {
	logLevel string
}

func newRootCmd() *cobra.Command {
	var rf rootFlags
	root := &cobra.Command{
		Use:   "augur",
		Short: "augur is a shared log: durable, fault-tolerant, totally ordered",
		Long: `augur is a shared log: a durable, fault-tolerant, totally ordered sequence of
records stored across many shards (Scalog-style ordering).

Start with:
  augur demo                      # a whole cluster in this process, under load
  augur dev                       # keep a local cluster up; prints its cluster file
  augur status --config FILE      # look at a cluster`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			lg, err := newLogger(rf.logLevel)
			if err != nil {
				return err
			}
			slog.SetDefault(lg)
			return nil
		},
	}
	root.PersistentFlags().StringVar(&rf.logLevel, "log-level", "warn", "log level on stderr: debug, info, warn or error")
	root.AddCommand(
		newDemoCmd(),
		newDevCmd(),
		newServerCmd(),
		newAppendCmd(),
		newReadCmd(),
		newSubscribeCmd(),
		newTailCmd(),
		newTrimCmd(),
		newStatusCmd(),
		newShardCmd(),
		newBenchCmd(),
		newSimCmd(),
		newTargetCmd(),
		newPlayerCmd(),
		newCertsCmd(),
		newTokenCmd(),
	)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())
	})
	return root
}

// newLogger returns a text logger on stderr at level.
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// interrupted reports whether err is the end of the command's context, a
// normal way for a long-running command to stop.
func interrupted(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, ctx.Err()))
}

// noArgsHint rejects stray positional arguments with a hint.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), strings.Join(args, " "))
	}
	return nil
}
