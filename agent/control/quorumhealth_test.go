package control_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/codes"
)

// TestQuorumWarnings: no leader warns NoLeaderWarning; a leader with no
// more voters reachable than a quorum needs, one of them down, warns
// QuorumAtRisk naming the unreachable; a full or a one-voter quorum warns
// nothing.
func TestQuorumWarnings(t *testing.T) {
	v := func(name string, up bool) apitype.Voter {
		return apitype.Voter{Name: name, Reachable: up, LastContactMS: -1}
	}
	q := func(leader string, vs ...apitype.Voter) apitype.Quorum {
		out := apitype.Quorum{Leader: leader, Voters: vs, Needed: len(vs)/2 + 1}
		for _, x := range vs {
			if x.Reachable {
				out.Reachable++
			}
		}
		return out
	}
	tests := []struct {
		name   string
		q      apitype.Quorum
		want   []codes.Code
		naming string
	}{
		{"ok/one-voter", q("c1", v("c1", true)), nil, ""},
		{"ok/three-up", q("c1", v("c1", true), v("c2", true), v("c3", true)), nil, ""},
		{"ok/five-one-down", q("c1", v("c1", true), v("c2", true), v("c3", true), v("c4", true), v("c5", false)), nil, ""},
		{"warn/three-one-down", q("c1", v("c1", true), v("c2", true), v("c3", false)), []codes.Code{codes.QuorumAtRisk}, "c3"},
		{"warn/five-two-down", q("c1", v("c1", true), v("c2", false), v("c3", true), v("c4", true), v("c5", false)), []codes.Code{codes.QuorumAtRisk}, "c2, c5"},
		{"warn/stale-leader-minority", q("c1", v("c1", false), v("c2", false), v("c3", true)), []codes.Code{codes.QuorumAtRisk}, "c1, c2"},
		{"warn/no-leader", q("", v("c1", true), v("c2", true), v("c3", true)), []codes.Code{codes.NoLeaderWarning}, ""},
		{"warn/no-leader-two-down", q("", v("c1", true), v("c2", false), v("c3", false)), []codes.Code{codes.NoLeaderWarning}, "c2, c3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := control.QuorumWarnings(tt.q)
			var got []codes.Code
			for _, w := range ws {
				got = append(got, w.Code)
				if tt.naming != "" && !strings.Contains(w.Detail, "unreachable: "+tt.naming) {
					t.Errorf("%s detail %q does not name %s", w.Code, w.Detail, tt.naming)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("warnings %v, want %v (%+v)", got, tt.want, ws)
			}
		})
	}
}
