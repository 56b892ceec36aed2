package gossip

import (
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
	tcp     *net.TCPListener
	udp     *net.UDPConn
	packets chan *memberlist.Packet
	streams chan net.Conn
	served  streamCap // bounds the streams served at once (streamcap.go)
	log     *log.Logger

	done    chan struct{}
	closing atomic.Bool
	once    sync.Once
	wg      sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

// listenTransport binds addr:port for TCP and UDP and starts reading both.
// A bind failure carries bindError's code and nothing is left open.
// logger takes memberlist-style lines ("[ERR] memberlist: ...").
func listenTransport(addr string, port int, logger *log.Logger) (*transport, error) {
	ip := net.IP(netip.MustParseAddr(addr).AsSlice()) // Validate parsed it
	hp := net.JoinHostPort(addr, fmt.Sprint(port))
	tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, bindError(hp, err)
	}
	ul, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		_ = tl.Close()
		return nil, bindError(hp, err)
	}
	for size := udpRecvBuf; size > 0; size /= 2 {
		if ul.SetReadBuffer(size) == nil {
			break
		}
	}
	t := &transport{
		tcp:     tl,
		udp:     ul,
		packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn),
		log:     logger,
		done:    make(chan struct{}),
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
		port = t.tcp.Addr().(*net.TCPAddr).Port
	}
	return net.IP(a.Unmap().AsSlice()), port, nil
}

// WriteTo implements memberlist.Transport.
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress implements memberlist.NodeAwareTransport: one datagram
// to a.Addr ("ip:port"; a host name is resolved).
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if ap, err := netip.ParseAddrPort(a.Addr); err == nil {
		_, err = t.udp.WriteToUDPAddrPort(b, ap)
		return time.Now(), err
	}
	ua, err := net.ResolveUDPAddr("udp", a.Addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, ua)
	return time.Now(), err
}

// PacketCh implements memberlist.Transport. Each packet's Buf is its own.
func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout implements memberlist.Transport.
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", a.Addr)
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
		_ = t.tcp.Close()
		_ = t.udp.Close()
	})
	t.wg.Wait()
	return nil
}

// readPackets reads datagrams into one buffer and hands each on in a copy
// of its own length.
func (t *transport) readPackets() {
	buf := make([]byte, packetBufSize)
	for {
		n, from, err := t.udp.ReadFromUDPAddrPort(buf)
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

// acceptStreams hands each accepted TCP connection to memberlist, pausing
// (doubling from 5 ms to acceptBackoffMax) while accepting fails.
func (t *transport) acceptStreams() {
	var pause time.Duration
	for {
		c, err := t.tcp.AcceptTCP()
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
