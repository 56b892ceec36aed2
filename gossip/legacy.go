package gossip

import (
	"context"
	"net"
	"net/netip"
	"sync"
)

// Network is where gossip's sockets come from: the kernel's (nil in
// Config) or a userspace overlay's (meshd's mesh.Mesh in userspace mode,
// whose Listen, ListenPacket and DialContext reach the overlay).
type Network interface {
	Listen(network, addr string) (net.Listener, error)
	ListenPacket(network, addr string) (net.PacketConn, error)
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// kernelNet is the kernel's sockets.
type kernelNet struct{}

func (kernelNet) Listen(network, addr string) (net.Listener, error) {
	return net.Listen(network, addr)
}

func (kernelNet) ListenPacket(network, addr string) (net.PacketConn, error) {
	return net.ListenPacket(network, addr)
}

func (kernelNet) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// legacyNet reaches members that advertise an address outside the
// overlay: a node still running the release before gossip moved onto the
// overlay (DESIGN §11), during a rolling upgrade. Nothing is received
// here: its socket is the kernel's, unbound (any address, an ephemeral
// port), used only to send, so its datagrams leave from the underlay
// address the kernel's route picks, not from the overlay address the
// gossip socket is bound to. Every datagram gossip receives still
// arrives on the overlay; a legacy member answers there, through Nebula.
type legacyNet struct {
	mu  sync.Mutex
	udp *net.UDPConn // opened at the first send
}

func (l *legacyNet) writeTo(b []byte, to netip.AddrPort) error {
	l.mu.Lock()
	if l.udp == nil {
		c, err := net.ListenUDP("udp", nil)
		if err != nil {
			l.mu.Unlock()
			return err
		}
		l.udp = c
	}
	c := l.udp
	l.mu.Unlock()
	_, err := c.WriteToUDPAddrPort(b, to)
	return err
}

func (l *legacyNet) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.udp != nil {
		_ = l.udp.Close()
		l.udp = nil
	}
}
