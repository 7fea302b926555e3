// Package synctrace fsyncs files and, in tests of power loss, records
// what each fsync covered.
//
// When the environment variable AUGUR_SYNC_TRACE names a file at start-up
// (tests set it; nothing else should), every Sync appends one line
// "<device> <inode> <size>" to it after the fsync returned: the file with
// that device and inode held at least size bytes on disk. A test that
// kills the process can then cut every file back to what its last fsync
// covered, which is what a power cut leaves. Without the variable Sync is
// f.Sync and nothing more.
package synctrace

import (
	"fmt"
	"os"
	"sync"
)

// EnvVar names the trace file.
const EnvVar = "AUGUR_SYNC_TRACE"

var (
	mu    sync.Mutex
	trace *os.File // nil unless tracing
)

func init() {
	path := os.Getenv(EnvVar)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "synctrace: %s=%s: %v\n", EnvVar, path, err)
		os.Exit(2)
	}
	trace = f
}

// Sync fsyncs f and, when tracing, records the length the fsync covered.
// The length is taken before the fsync (bytes written meanwhile may or may
// not be covered) and recorded after it returned, before the caller can
// count on it: a process killed in between under-reports, never over.
func Sync(f *os.File) error {
	if trace == nil {
		return f.Sync()
	}
	dev, ino, size, err := identify(f)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if _, err := fmt.Fprintf(trace, "%d %d %d\n", dev, ino, size); err != nil {
		return fmt.Errorf("synctrace: %w", err)
	}
	return nil
}
