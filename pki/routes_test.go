package pki_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// signRoutes signs a host certificate for 10.42.0.5 carrying routes.
func signRoutes(t *testing.T, ca *pki.CA, routes []netip.Prefix) ([]byte, error) {
	t.Helper()
	keys, err := pki.NewKeys("r1")
	if err != nil {
		t.Fatal(err)
	}
	return ca.SignNebula(pki.NebulaRequest{
		PublicKey: keys.NebulaPublicPEM, Name: "r1", IP: pkitest.IP(5), Groups: []string{"worker"}, Routes: routes,
	}, pkitest.Now)
}

// TestSignNebulaRoutes: the routes of a request become the certificate's
// unsafe networks, in the order given; the certificate still verifies
// against the CA; NebulaRoutes reads them back sorted.
func TestSignNebulaRoutes(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	pool, err := cert.NewCAPoolFromPEM(ca.NebulaCertPEM())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		routes []netip.Prefix
		want   []netip.Prefix // NebulaRoutes: sorted, nil for none
	}{
		{"none", nil, nil},
		{"empty", []netip.Prefix{}, nil},
		{"lan", prefixes("192.168.50.0/24"), prefixes("192.168.50.0/24")},
		{"exit", prefixes("0.0.0.0/0"), prefixes("0.0.0.0/0")},
		{"exit-and-lans", prefixes("192.168.50.0/24", "0.0.0.0/0", "172.16.0.0/12", "10.43.0.0/16"),
			prefixes("0.0.0.0/0", "10.43.0.0/16", "172.16.0.0/12", "192.168.50.0/24")},
		{"host-route", prefixes("198.51.100.7/32"), prefixes("198.51.100.7/32")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pemBytes, err := signRoutes(t, ca, tc.routes)
			if err != nil {
				t.Fatal(err)
			}
			c, _, err := cert.UnmarshalCertificateFromPEM(pemBytes)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.VerifyCertificate(pkitest.Now, c); err != nil {
				t.Fatalf("certificate with routes does not verify against the CA: %v", err)
			}
			if got, want := c.UnsafeNetworks(), pki.CertRoutes(tc.routes, ca.NebulaNetworks()); !slices.Equal(got, want) && len(got)+len(want) > 0 {
				t.Errorf("unsafe networks %v, want %v in the order given (the exit route as every address outside the overlay, last)", got, want)
			}
			if c.Version() == cert.Version1 && len(tc.routes) > 0 && !strings.Contains(c.String(), `"unsafeNetworks"`) {
				t.Errorf("v1 certificate does not show unsafe networks:\n%s", c)
			}
			got, err := pki.NebulaRoutes(pemBytes)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) || (tc.want == nil) != (got == nil) {
				t.Errorf("NebulaRoutes = %#v, want %#v", got, tc.want)
			}
			if !slices.IsSortedFunc(got, netip.Prefix.Compare) {
				t.Errorf("NebulaRoutes = %v, not sorted", got)
			}
		})
	}
}

// TestSignNebulaRoutesRefused: a bad route refuses the whole request with
// codes.EnrollRejected, naming the prefix.
func TestSignNebulaRoutesRefused(t *testing.T) {
	ca := pkitest.NewCA(t, "prod") // overlay 10.42.0.0/16
	cases := []struct {
		name   string
		routes []netip.Prefix
		names  string // the error names this prefix
	}{
		{"fail/inside-overlay", prefixes("10.42.7.0/24"), "10.42.7.0/24"},
		{"fail/the-overlay", prefixes("10.42.0.0/16"), "10.42.0.0/16"},
		{"fail/overlay-host", prefixes("10.42.0.9/32"), "10.42.0.9/32"},
		{"fail/contains-overlay", prefixes("10.0.0.0/8"), "10.0.0.0/8"},
		{"fail/unmasked", prefixes("192.168.50.1/24"), "192.168.50.1/24"},
		{"fail/unmasked-exit", []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("1.2.3.4"), 0)}, "1.2.3.4/0"},
		{"fail/ipv6", prefixes("fd00:50::/64"), "fd00:50::/64"},
		{"fail/ipv4-mapped", prefixes("::ffff:192.168.50.0/120"), "::ffff:192.168.50.0/120"},
		{"fail/invalid", []netip.Prefix{{}}, "invalid Prefix"},
		{"fail/duplicate", prefixes("192.168.50.0/24", "192.168.60.0/24", "192.168.50.0/24"), "192.168.50.0/24"},
		{"fail/second-bad", prefixes("192.168.50.0/24", "10.42.128.0/17"), "10.42.128.0/17"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := signRoutes(t, ca, tc.routes)
			if codes.Of(err) != codes.EnrollRejected || out != nil {
				t.Fatalf("SignNebula = %d bytes, %v; want %s", len(out), err, codes.EnrollRejected)
			}
			if !strings.Contains(err.Error(), tc.names) {
				t.Errorf("error %q does not name %s", err, tc.names)
			}
		})
	}
}

func TestCheckRoute(t *testing.T) {
	overlay := prefixes("10.42.0.0/16")
	for _, ok := range prefixes("0.0.0.0/0", "192.168.50.0/24", "10.43.0.0/16", "10.41.255.0/24", "11.0.0.0/8", "203.0.113.9/32") {
		if err := pki.CheckRoute(ok, overlay); err != nil {
			t.Errorf("CheckRoute(%s) = %v", ok, err)
		}
	}
	if pki.ExitRoute() != netip.MustParsePrefix("0.0.0.0/0") {
		t.Errorf("ExitRoute() = %s", pki.ExitRoute())
	}
	if err := pki.CheckRoutes(prefixes("192.168.50.0/24", "192.168.50.0/25"), overlay); err != nil {
		t.Errorf("nested routes are distinct routes: %v", err)
	}
	if err := pki.CheckRoutes(nil, overlay); err != nil {
		t.Errorf("no routes: %v", err)
	}
}

func TestNebulaRoutesRefusesGarbage(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleWorker, pkitest.IP(5))
	if got, err := pki.NebulaRoutes(id.NebulaCert); err != nil || got != nil {
		t.Errorf("a certificate without routes: %v, %v; want nil, nil", got, err)
	}
	for name, b := range map[string][]byte{"nil": nil, "junk": []byte("junk"), "x509": id.Cert, "nebula-ca": ca.NebulaCertPEM()} {
		if got, err := pki.NebulaRoutes(b); err == nil {
			t.Errorf("%s: NebulaRoutes = %v, want an error", name, got)
		}
	}
}
