package main

import (
	"os"
	"runtime/debug"
)

// gcPercent is the collector's heap-growth target when GOGC is unset. An
// augur server keeps a small live heap (a few MiB of indexes and pending
// appends) while, under load, it allocates one or two copies of every record
// it receives and forwards. With Go's default of 100 the collector then runs
// many times a second and costs about a tenth of the CPU; 400 lets the heap
// grow to five times its live size between collections. A loaded embedded
// cluster (7 servers and the bench's clients, 10,000 4 KiB records/s) peaks
// at about 150 MiB resident with it, 65 MiB without. GOGC, when set, wins.
const gcPercent = 400

func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	debug.SetGCPercent(gcPercent)
}
