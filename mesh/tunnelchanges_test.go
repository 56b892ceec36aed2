package mesh

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// TestTunnelChanges (Nebula patch 4): a tunnel established, and the same
// tunnel closed, each close the channel TunnelChanges handed out before
// and raise its count; with nothing happening the channel stays open.
func TestTunnelChanges(t *testing.T) {
	skipUnderRace(t)
	ca := testCA(t)
	lhIP := overlayIP(1).Addr()
	_, lhs := testLighthouse(t, ca)
	a, err := Start(memberConfig(t, ca, "a", 2, lhs), testLogger("a"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.WaitTunnel(ctx, lhIP); err != nil {
		t.Fatal(err)
	}
	gen, changed := a.TunnelChanges()
	if gen == 0 {
		t.Fatal("a tunnel is up, yet no change counted")
	}
	select {
	case <-changed:
		t.Fatal("the channel closed with no change since it was handed out")
	default:
	}
	a.RebuildTunnel(lhIP) // closes the tunnel and starts a new handshake
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("closing the tunnel to the lighthouse did not close the channel within 10 s")
	}
	if err := a.WaitTunnel(ctx, lhIP); err != nil {
		t.Fatal(err)
	}
	if g, _ := a.TunnelChanges(); g < gen+2 {
		t.Fatalf("count %d after a close and a new tunnel, want at least %d", g, gen+2)
	}
	// Tunnels, cached by the count, follows: the new tunnel is listed.
	if ts := a.Tunnels(); len(ts) != 1 || ts[0].OverlayIP != lhIP {
		t.Fatalf("Tunnels after the rebuild: %+v, want the one to the lighthouse", ts)
	}
	if rs := a.RelayedTunnels(); len(rs) != 0 {
		t.Fatalf("RelayedTunnels %+v, want none: the tunnel to the lighthouse is direct", rs)
	}

}

// BenchmarkTunnels: Tunnels on an instance that knows 1,000 peers (static
// hosts, no tunnel to any) and holds one tunnel, to its lighthouse: as
// the relay and path loops call it while nothing changes (cached: one
// copy), and with the cache dropped each time (every known peer looked
// up, as before Nebula patch 4).
func BenchmarkTunnels(b *testing.B) {
	ca := testCA(b)
	lhIP := overlayIP(1).Addr()
	_, lhs := testLighthouse(b, ca)
	aCfg := memberConfig(b, ca, "a", 2, lhs)
	aCfg.StaticHosts = map[netip.Addr][]netip.AddrPort{}
	for i := range 1000 {
		peer := netip.AddrFrom4([4]byte{10, 42, byte(1 + i/250), byte(1 + i%250)})
		aCfg.StaticHosts[peer] = []netip.AddrPort{netip.AddrPortFrom(ip("192.0.2.1"), 4242)}
	}
	a, err := Start(aCfg, testLogger("a"))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
	defer cancel()
	if err := a.WaitTunnel(ctx, lhIP); err != nil {
		b.Fatal(err)
	}
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if len(a.Tunnels()) != 1 {
				b.Fatal("want the one tunnel")
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		for b.Loop() {
			a.cache.forget()
			if len(a.Tunnels()) != 1 {
				b.Fatal("want the one tunnel")
			}
		}
	})
}
