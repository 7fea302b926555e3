//go:build !unix

package synctrace

import (
	"fmt"
	"os"
)

// identify is unsupported here: tracing needs inodes.
func identify(f *os.File) (dev, ino uint64, size int64, err error) {
	return 0, 0, 0, fmt.Errorf("synctrace: tracing %s needs a unix system", f.Name())
}
