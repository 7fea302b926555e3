//go:build !unix

package bench

import (
	"errors"
	"time"
)

// CPUTime is not available here: getrusage is a Unix call.
func CPUTime() (time.Duration, error) {
	return 0, errors.New("cpu time: getrusage is not available on this platform")
}
