package auth_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/auth"
)

// reloadWait bounds how long a test waits for Watch to pick a change up.
const reloadWait = 10 * time.Second

// TestWatchReloads checks both triggers of a reload, a changed file and
// SIGHUP, and that a broken file keeps the previous material.
func TestWatchReloads(t *testing.T) {
	dir := t.TempDir()
	ca, err := auth.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	// write puts a certificate named name where the material reads "me".
	write := func(name string) {
		t.Helper()
		cert, key, err := ca.IssueClient(name, auth.Data, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := auth.WritePair(dir, "me", cert, key); err != nil {
			t.Fatal(err)
		}
	}
	write("v1")
	m, err := auth.Load(auth.Files{CA: filepath.Join(dir, auth.CACertFile), Cert: auth.CertPath(dir, "me"), Key: auth.KeyPath(dir, "me")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	hup := make(chan os.Signal, 1)
	hups := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Watch(ctx, hup, func() { hups <- struct{}{} }, slog.New(slog.DiscardHandler))
	}()
	defer func() { cancel(); <-done }()
	waitName := func(want string) {
		t.Helper()
		deadline := time.Now().Add(reloadWait)
		for m.Name() != want {
			if time.Now().After(deadline) {
				t.Fatalf("certificate %q after %v, want %q", m.Name(), reloadWait, want)
			}
			time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
		}
	}

	// A changed file is picked up by the poll.
	write("v2")
	waitName("v2")

	// SIGHUP reloads (and runs the callback) even when no time stamp moved.
	write("v3")
	hup <- os.Interrupt
	<-hups
	waitName("v3")

	// A key that does not match its certificate is refused, and the
	// material in use stays.
	if err := os.WriteFile(auth.KeyPath(dir, "me"), []byte("broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Reload(); err == nil {
		t.Fatal("a broken key was loaded")
	}
	if m.Name() != "v3" {
		t.Fatalf("after a failed reload the certificate is %q, want v3", m.Name())
	}
}
