package mesh

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slackhq/nebula/handshake"
	"github.com/slackhq/nebula/header"
)

// TestHandshakeHoldoffAfterTimeout: a peer that never answers gets a new
// handshake only after a holdoff that grows with each timeout in a row
// (third_party/nebula's patch, PATCHES.md). A userspace node has a static
// host whose address is a socket of the test's that reads and never
// answers, and traffic for it every 50 ms; the test times the first
// stage 1 packets of each handshake (by its initiator index). Nebula
// gives up on a handshake one try interval (1 s) after its tenth try and,
// without the patch, starts the next with the next packet: 1.1–1.3 s from
// one handshake's last try to the next one's first. With it the second
// waits 0.5 s more, the third 1 s more.
func TestHandshakeHoldoffAfterTimeout(t *testing.T) {
	skipUnderRace(t)
	a, peer, silent := silentPeerNode(t)

	// Each handshake's first and last stage 1, in the order they began.
	type span struct{ first, last time.Time }
	var mu sync.Mutex
	var spans []span
	byIndex := map[uint32]int{}
	go func() {
		buf := make([]byte, 9001)
		for {
			n, err := peer.Read(buf)
			if err != nil {
				return
			}
			idx, ok := initiatorIndex(buf[:n])
			if !ok {
				continue
			}
			now := time.Now()
			mu.Lock()
			if i, seen := byIndex[idx]; seen {
				spans[i].last = now
			} else {
				byIndex[idx] = len(spans)
				spans = append(spans, span{now, now})
			}
			mu.Unlock()
		}
	}()

	pc, err := a.ListenPacket("udp", netip.AddrPortFrom(a.OverlayIP(), 40001).String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(silent, 9))
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			_, _ = pc.WriteTo([]byte("anyone there?"), to)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})

	var got []span
	waitCtx, waitCancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer waitCancel()
	if !waitFor(waitCtx, func() bool {
		mu.Lock()
		defer mu.Unlock()
		got = slices.Clone(spans)
		return len(got) >= 3
	}) {
		t.Fatalf("%d handshakes to a silent peer in 30 s, want 3", len(got))
	}
	// From the last try of one handshake to the first of the next: the
	// timeout (one more try interval after the last) and the holdoff.
	second, third := got[1].first.Sub(got[0].last), got[2].first.Sub(got[1].last)
	t.Logf("from the last try of a handshake to a silent peer to the next one's first: %s, then %s",
		second.Round(time.Millisecond), third.Round(time.Millisecond))
	if second < 1400*time.Millisecond {
		t.Errorf("the second handshake began %s after the first's last try: no holdoff after a timeout (want ≥ 1.4 s: about 1 s to the timeout, then 0.5 s)", second)
	}
	if third < 1900*time.Millisecond {
		t.Errorf("the third handshake began %s after the second's last try: the holdoff did not grow (want ≥ 1.9 s: about 1 s, then 1 s)", third)
	}
}

// initiatorIndex reads the initiator index of a Nebula IX stage 1: the
// handshake payload follows the header and the initiator's ephemeral and
// static keys, unencrypted (no key is agreed yet).
func initiatorIndex(packet []byte) (uint32, bool) {
	var h header.H
	if err := h.Parse(packet); err != nil || h.Type != header.Handshake || h.MessageCounter != 1 {
		return 0, false
	}
	const keys = 2 * 32
	if len(packet) < header.Len+keys {
		return 0, false
	}
	p, err := handshake.UnmarshalPayload(packet[header.Len+keys:])
	if err != nil || p.InitiatorIndex == 0 {
		return 0, false
	}
	return p.InitiatorIndex, true
}
