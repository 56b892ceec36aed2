package nebulabundle

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
	"github.com/meshd/meshd/stocknebula"
)

var overlay6 = netip.MustParsePrefix("fd00:42::/64")

// issued is a CA bundle and a host certificate signed for a key made by
// GenerateKey. Stock Nebula checks validity against the wall clock, so
// these are issued now, not at pkitest.Now.
type issued struct{ ca, cert, key, pub []byte }

func issue(t *testing.T, dualStack bool) issued {
	t.Helper()
	now := time.Now()
	var (
		ca  *pki.CA
		err error
	)
	req := pki.NebulaRequest{Name: "phone", IP: pkitest.IP(9), Groups: []string{"nebula", "phones"}}
	if dualStack {
		ca, err = pki.NewDualStackCA("test", pkitest.Overlay, overlay6, now)
		req.IP6 = netip.PrefixFrom(netip.MustParseAddr("fd00:42::9"), overlay6.Bits())
	} else {
		ca, err = pki.NewCA("test", pkitest.Overlay, now)
	}
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	req.PublicKey = pub
	cert, err := ca.SignNebula(req, now)
	if err != nil {
		t.Fatal(err)
	}
	return issued{ca: ca.NebulaCertPEM(), cert: cert, key: priv, pub: pub}
}

// stockBundle is a bundle as a --nebula-only member would get it: two
// lighthouses (with IPv6 overlay addresses on a dual-stack cluster), a
// static peer, a relay, an inbound rule for its groups.
func stockBundle(in issued, dualStack bool) Bundle {
	lh := []Host{
		{Overlay: ip("10.42.0.1"), Underlay: []netip.AddrPort{ap("192.0.2.1:4242")}},
		{Overlay: ip("10.42.0.2"), Underlay: []netip.AddrPort{ap("198.51.100.2:4242"), ap("[2001:db8::2]:4242")}},
	}
	static := map[netip.Addr][]netip.AddrPort{ip("10.42.0.7"): {ap("203.0.113.7:4242")}}
	if dualStack {
		lh[0].Overlay6, lh[1].Overlay6 = ip("fd00:42::1"), ip("fd00:42::2")
		static[ip("fd00:42::7")] = []netip.AddrPort{ap("203.0.113.7:4242")}
	}
	return Bundle{
		CACerts: in.ca, Cert: in.cert, Key: in.key,
		Lighthouses: lh, StaticHosts: static, Relays: []netip.Addr{ip("10.42.0.1")},
		Inbound: []Rule{{Port: "any", Proto: "icmp", Host: "any"}, {Port: "22", Proto: "tcp", Groups: []string{"control", "admin"}}},
	}
}

// TestStockNebulaAcceptsBundle: the directory WriteDir makes, and nothing
// else, is a config stock Nebula v1.12.0 and v1.11.0 (issue 53 item 4; built from the module proxy by
// stocknebula, not meshd's patched copy) accepts with `nebula -test`:
// an IPv4-only cluster's v1 certificate and a dual-stack cluster's v2
// one. A key that is not the certificate's is refused, so the check can
// fail.
func TestStockNebulaAcceptsBundle(t *testing.T) {
	for _, c := range []struct {
		name      string
		dualStack bool
		version   string
	}{
		{"v1", false, stocknebula.Version}, {"dualstack-v2", true, stocknebula.Version},
		{"v1/nebula-v1.11.0", false, "v1.11.0"}, {"dualstack-v2/nebula-v1.11.0", true, "v1.11.0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := issue(t, c.dualStack)
			dir := filepath.Join(t.TempDir(), "bundle")
			if err := stockBundle(in, c.dualStack).WriteDir(dir); err != nil {
				t.Fatal(err)
			}
			out, err := stocknebula.TestAt(t, c.version, ConfigFile, dir)
			if err != nil {
				t.Fatalf("nebula -test refused the bundle: %v\n%s", err, out)
			}
			if !strings.Contains(out, "Firewall started") {
				t.Fatalf("nebula -test passed without loading the firewall:\n%s", out)
			}
		})
	}
	t.Run("fail/key-of-another-certificate", func(t *testing.T) {
		in := issue(t, false)
		_, other, err := GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		in.key = other
		dir := t.TempDir()
		if err := stockBundle(in, false).WriteDir(dir); err != nil {
			t.Fatal(err)
		}
		out, err := stocknebula.Test(t, ConfigFile, dir)
		if err == nil {
			t.Fatalf("nebula -test accepted a key that is not the certificate's:\n%s", out)
		}
		if !strings.Contains(out, "private key is not a pair") { // Nebula's words: its output is all there is
			t.Fatalf("nebula -test failed for another reason:\n%s", out)
		}
	})
}

// TestStockNebulaRelativePaths: the default bare pki paths are read from
// Nebula's working directory, so the same config fails when Nebula runs
// elsewhere; with PKIDir set to the directory it passes from anywhere.
func TestStockNebulaRelativePaths(t *testing.T) {
	in := issue(t, true)
	dir := t.TempDir()
	b := stockBundle(in, true)
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	out, err := stocknebula.Test(t, filepath.Join(dir, ConfigFile), elsewhere)
	if err == nil {
		t.Fatalf("bare pki paths resolved from another working directory:\n%s", out)
	}
	if !strings.Contains(out, "unable to read pki.") {
		t.Fatalf("nebula -test failed for another reason:\n%s", out)
	}
	b.PKIDir = dir
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if out, err := stocknebula.Test(t, filepath.Join(dir, ConfigFile), elsewhere); err != nil {
		t.Fatalf("nebula -test refused absolute pki paths: %v\n%s", err, out)
	}
}

// TestStockNebulaDeviceKeepsKey: a bundle without a key (the device made
// its own and gave only the public key) leaves the device's host.key in
// place, and Nebula runs from the two.
func TestStockNebulaDeviceKeepsKey(t *testing.T) {
	in := issue(t, false)
	dir := t.TempDir()
	if err := writeAtomic(dir, KeyFile, in.key, 0o600); err != nil { // the device's own key, there first
		t.Fatal(err)
	}
	b := stockBundle(in, false)
	b.Key = nil
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if out, err := stocknebula.Test(t, ConfigFile, dir); err != nil {
		t.Fatalf("nebula -test refused the bundle with the device's key: %v\n%s", err, out)
	}
}
