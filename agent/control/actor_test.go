package control

import (
	"testing"

	"github.com/meshd/meshd/agent/state"
)

// TestActorText: every form reads back as it was written; anything else
// (the old "local:uid=..." text, a name with a capital, two relays, a
// missing node) is no actor.
func TestActorText(t *testing.T) {
	for _, a := range []Actor{
		OperatorActor(0, "c1"),
		OperatorActor(4294967295, "a-very-long-node-name-0"),
		NodeActor("c2"),
		{Node: "w1", Operator: true, UID: 1000, Via: "c2"},
		{Node: "w1", Via: "c2"},
	} {
		got, ok := ParseActor(a.String())
		if !ok || got != a {
			t.Errorf("ParseActor(%q) = %+v, %v; want %+v", a, got, ok, a)
		}
	}
	for _, s := range []string{"", "uid=0@", "uid=@c1", "uid=-1@c1", "uid=4294967296@c1", "local:uid=0,pid=7",
		"node:C1", "node:c1 via", "node:c1 via c2 via c3", "uid=0@c1 ", " node:c1", "node:-c1", "uid=0@c1\nnode:c2"} {
		if a, ok := ParseActor(s); ok {
			t.Errorf("ParseActor(%q) = %+v, want no actor", s, a)
		}
	}
	if s := OperatorActor(0, "c1").String(); s != "uid=0@c1" {
		t.Errorf("operator actor %q", s)
	}
	if s := (Actor{Node: "w1", Operator: true, Via: "c2"}).String(); s != "uid=0@w1 via c2" {
		t.Errorf("relayed actor %q", s)
	}
}

// TestForwardedJoinerActs: a joiner's own confirmation or undoing,
// forwarded by the control node that served it, keeps the joiner as its
// actor with no warning; naming another node, an operator or a relay
// still records the forwarder. On 7ec06db every join confirmed through a
// follower logged a warning on the leader and was recorded as the
// follower's.
func TestForwardedJoinerActs(t *testing.T) {
	var p *Plane // forwardedActor reads no plane for these
	c3 := Caller{Name: "c3", NodeID: "id-c3"}
	for _, tc := range []struct {
		name   string
		cmd    state.Command
		claim  string
		want   string
		accept bool
	}{
		{"confirm", state.ConfirmJoin{NodeID: "id-w9"}, "node:id-w9", "node:id-w9", true},
		{"abort", state.AbortJoin{NodeID: "id-w9"}, "node:id-w9", "node:id-w9", true},
		{"confirm of another", state.ConfirmJoin{NodeID: "id-w9"}, "node:id-w8", "node:c3", false},
		{"confirm by an operator", state.ConfirmJoin{NodeID: "id-w9"}, "uid=0@id-w9", "node:c3", false},
		{"a mint claiming a joiner", state.MintToken{}, "node:id-w9", "node:c3", false},
	} {
		got, ok := p.forwardedActor(c3, tc.cmd, tc.claim)
		if got != tc.want || ok != tc.accept {
			t.Errorf("%s: %q accepted %t, want %q accepted %t", tc.name, got, ok, tc.want, tc.accept)
		}
	}
}
