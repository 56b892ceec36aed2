package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestEphemeralReapedSeries: a control node serves how many ephemeral
// nodes it removed (0 included), lint-clean; a worker serves none.
func TestEphemeralReapedSeries(t *testing.T) {
	st := State{Phase: "running", Running: true, Control: true, EphemeralReaped: 3}
	m := New("1.2.3", func() State { return st })
	const want = "# HELP meshd_ephemeral_reaped_total Ephemeral nodes this control node removed since its runtime started, each down (failed or left in gossip) for ephemeral_after (control nodes only).\n" +
		"# TYPE meshd_ephemeral_reaped_total counter\n" +
		"meshd_ephemeral_reaped_total 3\n"
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "meshd_ephemeral_reaped_total"); err != nil {
		t.Error(err)
	}
	st.EphemeralReaped = 0
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(strings.Replace(want, " 3\n", " 0\n", 1)), "meshd_ephemeral_reaped_total"); err != nil {
		t.Errorf("none removed: %v", err)
	}
	problems, err := testutil.GatherAndLint(m.reg, "meshd_ephemeral_reaped_total")
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	st = State{Phase: "running", Running: true}
	if n, err := testutil.GatherAndCount(m.reg, "meshd_ephemeral_reaped_total"); err != nil || n != 0 {
		t.Errorf("a worker serves %d series (%v), want none", n, err)
	}
}
