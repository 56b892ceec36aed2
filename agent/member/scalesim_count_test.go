package member

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/config"
)

// simCountEnv overrides TestIdleLoopsDoNotScan's peer count.
const simCountEnv = "MESHD_SIM_COUNT_PEERS"

// TestIdleLoopsDoNotScan (issue 54, "Done when"): a real worker with
// 10,000 simulated peers on record (scalesim_*_test.go: its runtime,
// userspace Nebula, gossip and watch copy are real; the peers are records
// in a simulated control node's watch table), nothing changing: over
// countWindow its loops list its tunnels (mesh.Tunnels, RelayedTunnels:
// relaydown, pathup, the tunnel reports) and read the whole node list
// (the cluster facts' Records: reconcile, rejoin, pair health, reports) a
// bounded number of times, not once per peer or per tick. A loop put back
// on a 250 ms ticker (relaydown's was) lists the tunnels 40 times in the
// window; the bounds below allow the timers an idle worker keeps
// (docs/performance.md, "An idle worker's timers"): pair health's 10 s
// round asks for the node list once, to see whether it changed (the
// shared slice: O(1)), and reads it through (three reads, and a copy of
// the gossip members) only when it did (pairhealth_index.go); nothing
// else reads it at rest. Before, every round read it three times.
func TestIdleLoopsDoNotScan(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker with 10,000 peers on record, lets it settle past its first pair health round and watches it for 10 s")
	}
	if simRace {
		t.Skip("starts Nebula, whose handshake manager races under -race (scalesim_race_test.go); make unit runs this test without -race")
	}
	n := 10000
	if v, err := strconv.Atoi(os.Getenv(simCountEnv)); err == nil && v > 0 {
		n = v
	}
	const (
		countWindow = 10 * time.Second
	)
	settle := config.Default().PairProbe().Every + 3*time.Second // the first reload's wake-ups and the first pair health round, which builds its targets
	log := simLog()
	ca, key := newSimCluster(t)
	sc := startSimControl(t, ca, key, log)
	w := startSimWorker(t, ca, key, sc, n, log)
	time.Sleep(settle) // not a wait for an outcome: the quiet time before the window counted
	before := w.looks()
	time.Sleep(countWindow) // the window the looks are counted over
	got := w.looks().since(before)
	t.Logf("the simulated control node was asked: %v", sc.callCounts())
	t.Logf("%d peers, %s idle: node list read %d times, gossip members copied %d times, tunnels listed %d times, every known peer looked up %d times",
		n, countWindow, got.records, got.members, got.tunnels.Lists, got.tunnels.Scans)
	// Pair health's round (every 10 s) asks for the node list once (its
	// identity), and a 10 s window holds at most two rounds; nothing else
	// reads it at rest. Pair health's round as it was (three reads, every
	// round) reads it 3 to 6 times, a loop that read it every second 10
	// times, one on a 250 ms ticker 40.
	rounds := uint64(countWindow/config.Default().PairProbe().Every) + 1
	if maxRecords := rounds; got.records > maxRecords {
		t.Errorf("the node list (%d records) was asked for %d times in %s of rest, want at most %d (pair health's look whether it changed): a loop reads every peer on a timer",
			n+2, got.records, countWindow, maxRecords)
	}
	// Nothing copies the gossip members at rest but the rejoin loop's
	// look at 30 s (or on a gossip change); pair health's round copied
	// them twice a round before its targets were kept between changes.
	if maxMembers := uint64(1); got.members > maxMembers {
		t.Errorf("the gossip members were copied %d times in %s of rest, want at most %d: a loop reads every member on a timer",
			got.members, countWindow, maxMembers)
	}
	if got.tunnels.Lists > 2 || got.tunnels.Scans > 1 {
		t.Errorf("the tunnels were listed %d times and every known peer (%d) looked up %d times in %s of rest, want at most 2 and 1: a loop lists the tunnels on a timer",
			got.tunnels.Lists, n+1, got.tunnels.Scans, countWindow)
	}
}
