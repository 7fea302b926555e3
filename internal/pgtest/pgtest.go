// Package pgtest starts a throwaway PostgreSQL server for tests, from the
// binaries of the machine's PostgreSQL installation (Debian's postgresql
// package; .ci/run installs it). Without them a test skips, except under CI,
// where it fails: CI must never skip the PostgreSQL tests.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// readyTimeout bounds the wait for a started server to accept connections.
const readyTimeout = 30 * time.Second

// binDir finds the directory holding initdb and postgres.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "postgres")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- { // the newest version sorts last
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL binaries (initdb, postgres) on PATH or in /usr/lib/postgresql/*/bin")
}

// Start starts a PostgreSQL server that lives as long as the test and
// returns a connection string for it.
func Start(t testing.TB) string {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v; .ci/run installs them", err)
		}
		t.Skipf("%v (apt-get install postgresql)", err)
	}
	// PostgreSQL refuses to run as root: then run it as the postgres user,
	// in a directory that user owns.
	var cred *syscall.Credential
	dir, err := os.MkdirTemp("", "augur-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root and no postgres user to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "augur", "--auth=trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := freePort(t)
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-k", dir,
		"-c", "fsync=off", "-c", "max_connections=200")
	srv.Stdout, srv.Stderr = logFile, logFile
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := srv.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	exited := make(chan struct{})
	go func() { srv.Wait(); logFile.Close(); close(exited) }()
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			srv.Process.Kill()
			<-exited
		}
	})
	dsn := fmt.Sprintf("postgres://augur@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, dsn)
		cancel()
		if err == nil {
			c.Close(context.Background())
			return dsn
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			t.Fatalf("postgres exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres not ready within %v: %v", readyTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
