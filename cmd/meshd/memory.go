package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is meshd's GOGC unless the environment sets one.
//
// Go's heap goal is the live heap plus GOGC% of the live heap and the
// scanned roots (globals, stacks). When meshd linked gopacket's lookup
// tables (5 MB of scanned globals, third_party/gopacket says why they are
// gone) and memberlist's transport left 64 KiB of garbage per received
// packet (gossip/transport.go), GOGC 50 cut an idle worker's RSS by about
// 5 MB. With both gone the two settings differ by well under a megabyte
// (idle worker 22.6-23.1 MB at 50, 22.4-23.6 MB at 100;
// docs/performance.md); 50 is kept, since an idle node now collects
// rarely and each collection costs a few milliseconds.
// Nebula's data path allocates almost nothing, so the overlay's throughput
// does not see it (BenchmarkOverlayThroughput).
const defaultGCPercent = 50

// tuneGC applies defaultGCPercent when GOGC is unset or empty; an
// operator's GOGC wins.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}
