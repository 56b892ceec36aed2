package desired

import (
	"maps"
	"testing"

	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
)

func TestView(t *testing.T) {
	steady := map[string]gossip.Status{"c1": gossip.StatusAlive, "c2": gossip.StatusAlive, "w1": gossip.StatusAlive}
	for _, tc := range []struct {
		name   string
		change func(*Inputs)
		want   map[string]gossip.Status
	}{
		{
			name:   "steady state: serf's statuses",
			change: func(*Inputs) {},
			want:   steady,
		},
		{
			name: "a removed node still alive in serf is left at once",
			change: func(in *Inputs) {
				in.Records = in.Records[:2]
				in.Gone = []string{"id-w1"}
			},
			want: map[string]gossip.Status{"c1": gossip.StatusAlive, "c2": gossip.StatusAlive, "w1": gossip.StatusLeft},
		},
		{
			name: "gone whatever serf says: suspect, failed, leaving",
			change: func(in *Inputs) {
				in.Gone = []string{"id-c2", "id-w1"}
				in.Members[1].Status = gossip.StatusSuspect
				in.Members[2].Status = gossip.StatusLeaving
			},
			want: map[string]gossip.Status{"c1": gossip.StatusAlive, "c2": gossip.StatusLeft, "w1": gossip.StatusLeft},
		},
		{
			name: "a member that does not count is not in the view: no record (a joiner), no id tag, another address",
			change: func(in *Inputs) {
				in.Gone = []string{""}
				in.Members = append(in.Members,
					Member{ID: "id-w2", Name: "w2", Role: pki.RoleWorker, Addr: ip("10.42.0.9"), Status: gossip.StatusAlive},
					Member{Name: "old", Status: gossip.StatusFailed})
			},
			want: steady,
		},
		{
			name: "a key holder on the underlay named like a stopped worker: the worker is not shown alive (issue 27)",
			change: func(in *Inputs) {
				in.Members[2].Addr = ip("198.51.100.66")
			},
			want: map[string]gossip.Status{"c1": gossip.StatusAlive, "c2": gossip.StatusAlive},
		},
		{
			name: "a node an earlier release admitted counts from its recorded underlay gossip address",
			change: func(in *Inputs) {
				in.Records[2].LegacyGossip = ip("192.0.2.3")
				in.Members[2].Addr = ip("192.0.2.3")
			},
			want: steady,
		},
		{
			name: "this node, removed (a control node whose FSM says so): left in its own view too",
			change: func(in *Inputs) {
				in.Gone = []string{"id-c1"}
			},
			want: map[string]gossip.Status{"c1": gossip.StatusLeft, "c2": gossip.StatusAlive, "w1": gossip.StatusAlive},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.change(&in)
			if got := View(in); !maps.Equal(got, tc.want) {
				t.Fatalf("view %v, want %v", got, tc.want)
			}
		})
	}
}
