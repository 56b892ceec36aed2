package member

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/config"
)

// TestRecordLivenessFollowsTheLog (issue 54 item 3): a worker reading its
// liveness from its node list (Options.Liveness = LivenessRecords) pays
// per verdict, never per member. The scale simulation's worker (10,000
// simulated peers on record, MESHD_SIM_COUNT_PEERS to change it) learns k
// verdicts (a peer's record unheard) through its watch stream: the source
// reads one record a verdict from the change log (fetched.RecordsSince),
// no whole list; then, at rest for 10 s, it reads no record at all, and
// its members are copied at most once (the overlay loop's safety net), as
// TestIdleLoopsDoNotScan bounds gossip's.
func TestRecordLivenessFollowsTheLog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a worker with 10,000 peers on record and watches it for 23 s")
	}
	if simRace {
		t.Skip("starts Nebula, whose handshake manager races under -race (scalesim_race_test.go)")
	}
	n := 10000
	if v, err := strconv.Atoi(os.Getenv(simCountEnv)); err == nil && v > 0 {
		n = v
	}
	const (
		k          = 9
		restWindow = 10 * time.Second
	)
	log := simLog()
	ca, key := newSimCluster(t)
	sc := startSimControl(t, ca, key, log)
	w := startSimWorker(t, ca, key, sc, n, log, func(o *Options) { o.Liveness = LivenessRecords })
	heard := w.rt.heard
	if heard == nil {
		t.Fatal("the worker reads gossip's liveness: Options.Liveness was not followed")
	}
	w.await(t, 30*time.Second, "its liveness holds the list", func() bool { heard.sync(); return heard.listed() >= n })
	conv0 := heard.converted.Load()
	start := time.Now()
	for i := range k {
		id, raw := simPeer(i*97, 4242)
		var rec map[string]any
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatal(err)
		}
		rec["uh"] = time.Now().Unix()
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		sc.put(id, b, "")
		name := fmt.Sprintf("p%05d", i*97)
		w.await(t, 30*time.Second, "a peer's verdict seen", func() bool { _, ok := heard.LastSeen(name); return ok })
	}
	took := time.Since(start)
	conv := heard.converted.Load() - conv0
	t.Logf("%d verdicts at %d peers in %s: %d records read by the liveness source", k, n, took.Round(time.Millisecond), conv)
	if conv > k {
		t.Errorf("the liveness source read %d records for %d verdicts, want at most one a verdict: it reads every record", conv, k)
	}

	// The verdicts' aftermath first: the overlay passes the reload gap
	// held back and the next pair health round, which read the members
	// once each (a change's cost, not rest's).
	time.Sleep(config.Default().PairProbe().Every + 3*time.Second) // not a wait for an outcome: the quiet time before the window counted
	conv0, copies0 := heard.converted.Load(), heard.copies.Load()
	time.Sleep(restWindow) // not a wait for an outcome: the window the reads are counted over
	conv, copies := heard.converted.Load()-conv0, heard.copies.Load()-copies0
	t.Logf("%s at rest: %d records read, members copied %d times", restWindow, conv, copies)
	if conv != 0 {
		t.Errorf("the liveness source read %d records at rest, want none: it scans on a timer", conv)
	}
	if copies > 1 {
		t.Errorf("the members were copied %d times in %s of rest, want at most 1: a loop reads every member on a timer", copies, restWindow)
	}
}

// listed is how many members the source holds.
func (l *recordLiveness) listed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byID)
}
