package mesh

import (
	"context"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/codes"
)

// TestUserspaceOverlay runs a lighthouse and two nodes in this process,
// each a userspace Nebula on 127.0.0.1 with real certificates, and drives
// traffic, verification and reloads across them. The instances are never
// stopped: Stop is a no-op in userspace mode (Nebula v1.10.3 would exit
// the process; netstack.go has no teardown yet). The subtests share the mesh and run in order.
func TestUserspaceOverlay(t *testing.T) {
	skipUnderRace(t)
	ca := testCA(t)
	lhCert, lhKey := hostCert(t, ca, "lh", 1)
	aCert, aKey := hostCert(t, ca, "a", 2)
	bCert, bKey := hostCert(t, ca, "b", 3)
	lhIP, aIP, bIP := overlayIP(1).Addr(), overlayIP(2).Addr(), overlayIP(3).Addr()
	bEcho := netip.AddrPortFrom(bIP, 7000).String()

	lhStart := time.Now()
	lh, lhPort := startLighthouse(t, userspaceConfig(ca, lhCert, lhKey), testLogger("lh"))
	t.Logf("lighthouse %s up on 127.0.0.1:%d in %s", lh.OverlayIP(), lhPort, time.Since(lhStart))
	lighthouses := []Lighthouse{{OverlayIP: lhIP, Underlay: []netip.AddrPort{netip.AddrPortFrom(ip("127.0.0.1"), uint16(lhPort))}}}

	bCfg := userspaceConfig(ca, bCert, bKey)
	bCfg.Lighthouses = lighthouses
	b, err := Start(bCfg, testLogger("b"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Listen("tcp", ":7000")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, l)

	aCfg := userspaceConfig(ca, aCert, aKey)
	aCfg.Lighthouses = lighthouses
	aStart := time.Now()
	a, err := Start(aCfg, testLogger("a"))
	if err != nil {
		t.Fatal(err)
	}
	started := time.Since(aStart)
	if a.OverlayIP() != aIP || b.OverlayIP() != bIP {
		t.Fatalf("overlay IPs %s %s", a.OverlayIP(), b.OverlayIP())
	}

	t.Run("wait-tunnel-to-lighthouse", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		if err := a.WaitTunnel(ctx, lhIP); err != nil {
			t.Fatal(err)
		}
		t.Logf("a: Start took %s; WaitTunnel(lighthouse) returned after %s (%s after a's Start began)",
			started, time.Since(start), time.Since(aStart))
		if err := a.WaitTunnel(ctx, aIP); err != nil {
			t.Errorf("WaitTunnel(self) = %v", err)
		}
		tn := findTunnel(a.Tunnels(), lhIP)
		if tn == nil || tn.CertName != "lh" ||
			tn.Remote != lighthouses[0].Underlay[0] {
			t.Errorf("a's tunnel to the lighthouse: %+v", tn)
		}
	})

	t.Run("echo-across-overlay", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		dial := time.Now()
		if err := echo(ctx, a, bEcho); err != nil {
			t.Fatal(err)
		}
		first, sinceStart := time.Since(dial), time.Since(aStart)
		warm := time.Now()
		if err := echo(ctx, a, bEcho); err != nil {
			t.Fatal(err)
		}
		t.Logf("first echo a->b: %s after dialing, %s after a's Start began (lighthouse query, handshake with b, TCP); warm echo %s",
			first, sinceStart, time.Since(warm))
	})

	t.Run("udp-across-overlay", func(t *testing.T) {
		// Gossip's packets: a UDP socket bound to b's overlay address
		// receives a's datagram from a's overlay address, and answers it.
		bc, err := b.ListenPacket("udp", netip.AddrPortFrom(bIP, 7001).String())
		if err != nil {
			t.Fatal(err)
		}
		defer bc.Close()
		ac, err := a.ListenPacket("udp", ":7001")
		if err != nil {
			t.Fatal(err)
		}
		defer ac.Close()
		if _, err := a.ListenPacket("udp", netip.AddrPortFrom(bIP, 7002).String()); err == nil {
			t.Error("a listened on b's overlay address")
		}
		to := &net.UDPAddr{IP: bIP.AsSlice(), Port: 7001}
		buf := make([]byte, 64)
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := ac.WriteTo([]byte("ping"), to); err != nil {
				t.Fatal(err)
			}
			_ = bc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			n, from, err := bc.ReadFrom(buf)
			if err == nil {
				if string(buf[:n]) != "ping" || from.(*net.UDPAddr).AddrPort().Addr().Unmap() != aIP {
					t.Fatalf("b read %q from %v, want ping from %s", buf[:n], from, aIP)
				}
				if _, err := bc.WriteTo([]byte("pong"), from); err != nil {
					t.Fatal(err)
				}
				_ = ac.SetReadDeadline(time.Now().Add(5 * time.Second))
				if n, _, err := ac.ReadFrom(buf); err != nil || string(buf[:n]) != "pong" {
					t.Fatalf("a read %q, %v; want pong", buf[:n], err)
				}
				// to its own overlay address: delivered locally, as the
				// kernel does (gossip answers its own queries)
				if _, err := ac.WriteTo([]byte("self"), &net.UDPAddr{IP: aIP.AsSlice(), Port: 7001}); err != nil {
					t.Fatal(err)
				}
				if n, _, err := ac.ReadFrom(buf); err != nil || string(buf[:n]) != "self" {
					t.Fatalf("a read %q, %v from itself; want self", buf[:n], err)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no datagram crossed the overlay in 10 s: %v", err)
			}
		}
	})

	t.Run("tunnels", func(t *testing.T) {
		// Tunnels looks up the peers a config has named (peers.go): b's
		// lists its lighthouse but not a, whose tunnel it holds, until its
		// config names a; the lighthouse's, whose config names nobody,
		// lists none.
		if got := b.Tunnels(); findTunnel(got, aIP) != nil || findTunnel(got, lhIP) == nil {
			t.Errorf("b's tunnels before its config names a: %+v, want the lighthouse's only", got)
		}
		if got := lh.Tunnels(); len(got) != 0 {
			t.Errorf("lighthouse tunnels: %+v, want none: its config names no peer", got)
		}
		next := bCfg
		next.StaticHosts = map[netip.Addr][]netip.AddrPort{aIP: {a.udpAddr()}}
		if err := b.Reload(next); err != nil {
			t.Fatal(err)
		}
		bCfg = next
		tn := findTunnel(b.Tunnels(), aIP)
		if tn == nil || tn.CertName != "a" || tn.Remote.Addr() != ip("127.0.0.1") {
			t.Errorf("b's tunnel to a: %+v (all: %+v)", tn, b.Tunnels())
		}
		if got := b.Tunnels(); len(got) != 2 || !slices.IsSortedFunc(got, func(x, y Tunnel) int { return x.OverlayIP.Compare(y.OverlayIP) }) {
			t.Errorf("b's tunnels: %+v, want the lighthouse's and a's, sorted", got)
		}
		// TunnelTo reads the same host map entry (meshctl ping's path):
		// direct, no relays; none to an address nobody holds, or to itself.
		if one, ok := b.TunnelTo(aIP); !ok || tn == nil || one.Remote != tn.Remote || one.CertName != "a" || one.Relayed || one.Relays != nil {
			t.Errorf("b.TunnelTo(a) = %+v, %t; want the tunnel Tunnels lists, %+v", one, ok, tn)
		}
		if one, ok := b.TunnelTo(overlayIP(99).Addr()); ok {
			t.Errorf("b.TunnelTo(an unknown address) = %+v", one)
		}
		if one, ok := b.TunnelTo(bIP); ok {
			t.Errorf("b.TunnelTo(itself) = %+v", one)
		}
	})

	t.Run("wait-tunnel-deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		err := a.WaitTunnel(ctx, overlayIP(99).Addr())
		if codes.Of(err) != codes.OverlayUnreach {
			t.Fatalf("want %s, got %v", codes.OverlayUnreach, err)
		}
	})

	t.Run("verify", func(t *testing.T) {
		if err := a.Verify(aCfg); err != nil {
			t.Fatalf("running config does not verify: %v", err)
		}
		withSelf := bCfg
		withSelf.StaticHosts = map[netip.Addr][]netip.AddrPort{bIP: {ap("192.0.2.3:4242")}}
		if err := b.Verify(withSelf); err != nil {
			t.Errorf("an entry for the own address must be ignored: %v", err)
		}
		// What a lighthouse holds is read back for every entry.
		lhCfg := userspaceConfig(ca, lhCert, lhKey)
		lhCfg.AmLighthouse, lhCfg.ListenPort = true, lhPort
		if err := lh.Verify(lhCfg); err != nil {
			t.Fatalf("the lighthouse's running config does not verify: %v", err)
		}
		lhExtra := lhCfg
		lhExtra.StaticHosts = map[netip.Addr][]netip.AddrPort{overlayIP(50).Addr(): {ap("192.0.2.50:4242")}}
		if err := lh.Verify(lhExtra); codes.Of(err) != codes.OverlayApply {
			t.Errorf("a static host the lighthouse does not hold: want %s, got %v", codes.OverlayApply, err)
		}
		// Elsewhere only the lighthouse entries are read back (any other
		// would query the lighthouses); a lighthouse not applied is caught.
		notApplied := aCfg
		notApplied.Lighthouses = append(slices.Clone(aCfg.Lighthouses),
			Lighthouse{OverlayIP: overlayIP(50).Addr(), Underlay: []netip.AddrPort{ap("192.0.2.50:4242")}})
		if err := a.Verify(notApplied); codes.Of(err) != codes.OverlayApply {
			t.Errorf("a lighthouse Nebula does not hold: want %s, got %v", codes.OverlayApply, err)
		}
		inside := aCfg
		inside.StaticHosts = map[netip.Addr][]netip.AddrPort{overlayIP(51).Addr(): {ap("10.42.0.78:4242")}}
		if err := a.Verify(inside); codes.Of(err) != codes.OverlayApply {
			t.Errorf("a static host Nebula would drop (underlay inside the overlay): want %s, got %v", codes.OverlayApply, err)
		}
		otherCert := aCfg
		otherCert.Cert = bCert
		if err := a.Verify(otherCert); codes.Of(err) != codes.OverlayApply {
			t.Errorf("another certificate: want %s, got %v", codes.OverlayApply, err)
		}
	})

	t.Run("reload-restart-needed", func(t *testing.T) {
		port := bCfg
		port.ListenPort = 4243
		if err := b.Reload(port); codes.Of(err) != codes.RestartNeeded {
			t.Errorf("listen port: want %s, got %v", codes.RestartNeeded, err)
		}
		moved := bCfg
		moved.Cert, moved.Key = hostCert(t, ca, "b", 30)
		if err := b.Reload(moved); codes.Of(err) != codes.RestartNeeded {
			t.Errorf("overlay address: want %s, got %v", codes.RestartNeeded, err)
		}
		role := bCfg
		role.AmLighthouse, role.ListenPort = true, 4244
		if err := b.Reload(role); codes.Of(err) != codes.RestartNeeded {
			t.Errorf("lighthouse role: want %s, got %v", codes.RestartNeeded, err)
		}
		if err := b.Verify(bCfg); err != nil {
			t.Errorf("b changed after refused reloads: %v", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := echo(ctx, a, bEcho); err != nil {
			t.Fatalf("overlay broken after refused reloads: %v", err)
		}
	})

	t.Run("reload-verify-failure-rolls-back", func(t *testing.T) {
		// Same overlay address, other curve: Nebula logs a refusal and keeps
		// the old certificate while ReloadConfigString returns nil. The CA
		// bundle (which did change) must be rolled back too.
		p256CA, p256Cert, p256Key := p256Identity(t, "b", overlayIP(3))
		curve := bCfg
		curve.CACert = append(slices.Clone(ca.NebulaCertPEM()), p256CA...)
		curve.Cert, curve.Key = p256Cert, p256Key
		start := time.Now()
		err := b.Reload(curve)
		if codes.Of(err) != codes.OverlayApply {
			t.Fatalf("want %s, got %v", codes.OverlayApply, err)
		}
		t.Logf("refused and rolled back in %s: %v", time.Since(start), err)

		// An underlay address inside the overlay network: Nebula drops the
		// static_host_map entry without a word.
		inside := bCfg
		inside.StaticHosts = map[netip.Addr][]netip.AddrPort{overlayIP(60).Addr(): {ap("10.42.0.77:4242")}}
		if err := b.Reload(inside); codes.Of(err) != codes.OverlayApply {
			t.Fatalf("want %s, got %v", codes.OverlayApply, err)
		}

		if err := b.Verify(bCfg); err != nil {
			t.Fatalf("b does not run its old config: %v", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := echo(ctx, a, bEcho); err != nil {
			t.Fatalf("traffic stopped after a refused reload: %v", err)
		}
	})

	t.Run("reload-static-host", func(t *testing.T) {
		next := bCfg
		next.StaticHosts = map[netip.Addr][]netip.AddrPort{aIP: {a.udpAddr()}}
		if err := b.Reload(next); err != nil {
			t.Fatal(err)
		}
		if err := b.Reload(next); err != nil {
			t.Fatalf("reloading the same config: %v", err)
		}
		bCfg = next
	})

	t.Run("reload-unsafe-routes", func(t *testing.T) {
		// A userspace device routes nothing by them (TestKernelUnsafeRoutes
		// shows the routing on a TUN device); here each change of Via,
		// each route added or removed, reaches Nebula without a restart,
		// verifies, and leaves the tunnels up.
		steps := []struct {
			name   string
			routes []UnsafeRoute
		}{
			{"add", []UnsafeRoute{{Route: pfx("192.168.60.0/24"), Via: aIP, Install: true}}},
			{"move-via-and-add-exit", []UnsafeRoute{{Route: pfx("192.168.60.0/24"), Via: lhIP, Install: true}, {Route: pfx("0.0.0.0/0"), Via: aIP}}},
			{"remove-one", []UnsafeRoute{{Route: pfx("0.0.0.0/0"), Via: aIP}}},
			{"remove-all", nil},
		}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		if err := echo(ctx, a, bEcho); err != nil {
			t.Fatal(err)
		}
		for _, step := range steps {
			var up []netip.Addr
			for _, peer := range []netip.Addr{lhIP, aIP} {
				if _, ok := b.TunnelTo(peer); ok {
					up = append(up, peer)
				}
			}
			if len(up) != 2 {
				t.Fatalf("%s: b has tunnels to %v before the reload, want the lighthouse and a", step.name, up)
			}
			next := bCfg
			next.UnsafeRoutes = step.routes
			before := b.yaml
			if err := b.Reload(next); err != nil {
				t.Fatalf("%s: reload = %v (code %s), want it applied live", step.name, err, codes.Of(err))
			}
			if b.yaml == before {
				t.Fatalf("%s: the reload did not reach Nebula", step.name)
			}
			if err := b.Verify(next); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			for _, peer := range up {
				if _, ok := b.TunnelTo(peer); !ok {
					t.Errorf("%s: b lost its tunnel to %s", step.name, peer)
				}
			}
			if err := echo(ctx, a, bEcho); err != nil {
				t.Fatalf("%s: a -> b after the reload: %v", step.name, err)
			}
			bCfg = next
		}
	})

	t.Run("reload-blocklist", func(t *testing.T) {
		blocked := bCfg
		blocked.Blocklist = []string{fingerprint(t, aCert)}
		start := time.Now()
		if err := b.Reload(blocked); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		if !waitFor(ctx, func() bool { return findTunnel(b.Tunnels(), aIP) == nil }) {
			t.Fatalf("b still has a tunnel to blocklisted a: %+v", b.Tunnels())
		}
		t.Logf("b dropped a's tunnel %s after the reload", time.Since(start))
		short, cancelShort := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancelShort()
		if err := echo(short, a, bEcho); err == nil {
			t.Fatal("a still reaches b through the overlay after b blocklisted a")
		}

		if err := b.Reload(bCfg); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		var last error
		if !waitFor(ctx, func() bool {
			try, cancelTry := context.WithTimeout(ctx, 2*time.Second)
			defer cancelTry()
			last = echo(try, a, bEcho)
			return last == nil
		}) {
			t.Fatalf("a cannot reach b after the blocklist entry was removed: %v", last)
		}
		t.Logf("a reaches b again %s after the entry was removed", time.Since(start))
	})

	t.Run("stop-is-a-noop-in-userspace", func(t *testing.T) {
		lh.Stop() // would exit the process if it called Control.Stop
		if err := lh.Verify(lh.applied); err != nil {
			t.Errorf("lighthouse after Stop: %v", err)
		}
	})
}

func findTunnel(ts []Tunnel, ip netip.Addr) *Tunnel {
	for i := range ts {
		if ts[i].OverlayIP == ip {
			return &ts[i]
		}
	}
	return nil
}

// p256Identity builds a P-256 Nebula CA and a host certificate for ip with
// Nebula's cert package (pki issues Curve25519 only).
func p256Identity(t *testing.T, name string, ip netip.Prefix) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caPub, err := caKey.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	caPriv, err := caKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caCert, err := (&cert.TBSCertificate{
		Version: cert.Version1, Name: "p256-ca", Networks: []netip.Prefix{overlayNet}, IsCA: true,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), PublicKey: caPub, Curve: cert.Curve_P256,
	}).Sign(nil, cert.Curve_P256, caPriv)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	host, err := (&cert.TBSCertificate{
		Version: cert.Version1, Name: name, Networks: []netip.Prefix{ip},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), PublicKey: hostKey.PublicKey().Bytes(), Curve: cert.Curve_P256,
	}).Sign(caCert, cert.Curve_P256, caPriv)
	if err != nil {
		t.Fatal(err)
	}
	if caPEM, err = caCert.MarshalPEM(); err != nil {
		t.Fatal(err)
	}
	if certPEM, err = host.MarshalPEM(); err != nil {
		t.Fatal(err)
	}
	return caPEM, certPEM, cert.MarshalPrivateKeyToPEM(cert.Curve_P256, hostKey.Bytes())
}
