//go:build e2e

package e2e

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshd/meshd/nebulabundle"
	"github.com/meshd/meshd/stocknebula"
)

// thief is a plain stock nebula on a host of its own, holding a copy of a
// member's Nebula certificate and key (a backup, a disk image, the node's
// own operator): what a node that departed could keep.
type thief struct {
	*stockMember
}

// copyIdentity reads nd's Nebula CA bundle, certificate and key from its
// state dir, as a copy of its disk would hold them.
func copyIdentity(t testing.TB, nd *Node) (ca, cert, key []byte) {
	t.Helper()
	dir := filepath.Join(nd.Dir, "identity", "nebula")
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("copy %s's %s: %v", nd.NodeName, name, err)
		}
		return b
	}
	return read("ca.crt"), read("host.crt"), read("host.key")
}

// startThief runs stock nebula on a new host with the copied identity,
// origin as its lighthouse, and an inbound firewall that takes ICMP.
func startThief(t testing.TB, n *Net, name string, origin *Node, originIP string, ca, cert, key []byte) *thief {
	t.Helper()
	bin := stocknebula.Binary(t)
	h := n.AddHost(name)
	ovl, err := netip.ParseAddr(originIP)
	if err != nil {
		t.Fatal(err)
	}
	b := nebulabundle.Bundle{CACerts: ca, Cert: cert, Key: key,
		Lighthouses: []nebulabundle.Host{{Overlay: ovl, Underlay: []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr(origin.IP), 4242)}}},
		Inbound:     []nebulabundle.Rule{{Port: "any", Proto: "icmp", Host: "any"}}}
	dir := filepath.Join(t.TempDir(), "copy")
	if err := b.WriteDir(dir); err != nil {
		t.Fatalf("write %s's config: %v", name, err)
	}
	m := &stockMember{Host: h, Name: name, Dir: dir, log: &syncLog{}}
	m.cmd = h.Exec(context.WithoutCancel(t.Context()), bin, "-config", "config.yml")
	m.cmd.Dir, m.cmd.Stdout, m.cmd.Stderr = dir, m.log, m.log
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = m.cmd.Process.Kill()
		_ = m.cmd.Wait()
		if t.Failed() {
			t.Logf("stock nebula %s:\n%s", name, m.log.String())
		}
	})
	return &thief{m}
}

// TestDepartedCopyCutOff (issue 52, `timers: lan`): a plain Nebula holding
// a copy of a member's certificate and key reaches the cluster while the
// member is on record (the copy of w3, whose meshd was killed: the
// baseline that the copy works), and reaches no member, nor any member it,
// once the node departed: w1 by `meshctl leave`, w3 by `meshctl remove`
// (cut off within 2 s of remove returning). On main the copy of a node
// that left pinged the origin and every worker within a second, for the
// rest of its certificate's year.
func TestDepartedCopyCutOff(t *testing.T) {
	n := NewNet(t)
	n.Timers = "lan"
	nodes := cluster(t, n, "w1", "w2", "w3")
	origin, w1, w2, w3 := nodes[0], nodes[1], nodes[2], nodes[3]
	allPairsPing(t, nodes, 30*time.Second)
	ips := overlayIPs(t, origin)
	members := []*Node{origin, w2}

	// The baseline: a copy of w3 while w3 is on record reaches everyone.
	ca3, cert3, key3 := copyIdentity(t, w3)
	w3.Kill()
	copy3 := startThief(t, n, "copy-w3", origin, ips["origin"], ca3, cert3, key3)
	took := Eventually(t, 30*time.Second, "the copy of w3 (on record) and the members reach each other", func() error {
		return reachBoth(t.Context(), copy3.stockMember, ips["w3"], "", members, ips, nil)
	})
	t.Logf("the copy of w3 reached every member %s after it started (timers: lan)", took.Round(time.Millisecond))

	// Leave: the copy of w1 reaches nobody once w1 left.
	ca1, cert1, key1 := copyIdentity(t, w1)
	start := time.Now()
	w1.MustCtl(t, "leave")
	left := time.Since(start)
	copy1 := startThief(t, n, "copy-w1", origin, ips["origin"], ca1, cert1, key1)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		if err := cutOff(t.Context(), copy1.stockMember, ips["w1"], members, ips); err != nil {
			t.Fatalf("the copy of w1, which left: %v", err)
		}
	}
	t.Logf("leave of w1 returned after %s; its copy reached no member, nor any member it, for the 5 s watched (timers: lan)",
		left.Round(time.Millisecond))

	// Removal: the copy of w3 is cut off within 2 s of remove returning.
	start = time.Now()
	origin.MustCtl(t, "remove", "w3")
	returned := time.Since(start)
	gone, err := waitFor(t.Context(), removalWithin, func() error { return cutOff(t.Context(), copy3.stockMember, ips["w3"], members, ips) })
	if err != nil {
		t.Fatalf("the copy of w3 not cut off within %s of remove returning: %v", removalWithin, err)
	}
	t.Logf("remove w3 returned after %s; its copy cut off both ways %s after that (timers: lan)", returned.Round(time.Millisecond),
		gone.Round(time.Millisecond))
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if err := cutOff(t.Context(), copy3.stockMember, ips["w3"], members, ips); err != nil {
			t.Fatalf("the copy of removed w3: %v", err)
		}
	}
}
