package mesh

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// TestReloadDelta (Nebula patch 5): each kind of membership change that
// Reload applies as a delta, on real userspace instances, reaches Nebula
// and does what a reload of the same key did: a static host added is
// reachable, one removed is not, a lighthouse added finds a peer only it
// knows, a relay added is told to the lighthouse, a blocked fingerprint
// closes its tunnel at once. Each step checks that the delta applied
// (yaml left empty: a full reload sets it to the text). The last steps
// check that Nebula's config kept in step with the deltas, so a full
// reload after them compares with what runs, and that a refused delta
// changes nothing. The subtests share the instances and run in order.
func TestReloadDelta(t *testing.T) {
	skipUnderRace(t)
	ca := testCA(t)
	lhCert, lhKey := hostCert(t, ca, "lh", 1)
	aCert, aKey := hostCert(t, ca, "a", 2)
	bCert, bKey := hostCert(t, ca, "b", 3)
	cCert, cKey := hostCert(t, ca, "c", 4)
	lhIP, aIP, bIP, cIP := overlayIP(1).Addr(), overlayIP(2).Addr(), overlayIP(3).Addr(), overlayIP(4).Addr()
	lh, lhPort := startLighthouse(t, userspaceConfig(ca, lhCert, lhKey), testLogger("lh"))
	lighthouses := []Lighthouse{{OverlayIP: lhIP, Underlay: []netip.AddrPort{netip.AddrPortFrom(ip("127.0.0.1"), uint16(lhPort))}}}

	start := func(name string, crt, key []byte, lhs []Lighthouse) (*Mesh, Config) {
		cfg := userspaceConfig(ca, crt, key)
		cfg.Lighthouses = lhs
		m, err := Start(cfg, testLogger(name))
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Listen("tcp", ":7000")
		if err != nil {
			t.Fatal(err)
		}
		serveEcho(t, l)
		return m, cfg
	}
	// a and b know no lighthouse: they reach each other through their
	// static hosts only. c registers with the lighthouse.
	a, aCfg := start("a", aCert, aKey, nil)
	b, bCfg := start("b", bCert, bKey, nil)
	c, _ := start("c", cCert, cKey, lighthouses)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := c.WaitTunnel(ctx, lhIP); err != nil {
		t.Fatal(err)
	}
	bEcho, cEcho := netip.AddrPortFrom(bIP, 7000).String(), netip.AddrPortFrom(cIP, 7000).String()

	reload := func(t *testing.T, m *Mesh, cfg Config) {
		t.Helper()
		if err := m.Reload(cfg); err != nil {
			t.Fatal(err)
		}
		if m.yaml != "" {
			t.Fatal("Reload rendered the whole config: the change did not go the delta's way")
		}
	}
	reaches := func(m *Mesh, addr string, within time.Duration) error {
		var last error
		waitCtx, cancelWait := context.WithTimeout(ctx, within)
		defer cancelWait()
		if waitFor(waitCtx, func() bool {
			try, cancelTry := context.WithTimeout(waitCtx, 2*time.Second)
			defer cancelTry()
			last = echo(try, m, addr)
			return last == nil
		}) {
			return nil
		}
		return last
	}

	t.Run("static-host-added-is-reachable", func(t *testing.T) {
		aCfg.StaticHosts = map[netip.Addr][]netip.AddrPort{bIP: {b.udpAddr()}}
		reload(t, a, aCfg)
		if have := a.staticRemotes(bIP); !slices.Contains(have, b.udpAddr()) {
			t.Fatalf("Nebula holds %v for b, want %s", have, b.udpAddr())
		}
		if err := reaches(a, bEcho, 15*time.Second); err != nil {
			t.Fatalf("a cannot reach b through its new static host: %v", err)
		}
	})

	t.Run("static-host-removed-is-unreachable", func(t *testing.T) {
		aCfg.StaticHosts = map[netip.Addr][]netip.AddrPort{}
		reload(t, a, aCfg)
		if have := a.staticRemotes(bIP); len(have) != 0 {
			t.Fatalf("Nebula still holds %v for b", have)
		}
		// As after a reload, the tunnel stays until it closes; the next
		// one has no address to go to.
		a.ctrl.CloseTunnel(bIP, false)
		short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
		defer cancelShort()
		if err := echo(short, a, bEcho); err == nil {
			t.Fatal("a still reaches b after its static host was removed and the tunnel closed")
		}
	})

	t.Run("lighthouse-added-finds-peers", func(t *testing.T) {
		short, cancelShort := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancelShort()
		if err := echo(short, a, cEcho); err == nil {
			t.Fatal("a reaches c before it knows a lighthouse")
		}
		aCfg.Lighthouses = lighthouses
		reload(t, a, aCfg)
		if err := reaches(a, cEcho, 20*time.Second); err != nil {
			t.Fatalf("a cannot reach c, which only the new lighthouse knows: %v", err)
		}
	})

	t.Run("relay-added-is-told-to-the-lighthouse", func(t *testing.T) {
		if cm := lh.ctrl.QueryLighthouse(aIP); cm != nil && (*cm)[aIP.String()] != nil && len((*cm)[aIP.String()].Relay) > 0 {
			t.Fatalf("the lighthouse lists relays of a before a has any: %+v", *(*cm)[aIP.String()])
		}
		aCfg.Relays = []netip.Addr{cIP}
		reload(t, a, aCfg)
		wait, cancelWait := context.WithTimeout(ctx, 10*time.Second)
		defer cancelWait()
		if !waitFor(wait, func() bool {
			cm := lh.ctrl.QueryLighthouse(aIP)
			return cm != nil && (*cm)[aIP.String()] != nil && slices.Contains((*cm)[aIP.String()].Relay, cIP)
		}) {
			t.Fatalf("the lighthouse does not list c as a's relay: %+v", lh.ctrl.QueryLighthouse(aIP))
		}
	})

	t.Run("fingerprint-blocked-closes-its-tunnel", func(t *testing.T) {
		aCfg.StaticHosts = map[netip.Addr][]netip.AddrPort{bIP: {b.udpAddr()}}
		reload(t, a, aCfg)
		bCfg.StaticHosts = map[netip.Addr][]netip.AddrPort{aIP: {a.udpAddr()}}
		reload(t, b, bCfg)
		if err := reaches(a, bEcho, 15*time.Second); err != nil {
			t.Fatal(err)
		}
		// A removal: a leaves b's static hosts and its certificate is
		// blocked, in one change.
		bCfg.StaticHosts, bCfg.Blocklist = map[netip.Addr][]netip.AddrPort{}, []string{fingerprint(t, aCert)}
		reload(t, b, bCfg)
		if tn, ok := b.TunnelTo(aIP); ok {
			t.Fatalf("b's tunnel to blocked a is still up when Reload returned: %+v", tn)
		}
		short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
		defer cancelShort()
		if err := echo(short, a, bEcho); err == nil {
			t.Fatal("a still reaches b after b blocked it")
		}
		bCfg.StaticHosts, bCfg.Blocklist = map[netip.Addr][]netip.AddrPort{aIP: {a.udpAddr()}}, nil
		reload(t, b, bCfg)
		if err := reaches(a, bEcho, 20*time.Second); err != nil {
			t.Fatalf("a cannot reach b after b unblocked it: %v", err)
		}
	})

	t.Run("full-reload-after-deltas", func(t *testing.T) {
		// A full reload (a firewall change), a delta that adds x, and a
		// full reload (another firewall change) without x: the static
		// hosts of the first. Nebula compares the reloaded config with
		// the one it holds: had the delta not been written into it,
		// static_host_map would seem unchanged and x would stay.
		full := func(port string) {
			t.Helper()
			next := aCfg
			next.Inbound = append(slices.Clone(aCfg.Inbound), FirewallRule{Port: port, Proto: "tcp", Host: "any"})
			if err := a.Reload(next); err != nil {
				t.Fatal(err)
			}
			if a.yaml == "" {
				t.Fatal("a firewall change did not take the full reload")
			}
			aCfg = next
		}
		full("7001")
		x, xAddr := overlayIP(77).Addr(), ap("192.0.2.77:4242")
		aCfg.StaticHosts[x] = []netip.AddrPort{xAddr}
		reload(t, a, aCfg)
		if have := a.staticRemotes(x); !slices.Contains(have, xAddr) {
			t.Fatalf("Nebula holds %v for x after the delta", have)
		}
		delete(aCfg.StaticHosts, x)
		full("7002")
		if have := a.staticRemotes(x); slices.Contains(have, xAddr) {
			t.Fatalf("Nebula still holds %v for x after the full reload removed it", have)
		}
		if err := reaches(a, bEcho, 15*time.Second); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("refused-delta-changes-nothing", func(t *testing.T) {
		inside := aCfg
		inside.StaticHosts = map[netip.Addr][]netip.AddrPort{bIP: aCfg.StaticHosts[bIP], overlayIP(60).Addr(): {ap("10.42.0.77:4242")}}
		if err := a.Reload(inside); codes.Of(err) != codes.OverlayApply {
			t.Fatalf("an underlay address inside the overlay: want %s, got %v", codes.OverlayApply, err)
		}
		bad := aCfg
		bad.Blocklist = []string{"not-a-fingerprint"}
		if err := a.Reload(bad); codes.Of(err) != codes.ConfigInvalid {
			t.Fatalf("a malformed fingerprint: want %s, got %v", codes.ConfigInvalid, err)
		}
		if err := a.Apply(Change{StaticHosts: map[netip.Addr][]netip.AddrPort{bIP: nil, overlayIP(61).Addr(): {}}}); codes.Of(err) != codes.ConfigInvalid {
			t.Fatalf("Apply of an entry without an underlay address: want %s, got %v", codes.ConfigInvalid, err)
		}
		if _, ok := a.applied.StaticHosts[bIP]; !ok {
			t.Fatal("a refused Apply removed b")
		}
		if err := a.Verify(aCfg); err != nil {
			t.Fatalf("a after refused changes: %v", err)
		}
		if err := reaches(a, bEcho, 15*time.Second); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("apply", func(t *testing.T) {
		y, yAddr := overlayIP(78).Addr(), ap("192.0.2.78:4242")
		if err := a.Apply(Change{StaticHosts: map[netip.Addr][]netip.AddrPort{y: {yAddr}}}); err != nil {
			t.Fatal(err)
		}
		if have := a.staticRemotes(y); !slices.Contains(have, yAddr) {
			t.Fatalf("Nebula holds %v for y after Apply", have)
		}
		// The config with y is what runs now: Reload finds nothing to do.
		aCfg.StaticHosts[y] = []netip.AddrPort{yAddr}
		if err := a.Reload(aCfg); err != nil {
			t.Fatal(err)
		}
		if err := a.Apply(Change{StaticHosts: map[netip.Addr][]netip.AddrPort{y: nil}}); err != nil {
			t.Fatal(err)
		}
		if have := a.staticRemotes(y); len(have) != 0 {
			t.Fatalf("Nebula still holds %v for y", have)
		}
	})
}
