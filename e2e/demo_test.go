//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDemo is `make demo`: three meshd processes, each in its own network
// namespace with a real TUN device, form a cluster; the origin lists it and
// every node pings every other over the encrypted overlay, by address and
// by name (NAME.demo.mesh, each node's own DNS). It runs only
// when MESHD_DEMO=1 and prints for a person, not for a test log.
func TestDemo(t *testing.T) {
	if os.Getenv("MESHD_DEMO") != "1" {
		t.Skip("set MESHD_DEMO=1 (make demo)")
	}
	say := func(format string, args ...any) { fmt.Printf("\n\033[1m== "+format+"\033[0m\n", args...) }
	n := NewNet(t)
	say("three network namespaces on one bridge; a meshd in each")
	origin := n.NewNode("origin")
	w1 := n.NewNode("w1")
	w2 := n.NewNode("w2")
	for _, nd := range []*Node{origin, w1, w2} {
		nd.Start(t)
		fmt.Printf("%-7s underlay %s (netns %s)\n", nd.NodeName, nd.IP, nd.Name)
	}
	say("origin: meshctl init --cluster demo")
	fmt.Print(origin.MustCtl(t, "init", "--cluster", "demo"))
	for _, w := range []*Node{w1, w2} {
		say("origin: meshctl admit %s", w.NodeName)
		tok := origin.Admit(t, w.NodeName)
		fmt.Printf("token minted (%d characters)\n", len(tok))
		say("%s: meshctl join <token>", w.NodeName)
		start := time.Now()
		fmt.Print(w.MustCtl(t, "join", tok))
		fmt.Printf("(join confirmed in %s)\n", time.Since(start).Round(time.Millisecond))
	}
	say("origin: meshctl nodes")
	fmt.Print(origin.MustCtl(t, "nodes"))
	say("every node pings every other over the overlay")
	ips := overlayIPs(t, origin)
	nodes := []*Node{origin, w1, w2}
	for _, a := range nodes {
		for _, b := range nodes {
			if a == b {
				continue
			}
			took := Eventually(t, 10*time.Second, a.NodeName+" pings "+b.NodeName, func() error {
				return a.Ping(t.Context(), ips[b.NodeName])
			})
			fmt.Printf("%-6s -> %-6s %-10s ok (%s)\n", a.NodeName, b.NodeName, ips[b.NodeName], took.Round(time.Millisecond))
		}
	}
	say("names: every node resolves every member as NAME.demo.mesh (its resolv.conf points at its own meshd, 127.0.77.53)")
	for _, nd := range nodes {
		useNodeDNS(t, nd.Host)
	}
	for _, a := range nodes {
		for _, b := range nodes {
			name := b.NodeName + ".demo.mesh"
			took := Eventually(t, 5*time.Second, a.NodeName+" pings "+name, func() error { return pingName(t.Context(), a.Host, name) })
			fmt.Printf("%-6s -> %-16s ping by name ok (%s)\n", a.NodeName, name, took.Round(time.Millisecond))
		}
	}
	say("w1: meshctl status")
	fmt.Print(w1.MustCtl(t, "status"))
	say("tearing down: processes stopped, namespaces deleted")
	fmt.Println(strings.Repeat("-", 40))
}
