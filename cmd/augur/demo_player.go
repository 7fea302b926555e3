package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/devcluster"
	"github.com/augur-log/augur/internal/mode"
	"github.com/augur-log/augur/internal/player"
	"github.com/augur-log/augur/internal/playerd"
	targetsdk "github.com/augur-log/augur/target"
	"github.com/augur-log/augur/target/kv"
)

// Bounds of `augur demo player`.
const (
	demoPlayerTargetsMax = 20
	// demoPlayerKeys is how many keys the demo's records spread over.
	demoPlayerKeys = 100
	// demoPlayerCatchUp bounds the wait for the targets once appends stop.
	demoPlayerCatchUp = 30 * time.Second
	// demoPlayerAckTimeout is the player's ack timeout in the demo; the
	// status it prints refreshes every quarter of it.
	demoPlayerAckTimeout = 2 * time.Second
)

type demoPlayerFlags struct {
	mode     string
	duration time.Duration
	targets  int
	rate     int
}

func newDemoPlayerCmd() *cobra.Command {
	var f demoPlayerFlags
	cmd := &cobra.Command{
		Use:   "player",
		Short: "Start a cluster, kv targets and the player in this process, and show entries flowing",
		Long: `Start a whole cluster in this process, --targets embedded kv targets (bbolt
files in a temporary directory) and the exactly-once player, append at --rate
for --duration with keys spread over the targets by hash, print each target's
state, last applied index and lag every second, and at the end check that
every target applied exactly its entries of the log, in log order.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var errs []error
			if _, err := mode.Lookup(f.mode); err != nil {
				errs = append(errs, fmt.Errorf("--mode: %w", err))
			}
			if f.duration <= 0 {
				errs = append(errs, fmt.Errorf("--duration must be positive, got %v", f.duration))
			}
			if f.targets < 1 || f.targets > demoPlayerTargetsMax {
				errs = append(errs, fmt.Errorf("--targets must be in [1, %d], got %d", demoPlayerTargetsMax, f.targets))
			}
			if f.rate < 1 {
				errs = append(errs, fmt.Errorf("--rate must be positive, got %d", f.rate))
			}
			if err := errors.Join(errs...); err != nil {
				return err
			}
			return runDemoPlayer(cmd.Context(), f, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.mode, "mode", mode.EagerName, "ordering mode of the cluster: eager or spec")
	fs.DurationVar(&f.duration, "duration", 5*time.Second, "how long to append")
	fs.IntVar(&f.targets, "targets", 3, "kv targets")
	fs.IntVar(&f.rate, "rate", 500, "appends per second")
	return cmd
}

func runDemoPlayer(ctx context.Context, f demoPlayerFlags, out io.Writer) error {
	dc, err := devcluster.Start(ctx, devcluster.Options{Logger: slog.Default(), Mode: f.mode, TLS: true})
	if err != nil {
		return err
	}
	defer dc.Close()
	readyCtx, cancel := context.WithTimeout(ctx, devReadyTimeout)
	err = dc.WaitReady(readyCtx)
	cancel()
	if err != nil {
		return err
	}
	cfg := dc.Config()
	cl, err := client.Dial(ctx, dc.ClientConfig())
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Fprintf(out, "cluster %q (%s order) ready\n", cfg.ClusterID, f.mode)

	dir, err := os.MkdirTemp("", "augur-demo-player-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pcfg := playerd.Config{Core: player.Config{Route: player.RouteKeyHash}, AckTimeout: demoPlayerAckTimeout,
		Creds: credentials.NewTLS(dc.ClientConfig().TLS)}
	stores := make([]*kv.Store, f.targets)
	for i := range stores {
		name := fmt.Sprint("kv", i+1)
		s, err := kv.Open(filepath.Join(dir, name+".db"), kv.Options{History: true})
		if err != nil {
			return err
		}
		defer s.Close()
		stores[i] = s
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		sec, err := dc.TargetSecurity(name)
		if err != nil {
			return err
		}
		g := grpc.NewServer(sec.ServerOptions()...)
		targetsdk.Register(g, s)
		go g.Serve(l)
		defer g.Stop()
		pcfg.Targets = append(pcfg.Targets, playerd.TargetSpec{Name: name, Addr: l.Addr().String()})
	}
	srv, err := playerd.New(pcfg, playerd.ClientLog{C: cl})
	if err != nil {
		return err
	}
	pctx, stopPlayer := context.WithCancel(ctx)
	defer stopPlayer()
	playerDone := make(chan error, 1)
	go func() { playerDone <- srv.Run(pctx) }()
	fmt.Fprintf(out, "player delivering to %d kv targets; appending %d records/s for %v\n\n", f.targets, f.rate, f.duration)

	// Append open loop at the rate, one goroutine; print the status every
	// second meanwhile.
	var wg sync.WaitGroup
	appendCtx, stopAppends := context.WithTimeout(ctx, f.duration)
	defer stopAppends()
	wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(f.rate))
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-appendCtx.Done():
				return
			case <-tick.C:
			}
			rec := client.Record{Key: fmt.Sprint("user", n%demoPlayerKeys), Payload: fmt.Appendf(nil, "event %d", n)}
			cl.AppendAsync(appendCtx, rec, func(client.Ack, error) {})
		}
	})
	every := time.NewTicker(time.Second)
	defer every.Stop()
	for appendCtx.Err() == nil {
		select {
		case <-appendCtx.Done():
		case <-every.C:
			printDemoPlayerStatus(out, srv.Status())
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}

	// The log as the targets must have it.
	tail, err := cl.CheckTail(ctx)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, demoPlayerCatchUp)
	entries, err := cl.ReadRange(rctx, 0, int(max(tail, 1)))
	cancel()
	if err != nil && tail > 0 {
		return fmt.Errorf("read the log: %w", err)
	}
	want := make([][]kv.Applied, f.targets)
	ccore := player.Config{Route: player.RouteKeyHash}
	for _, t := range pcfg.Targets {
		ccore.Targets = append(ccore.Targets, t.Name)
	}
	for _, e := range entries {
		pe := player.Entry{Key: e.Record.Key}
		for _, id := range player.TargetsOf(ccore, &pe) {
			want[id] = append(want[id], kv.Applied{Index: e.Position + 1, Key: e.Record.Key})
		}
	}
	deadline := time.Now().Add(demoPlayerCatchUp)
	for {
		st := srv.Status()
		done := true
		for i, ts := range st.Targets {
			if n := len(want[i]); n > 0 && ts.LastAck < want[i][n-1].Index {
				done = false
			}
		}
		if done {
			fmt.Fprintln(out, "\nappends stopped; every target caught up:")
			printDemoPlayerStatus(out, st)
			break
		}
		if time.Now().After(deadline) {
			printDemoPlayerStatus(out, st)
			return fmt.Errorf("the targets did not catch up within %v", demoPlayerCatchUp)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-every.C:
		}
	}
	stopPlayer()
	<-playerDone

	fmt.Fprintf(out, "\n%d records in the log.\n", len(entries))
	ok := true
	for i, s := range stores {
		got, err := s.History()
		if err != nil {
			return err
		}
		got = slices.DeleteFunc(got, func(a kv.Applied) bool { return a.Index > tail })
		same := slices.Equal(got, want[i])
		ok = ok && same
		verdict := "exactly its entries, in log order"
		if !same {
			verdict = "NOT its entries in log order"
		}
		fmt.Fprintf(out, "%s applied %d entries: %s\n", pcfg.Targets[i].Name, len(got), verdict)
	}
	if !ok {
		return errors.New("a target's applied sequence differs from the log's")
	}
	return nil
}

func printDemoPlayerStatus(out io.Writer, st *playerd.Status) {
	fmt.Fprintf(out, "log index %d\n", st.CurrentIndex)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  TARGET\tSTATE\tLAST APPLIED\tLAG")
	for _, t := range st.Targets {
		fmt.Fprintf(w, "  %s\t%s\t%d\t%d\n", t.Name, t.State, t.LastAck, t.Lag)
	}
	w.Flush()
}
