package member

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/fetched"
)

// TestChangeConvertsTheChange (issue 54 item 2): a real worker with
// 10,000 simulated peers on record (scalesim_*_test.go) takes membership
// changes through its watch stream (a peer added, moved, removed and
// blocked, in turn) and its overlay loop converts only the records that
// changed: no pass reads the whole node list, converts every record or
// has the watch copy build the list in order. A pass that went back to
// reading every record converts 10,000 records per change and fails.
// The bounds leave room for the timers that read the list at rest (pair
// health's round every 10 s, the list's save).
func TestChangeConvertsTheChange(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker with 10,000 peers on record")
	}
	if simRace {
		t.Skip("starts Nebula, whose handshake manager races under -race (scalesim_race_test.go)")
	}
	n := 10000
	if v, err := strconv.Atoi(os.Getenv(simCountEnv)); err == nil && v > 0 {
		n = v
	}
	const k = 9
	log := simLog()
	ca, key := newSimCluster(t)
	sc := startSimControl(t, ca, key, log)
	w := startSimWorker(t, ca, key, sc, n, log)
	copies, ok := w.reads.clusterFacts.(*fetched.Copies)
	if !ok {
		t.Fatalf("the worker's cluster facts are %T, not its fetched copies", w.reads.clusterFacts)
	}
	// The worker's own inputs settle first: its NAT check's outcome
	// changes what every record contributes (the relays it offers), a
	// whole-config pass, not a membership change's; the first change
	// after it is that pass's and is not counted.
	w.await(t, 30*time.Second, "its NAT checked", func() bool { return w.rt.nat.get() != natUnknown })
	w.change(t, sc, n, 0)
	start := time.Now()
	reads0, conv0, builds0 := w.reads.records.Load(), w.rt.ov.converted.Load(), copies.Stats().ListBuilds
	for i := 1; i <= k; i++ {
		w.change(t, sc, n, i)
	}
	took := time.Since(start)
	reads, conv := w.reads.records.Load()-reads0, w.rt.ov.converted.Load()-conv0
	builds := copies.Stats().ListBuilds - builds0
	t.Logf("%d changes at %d peers in %s: %d records converted by the overlay loop, node list read %d times, built %d times",
		k, n, took.Round(time.Millisecond), conv, reads, builds)
	if conv > k {
		t.Errorf("the overlay loop converted %d records for %d changes, want at most one a change: a pass reads every record", conv, k)
	}
	rounds := uint64(took/config.Default().PairProbe().Every) + 1 // pair health reads the list three times a round
	if reads > 3*rounds {
		t.Errorf("the node list (%d records) was read %d times over %d changes in %s, want at most %d", n+2, reads, k, took, 3*rounds)
	}
	if saves := 1; builds > int(reads)+saves {
		t.Errorf("the watch copy built the list %d times over %d changes (node list read %d times, %d saves), want no more: a change copies the list",
			builds, k, reads, saves)
	}
}
