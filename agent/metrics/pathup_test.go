package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPathUpSeries: a member serves the path upgrader's tries by outcome
// (every outcome, 0 included, so a rate works from the first scrape) and
// how many of its tunnels are relayed; a node that runs no overlay serves
// neither, and one whose upgrader is not known serves no tries, and
// the values lint clean.
func TestPathUpSeries(t *testing.T) {
	st := State{Phase: "running", Running: true, OverlayKnown: true, Tunnels: 3, Relayed: 2,
		PathUpKnown: true, PathUpDirect: 4, PathUpFailed: 0, PathUpSkipped: 1}
	m := New("1.2.3", func() State { return st })
	const want = "# HELP meshd_overlay_tunnels_relayed Established Nebula tunnels that go through a relay, not a direct path (of meshd_overlay_tunnels).\n" +
		"# TYPE meshd_overlay_tunnels_relayed gauge\n" +
		"meshd_overlay_tunnels_relayed 2\n" +
		"# HELP meshd_pathup_tries_total Tries to move a relayed tunnel onto a direct path since the runtime started, by outcome: direct (moved), failed (no candidate address answered; the tunnel was rebuilt) or skipped (not tried: both nodes behind NATs, one symmetric; once per peer each time it begins to be skipped).\n" +
		"# TYPE meshd_pathup_tries_total counter\n" +
		"meshd_pathup_tries_total{outcome=\"direct\"} 4\n" +
		"meshd_pathup_tries_total{outcome=\"failed\"} 0\n" +
		"meshd_pathup_tries_total{outcome=\"skipped\"} 1\n"
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "meshd_overlay_tunnels_relayed", "meshd_pathup_tries_total"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(m.reg, "meshd_pathup_tries_total", "meshd_overlay_tunnels_relayed"); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	st.PathUpKnown = false
	if n, err := testutil.GatherAndCount(m.reg, "meshd_pathup_tries_total"); err != nil || n != 0 {
		t.Errorf("no upgrader: %d series (%v), want none", n, err)
	}
	st = State{Phase: "unjoined"}
	if n, err := testutil.GatherAndCount(m.reg, "meshd_pathup_tries_total", "meshd_overlay_tunnels_relayed"); err != nil || n != 0 {
		t.Errorf("an unjoined node serves %d series (%v), want none", n, err)
	}
}
