package mesh

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/slackhq/nebula"
	"github.com/slackhq/nebula/overlay"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// netstack is a userspace overlay's network stack: gvisor's TCP/IP on
// Nebula's user device, with the node's overlay address. It is what
// Nebula's own service package builds (service.New, v1.10.3 to v1.12.0: the same NIC,
// MTU and packet pumps; v1.12.0's also routes IPv6 and adds every network's
// address), with what meshd's gossip needs that the service
// package keeps private: a UDP socket and a TCP listener on the overlay
// address, so gossip rides the overlay in userspace mode as it does on a
// kernel TUN device.
type netstack struct {
	ip    *stack.Stack
	self  netip.Addr
	proto tcpip.NetworkProtocolNumber
}

const netstackNIC = 1

// netstackMTU is the link MTU Nebula's service package gives the stack.
const netstackMTU = 1280

// newNetstack starts ctrl (Nebula's Control.Start) and pumps packets
// between its user device and a new gvisor stack until ctrl's context
// ends. Nebula v1.10.3 exited the process when the device's pipes closed
// (v1.11 no longer does), so a userspace overlay runs until the process
// exits: nothing tears this stack down yet (Mesh.Stop).
func newNetstack(ctrl *nebula.Control) (*netstack, error) {
	if err := ctrl.Start(); err != nil {
		return nil, fmt.Errorf("userspace network stack: Nebula did not start: %w", err)
	}
	dev, ok := ctrl.Device().(*overlay.UserDevice)
	if !ok {
		return nil, errors.New("userspace network stack: Nebula is not running a user device")
	}
	nets := dev.Networks()
	if len(nets) == 0 {
		return nil, errors.New("userspace network stack: the certificate has no network")
	}
	self := nets[0].Addr()
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
		// a datagram to this node's own overlay address (gossip answering
		// its own query) is delivered here, as the kernel does; Nebula
		// drops a packet addressed to itself
		HandleLocal: true,
	})
	sack := tcpip.TCPSACKEnabled(true)
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); err != nil {
		return nil, fmt.Errorf("userspace network stack: TCP SACK: %v", err)
	}
	link := channel.New(512, netstackMTU, "")
	if err := s.CreateNIC(netstackNIC, link); err != nil {
		return nil, fmt.Errorf("userspace network stack: NIC: %v", err)
	}
	any4, _ := tcpip.NewSubnet(tcpip.AddrFrom4([4]byte{}), tcpip.MaskFrom(string(make([]byte, 4))))
	s.SetRouteTable([]tcpip.Route{{Destination: any4, NIC: netstackNIC}})
	ns := &netstack{ip: s, self: self, proto: protoOf(self)}
	pa := tcpip.ProtocolAddress{AddressWithPrefix: tcpip.AddrFromSlice(self.AsSlice()).WithPrefix(), Protocol: ns.proto}
	if err := s.AddProtocolAddress(netstackNIC, pa, stack.AddressProperties{}); err != nil {
		return nil, fmt.Errorf("userspace network stack: address %s: %v", self, err)
	}
	ctx := ctrl.Context()
	reader, writer := dev.Pipe()
	go func() {
		<-ctx.Done()
		_ = reader.Close()
		_ = writer.Close()
	}()
	go func() { // Nebula to the stack: one packet per read
		buf := make([]byte, header.IPv4MaximumHeaderSize+header.IPv4MaximumPayloadSize)
		for {
			n, err := reader.Read(buf)
			if err != nil || ctx.Err() != nil {
				return
			}
			pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(bytes.Clone(buf[:n]))})
			link.InjectInbound(header.IPv4ProtocolNumber, pkt)
			pkt.DecRef()
		}
	}()
	go func() { // the stack to Nebula
		for {
			pkt := link.ReadContext(ctx)
			if pkt == nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			v := pkt.ToView()
			pkt.DecRef()
			_, err := v.WriteTo(writer)
			v.Release()
			if err != nil {
				return
			}
		}
	}()
	return ns, nil
}

func protoOf(a netip.Addr) tcpip.NetworkProtocolNumber {
	if a.Is6() {
		return ipv6.ProtocolNumber
	}
	return ipv4.ProtocolNumber
}

func full(ap netip.AddrPort) tcpip.FullAddress {
	return tcpip.FullAddress{NIC: netstackNIC, Addr: tcpip.AddrFromSlice(ap.Addr().AsSlice()), Port: ap.Port()}
}

// local is the overlay address a listener binds: this node's own, at port.
// An unspecified address stands for it; any other address is refused.
func (ns *netstack) local(addr string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ap, err := netip.ParseAddrPort(net.JoinHostPort(cmp.Or(host, ns.self.String()), port))
	if err != nil {
		return netip.AddrPort{}, err
	}
	if ap.Addr().IsUnspecified() {
		ap = netip.AddrPortFrom(ns.self, ap.Port())
	}
	if ap.Addr() != ns.self || ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("userspace overlay: listen on %s: only this node's overlay address %s and a non-zero port", addr, ns.self)
	}
	return ap, nil
}

// remote parses a dialled "ip:port".
func remote(addr string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("userspace overlay: dial %q: want ip:port", addr)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

func (ns *netstack) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := remote(addr)
	if err != nil {
		return nil, err
	}
	switch network {
	case "tcp", "tcp4", "tcp6":
		return gonet.DialContextTCP(ctx, ns.ip, full(ap), protoOf(ap.Addr()))
	case "udp", "udp4", "udp6":
		ra := full(ap)
		return gonet.DialUDP(ns.ip, nil, &ra, protoOf(ap.Addr()))
	}
	return nil, fmt.Errorf("userspace overlay: dial: unknown network %q", network)
}

// bind opens an endpoint of transport protocol proto ("tcp" or "udp"
// for errors) bound to addr with SO_REUSEADDR, as the kernel's sockets
// Go opens are: a socket closed a moment ago (a runtime stopped and the
// next one started on the same parked overlay) does not hold the port.
func (ns *netstack) bind(proto tcpip.TransportProtocolNumber, name, addr string) (tcpip.Endpoint, *waiter.Queue, error) {
	ap, err := ns.local(addr)
	if err != nil {
		return nil, nil, err
	}
	wq := new(waiter.Queue)
	ep, terr := ns.ip.NewEndpoint(proto, ns.proto, wq)
	if terr != nil {
		return nil, nil, fmt.Errorf("userspace overlay: %s %s: %s", name, ap, terr)
	}
	ep.SocketOptions().SetReuseAddress(true)
	if terr := ep.Bind(full(ap)); terr != nil {
		ep.Close()
		return nil, nil, fmt.Errorf("userspace overlay: bind %s %s: %s", name, ap, terr)
	}
	return ep, wq, nil
}

func (ns *netstack) listenTCP(addr string) (net.Listener, error) {
	ep, wq, err := ns.bind(tcp.ProtocolNumber, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if terr := ep.Listen(listenBacklog); terr != nil {
		ep.Close()
		return nil, fmt.Errorf("userspace overlay: listen tcp %s: %s", addr, terr)
	}
	return &stackListener{TCPListener: gonet.NewTCPListener(ns.ip, wq, ep)}, nil
}

// listenBacklog is the accept queue of a userspace listener (gonet's own).
const listenBacklog = 4096

func (ns *netstack) listenUDP(addr string) (net.PacketConn, error) {
	ep, wq, err := ns.bind(udp.ProtocolNumber, "udp", addr)
	if err != nil {
		return nil, err
	}
	return &stackPacketConn{UDPConn: gonet.NewUDPConn(wq, ep)}, nil
}

// stackListener is gonet's listener whose Close also ends an Accept in
// progress (gonet's Close leaves it blocked) and may be called again.
type stackListener struct {
	*gonet.TCPListener
	once sync.Once
}

func (l *stackListener) Close() error {
	l.once.Do(func() {
		l.Shutdown() // wakes Accept
		_ = l.TCPListener.Close()
	})
	return nil
}

// stackPacketConn is gonet's UDP socket whose Close also ends a ReadFrom
// in progress (gonet's Close leaves it blocked).
type stackPacketConn struct {
	*gonet.UDPConn
	once sync.Once
}

func (c *stackPacketConn) Close() error {
	c.once.Do(func() {
		_ = c.SetReadDeadline(time.Now()) // wakes ReadFrom
		_ = c.UDPConn.Close()
	})
	return nil
}
