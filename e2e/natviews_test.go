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

// TestNATViewsAndRelayVolunteer (issue 29 items 4 and 7): a control node
// c1 and a worker r1 offering itself as a relay (`relay: true`) on the
// internet, w1 behind a port-preserving NAT, w2 and w3 each behind a
// symmetric NAT.
//   - `meshctl nodes` on c1 shows w1 (and w2) behind a NAT, seen from its
//     site router's public address, while the underlay it advertised is
//     its private one; r1 is a relay, seen from its own address;
//   - every non-relay node's Nebula runs with r1 among its relays (from
//     raft), and r1 runs as a relay;
//   - w1 restarted with `relay: true` records it itself (POST
//     /v1/self/relay): c1 shows it and w2's relay list gains it; restarted
//     with `relay: false`, both drop it again;
//   - w2 reaches w3 only through a relay (c1 or r1: Nebula picks), and
//     `nodes` on w2 says so.
func TestNATViewsAndRelayVolunteer(t *testing.T) {
	n := NewNet(t)
	c1 := n.NewNode("c1")
	c1.Start(t)
	c1.MustCtl(t, "init", "--cluster", "e2e")
	r1 := n.NewNode("r1")
	offerRelay(t, r1)
	r1.Start(t)
	r1.MustCtl(t, "join", c1.Admit(t, "r1"))
	a, b, c := n.AddSite("a", NATPortPreserving), n.AddSite("b", NATSymmetric), n.AddSite("c", NATSymmetric)
	var workers []*Node
	for i, s := range []*Site{a, b, c} {
		w := s.NewNode(fmt.Sprintf("w%d", i+1))
		w.Start(t)
		w.MustCtl(t, "join", c1.Admit(t, w.NodeName))
		workers = append(workers, w)
	}
	w1, w2, w3 := workers[0], workers[1], workers[2]
	all := []*Node{c1, r1, w1, w2, w3}
	Eventually(t, 40*time.Second, "gossip on every node shows every node alive", func() error {
		return allAlive(t, all, "c1", "r1", "w1", "w2", "w3")
	})

	// Item 7: both addresses on the record, and the NAT marked.
	rows, err := nodesByName(t, c1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, seenFrom string
		nat            bool
	}{{"w1", a.Router.IP, true}, {"w2", b.Router.IP, true}, {"r1", r1.IP, false}} {
		r := rows[tc.name]
		if r.SeenFrom != tc.seenFrom || r.BehindNAT != tc.nat {
			t.Errorf("nodes on c1: %s seen from %q, behind NAT %v (underlay %s); want seen from %s, behind NAT %v",
				tc.name, r.SeenFrom, r.BehindNAT, r.Underlay, tc.seenFrom, tc.nat)
		}
	}
	if rows["w1"].Underlay == a.Router.IP || rows["w1"].Underlay != w1.IP {
		t.Errorf("w1's record: underlay %s, want the private address it advertised, %s", rows["w1"].Underlay, w1.IP)
	}
	if !rows["r1"].Relay || rows["w1"].Relay || rows["c1"].Relay {
		t.Errorf("nodes on c1: relay r1=%v w1=%v c1=%v, want only r1", rows["r1"].Relay, rows["w1"].Relay, rows["c1"].Relay)
	}
	t.Logf("nodes on c1:\n%s", c1.MustCtl(t, "nodes"))

	// Item 4: the volunteer is in every other node's relay list.
	ips := overlayIPs(t, c1)
	for _, nd := range []*Node{w1, w2, w3} {
		Eventually(t, 10*time.Second, nd.NodeName+" lists c1 and r1 as its relays", func() error {
			got, err := relaysOf(t, nd)
			if err != nil {
				return err
			}
			if !slices.Contains(got, ips["r1"]) || !slices.Contains(got, ips["c1"]) {
				return fmt.Errorf("%s's relays are %v, want %s (c1) and %s (r1)", nd.NodeName, got, ips["c1"], ips["r1"])
			}
			return nil
		})
	}
	var st apitype.Status
	if err := r1.CtlJSON(t.Context(), &st, "status"); err != nil || st.Overlay == nil || !st.Overlay.AmRelay {
		t.Fatalf("r1 does not run as a relay: %v, %+v", err, st.Overlay)
	}

	// A changed setting at restart is recorded by the node itself.
	for _, on := range []bool{true, false} {
		setRelay(t, w1, on)
		Eventually(t, 30*time.Second, fmt.Sprintf("c1 records w1's relay: %v and w2's relays follow", on), func() error {
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
	}

	// Two symmetric NATs: only a relay carries w2 ↔ w3.
	took, err := firstPing(t, w2, ips["w3"], 3*time.Second)
	if err != nil {
		t.Fatalf("w2 does not reach w3 (both behind symmetric NATs) within 3s of its first packet: %v", err)
	}
	path, err := pingPath(t, w2, "w3")
	if err != nil {
		t.Fatal(err)
	}
	if path.Relay != "c1" && path.Relay != "r1" {
		t.Fatalf("w2's path to w3 is %s, want relayed via c1 or r1", path)
	}
	t.Logf("w2 reached w3 %s after its first packet, %s", took.Round(time.Millisecond), path)
	rows, err = nodesByName(t, w2)
	if err != nil {
		t.Fatal(err)
	}
	if tn := rows["w3"].Tunnel; tn == nil || tn.Relay == "" {
		t.Errorf("nodes on w2: the tunnel to w3 is %+v, want relayed", tn)
	}
	t.Logf("nodes on w2:\n%s", w2.MustCtl(t, "nodes"))
	// Not shown here: w2 ↔ w3 moving to r1 once c1 is killed. With c1
	// the only lighthouse, Nebula does not rebuild the relayed tunnel
	// through r1 within 30 s (tried): it finds relays for a peer through a
	// lighthouse. The relay lists above are what raft decides.
}
