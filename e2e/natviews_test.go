//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// nodesByName is `meshctl nodes -o json` on nd, by name.
func nodesByName(t *testing.T, nd *Node) (map[string]apitype.Node, error) {
	var rows []apitype.Node
	if err := nd.CtlJSON(t.Context(), &rows, "nodes"); err != nil {
		return nil, err
	}
	out := map[string]apitype.Node{}
	for _, r := range rows {
		out[r.Name] = r
	}
	return out, nil
}

// relaysOf is the relay list nd's Nebula runs with (status.overlay.relays).
func relaysOf(t *testing.T, nd *Node) ([]string, error) {
	var st apitype.Status
	if err := nd.CtlJSON(t.Context(), &st, "status"); err != nil {
		return nil, err
	}
	if st.Overlay == nil {
		return nil, fmt.Errorf("%s reports no overlay", nd.NodeName)
	}
	return st.Overlay.Relays, nil
}

// setRelay rewrites nd's meshd.yaml with `relay: on` and restarts it.
func setRelay(t *testing.T, nd *Node, on bool) {
	t.Helper()
	raw, err := os.ReadFile(nd.Config)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimRight(string(raw), "\n"), "\n") {
		if !strings.HasPrefix(l, "relay:") {
			keep = append(keep, l)
		}
	}
	keep = append(keep, fmt.Sprintf("relay: %v", on))
	if err := os.WriteFile(nd.Config, []byte(strings.Join(keep, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nd.Stop(t)
	nd.Start(t)
}

// relayLab is the NAT lab's relay cluster, built once per timer set for
// the scenarios of TestNATRelayLab. On the internet: the control nodes c1
// and c2, lighthouses that relay for nobody (Net.RefuseRelaying drops
// Nebula's relay set-up at them), and r1 and r2, workers that volunteer
// as relays (`relay: true`). Behind NATs: w1 (site a, port-preserving),
// w2 and w3 (sites b and c, each symmetric), all joined; wx behind site
// x, which drops outbound UDP, running but never joined. Every tunnel
// between w1, w2 and w3 is relayed, and only a volunteer can carry it.
type relayLab struct {
	Net        *Net
	Timers     string
	A, B, X    *Site
	C1, C2     *Node
	R1, R2     *Node
	W1, W2, W3 *Node
	WX         *Node
	Volunteers map[string]*Node // r1, r2
	IPs        map[string]string
}

func newRelayLab(t *testing.T, timers string) *relayLab {
	t.Helper()
	n := NewNet(t)
	n.Timers, n.DefaultRaft = timers, timers == "lan"
	l := &relayLab{Net: n, Timers: timers, Volunteers: map[string]*Node{}}
	l.C1 = n.NewNode("c1")
	l.C1.Start(t)
	l.C1.MustCtl(t, "init", "--cluster", "e2e")
	n.RefuseRelaying(l.C1.Host)
	l.C2 = n.NewNode("c2")
	l.C2.Start(t)
	l.C2.MustCtl(t, "join", l.C1.Admit(t, "c2", "--role", "control"))
	n.RefuseRelaying(l.C2.Host)
	for _, name := range []string{"r1", "r2"} {
		r := n.NewNode(name)
		offerRelay(t, r)
		r.Start(t)
		r.MustCtl(t, "join", l.C1.Admit(t, name))
		l.Volunteers[name] = r
	}
	l.R1, l.R2 = l.Volunteers["r1"], l.Volunteers["r2"]
	l.A, l.B = n.AddSite("a", NATPortPreserving), n.AddSite("b", NATSymmetric)
	var ws []*Node
	for i, s := range []*Site{l.A, l.B, n.AddSite("c", NATSymmetric)} {
		w := s.NewNode(fmt.Sprintf("w%d", i+1))
		w.Start(t)
		w.MustCtl(t, "join", l.C1.Admit(t, w.NodeName))
		ws = append(ws, w)
	}
	l.W1, l.W2, l.W3 = ws[0], ws[1], ws[2]
	l.X = n.AddSite("x", NATUDPBlocked)
	l.WX = l.X.NewNode("wx")
	l.WX.Start(t)
	Eventually(t, 40*time.Second, "gossip on every node shows every node alive", func() error {
		return allAlive(t, l.Joined(), "c1", "c2", "r1", "r2", "w1", "w2", "w3")
	})
	l.IPs = overlayIPs(t, l.C1)
	return l
}

// Joined is every node of the lab that joined, the control nodes first.
func (l *relayLab) Joined() []*Node { return []*Node{l.C1, l.C2, l.R1, l.R2, l.W1, l.W2, l.W3} }

// TestNATRelayLab is the NAT lab's scenarios that need a cluster with
// volunteer relays, run in order as subtests on one relayLab per timer
// set (the suite's fast timers, then meshd's default `lan` with raft at
// its defaults): each needs the lab's set-up and none undoes what an
// earlier one checks, and removal comes last. A scenario that fails can
// leave the lab changed for the next ones (a failed views scenario
// leaves w1 running with `relay: true`, and removed_refused_through_relay
// then found w1 reaching w2 through no relay: a Nebula node that is a
// relay seems not to use relays itself);
// each also runs alone, on a lab of its own: -run
// 'TestNATRelayLab/lan/netcheck_nat'.
//   - views_and_relay_volunteer (issue 29 items 4 and 7): natViews;
//   - netcheck_nat: netcheckNAT (netcheck_test.go);
//   - netcheck_udp_blocked: netcheckUDPBlocked (netcheck_test.go);
//   - volunteer_relay_carries: volunteerRelayCarries (relay_test.go);
//   - removed_refused_through_relay: removedRefusedThroughRelay
//     (relay_test.go).
func TestNATRelayLab(t *testing.T) {
	for _, timers := range []string{"fast", "lan"} {
		t.Run(timers, func(t *testing.T) {
			l := newRelayLab(t, timers)
			for _, sc := range []struct {
				name string
				run  func(*testing.T, *relayLab)
			}{
				{"views_and_relay_volunteer", natViews},
				{"netcheck_nat", netcheckNAT},
				{"netcheck_udp_blocked", netcheckUDPBlocked},
				{"volunteer_relay_carries", volunteerRelayCarries},
				{"removed_refused_through_relay", removedRefusedThroughRelay},
			} {
				t.Run(sc.name, func(t *testing.T) { sc.run(t, l) })
			}
		})
	}
}

// natViews (issue 29 items 4 and 7), on the relay lab:
//   - `meshctl nodes` on c1 shows w1 (and w2) behind a NAT, seen from its
//     site router's public address, while the underlay it advertised is
//     its private one; r1 is a relay, seen from its own address;
//   - every worker's Nebula runs with the control nodes and both
//     volunteers among its relays (from raft), and r1 runs as a relay;
//   - w1 restarted with `relay: true` records it itself (POST
//     /v1/self/relay): c1 shows it and w2's relay list gains it; restarted
//     with `relay: false`, both drop it again.
//
// Seen failing (lan, on the shared lab; fast before): with
// `rt.Spawn(rt.runRelayReport)` commented out, "c1 shows w1 relay false"
// at the bound (then 30 s).
func natViews(t *testing.T, l *relayLab) {
	c1, r1, w1, w2 := l.C1, l.R1, l.W1, l.W2
	// Item 7: both addresses on the record, and the NAT marked.
	rows, err := nodesByName(t, c1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, seenFrom string
		nat            bool
	}{{"w1", l.A.Router.IP, true}, {"w2", l.B.Router.IP, true}, {"r1", r1.IP, false}} {
		r := rows[tc.name]
		if r.SeenFrom != tc.seenFrom || r.BehindNAT != tc.nat {
			t.Errorf("nodes on c1: %s seen from %q, behind NAT %v (underlay %s); want seen from %s, behind NAT %v",
				tc.name, r.SeenFrom, r.BehindNAT, r.Underlay, tc.seenFrom, tc.nat)
		}
	}
	if rows["w1"].Underlay == l.A.Router.IP || rows["w1"].Underlay != w1.IP {
		t.Errorf("w1's record: underlay %s, want the private address it advertised, %s", rows["w1"].Underlay, w1.IP)
	}
	if !rows["r1"].Relay || !rows["r2"].Relay || rows["w1"].Relay || rows["c1"].Relay {
		t.Errorf("nodes on c1: relay r1=%v r2=%v w1=%v c1=%v, want only r1 and r2",
			rows["r1"].Relay, rows["r2"].Relay, rows["w1"].Relay, rows["c1"].Relay)
	}
	t.Logf("timers %s: nodes on c1:\n%s", l.Timers, c1.MustCtl(t, "nodes"))

	// Item 4: the volunteers are in every worker's relay list.
	ips := l.IPs
	for _, nd := range []*Node{w1, w2, l.W3} {
		Eventually(t, 10*time.Second, nd.NodeName+" lists c1, c2, r1 and r2 as its relays", func() error {
			got, err := relaysOf(t, nd)
			if err != nil {
				return err
			}
			for _, name := range []string{"c1", "c2", "r1", "r2"} {
				if !slices.Contains(got, ips[name]) {
					return fmt.Errorf("%s's relays are %v, want %s (%s) among them", nd.NodeName, got, ips[name], name)
				}
			}
			return nil
		})
	}
	var st apitype.Status
	if err := r1.CtlJSON(t.Context(), &st, "status"); err != nil || st.Overlay == nil || !st.Overlay.AmRelay {
		t.Fatalf("r1 does not run as a relay: %v, %+v", err, st.Overlay)
	}

	// A changed setting at restart is recorded by the node itself.
	// relayFollow bounds it until c1 shows it and w2's relay list follows.
	// The first change (to true) used to take 28.8-29.0 s in three lan
	// runs and in one of three fast ones, though w1's report was recorded
	// about 1 s after its start: a worker that fetched its node list on
	// w1's gossip rejoin, before the report, saw the change only at its
	// 30 s reconcile tick. The control node that records a relay setting
	// now tells every member (control.handleSelfRelay), and the workers
	// fetch the list at once: 1.1-1.2 s. The notification is a gossip
	// broadcast, which a node can miss (w2 did once with lan timers,
	// 2026-12-03: no gossip reached it for 6 s while its relayed tunnels
	// were being built), and then the tick is what brings it: the bound
	// stays the 30 s tick plus 10 s.
	const relayFollow = 40 * time.Second
	for _, on := range []bool{true, false} {
		mark := logMark(t, []*Node{w1})
		setRelay(t, w1, on)
		took := Eventually(t, relayFollow, fmt.Sprintf("c1 records w1's relay: %v and w2's relays follow", on), func() error {
			rows, err := nodesByName(t, c1)
			if err != nil {
				return err
			}
			if rows["w1"].Relay != on {
				return fmt.Errorf("c1 shows w1 relay %v", rows["w1"].Relay)
			}
			got, err := relaysOf(t, w2)
			if err != nil {
				return err
			}
			if slices.Contains(got, ips["w1"]) != on {
				return fmt.Errorf("w2's relays are %v", got)
			}
			return nil
		})
		t.Logf("timers %s: w1 restarted with relay: %v; c1 and w2's relays followed %s after its start; w1's reports:\n%s",
			l.Timers, on, took.Round(time.Millisecond), strings.Join(linesSince(t, mark, []string{"relay setting"}), "\n"))
	}
	// w1 is back as it was: alive everywhere before the next scenario.
	Eventually(t, 30*time.Second, "gossip on every node shows every node alive after w1's restarts", func() error {
		return allAlive(t, l.Joined(), "c1", "c2", "r1", "r2", "w1", "w2", "w3")
	})
}
