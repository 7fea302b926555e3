//go:build !unix

package raftnode

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockDir only creates the lock file where flock is unavailable; exclusive use
// of Dir is then the operator's responsibility.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	return f, nil
}
