//go:build unix

package synctrace

import (
	"fmt"
	"os"
	"syscall"
)

// identify returns f's device, inode and size.
func identify(f *os.File) (dev, ino uint64, size int64, err error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, 0, fmt.Errorf("synctrace: no inode for %s", f.Name())
	}
	return uint64(st.Dev), uint64(st.Ino), fi.Size(), nil
}
