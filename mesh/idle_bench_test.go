package mesh

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// BenchmarkFirstPacketAfterIdle is BenchmarkFirstPacket with the tunnel
// closed by Nebula itself, as a worker's is (IdleTimeout 1 s on both,
// fast timers: Nebula looks every 2 s), not by CloseTunnel: each round waits
// until neither a nor b holds a tunnel, then times a's echo to b (a TCP
// connect over a's overlay and one echo; the handshake holds the first
// packet). Real Nebula on loopback, userspace overlay. Prints p50/p95/max
// of the echo and the median wait for the close after the last echo.
func BenchmarkFirstPacketAfterIdle(b *testing.B) {
	ca := testCA(b)
	_, lhs := testLighthouse(b, ca)
	start := func(name string, n byte, edit func(*Config)) *Mesh {
		cfg := memberConfig(b, ca, name, n, lhs)
		edit(&cfg)
		m, err := Start(cfg, testLogger(name))
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	aIP, bIP := overlayIP(2).Addr(), overlayIP(3).Addr()
	mb := start("b", 3, func(c *Config) { c.IdleTimeout = time.Second }) // both workers
	ma := start("a", 2, func(c *Config) {
		c.StaticHosts = map[netip.Addr][]netip.AddrPort{bIP: {mb.udpAddr()}}
		c.IdleTimeout = time.Second
	})
	l, err := mb.Listen("tcp", net.JoinHostPort(bIP.String(), "7000"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go serveEchoUntilClosed(l)
	addr := net.JoinHostPort(bIP.String(), "7000")
	var took, closing []time.Duration
	last := time.Now()
	for b.Loop() {
		b.StopTimer()
		ctx, cancel := context.WithTimeout(b.Context(), 30*time.Second)
		if !waitFor(ctx, func() bool {
			_, ta := ma.TunnelTo(bIP)
			_, tb := mb.TunnelTo(aIP)
			return !ta && !tb
		}) {
			b.Fatal("the idle tunnel between a and b did not close within 30 s")
		}
		closing = append(closing, time.Since(last))
		b.StartTimer()
		t0 := time.Now()
		if err := echo(ctx, ma, addr); err != nil {
			b.Fatalf("first packet to b: %v", err)
		}
		last = time.Now()
		took = append(took, last.Sub(t0))
		cancel()
	}
	b.StopTimer()
	slices.Sort(took)
	slices.Sort(closing)
	at := func(d []time.Duration, q float64) time.Duration { return d[int(q*float64(len(d)-1))] }
	b.ReportMetric(float64(at(took, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(at(took, 0.95).Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(at(closing, 0.5).Seconds(), "close-s")
	b.Logf("first packet after an idle close, %d rounds: p50 %v, p95 %v, max %v (target <= 100 ms); closed a median %v after the last echo (IdleTimeout 1 s, connection_alive_interval 2 s)",
		len(took), at(took, 0.5).Round(time.Microsecond), at(took, 0.95).Round(time.Microsecond), took[len(took)-1].Round(time.Microsecond),
		at(closing, 0.5).Round(time.Millisecond))
}

// serveEchoUntilClosed echoes every connection l accepts until l closes.
func serveEchoUntilClosed(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 64)
			for {
				n, err := c.Read(buf)
				if err != nil {
					return
				}
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
		}()
	}
}

// TestIdleWorkerTunnels: a worker (IdleTimeout 2 s, one lighthouse, one
// relay of its own) that exchanged one echo with each of 24 peers holds 26
// tunnels, and once idle only the lighthouse's and the relay's. Real
// Nebula on loopback, userspace overlay, fast timers; prints the counts.
func TestIdleWorkerTunnels(t *testing.T) {
	skipUnderRace(t)
	if testing.Short() {
		t.Skip("starts 26 Nebula instances")
	}
	const peers, idle = 24, 2 * time.Second
	ca := testCA(t)
	lh, lhs := testLighthouse(t, ca)
	start := func(name string, n byte, edit func(*Config)) *Mesh {
		cfg := memberConfig(t, ca, name, n, lhs)
		edit(&cfg)
		m, err := Start(cfg, testLogger(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Stop)
		return m
	}
	rIP := overlayIP(3).Addr()
	r := start("r", 3, func(c *Config) { c.AmRelay = true })
	static := map[netip.Addr][]netip.AddrPort{rIP: {r.udpAddr()}}
	var addrs []string
	for i := range peers {
		n := byte(10 + i)
		p := start(fmt.Sprintf("p%d", i), n, func(*Config) {})
		l, err := p.Listen("tcp", net.JoinHostPort(overlayIP(n).Addr().String(), "7000"))
		if err != nil {
			t.Fatal(err)
		}
		serveEcho(t, l)
		static[overlayIP(n).Addr()] = []netip.AddrPort{p.udpAddr()}
		addrs = append(addrs, net.JoinHostPort(overlayIP(n).Addr().String(), "7000"))
	}
	a := start("a", 2, func(c *Config) {
		c.StaticHosts, c.Relays, c.IdleTimeout = static, []netip.Addr{rIP}, idle
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for _, ip := range []netip.Addr{lh.self, rIP} {
		if err := a.WaitTunnel(ctx, ip); err != nil {
			t.Fatal(err)
		}
	}
	for _, addr := range addrs {
		if err := echo(ctx, a, addr); err != nil {
			t.Fatal(err)
		}
	}
	busy := len(a.Tunnels())
	last := time.Now()
	if busy != peers+2 {
		t.Errorf("after an echo to each of %d peers a holds %d tunnels, want %d", peers, busy, peers+2)
	}
	if !waitFor(ctx, func() bool { return len(a.Tunnels()) == 2 }) {
		t.Fatalf("a idle still holds %d tunnels %s after its last echo", len(a.Tunnels()), time.Since(last).Round(time.Millisecond))
	}
	var kept []netip.Addr
	for _, tn := range a.Tunnels() {
		kept = append(kept, tn.OverlayIP)
	}
	if !slices.Equal(kept, []netip.Addr{lh.self, rIP}) {
		t.Errorf("idle a keeps tunnels to %v, want the lighthouse and the relay %v", kept, []netip.Addr{lh.self, rIP})
	}
	t.Logf("a worker that echoed %d peers: %d tunnels, then %d (lighthouse and relay) %s after its last echo (IdleTimeout %s, connection_alive_interval 2 s)",
		peers, busy, len(kept), time.Since(last).Round(time.Millisecond), idle)
}
