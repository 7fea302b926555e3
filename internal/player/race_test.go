//go:build race

package player

// raceEnabled trims the longest runs under the race detector, which slows
// this single-goroutine core about tenfold and has no goroutines to watch
// in it.
const raceEnabled = true
