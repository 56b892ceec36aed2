package nebula

import (
	"net/netip"
	"slices"
)

// meshd patch 5 (PATCHES.md, "Apply a membership change without a
// reload"): the tunnels a blocklist delta cuts. A blocked certificate's
// tunnel lasts until the connection manager next checks it (seconds);
// meshd closes it when the change is applied, and finding it by looking
// up every peer meshd knows cost a lookup per member. Here the host map's
// tunnels are walked once, by the fingerprint each tunnel's certificate
// cached at the handshake: the cost is the tunnels this node holds.

// TunnelsWithCerts returns the first overlay address of each established
// tunnel whose peer presented a certificate with one of fingerprints, and
// of each tunnel without a direct path relayed through one of those peers.
// No remote list is read (see meshd's mesh/peers.go for why), and the
// relay lists are read after the host map's lock is released.
func (c *Control) TunnelsWithCerts(fingerprints []string) (blocked, relayed []netip.Addr) {
	var indirect []*HostInfo
	c.f.hostMap.ForEachIndex(func(h *HostInfo) {
		if len(h.vpnAddrs) == 0 {
			return
		}
		if crt := h.GetCert(); crt != nil && slices.Contains(fingerprints, crt.Fingerprint) {
			if !slices.Contains(blocked, h.vpnAddrs[0]) {
				blocked = append(blocked, h.vpnAddrs[0])
			}
			return
		}
		if !h.GetRemote().IsValid() {
			indirect = append(indirect, h)
		}
	})
	for _, h := range indirect {
		if slices.Contains(blocked, h.vpnAddrs[0]) || slices.Contains(relayed, h.vpnAddrs[0]) {
			continue
		}
		if slices.ContainsFunc(h.relayState.CopyRelayIps(), func(r netip.Addr) bool { return slices.Contains(blocked, r) }) {
			relayed = append(relayed, h.vpnAddrs[0])
		}
	}
	return blocked, relayed
}
