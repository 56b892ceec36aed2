package nebula

// meshd patch (third_party/nebula/PATCHES.md): hold back a new handshake
// to a peer whose last handshakes timed out.

import (
	"net/netip"
	"time"
)

// hsHoldoff counts the handshakes to one peer that timed out in a row.
type hsHoldoff struct {
	n    int
	last time.Time
}

// holdoffForget is how long after its last timeout a peer's count is
// forgotten.
const holdoffForget = 30 * time.Second

// holdoff is how long a new handshake to vpnAddr waits before its first
// packet: nothing unless its last handshakes timed out, then 5 ×
// try_interval for one, doubling with each further one, at most the
// handshake's own timeout. Upstream starts the next handshake with the
// next packet for the peer, so a peer whose socket is queued longer than
// a handshake's timeout got a new one every 5.5 s from every peer with
// traffic for it, each resent ten times, while none could complete.
// The caller holds hm's lock.
func (hm *HandshakeManager) holdoff(vpnAddr netip.Addr, now time.Time) time.Duration {
	r := hm.timedOut[vpnAddr]
	if r == nil {
		return 0
	}
	if now.Sub(r.last) > holdoffForget {
		delete(hm.timedOut, vpnAddr)
		return 0
	}
	d := 5 * hm.config.tryInterval << min(r.n-1, 8)
	return min(d, hsTimeout(hm.config.retries, hm.config.tryInterval))
}

// noteTimedOut counts a handshake to vpnAddr that timed out.
func (hm *HandshakeManager) noteTimedOut(vpnAddr netip.Addr, now time.Time) {
	hm.Lock()
	defer hm.Unlock()
	r := hm.timedOut[vpnAddr]
	if r == nil {
		r = &hsHoldoff{}
		hm.timedOut[vpnAddr] = r
	}
	r.n++
	r.last = now
}

// clearTimedOut forgets the timeouts of a peer a tunnel now reaches. The
// caller holds hm's lock.
func (hm *HandshakeManager) clearTimedOut(addrs []netip.Addr) {
	for _, a := range addrs {
		delete(hm.timedOut, a)
	}
}
