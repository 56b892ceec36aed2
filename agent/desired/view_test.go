package desired

import (
	"maps"
	"slices"
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
			name: "forged bad news about live members whose probe answers: alive (issue 52 item 8)",
			change: func(in *Inputs) {
				in.Members[1].Status = gossip.StatusFailed
				in.Members[2].Status = gossip.StatusLeft
				in.Probes = map[string]Probe{"c2": ProbeAnswered, "w1": ProbeAnswered}
			},
			want: steady,
		},
		{
			name: "bad news not probed yet: suspect, neither failed nor left",
			change: func(in *Inputs) {
				in.Members[1].Status = gossip.StatusLeaving
				in.Members[2].Status = gossip.StatusFailed
			},
			want: map[string]gossip.Status{"c1": gossip.StatusAlive, "c2": gossip.StatusSuspect, "w1": gossip.StatusSuspect},
		},
		{
			name: "bad news a failed probe confirms stands",
			change: func(in *Inputs) {
				in.Members[1].Status = gossip.StatusLeft
				in.Members[2].Status = gossip.StatusFailed
				in.Probes = map[string]Probe{"c2": ProbeFailed, "w1": ProbeFailed}
			},
			want: map[string]gossip.Status{"c1": gossip.StatusAlive, "c2": gossip.StatusLeft, "w1": gossip.StatusFailed},
		},
		{
			name: "raft's word needs no probe: a removed node whose probe answers is left",
			change: func(in *Inputs) {
				in.Gone = []string{"id-w1"}
				in.Members[2].Status = gossip.StatusFailed
				in.Probes = map[string]Probe{"w1": ProbeAnswered}
			},
			want: map[string]gossip.Status{"c1": gossip.StatusAlive, "c2": gossip.StatusAlive, "w1": gossip.StatusLeft},
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

// TestDoubted: the members probed are those gossip shows failed, left or
// leaving that count and have an active record: not this node, not one
// raft records gone, not one that does not count, not one alive or
// suspect.
func TestDoubted(t *testing.T) {
	in := base()
	in.Members[0].Status = gossip.StatusFailed // this node
	in.Members[1].Status = gossip.StatusLeaving
	in.Members = append(in.Members,
		Member{ID: "id-w2", Name: "w2", Role: pki.RoleWorker, Overlay: ip("10.42.0.4"), Addr: ip("10.42.0.4"), Status: gossip.StatusLeft},
		Member{ID: "id-w3", Name: "w3", Role: pki.RoleWorker, Overlay: ip("10.42.0.5"), Addr: ip("10.42.0.9"), Status: gossip.StatusFailed},
		Member{ID: "id-w4", Name: "w4", Role: pki.RoleWorker, Overlay: ip("10.42.0.6"), Addr: ip("10.42.0.6"), Status: gossip.StatusFailed},
		Member{ID: "id-w5", Name: "w5", Role: pki.RoleWorker, Overlay: ip("10.42.0.7"), Addr: ip("10.42.0.7"), Status: gossip.StatusSuspect})
	in.Records = append(in.Records,
		Record{ID: "id-w2", Name: "w2", Role: pki.RoleWorker, Overlay: ip("10.42.0.4")},
		Record{ID: "id-w3", Name: "w3", Role: pki.RoleWorker, Overlay: ip("10.42.0.5")}, // gossips from another address
		Record{ID: "id-w4", Name: "w4", Role: pki.RoleWorker, Overlay: ip("10.42.0.6")},
		Record{ID: "id-w5", Name: "w5", Role: pki.RoleWorker, Overlay: ip("10.42.0.7")})
	in.Gone = []string{"id-w4"}
	var got []string
	for _, r := range Doubted(in) {
		got = append(got, r.Name+"@"+r.Overlay.String())
	}
	if want := []string{"c2@10.42.0.2", "w2@10.42.0.4"}; !slices.Equal(got, want) {
		t.Fatalf("doubted %v, want %v", got, want)
	}
}
