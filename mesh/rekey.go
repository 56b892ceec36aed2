package mesh

// Tunnels follow this node's own certificate at once.
//
// Nebula moves a tunnel to a reloaded certificate lazily: its connection
// manager re-handshakes a tunnel whose local certificate is not current
// only when it next checks that tunnel and sees inbound traffic on it
// (tryRehandshake, every tunnels check interval). Until then the peer
// holds this node's old certificate for that tunnel. During a CA rotation
// the old CA leaves every bundle moments after the last certificate is
// reissued (`ca rotate --now`: tens of ms), and a peer that drops it tears
// down every tunnel still presenting a certificate of it and hands-shakes
// again: a packet or two lost (e2e.TestMoveToV2 lost one ping in 10 runs
// that way, 2026-12-07). So when a reload changes the certificate, every
// established tunnel is re-handshaken now: Nebula's own make-before-break
// (the old tunnel carries packets until the new one completes, as
// tryRehandshake does), and both ends then hold each other's current
// certificates.
//
// Cost: one handshake per tunnel per change of this node's certificate (a
// renewal, a CA rotation), none on a membership change.

// rekeyTunnels starts a new handshake with every peer this node has an
// established tunnel to. The caller holds m.mu.
func (m *Mesh) rekeyTunnels() int {
	n := 0
	for _, h := range m.hosts() {
		m.ctrl.CreateTunnel(h.VpnAddrs[0])
		n++
	}
	return n
}
