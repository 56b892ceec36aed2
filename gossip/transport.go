package gossip

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Gossip's network transport: memberlist's packets over UDP and its
// streams (push/pull, TCP fallback probes) over TCP, on one address and
// port. It does what memberlist.NetTransport does for one bind address,
// with one difference: NetTransport reads every UDP packet into a fresh
// 64 KiB buffer and hands that buffer on, so each received packet of
// about a kilobyte left 64 KiB of garbage (most of what an idle meshd
// allocated, and what a process of many simulated members spent its time
// collecting: docs/performance.md). This transport reads into one buffer
// it keeps and hands on a copy of the packet's own length.

// packetBufSize is the largest UDP payload there is; memberlist's own
// packets stay under its UDPBufferSize (1,400 bytes), but a peer's
// larger datagram must not be cut short.
const packetBufSize = 65536

// udpRecvBuf is the socket receive buffer asked for, as NetTransport
// does; the kernel may grant less (halved until it accepts).
const udpRecvBuf = 2 << 20

// acceptBackoffMax caps the pause after a failed accept (file
// descriptors exhausted, say), as NetTransport does.
const acceptBackoffMax = time.Second

type transport struct {
	ln      net.Listener
	udp     net.PacketConn
	kudp    *net.UDPConn // udp when it is the kernel's: read without an allocation per packet
	net     Network      // where udp and ln came from; dials go through it
	overlay netip.Prefix // Config.Overlay: other addresses are reached through legacy
	legacy  legacyNet    // the kernel's sockets for members outside the overlay (legacy.go)
	packets chan *memberlist.Packet
	streams chan net.Conn
	served  streamCap // bounds the streams served at once (streamcap.go)
	log     *log.Logger

	done     chan struct{}
	dialing  context.Context // ends at Shutdown: a dial in progress (a join) stops with it
	stopDial context.CancelFunc
	closing  atomic.Bool
	once     sync.Once
	wg       sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

// listenTransport binds addr:port for TCP and UDP on nw (the kernel's
// sockets when nil) and starts reading both. Addresses outside overlay
// (when it is valid) are reached through the kernel instead (legacy.go).
// A bind failure carries bindError's code and nothing is left open.
// logger takes memberlist-style lines ("[ERR] memberlist: ...").
func listenTransport(nw Network, overlay netip.Prefix, addr string, port int, logger *log.Logger) (*transport, error) {
	if nw == nil {
		nw = kernelNet{}
	}
	hp := net.JoinHostPort(addr, fmt.Sprint(port))
	tl, err := nw.Listen("tcp", hp)
	if err != nil {
		return nil, bindError(hp, err)
	}
	ul, err := nw.ListenPacket("udp", hp)
	if err != nil {
		_ = tl.Close()
		return nil, bindError(hp, err)
	}
	t := &transport{
		ln:      tl,
		udp:     ul,
		net:     nw,
		overlay: overlay,
		served:  streamCap{overlay: overlay},
		packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn),
		log:     logger,
		done:    make(chan struct{}),
	}
	t.dialing, t.stopDial = context.WithCancel(context.Background())
	if ku, ok := ul.(*net.UDPConn); ok {
		t.kudp = ku
		for size := udpRecvBuf; size > 0; size /= 2 {
			if ku.SetReadBuffer(size) == nil {
				break
			}
		}
	}
	t.wg.Go(t.readPackets)
	t.wg.Go(t.acceptStreams)
	return t, nil
}

// FinalAdvertiseAddr implements memberlist.Transport. meshd always gives
// memberlist an advertise address and port (Config.advertise), so nothing
// is guessed here.
func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return nil, 0, fmt.Errorf("gossip: advertise address %q: not an IP address", ip)
	}
	if port == 0 {
		port = t.ln.Addr().(*net.TCPAddr).Port
	}
	return net.IP(a.Unmap().AsSlice()), port, nil
}

// WriteTo implements memberlist.Transport.
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress implements memberlist.NodeAwareTransport: one datagram
// to a.Addr ("ip:port"; a host name is resolved). An address outside the
// overlay goes out on the legacy socket.
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	ap, err := netip.ParseAddrPort(a.Addr)
	if err != nil {
		ua, err := net.ResolveUDPAddr("udp", a.Addr)
		if err != nil {
			return time.Time{}, err
		}
		ap = ua.AddrPort()
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if !t.through(ap.Addr()) {
		return time.Now(), t.legacy.writeTo(b, ap)
	}
	if t.kudp != nil {
		_, err = t.kudp.WriteToUDPAddrPort(b, ap)
	} else {
		_, err = t.udp.WriteTo(b, net.UDPAddrFromAddrPort(ap))
	}
	return time.Now(), err
}

// through reports whether a is reached through the bound sockets: every
// address without an overlay, else the overlay's.
func (t *transport) through(a netip.Addr) bool {
	return !t.overlay.IsValid() || t.overlay.Contains(a)
}

// PacketCh implements memberlist.Transport. Each packet's Buf is its own.
func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout implements memberlist.Transport.
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	// Over the overlay an unreachable peer sends no reset, so a dial
	// waits out its timeout; Shutdown ends it rather than wait.
	ctx, cancel := context.WithTimeout(t.dialing, timeout)
	defer cancel()
	if ap, err := netip.ParseAddrPort(a.Addr); err == nil && t.through(ap.Addr().Unmap()) {
		return t.net.DialContext(ctx, "tcp", a.Addr)
	}
	return kernelNet{}.DialContext(ctx, "tcp", a.Addr)
}

// StreamCh implements memberlist.Transport.
func (t *transport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown implements memberlist.Transport: it closes both sockets and
// returns once both readers have stopped. Safe to call more than once
// (memberlist calls it, and so does New when serf fails to start).
func (t *transport) Shutdown() error {
	t.once.Do(func() {
		t.closing.Store(true)
		close(t.done)
		t.stopDial()
		_ = t.ln.Close()
		_ = t.udp.Close()
		t.legacy.close()
	})
	t.wg.Wait()
	return nil
}

// readPackets reads datagrams into one buffer and hands each on in a copy
// of its own length.
func (t *transport) readPackets() {
	buf := make([]byte, packetBufSize)
	for {
		n, from, err := t.read(buf)
		at := time.Now()
		if err != nil {
			if t.closing.Load() {
				return
			}
			t.log.Printf("[ERR] memberlist: reading a UDP packet: %v", err)
			continue
		}
		if n < 1 {
			t.log.Printf("[ERR] memberlist: empty UDP packet from %s", from)
			continue
		}
		p := &memberlist.Packet{
			Buf:       append([]byte(nil), buf[:n]...),
			From:      net.UDPAddrFromAddrPort(from),
			Timestamp: at,
		}
		select {
		case t.packets <- p:
		case <-t.done:
			return
		}
	}
}

// read reads one datagram, without an allocation from the kernel's
// socket.
func (t *transport) read(buf []byte) (int, netip.AddrPort, error) {
	if t.kudp != nil {
		return t.kudp.ReadFromUDPAddrPort(buf)
	}
	n, from, err := t.udp.ReadFrom(buf)
	if ua, ok := from.(*net.UDPAddr); ok {
		return n, ua.AddrPort(), err
	}
	return n, netip.AddrPort{}, err
}

// acceptStreams hands each accepted TCP connection to memberlist, pausing
// (doubling from 5 ms to acceptBackoffMax) while accepting fails.
func (t *transport) acceptStreams() {
	var pause time.Duration
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if t.closing.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), acceptBackoffMax)
			t.log.Printf("[ERR] memberlist: accepting a TCP connection: %v", err)
			select {
			case <-time.After(pause):
			case <-t.done:
				return
			}
			continue
		}
		pause = 0
		capped, ok := t.served.admit(c)
		if !ok {
			_ = c.Close() // one past a bound: memberlist never sees it
			continue
		}
		select {
		case t.streams <- capped:
		case <-t.done:
			_ = c.Close()
			return
		}
	}
}
