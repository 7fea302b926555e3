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
//
// When AUGUR_SYNC_DELAY holds a Go duration at start-up (tests of a slow
// disk set it; nothing else should), every Sync waits that long before
// the fsync: a disk whose flushes are slow, without root or kernel
// features. Writes to the page cache stay fast, as they do on such a
// disk.
package synctrace

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// EnvVar names the trace file.
const EnvVar = "AUGUR_SYNC_TRACE"

// DelayEnvVar holds the delay added to every Sync.
const DelayEnvVar = "AUGUR_SYNC_DELAY"

var (
	mu    sync.Mutex
	trace *os.File // nil unless tracing
	// delay is added before every fsync; 0 unless DelayEnvVar is set.
	delay time.Duration
)

func init() {
	if v := os.Getenv(DelayEnvVar); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			fmt.Fprintf(os.Stderr, "synctrace: %s=%s: want a duration >= 0\n", DelayEnvVar, v)
			os.Exit(2)
		}
		delay = d
	}
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
	if delay > 0 {
		time.Sleep(delay) // the slow disk of a test, not synchronisation
	}
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
