package console

import (
	"fmt"
	"math"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
)

// TestDrawScales: from one node to a thousand, every node is inside the
// canvas and no two nodes (with their lighthouse rings) overlap; names are
// drawn while they fit and left to the tooltips and the table after.
func TestDrawScales(t *testing.T) {
	for _, n := range []int{1, 2, 3, 10, 20, 21, 30, 100, 1000} {
		rows := make([]nodeRow, n)
		for i := range rows {
			rows[i] = nodeRow{Node: apitype.Node{Name: fmt.Sprintf("n%04d", i)}, Lighthouse: true}
		}
		p := draw(nil, rows)
		if len(p.Nodes) != n {
			t.Fatalf("%d nodes: drew %d", n, len(p.Nodes))
		}
		for i, a := range p.Nodes {
			if a.X-a.BeaconR < 0 || a.Y-a.BeaconR < 0 || a.X+a.BeaconR > p.W || a.Y+a.BeaconR > p.H || (a.LabelY != 0 && a.LabelY > p.H) {
				t.Errorf("%d nodes: node %d at (%d,%d) r %d label %d is outside %dx%d", n, i, a.X, a.Y, a.BeaconR, a.LabelY, p.W, p.H)
			}
			if n <= 100 {
				for _, b := range p.Nodes[i+1:] {
					if d := math.Hypot(float64(a.X-b.X), float64(a.Y-b.Y)); d < float64(a.BeaconR+b.BeaconR) {
						t.Errorf("%d nodes: %s and %s overlap (%.1f apart, radius %d)", n, a.Name, b.Name, d, a.BeaconR)
					}
				}
			}
		}
		if labelled := p.Nodes[0].LabelY != 0; labelled != (n <= 20) {
			t.Errorf("%d nodes: labelled %v (radius %d)", n, labelled, p.Nodes[0].R)
		}
	}
}
