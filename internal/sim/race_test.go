//go:build race

package sim

// raceSeedsMax bounds TestSeeds under the race detector: each seed runs in
// one goroutine, so what the detector can find is in RunSeeds' sharing of
// results, which a hundred seeds exercise as well as a thousand, at a
// tenth of the detector's tenfold cost.
const raceSeedsMax = 100
