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
	lhCert, lhKey := hostCert(t, ca, "lh", 1)
	aCert, aKey := hostCert(t, ca, "a", 2)
	lhIP := overlayIP(1).Addr()
	lh, lhPort := startLighthouse(t, userspaceConfig(ca, lhCert, lhKey), testLogger("lh"))
	_ = lh
	aCfg := userspaceConfig(ca, aCert, aKey)
	aCfg.Lighthouses = []Lighthouse{{OverlayIP: lhIP, Underlay: []netip.AddrPort{netip.AddrPortFrom(ip("127.0.0.1"), uint16(lhPort))}}}
	a, err := Start(aCfg, testLogger("a"))
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
}
