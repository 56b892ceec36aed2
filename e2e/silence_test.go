//go:build e2e

package e2e

import (
	"cmp"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// silentOn is what a lighthouse's status says of its members' host
// updates (Nebula patch 9): how many it hears from, and the names of the
// silent ones.
func silentOn(t testing.TB, nd *Node) (heard int, silent []string, err error) {
	var st apitype.Status
	if err := nd.CtlJSON(t.Context(), &st, "status"); err != nil {
		return 0, nil, err
	}
	if st.Overlay == nil {
		return 0, nil, fmt.Errorf("%s: no overlay in status", nd.NodeName)
	}
	for _, m := range st.Overlay.Silent {
		silent = append(silent, m.Name)
	}
	return st.Overlay.Heard, silent, nil
}

// TestLighthouseHearsSilence (issue 54 item 3, first step): a control
// node, as lighthouse, hears every member's host updates; a worker killed
// is listed silent in its status within three lighthouse intervals and a
// tick (1 s each with the suite's fast timers; 2 s with
// MESHD_SILENCE_TIMERS=lan, meshd's default, which this measures by hand),
// and is no longer once it runs again. The time beside gossip's own
// failure detection is logged.
func TestLighthouseHearsSilence(t *testing.T) {
	n := NewNet(t)
	n.Timers = cmp.Or(os.Getenv("MESHD_SILENCE_TIMERS"), suiteTimers)
	interval := time.Second
	if n.Timers == "lan" {
		interval = 2 * time.Second
	}
	bound := 5*interval + 3*time.Second // three intervals unheard, a tick, slack for a loaded box
	nodes := cluster(t, n, "w1", "w2")
	origin, w1 := nodes[0], nodes[1]
	Eventually(t, 2*bound, "the lighthouse hears from both workers", func() error {
		heard, silent, err := silentOn(t, origin)
		if err != nil {
			return err
		}
		if heard != 2 || len(silent) != 0 {
			return fmt.Errorf("heard from %d, silent %v; want 2 and none", heard, silent)
		}
		return nil
	})

	w1.Kill()
	start := time.Now()
	var gossipFailed time.Duration
	took := Eventually(t, bound, "the killed worker listed silent", func() error {
		if gossipFailed == 0 {
			for _, x := range origin.Nodes(t) {
				if x.Name == "w1" && x.Gossip == "failed" {
					gossipFailed = time.Since(start)
				}
			}
		}
		_, silent, err := silentOn(t, origin)
		if err != nil {
			return err
		}
		if strings.Join(silent, ",") != "w1" {
			return fmt.Errorf("silent %v, want w1", silent)
		}
		return nil
	})
	t.Logf("timers %s: w1 killed, silent on the lighthouse after %v (gossip had it failed after %v; 0: not yet)",
		n.Timers, took.Round(10*time.Millisecond), gossipFailed.Round(10*time.Millisecond))
	if text := origin.MustCtl(t, "status"); !strings.Contains(text, "silent here:") || !strings.Contains(text, "w1 (") {
		t.Errorf("meshctl status on the lighthouse does not show w1 silent:\n%s", text)
	}

	w1.Start(t)
	Eventually(t, bound, "the restarted worker heard again", func() error {
		_, silent, err := silentOn(t, origin)
		if err != nil {
			return err
		}
		if len(silent) != 0 {
			return fmt.Errorf("silent %v, want none", silent)
		}
		return nil
	})
}
