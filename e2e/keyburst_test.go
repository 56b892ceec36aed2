//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// Issue 31's "done when": an image baked with one key file comes up 50
// times at once, and every copy joins under its own name. Each machine is
// a meshd of its own in its own namespace, started unjoined, and runs
// `meshctl join --token-file` with the same file at the same moment.

// keyBurstMachines is how many copies of the image come up at once.
const keyBurstMachines = 50

// keyBurstTarget is the first start to last exit the report holds a
// round to (bench/report's TestKeyBurst50 row): the one-time tokens'
// burst bound (TestJoinBurst50). Issue 31 asks that every copy join under
// its own name, which the test asserts; the time is recorded and judged
// in the report, not here: on this 2-core box 53 meshd share the CPU that
// 53 machines would each have (docs/performance.md).
const keyBurstTarget = 10 * time.Second

// TestKeyBurst50: 50 machines join at once with one key file of 50 uses
// (name prefix web-) through 3 control nodes, as many rounds as
// TestJoinBurst50, each on a new cluster: every join exits 0 under a name
// the cluster gave, web-1..web-50 each once; every control node lists
// each active and alive at the overlay IP its join reported, no IP twice
// (checkBurst); the key is used 50 times, 0 left, exhausted. The time is
// recorded against keyBurstTarget. It runs only with MESHD_BURST=1 (make
// bench), with MESHD_BURST_TIMERS as the burst does: 53 meshd processes.
func TestKeyBurst50(t *testing.T) {
	if os.Getenv(burstEnv) != "1" {
		t.Skip("set " + burstEnv + "=1 (make bench)")
	}
	var rounds []burstStats
	for round := range burstRounds() {
		t.Run(fmt.Sprintf("round%d", round+1), func(t *testing.T) {
			neighbourRoom(t, 3+keyBurstMachines)
			n, timers := burstNet(t)
			controls := controlCluster(t, n)
			stopCleanly(t, n, controls)
			prioritize(t, controls, controlNice)
			var key apitype.AdmitResponse
			err := controls[0].CtlJSON(t.Context(), &key, "admit", "--reusable", "--uses", strconv.Itoa(keyBurstMachines), "--name-prefix", "web-")
			if err != nil {
				t.Fatal(err)
			}
			keyFile := filepath.Join(t.TempDir(), "web.key") // what the image bakes
			if err := os.WriteFile(keyFile, []byte(key.Token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			ws := burstWorkers(t, n, "m", keyBurstMachines)
			keepBurstLogs(t, append(controls, ws...))
			joins := make([]*burstJoin, len(ws))
			for i, w := range ws {
				joins[i] = &burstJoin{w: w, args: []string{"--token-file", keyFile}, out: &stampedLines{}}
			}
			runBurst(t, joins, 60*time.Second)
			s := statsOf(joins)
			t.Logf("%d machines with one key file at once through 3 control nodes (timers: %s): %s\nwhere the joins spent their time:\n%s",
				keyBurstMachines, timers, s, phaseReport(joins))
			recordBurst(t, timers, joins)
			checkKeyBurst(t, timers, controls, joins, key.ID)
			rounds = append(rounds, s)
			if s.total > keyBurstTarget {
				t.Logf("first start to last exit %s: the report's target is %s (missed)", s.total.Round(time.Millisecond), keyBurstTarget)
			}
		})
	}
	for i, s := range rounds {
		t.Logf("round %d: %s", i+1, s)
	}
}

// checkKeyBurst asserts what a key's burst leaves: each join that exited
// 0 said the name the cluster gave it, web-1..web-N each once (the
// machine's node is renamed to it for checkBurst); then checkBurst, its
// settle time recorded; and the key's row used N times, 0 left,
// exhausted.
func checkKeyBurst(t testing.TB, timers string, controls []*Node, joins []*burstJoin, keyID string) {
	t.Helper()
	var names []string
	for _, j := range joins {
		if j.code != 0 {
			continue // checkBurst reports it
		}
		m := joinedAs.FindStringSubmatch(j.out.String())
		if m == nil {
			t.Fatalf("%s's join exited 0 without naming the node it became:\n%s", j.w.Host.Name, j.out)
		}
		j.w.NodeName = m[1]
		names = append(names, m[1])
	}
	recordSettle(t, timers, joins, checkBurst(t, controls, joins, burstSettle))
	slices.Sort(names)
	want := make([]string, len(joins))
	for i := range want {
		want[i] = fmt.Sprintf("web-%d", i+1)
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("%d machines with a key of %d uses joined as %v; want web-1..web-%d each once", len(joins), len(joins), names, len(joins))
	}
	var toks []apitype.Token
	if err := controls[0].CtlJSON(t.Context(), &toks, "tokens"); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(toks, func(tk apitype.Token) bool { return tk.ID == keyID })
	if i < 0 {
		t.Fatalf("tokens lists no key %s", keyID)
	}
	if k := toks[i]; k.Key == nil || k.Key.Used != len(joins) || k.Key.Left != 0 || k.State != apitype.TokenExhausted {
		t.Fatalf("the key's row after the burst: %+v (key %+v); want used %d, 0 left, %s", k, k.Key, len(joins), apitype.TokenExhausted)
	}
}
