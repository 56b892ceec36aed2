package mesh

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestHandshakeTickerIdles (Nebula patch 8): an instance with no handshake
// under way stops the handshake manager's 100 ms ticker; a packet for a
// static host that never answers starts it again, its handshake is resent
// on the ticker's schedule, and once that handshake has timed out the
// ticker stops again. Without the patch Control.HandshakeTicking does not
// exist and the test does not build.
func TestHandshakeTickerIdles(t *testing.T) {
	skipUnderRace(t)
	a, peer, silent := silentPeerNode(t)

	var mu sync.Mutex
	copies := map[uint32]int{} // stage 1 packets the silent peer read, by initiator index
	go func() {
		buf := make([]byte, 9001)
		for {
			n, err := peer.Read(buf)
			if err != nil {
				return
			}
			if idx, ok := initiatorIndex(buf[:n]); ok {
				mu.Lock()
				copies[idx]++
				mu.Unlock()
			}
		}
	}()
	most := func() int {
		mu.Lock()
		defer mu.Unlock()
		m := 0
		for _, n := range copies {
			m = max(m, n)
		}
		return m
	}
	waitTicking := func(want bool, within time.Duration, what string) {
		t.Helper()
		deadline := time.Now().Add(within)
		for a.ctrl.HandshakeTicking() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: ticking %v, want %v within %s", what, !want, want, within)
			}
			time.Sleep(10 * time.Millisecond) // polling a flag, bounded by the deadline
		}
	}

	waitTicking(false, 2*time.Second, "idle, no handshake")

	pc, err := a.ListenPacket("udp", netip.AddrPortFrom(a.OverlayIP(), 40001).String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if _, err := pc.WriteTo([]byte("anyone there?"), net.UDPAddrFromAddrPort(netip.AddrPortFrom(silent, 9))); err != nil {
		t.Fatal(err)
	}
	waitTicking(true, 2*time.Second, "a handshake started")
	deadline := time.Now().Add(5 * time.Second)
	for most() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("the silent peer read %d copies of one stage 1 within 5s, want at least 4 (resent on the ticker)", most())
		}
		time.Sleep(10 * time.Millisecond) // polling a count, bounded by the deadline
	}
	waitTicking(false, 15*time.Second, "the handshake timed out")
	t.Logf("stage 1 copies of the one handshake: %d", most())
}
