//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// Issue 34 item 3: an IPv6 underlay. Every host of the net has fd99::<i>
// on eth0 and no IPv4 address but lo's; the overlay stays IPv4, and
// gossip rides it. Nothing is pinned: bind_addr and advertise_addr keep
// their defaults, so the route chooses each node's underlay
// (mesh.ChooseUnderlay) and Nebula listens on :: (config.NebulaListenHost).

// TestIPv6Underlay: on an IPv6-only underlay, an origin (init by its IPv6
// default route), a control node and a worker (each by the route to the
// token's seeds) form a cluster: the tokens' seeds are [fd99::…]:7300,
// every pair pings over the overlay through direct tunnels whose remotes
// are the peers' IPv6 underlay addresses, gossip sees all three alive,
// the control node is a raft voter, `meshctl nodes` shows each node's
// IPv6 underlay, and netcheck's STUN answers over IPv6. `join --plan`
// passes every check over IPv6; a join (and its plan) pinned to an IPv4
// address against these IPv6-only seeds is refused with
// codes.UnderlayFamily and changes nothing: the token stays unused, the
// node stays unjoined, and the same join without the pin then succeeds.
// The worker's token is bound to its IPv6 source address (admit --addr).
func TestIPv6Underlay(t *testing.T) {
	n := NewNetIPv6(t)
	n.Unpinned = true
	origin := n.NewNode("origin")
	// A default route over IPv6 only: init takes its interface's address
	// (the IPv4 default route is looked for first, and there is none).
	n.in(origin.Name, "ip", "-6", "route", "add", "default", "via", "fd99::fe", "dev", "eth0")
	origin.Start(t)
	var ini apitype.InitResponse
	if err := origin.CtlJSON(t.Context(), &ini, "init", "--cluster", "e2e6"); err != nil {
		t.Fatal(err)
	}
	if ini.Underlay != origin.IP || !strings.Contains(ini.UnderlayWhy, "IPv6 default route") {
		t.Fatalf("init chose %s (%s), want %s by the IPv6 default route", ini.Underlay, ini.UnderlayWhy, origin.IP)
	}

	// The token's seeds are [addr]:port.
	var adm struct {
		Token string
		Seeds []string
	}
	if err := origin.CtlJSON(t.Context(), &adm, "admit", "c1", "--role", "control"); err != nil {
		t.Fatal(err)
	}
	if want := "[" + origin.IP + "]:7300"; !slices.Equal(adm.Seeds, []string{want}) {
		t.Fatalf("token seeds %v, want [%s]", adm.Seeds, want)
	}

	// join --plan: every check passes over IPv6, the route to the seed
	// choosing fd99::2; pinned to IPv4 (lo's 127.0.0.1, an address of this
	// machine) against these IPv6-only seeds, the underlay check fails
	// with its code.
	c1 := n.NewNode("c1")
	c1.Start(t)
	file := tokenFile(t, adm.Token)
	res, code, errs := runPlan(t, c1, file)
	if code != 0 || !res.OK || res.Underlay != c1.IP || !strings.Contains(res.UnderlayWhy, "route to seed "+origin.IP) {
		t.Fatalf("plan: exit %d, ok %t, underlay %s (%s), want ok and %s by the route to the seed\n%+v\n%s",
			code, res.OK, res.Underlay, res.UnderlayWhy, c1.IP, res.Checks, errs)
	}
	if c := planCheck(t, res, "seed "+adm.Seeds[0]); c.Status != apitype.CheckOK {
		t.Fatalf("plan: seed check %s %s: %s", c.Status, c.Code, c.Detail)
	}
	out, errs, code := c1.Ctl(t.Context(), "join", "--plan", "--token-file", file, "--advertise-addr", "127.0.0.1", "-o", "json")
	res = apitype.PlanResult{}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("join --plan pinned to IPv4: exit %d, stdout not a plan: %v\n%s%s", code, err, out, errs)
	}
	wantRed(t, res, code, errs, "underlay", codes.UnderlayFamily)

	// The join itself, pinned to IPv4: refused with its code, nothing
	// changed.
	out, errs, code = c1.Ctl(t.Context(), "join", adm.Token, "--advertise-addr", "127.0.0.1")
	if code != 1 || !strings.HasPrefix(strings.TrimSpace(errs), string(codes.UnderlayFamily)) {
		t.Fatalf("join pinned to IPv4 against IPv6 seeds: exit %d, want 1 with %s first\n%s%s", code, codes.UnderlayFamily, out, errs)
	}
	var st apitype.Status
	if err := c1.CtlJSON(t.Context(), &st, "status"); err != nil || st.State != "unjoined" || st.NodeID != "" {
		t.Fatalf("after the refused join c1 is %q (node id %q, err %v), want unjoined", st.State, st.NodeID, err)
	}
	if s := tokenState(t, origin, "c1"); s != "unused" {
		t.Fatalf("after the refused join c1's token is %s, want unused", s)
	}
	if _, ok := nodeRow(t, origin, "c1"); ok {
		t.Fatal("after the refused join the cluster lists c1")
	}

	// The same token, unpinned: the route to the seed chooses fd99::2.
	c1.MustCtl(t, "join", adm.Token)
	w1 := n.NewNode("w1")
	w1.Start(t)
	// w1's token names both control nodes as [addr]:7300 and is bound to
	// w1's IPv6 source address as the seed sees it (admit --addr).
	var admW struct {
		Token string
		Seeds []string
	}
	if err := origin.CtlJSON(t.Context(), &admW, "admit", "w1", "--addr", w1.IP); err != nil {
		t.Fatal(err)
	}
	if want := []string{"[" + origin.IP + "]:7300", "[" + c1.IP + "]:7300"}; !slices.Equal(slices.Sorted(slices.Values(admW.Seeds)), want) {
		t.Fatalf("w1's token seeds %v, want %v", admW.Seeds, want)
	}
	w1.MustCtl(t, "join", admW.Token)
	nodes := []*Node{origin, c1, w1}

	// Every node lists the three alive, each at its IPv6 underlay.
	for _, nd := range nodes {
		Eventually(t, 10*time.Second, nd.NodeName+" sees 3 alive at their IPv6 underlay", func() error {
			var ns []apitype.Node
			if err := nd.CtlJSON(t.Context(), &ns, "nodes"); err != nil {
				return err
			}
			alive := 0
			for _, x := range ns {
				if x.Gossip == "alive" {
					alive++
				}
				if want := hostIP(nodes, x.Name); x.Underlay != want {
					return fmt.Errorf("%s at underlay %q, want %q", x.Name, x.Underlay, want)
				}
			}
			if alive != 3 || len(ns) != 3 {
				return fmt.Errorf("%d of %d alive: %+v", alive, len(ns), ns)
			}
			return nil
		})
	}
	if r, _ := nodeRow(t, origin, "c1"); r.Raft != "voter" {
		t.Fatalf("c1 is raft %q, want voter", r.Raft)
	}
	if text := origin.MustCtl(t, "nodes"); !strings.Contains(text, w1.IP) {
		t.Fatalf("meshctl nodes does not show w1's underlay %s:\n%s", w1.IP, text)
	}

	allPairsPing(t, nodes, 10*time.Second)

	// The tunnels run over IPv6, directly: each remote is the peer's
	// underlay address on Nebula's port.
	ips := overlayIPs(t, origin)
	for _, nd := range nodes {
		Eventually(t, 10*time.Second, nd.NodeName+"'s tunnels run over IPv6", func() error {
			var s apitype.Status
			if err := nd.CtlJSON(t.Context(), &s, "status"); err != nil {
				return err
			}
			if s.Overlay == nil {
				return fmt.Errorf("no overlay in status")
			}
			seen := 0
			for _, tn := range s.Overlay.Tunnels {
				name := nameOf(ips, tn.OverlayIP)
				want := netip.AddrPortFrom(netip.MustParseAddr(hostIP(nodes, name)), 4242).String()
				if tn.Relayed || tn.Remote != want {
					return fmt.Errorf("tunnel to %s (%s): remote %q relayed %t, want %s direct", name, tn.OverlayIP, tn.Remote, tn.Relayed, want)
				}
				seen++
			}
			if seen != len(nodes)-1 {
				return fmt.Errorf("%d tunnels, want %d: %+v", seen, len(nodes)-1, s.Overlay.Tunnels)
			}
			return nil
		})
	}

	// STUN over IPv6: the worker asks both control nodes; each answers
	// with the worker's own IPv6 address (no NAT on this underlay).
	var nc apitype.NetcheckReport
	if err := w1.CtlJSON(t.Context(), &nc, "netcheck"); err != nil {
		t.Fatal(err)
	}
	if !nc.UDP || nc.NAT || len(nc.Targets) != 2 {
		t.Fatalf("netcheck on w1: %+v, want UDP answered by both control nodes, no NAT", nc)
	}
	for _, tg := range nc.Targets {
		m, err := netip.ParseAddrPort(tg.Mapped)
		if !tg.Answered || err != nil || m.Addr().String() != w1.IP {
			t.Fatalf("netcheck on w1: %s (%s) answered %t mapped %q, want w1's %s", tg.Name, tg.STUN, tg.Answered, tg.Mapped, w1.IP)
		}
	}
}

// hostIP is the underlay address of the node named name.
func hostIP(nodes []*Node, name string) string {
	for _, nd := range nodes {
		if nd.NodeName == name {
			return nd.IP
		}
	}
	return ""
}

// nameOf is the name whose overlay IP is ip in ips (overlayIPs).
func nameOf(ips map[string]string, ip string) string {
	for name, o := range ips {
		if o == ip {
			return name
		}
	}
	return ""
}
