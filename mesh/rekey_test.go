package mesh

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/meshd/meshd/pki"
)

// A reload that changes a node's certificate moves its tunnels to it at
// once (rekey.go): the peer holds the new certificate within a handshake,
// not at Nebula's next traffic check (2 s and more, and only with inbound
// traffic). Without rekeyTunnels the lighthouse still holds the old
// certificate at the deadline: no packet flows here but the member's
// lighthouse updates.
func TestReloadedCertReachesPeersAtOnce(t *testing.T) {
	skipUnderRace(t)
	ca := testCA(t)
	lhCert, lhKey := hostCert(t, ca, "lh", 1)
	lh, lhPort := startLighthouse(t, userspaceConfig(ca, lhCert, lhKey), testLogger("lh"))
	lhIP, aIP := overlayIP(1).Addr(), overlayIP(2).Addr()

	keys, err := pki.NewKeys("a")
	if err != nil {
		t.Fatal(err)
	}
	sign := func(at time.Time) []byte {
		c, err := ca.SignNebula(pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: "a", IP: overlayIP(2), Groups: []string{"worker"}}, at)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := sign(time.Now().Add(-time.Minute))
	cfg := userspaceConfig(ca, first, keys.NebulaKeyPEM)
	cfg.Lighthouses = []Lighthouse{{OverlayIP: lhIP, Underlay: []netip.AddrPort{netip.AddrPortFrom(ip("127.0.0.1"), uint16(lhPort))}}}
	a, err := Start(cfg, testLogger("a"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.WaitTunnel(ctx, lhIP); err != nil {
		t.Fatal(err)
	}
	peerCert := func() string {
		c := lh.ctrl.GetCertByVpnIp(aIP)
		if c == nil {
			return ""
		}
		fp, err := c.Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		return fp
	}
	if got, want := peerCert(), fingerprint(t, first); got != want {
		t.Fatalf("the lighthouse holds %q for a, want its first certificate %s", got, want)
	}

	next := cfg
	next.Cert = sign(time.Now())
	want := fingerprint(t, next.Cert)
	reloaded := time.Now()
	if err := a.Reload(next); err != nil {
		t.Fatal(err)
	}
	const bound = time.Second // a handshake on loopback takes ms; Nebula's own check comes at 2 s at the earliest
	for peerCert() != want {
		if time.Since(reloaded) > bound {
			t.Fatalf("%s after the reload the lighthouse still holds %s for a, want the reloaded %s", bound, peerCert(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the lighthouse held a's reloaded certificate %s after the reload", time.Since(reloaded).Round(time.Millisecond))
}
