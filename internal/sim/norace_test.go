//go:build !race

package sim

// raceSeedsMax does not bound TestSeeds without the race detector.
const raceSeedsMax = 1 << 30
