package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/augur-log/augur/internal/auth"
	"github.com/augur-log/augur/internal/config"
	"github.com/augur-log/augur/internal/devcluster"
)

// insecureWarning is what a plaintext cluster says wherever it is seen.
const insecureWarning = "INSECURE: this cluster runs without TLS (insecure: true): anyone who can reach its ports can read, append, trim, finalize shards and take part in Raft"

func warnInsecure(w io.Writer, lg *slog.Logger) {
	lg.Warn(insecureWarning)
	fmt.Fprintf(w, "augur: WARNING: %s\n", insecureWarning)
}

// reloadOnSignal reloads sec's certificates and tokens when their files
// change or on SIGHUP, which also rereads the members of the cluster file
// at path; the returned stop ends it.
func reloadOnSignal(ctx context.Context, sec *auth.Security, path string, lg *slog.Logger) (stop func()) {
	return watchMaterial(ctx, sec.Material(), func() {
		c, err := config.Load(path)
		if err != nil {
			lg.Error("reload: cluster file; keeping the previous members", "err", err)
			return
		}
		sec.SetMembers(c.Members())
	}, lg)
}

// watchMaterial reloads m when its files change or on SIGHUP, which also
// calls onHUP (nil for nothing); the returned stop ends it.
func watchMaterial(ctx context.Context, m *auth.Material, onHUP func(), lg *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Watch(ctx, hup, onHUP, lg)
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}

// printConnect tells how to reach a dev cluster from other programs.
func printConnect(w io.Writer, dc *devcluster.Cluster) {
	dir := dc.CertDir()
	if dir == "" {
		fmt.Fprintf(w, "security           NONE (--insecure): plaintext, no authentication\n")
		return
	}
	fmt.Fprintf(w, "security           TLS; the cluster file names the certificates\n")
	fmt.Fprintf(w, "  CA               %s\n", filepath.Join(dir, auth.CACertFile))
	fmt.Fprintf(w, "  admin client     --cert %s --cert-key %s\n", auth.CertPath(dir, config.AdminClient), auth.KeyPath(dir, config.AdminClient))
	fmt.Fprintf(w, "  more clients     augur certs issue --config CLUSTER_FILE client NAME --perm data\n")
	fmt.Fprintf(w, "  tokens           augur token add --file %s NAME --perm data\n", dc.TokensFile())
}
