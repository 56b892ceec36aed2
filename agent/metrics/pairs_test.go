package metrics

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestOverlayUnreachableGauge: a member serves how many members its own
// probes cannot reach over the overlay (pair health), 0 included; a node
// that runs no overlay serves none.
func TestOverlayUnreachableGauge(t *testing.T) {
	st := State{Phase: "running", Running: true, OverlayKnown: true, Unreachable: 2}
	m := New("1.2.3", func() State { return st })
	const help = "# HELP meshd_overlay_unreachable_peers Members this node's own probes cannot reach over the overlay, though gossip may show them alive (a broken pair).\n" +
		"# TYPE meshd_overlay_unreachable_peers gauge\n"
	for _, n := range []int{2, 0} {
		st.Unreachable = n
		want := help + "meshd_overlay_unreachable_peers " + strconv.Itoa(n) + "\n"
		if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "meshd_overlay_unreachable_peers"); err != nil {
			t.Errorf("%d unreachable: %v", n, err)
		}
	}
	st = State{Phase: "unjoined"}
	if n, err := testutil.GatherAndCount(m.reg, "meshd_overlay_unreachable_peers"); err != nil || n != 0 {
		t.Errorf("an unjoined node serves %d series (%v), want none", n, err)
	}
}
