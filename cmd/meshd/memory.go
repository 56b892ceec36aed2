package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is meshd's GOGC unless the environment sets one.
//
// An idle worker's live heap is about 2 MB, but Go's heap goal also counts
// the scanned globals (about 5 MB, most of them gopacket's lookup tables,
// which Nebula links), so at GOGC 100 the heap grows to about 9 MB between
// collections, and the gossip layer's garbage (a 64 KiB buffer per received
// UDP packet, an LZW table per compressed send) keeps it there. At 50 the
// goal is about 5.5 MB: idle RSS drops by about 5 MB for one more
// collection every few seconds, each a few milliseconds of CPU. Nebula's
// data path allocates almost nothing, so the overlay's throughput does not
// see it (docs/performance.md, BenchmarkIdleRSS and
// BenchmarkOverlayThroughput).
const defaultGCPercent = 50

// tuneGC applies defaultGCPercent when GOGC is unset or empty; an
// operator's GOGC wins.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}
