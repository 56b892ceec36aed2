package control

import "testing"

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
