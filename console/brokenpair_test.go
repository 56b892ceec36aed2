package console

import (
	"html"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
)

// TestMeshPictureBrokenPair: a broken pair of the cluster-wide view is
// drawn as a broken edge in place of its tunnel, with a tooltip naming
// which end cannot reach which, and the caption and title count it.
func TestMeshPictureBrokenPair(t *testing.T) {
	fake := newFake()
	fake.tunnels.Broken = []apitype.TunnelBreak{{A: "cp1", B: "w1", From: []string{"w1"}}}
	c := startConsole(t, fake)
	c.login()
	_, body := c.get("/")
	if n := strings.Count(body, `<line class="edge`); n != 3 {
		t.Errorf("%d edges, want 3 (cp1-w1 broken, cp1-w2, w1-w2)", n)
	}
	if n := strings.Count(body, `<line class="edge broken"`); n != 1 {
		t.Errorf("%d broken edges, want 1", n)
	}
	for _, want := range []string{"cp1 ↮ w1: w1 cannot reach cp1 over the overlay", "3 nodes, 2 tunnels, 1 broken</title>",
		"a red dotted edge is a broken pair"} {
		if !strings.Contains(body, html.EscapeString(want)) && !strings.Contains(body, want) {
			t.Errorf("the mesh page lacks %q", want)
		}
	}
}
