package state

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestCheckOverlay6: the IPv6 overlay prefixes a cluster takes beside
// 10.42.0.0/16, and each refusal's code.
func TestCheckOverlay6(t *testing.T) {
	v4 := netip.MustParsePrefix("10.42.0.0/16")
	for _, tt := range []struct {
		name, v6 string
		want     codes.Code
	}{
		{"ok/ula-64", "fd5a:1b2c:3d4e::/64", ""},
		{"ok/longest-holding-every-v4", "fd5a:1b2c:3d4e::/112", ""},
		{"ok/global-is-policy-not-here", "2001:db8::/64", ""},
		{"fail/shorter-than-64", "fd5a:1b2c::/48", codes.Overlay6Invalid},
		{"fail/too-long-for-the-v4-overlay", "fd5a:1b2c:3d4e::/113", codes.Overlay6Invalid},
		{"fail/ipv4", "10.43.0.0/16", codes.Overlay6Invalid},
		{"fail/ipv4-mapped-overlaps-v4", "::ffff:10.42.0.0/112", codes.Overlay6Invalid},
		{"fail/host-bits", "fd5a:1b2c:3d4e::1/64", codes.Overlay6Invalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckOverlay6(v4, netip.MustParsePrefix(tt.v6))
			if got := codes.Of(err); (err == nil) != (tt.want == "") || (err != nil && got != tt.want) {
				t.Fatalf("CheckOverlay6(%s) = %v (code %s), want code %q", tt.v6, err, got, tt.want)
			}
		})
	}
}

// TestChooseOverlay6: init's --overlay-cidr6: a generated ULA /64 by
// default (a new one per cluster), none, a given ULA, a global prefix only
// with --overlay6-global, and bad input coded.
func TestChooseOverlay6(t *testing.T) {
	v4 := netip.MustParsePrefix("10.42.0.0/16")
	a, err := ChooseOverlay6(v4, "", false)
	if err != nil || !IsULA(a) || a.Bits() != 64 || a.Masked() != a {
		t.Fatalf("generated %v, %v; want a ULA /64", a, err)
	}
	if b, _ := ChooseOverlay6(v4, "", false); b == a {
		t.Fatalf("two generated overlays are both %s", a)
	}
	if p, err := ChooseOverlay6(v4, Overlay6None, false); err != nil || p.IsValid() {
		t.Fatalf("none: %v, %v; want no prefix", p, err)
	}
	for _, tt := range []struct {
		arg    string
		global bool
		want   codes.Code
	}{
		{"fd00:1:2::/64", false, ""},
		{"2001:db8::/64", false, codes.Overlay6NotULA},
		{"2001:db8::/64", true, ""},
		{"fc00:1:2::/64", false, codes.Overlay6NotULA}, // fc00::/8 is RFC 4193's undefined half
		{"fd00::/56", false, codes.Overlay6Invalid},
		{"not-a-prefix", false, codes.Overlay6Invalid},
		{"10.42.0.0/16", false, codes.Overlay6Invalid},
	} {
		_, err := ChooseOverlay6(v4, tt.arg, tt.global)
		if got := codes.Of(err); (err == nil) != (tt.want == "") || (err != nil && got != tt.want) {
			t.Errorf("ChooseOverlay6(%q, global %v) = %v (code %s), want code %q", tt.arg, tt.global, err, got, tt.want)
		}
	}
}

// TestOverlay6For: the IPv6 address is the IPv4 address's offset in the
// IPv6 prefix, so it is unique exactly when the IPv4 one is.
func TestOverlay6For(t *testing.T) {
	v4, v6 := netip.MustParsePrefix("10.42.0.0/16"), netip.MustParsePrefix("fd5a:1b2c:3d4e::/64")
	for ip, want := range map[string]string{
		"10.42.0.1":     "fd5a:1b2c:3d4e::1",
		"10.42.1.2":     "fd5a:1b2c:3d4e::102",
		"10.42.255.254": "fd5a:1b2c:3d4e::fffe",
		"10.43.0.1":     "invalid IP", // outside the IPv4 overlay
	} {
		if got := Overlay6For(v4, v6, netip.MustParseAddr(ip)); got.String() != want {
			t.Errorf("Overlay6For(%s) = %s, want %s", ip, got, want)
		}
	}
	if got := Overlay6For(v4, netip.Prefix{}, netip.MustParseAddr("10.42.0.1")); got.IsValid() {
		t.Errorf("an IPv4-only cluster gave %s", got)
	}
}

// dualCluster is testCluster made dual-stack.
func dualCluster() Cluster {
	c := testCluster()
	c.Overlay6 = testOverlay6
	return c
}

// TestDualStackAllocation: the FSM gives the origin and every admitted
// node its IPv6 address with its IPv4 one; a reused record keeps both; a
// bad IPv6 overlay or an origin naming another address changes nothing.
func TestDualStackAllocation(t *testing.T) {
	f := New()
	bad := dualCluster()
	bad.Overlay6 = netip.MustParsePrefix("fd5a:1b2c::/48")
	if err := apply(t, f, Bootstrap{Cluster: bad, Origin: testOrigin(), At: t0}); codes.Of(err) != codes.Overlay6Invalid {
		t.Fatalf("bootstrap with a /48: %v, want %s", err, codes.Overlay6Invalid)
	}
	o := testOrigin()
	o.OverlayIP6 = netip.MustParseAddr("fd5a:1b2c:3d4e::9")
	if err := apply(t, f, Bootstrap{Cluster: dualCluster(), Origin: o, At: t0}); codes.Of(err) != codes.BadRequest {
		t.Fatalf("bootstrap naming another IPv6 address: %v, want %s", err, codes.BadRequest)
	}
	if _, ok := f.Cluster(); ok {
		t.Fatal("a refused bootstrap made a cluster")
	}
	mustApply(t, f, Bootstrap{Cluster: dualCluster(), Origin: testOrigin(), At: t0})
	if n, _ := f.Node(originID); n.OverlayIP6 != netip.MustParseAddr("fd5a:1b2c:3d4e::1") {
		t.Fatalf("origin's IPv6 overlay address %v", n.OverlayIP6)
	}
	mustApply(t, f, MintToken{Record: tokenRecord(2, "w2", pki.RoleWorker)})
	a := admitCmd(2, "n-w2", "w2", pki.RoleWorker, "10.42.0.7")
	a.Node.TLSFingerprint, a.Node.NebulaFingerprint = "", "" // as every admission since v1
	a.Node.TLSPublicKey = []byte("tls-key")
	mustApply(t, f, a)
	if n, _ := f.Node("n-w2"); n.OverlayIP6 != netip.MustParseAddr("fd5a:1b2c:3d4e::7") {
		t.Fatalf("w2's IPv6 overlay address %v, want fd5a:1b2c:3d4e::7", n.OverlayIP6)
	}
}

// TestMoveToV2: a rotation carrying NextOverlay6 gives every node of an
// IPv4-only cluster its IPv6 address at begin and makes the cluster
// dual-stack at finish; a next CA that does not hold exactly both
// overlays, or another IPv6 overlay for a dual-stack cluster, is refused
// with nothing changed; a later rotation keeps the IPv6 overlay.
func TestMoveToV2(t *testing.T) {
	f := bootstrapped(t)
	v4only, err := pki.NewCA("lab", netip.MustParsePrefix("10.42.0.0/16"), t0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewDualStackCA("lab", netip.MustParsePrefix("10.42.0.0/16"), netip.MustParsePrefix("fd00:9::/64"), t0)
	if err != nil {
		t.Fatal(err)
	}
	before := stateBytes(t, f)
	for name, c := range map[string]RotateCA{
		"v4-only next CA":       withNext(rotateBegin(t, v4only, false), v4only),
		"next CA of another v6": withNext(rotateBegin(t, other, false), other),
		"a /48": func() RotateCA {
			c := rotateBegin(t, next1, false)
			c.NextOverlay6 = netip.MustParsePrefix("fd5a:1b2c::/48")
			return c
		}(),
	} {
		if err := apply(t, f, c); err == nil {
			t.Errorf("%s: begin applied", name)
		}
	}
	if !bytes.Equal(before, stateBytes(t, f)) {
		t.Fatal("a refused begin changed the state")
	}
	mustApply(t, f, rotateBegin(t, next1, false))
	c, _ := f.Cluster()
	if c.Overlay6.IsValid() || c.IPv6Overlay() != testOverlay6 {
		t.Fatalf("during the move: Overlay6 %v, IPv6Overlay %v", c.Overlay6, c.IPv6Overlay())
	}
	if n, _ := f.Node(originID); n.OverlayIP6 != netip.MustParseAddr("fd5a:1b2c:3d4e::1") {
		t.Fatalf("origin's IPv6 address %v after begin", n.OverlayIP6)
	}
	fp := next1.Fingerprint().String()
	mustApply(t, f, RotateCA{Step: CAReissue, Next: fp, At: t0.Add(8 * time.Minute)})
	n, _ := f.Node(originID)
	n.NebulaCert, n.TLSCert = nil, nil // no certificate of the old CA on record (OldDependents)
	f.s.Nodes[originID] = n
	mustApply(t, f, RotateCA{Step: CAFinish, Next: fp, At: t0.Add(9 * time.Minute)})
	if c, _ = f.Cluster(); c.Overlay6 != testOverlay6 || c.Rotation != nil {
		t.Fatalf("after the move: Overlay6 %v, rotation %+v", c.Overlay6, c.Rotation)
	}
	move := withNext(rotateBegin(t, other, false), other)
	move.NextOverlay6 = netip.MustParsePrefix("fd00:9::/64")
	if err := apply(t, f, move); codes.Of(err) != codes.Overlay6Exists {
		t.Fatalf("a move of the dual-stack cluster to another IPv6 overlay: %v, want %s", err, codes.Overlay6Exists)
	}
	plain := rotateBegin(t, next2, false)
	plain.NextOverlay6 = netip.Prefix{}
	mustApply(t, f, plain)
	if c, _ = f.Cluster(); c.Rotation.NextOverlay6 != testOverlay6 {
		t.Fatalf("a rotation of the dual-stack cluster brings IPv6 overlay %v", c.Rotation.NextOverlay6)
	}
}

// withNext is c with the next CA's certificates and fingerprint of next.
func withNext(c RotateCA, next *pki.CA) RotateCA {
	c.Next, c.NextCACert, c.NextNebulaCACert = next.Fingerprint().String(), next.CertPEM(), next.NebulaCertPEM()
	c.NextOverlay6 = testOverlay6
	return c
}
