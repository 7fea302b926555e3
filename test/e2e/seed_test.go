package e2e

import (
	"flag"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("e2e.seed", 0, "seed of the tests' random choices (0: a new one, printed)")

// testSeed returns the seed of t's random choices (victims, read
// positions, fault rounds) and prints it with the command that runs t with
// it again. Real processes add their own timing, so a replay repeats the
// choices, not every interleaving.
func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d; replay its choices with: go test ./test/e2e -run '^%s$' -e2e.seed=%d -v", seed, t.Name(), seed)
	return seed
}
