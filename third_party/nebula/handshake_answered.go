package nebula

// meshd patch (third_party/nebula/PATCHES.md): answer a repeated stage 1
// from the cached stage 2 before any expensive work.

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/slackhq/nebula/header"
)

// answered returns the tunnel this node built as the responder to exactly
// this stage 1 packet (the bytes after the header), or nil. The initiator
// resends stage 1 until it reads stage 2; when this node's socket is
// queued for seconds, most stage 1 packets it reads are such copies.
// Bytes equal to a packet already answered carry the same certificate,
// ephemeral key and index the first copy did, and that copy passed every
// check, so the only answer they can get is the one already sent.
func (hm *HandshakeManager) answered(initiatorIndex uint32, stage1 []byte) *HostInfo {
	hm.mainHostMap.RLock()
	defer hm.mainHostMap.RUnlock()
	hi := hm.mainHostMap.RemoteIndexes[initiatorIndex]
	if hi == nil || hi.ConnectionState == nil || hi.ConnectionState.initiator {
		return nil
	}
	if !bytes.Equal(hi.HandshakePacket[handshakePacketStage0], stage1) || len(hi.HandshakePacket[handshakePacketStage2]) == 0 {
		return nil
	}
	return hi
}

// stage2ResendGap is the least time between two stage 2 packets this
// node sends for one tunnel the same way. An initiator resends stage 1
// every try_interval × n; copies that reach a node closer together than
// this by one path were queued together (its socket, or the initiator's,
// is seconds behind), and one answer serves them all: each further one
// would only queue again behind the first. A lost stage 2 is answered
// again at the next copy after the gap; a copy that came another way (an
// initiator tries every address it knows) is answered at once.
const stage2ResendGap = 500 * time.Millisecond

// stage2Resend is the last stage 2 a tunnel's responder sent: when, and
// which way (viaKey).
type stage2Resend struct {
	at time.Time
	to netip.AddrPort
}

// viaKey names the way a packet came: the sender's UDP address, or for a
// relayed packet the relay's overlay address (port 0).
func viaKey(via ViaSender) netip.AddrPort {
	if via.IsRelayed && via.relayHI != nil && len(via.relayHI.vpnAddrs) > 0 {
		return netip.AddrPortFrom(via.relayHI.vpnAddrs[0], 0)
	}
	return via.UdpAddr
}

// resendStage2 sends existing's cached stage 2 back the way the repeated
// stage 1 came (Nebula's ErrAlreadySeen answer, moved here from
// handleCheckAndCompleteError so that the early path in beginHandshake and
// CheckAndComplete's share it), unless it sent one the same way within
// stage2ResendGap.
func (hm *HandshakeManager) resendStage2(via ViaSender, existing *HostInfo) {
	f := hm.f
	if existing.SetRemoteIfPreferred(f.hostMap, via) {
		// Send a test packet to ensure the other side has also switched to
		// the preferred remote
		f.SendMessageToVpnAddr(header.Test, header.TestRequest, existing.vpnAddrs[0], []byte(""), make([]byte, 12, 12), make([]byte, mtu))
	}

	msg := existing.HandshakePacket[handshakePacketStage2]
	if msg == nil {
		return
	}

	now, to := time.Now(), viaKey(via)
	if last := existing.stage2Sent.Load(); last != nil && last.to == to && now.Sub(last.at) < stage2ResendGap {
		if hm.l.Enabled(context.Background(), slog.LevelDebug) {
			existing.logger(hm.l).Debug("Handshake message not sent again so soon",
				"vpnAddrs", existing.vpnAddrs,
				"from", via,
				"handshake", m{"stage": uint64(2), "style": header.SubTypeName(header.Handshake, header.HandshakeIXPSK0)},
				"cached", true,
			)
		}
		return
	}
	existing.stage2Sent.Store(&stage2Resend{at: now, to: to})

	// Resend the original response. The peer is committed to that response's
	// ephemeral keys; a freshly-built one would have different keys and break
	// the tunnel even though both sides "completed" the handshake.
	hm.sendHandshakeResponse(via, msg, existing, true)
}
