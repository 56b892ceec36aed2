package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/meshd/meshd/codes"
)

// newTestTransport binds a transport on a fresh loopback address at the
// gossip port and shuts it down at the end of the test.
func newTestTransport(t testing.TB) (*transport, string) {
	t.Helper()
	addr := takeIP(t)
	tr, err := listenTransport(nil, netip.Prefix{}, addr, DefaultPort, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown() })
	return tr, net.JoinHostPort(addr, strconv.Itoa(DefaultPort))
}

func recvPacket(t testing.TB, tr *transport) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-tr.PacketCh():
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no packet within 5 s")
		return nil
	}
}

// TestTransportPackets: every packet arrives whole, from the sender's
// address, in a buffer of its own: a later, shorter packet (read into the
// same receive buffer) leaves an earlier one's bytes as they were.
func TestTransportPackets(t *testing.T) {
	a, aAddr := newTestTransport(t)
	b, bAddr := newTestTransport(t)

	first := bytes.Repeat([]byte{'a'}, 1200)
	second := []byte("bb")
	for _, m := range [][]byte{first, second} {
		if _, err := a.WriteToAddress(m, memberlist.Address{Addr: bAddr, Name: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	p1, p2 := recvPacket(t, b), recvPacket(t, b)
	if !bytes.Equal(p1.Buf, first) {
		t.Errorf("first packet: %d bytes %q..., want 1200 bytes of 'a' (a later packet overwrote it?)", len(p1.Buf), p1.Buf[:min(8, len(p1.Buf))])
	}
	if !bytes.Equal(p2.Buf, second) {
		t.Errorf("second packet %q, want %q", p2.Buf, second)
	}
	if cap(p1.Buf) > 2*len(first) {
		t.Errorf("first packet's buffer has capacity %d for %d bytes: want a copy of its own length", cap(p1.Buf), len(first))
	}
	if p1.From.String() != aAddr {
		t.Errorf("from %s, want %s", p1.From, aAddr)
	}
	if p1.Timestamp.IsZero() {
		t.Error("no receive timestamp")
	}
	// WriteTo, by host name rather than address, reaches it too.
	host := "localhost:" + strconv.Itoa(DefaultPort)
	if _, err := b.WriteTo([]byte("x"), host); err != nil {
		t.Fatalf("WriteTo(%s): %v", host, err)
	}
}

// TestTransportStreams: a dialled connection arrives on the other's
// stream channel and carries bytes both ways.
func TestTransportStreams(t *testing.T) {
	a, _ := newTestTransport(t)
	b, bAddr := newTestTransport(t)
	c, err := a.DialAddressTimeout(memberlist.Address{Addr: bAddr}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var s net.Conn
	select {
	case s = <-b.StreamCh():
	case <-time.After(5 * time.Second):
		t.Fatal("no stream within 5 s")
	}
	defer s.Close()
	if _, err := c.Write([]byte("push")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(s, got); err != nil || string(got) != "push" {
		t.Fatalf("read %q, %v; want push", got, err)
	}
}

// TestTransportAdvertise: the advertise address is taken as given
// (IPv4 in its 4-byte form), the bound port fills in a zero one, and a
// non-address is refused.
func TestTransportAdvertise(t *testing.T) {
	tr, _ := newTestTransport(t)
	ip, port, err := tr.FinalAdvertiseAddr("192.0.2.7", 0)
	if err != nil || !ip.Equal(net.ParseIP("192.0.2.7")) || len(ip) != net.IPv4len || port != DefaultPort {
		t.Errorf("FinalAdvertiseAddr(192.0.2.7, 0) = %v (%d bytes), %d, %v; want 192.0.2.7 (4 bytes), %d", ip, len(ip), port, err, DefaultPort)
	}
	if _, _, err := tr.FinalAdvertiseAddr("", 7946); err == nil {
		t.Error("FinalAdvertiseAddr(\"\") accepted; want an error")
	}
}

// TestTransportShutdown: Shutdown returns while a received packet waits
// for a reader that never comes, frees the port, and may be called twice.
func TestTransportShutdown(t *testing.T) {
	a, _ := newTestTransport(t)
	addr := takeIP(t)
	b, err := listenTransport(nil, netip.Prefix{}, addr, DefaultPort, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	bAddr := net.JoinHostPort(addr, strconv.Itoa(DefaultPort))
	if _, err := a.WriteTo([]byte("unread"), bAddr); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = b.Shutdown()
		_ = b.Shutdown()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown still blocked after 5 s")
	}
	again, err := listenTransport(nil, netip.Prefix{}, addr, DefaultPort, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatalf("port not freed by Shutdown: %v", err)
	}
	_ = again.Shutdown()
}

// TestTransportBindInUse: a port already bound is refused with
// ConfigInvalid, and the half that did bind is released.
func TestTransportBindInUse(t *testing.T) {
	addr := takeIP(t)
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(addr), Port: DefaultPort})
	if err != nil {
		t.Fatal(err)
	}
	_, err = listenTransport(nil, netip.Prefix{}, addr, DefaultPort, log.New(io.Discard, "", 0))
	if codes.Of(err) != codes.ConfigInvalid {
		t.Fatalf("bind with the UDP port taken: %v (code %s), want %s", err, codes.Of(err), codes.ConfigInvalid)
	}
	_ = u.Close()
	tr, err := listenTransport(nil, netip.Prefix{}, addr, DefaultPort, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatalf("TCP half not released after the refused bind: %v", err)
	}
	_ = tr.Shutdown()
}

// BenchmarkTransportReceive: bytes allocated per received 1,200-byte
// packet, this transport against memberlist.NetTransport (which
// allocates 64 KiB per packet). Run with -benchmem.
func BenchmarkTransportReceive(b *testing.B) {
	msg := bytes.Repeat([]byte{'p'}, 1200)
	for _, kind := range []string{"meshd", "memberlist"} {
		b.Run(kind, func(b *testing.B) {
			addr := takeIP(b)
			var ch <-chan *memberlist.Packet
			switch kind {
			case "meshd":
				tr, err := listenTransport(nil, netip.Prefix{}, addr, DefaultPort, log.New(io.Discard, "", 0))
				if err != nil {
					b.Fatal(err)
				}
				defer tr.Shutdown()
				ch = tr.PacketCh()
			default:
				tr, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{addr}, BindPort: DefaultPort, Logger: log.New(io.Discard, "", 0)})
				if err != nil {
					b.Fatal(err)
				}
				defer tr.Shutdown()
				ch = tr.PacketCh()
			}
			to := &net.UDPAddr{IP: net.ParseIP(addr), Port: DefaultPort}
			c, err := net.DialUDP("udp", nil, to)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				<-ch
			}
		})
	}
}

// TestTransportStreamCap: silent TCP connections to port 7946 (what
// memberlist serves each on a goroutine of its own until its TCP timeout)
// are bounded: one source network gets maxStreamsPerSource of them at
// once, the next is closed before memberlist sees it, and a stream that
// ends gives its slot back. Before issue 27 every one was handed on.
func TestTransportStreamCap(t *testing.T) {
	tr, addr := newTestTransport(t)
	var served []net.Conn // what memberlist would hold
	stop, done := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	go func() {
		defer close(done)
		for {
			select {
			case c := <-tr.StreamCh():
				mu.Lock()
				served = append(served, c)
				mu.Unlock()
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	src := &net.TCPAddr{IP: net.IPv4(127, 0, 4, 1)}
	var dialed []net.Conn
	for i := range 3 * maxStreamsPerSource {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 4, byte(1+i%3))}}).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		dialed = append(dialed, c)
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(served)
	}
	deadline := time.Now().Add(5 * time.Second)
	for count() < maxStreamsPerSource && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// The ones past the bound are closed at once: their reads end.
	var closed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range dialed {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(time.Second)) // time for the accept loop to reach every one
			if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				closed.Add(1)
			}
		})
	}
	wg.Wait()
	if got := count(); got != maxStreamsPerSource || closed.Load() != 2*maxStreamsPerSource {
		t.Fatalf("%d connections from one /24: %d handed to memberlist, %d closed; want %d and %d",
			len(dialed), got, closed.Load(), maxStreamsPerSource, 2*maxStreamsPerSource)
	}
	mu.Lock()
	_ = served[0].Close() // memberlist is done with one stream
	mu.Unlock()
	c, err := (&net.Dialer{LocalAddr: src}).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline = time.Now().Add(5 * time.Second)
	for count() < maxStreamsPerSource+1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := count(); got != maxStreamsPerSource+1 {
		t.Fatalf("after a stream ended, a new one from the same source was not served (%d served)", got)
	}
}

// recordingNet is the kernel's sockets, counting what gossip asked of it.
type recordingNet struct {
	kernelNet
	mu      sync.Mutex
	listens []string
	dials   []string
}

func (r *recordingNet) Listen(network, addr string) (net.Listener, error) {
	r.mu.Lock()
	r.listens = append(r.listens, network+" "+addr)
	r.mu.Unlock()
	return r.kernelNet.Listen(network, addr)
}

func (r *recordingNet) ListenPacket(network, addr string) (net.PacketConn, error) {
	r.mu.Lock()
	r.listens = append(r.listens, network+" "+addr)
	r.mu.Unlock()
	return r.kernelNet.ListenPacket(network, addr)
}

func (r *recordingNet) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	r.mu.Lock()
	r.dials = append(r.dials, addr)
	r.mu.Unlock()
	return r.kernelNet.DialContext(ctx, network, addr)
}

// TestTransportOverlayAndLegacy: a transport with an overlay binds both
// sockets through its Network; a member inside the overlay is sent to from
// the bound address and dialled through the Network; a member outside it
// (the previous release, gossiping on the underlay) is sent to from
// another socket, never from the bound (overlay) address, and dialled
// with the kernel.
func TestTransportOverlayAndLegacy(t *testing.T) {
	addr := takeIP(t)
	overlay := netip.MustParsePrefix("127.78.0.0/16") // every takeIP address; 127.0.0.1 is outside
	nw := &recordingNet{}
	a, err := listenTransport(nw, overlay, addr, DefaultPort, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown() })
	bound := net.JoinHostPort(addr, strconv.Itoa(DefaultPort))
	if want := []string{"tcp " + bound, "udp " + bound}; !slices.Equal(nw.listens, want) {
		t.Fatalf("listened %v, want %v", nw.listens, want)
	}

	inside, insideAddr := newTestTransport(t)
	outside, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	outsideTCP, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer outsideTCP.Close()

	if _, err := a.WriteToAddress([]byte("legacy"), memberlist.Address{Addr: outside.LocalAddr().String()}); err != nil {
		t.Fatal(err)
	}
	_ = outside.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, from, err := outside.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "legacy" {
		t.Fatalf("the legacy member read %q, %v", buf[:n], err)
	}
	if from.String() == bound {
		t.Errorf("a datagram to a member outside the overlay left from the bound overlay address %s", from)
	}
	c, err := a.DialAddressTimeout(memberlist.Address{Addr: outsideTCP.Addr().String()}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if len(nw.dials) != 0 {
		t.Errorf("a member outside the overlay was dialled through the overlay's Network: %v", nw.dials)
	}

	if _, err := a.WriteToAddress([]byte("member"), memberlist.Address{Addr: insideAddr}); err != nil {
		t.Fatal(err)
	}
	if p := recvPacket(t, inside); p.From.String() != bound {
		t.Errorf("a member inside the overlay heard from %s, want the bound address %s", p.From, bound)
	}
	c, err = a.DialAddressTimeout(memberlist.Address{Addr: insideAddr}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if !slices.Equal(nw.dials, []string{insideAddr}) {
		t.Errorf("dials through the Network %v, want [%s]", nw.dials, insideAddr)
	}
}

// TestTransportStreamCapOverlay: inside the overlay gossip rides a source
// is one address (each is one member: Nebula admits a packet only from
// the address its sender's certificate holds), so more than
// maxStreamsPerSource members of one /24, as a cluster's first 254 are,
// are all served; one address is still held to maxStreamsPerSource.
// Before issue 54 the 17th member's stream was closed at once.
func TestTransportStreamCapOverlay(t *testing.T) {
	overlay := netip.MustParsePrefix("127.0.5.0/24")
	streamCount := func(cap *streamCap, from []string) (served int) {
		for _, ip := range from {
			a, b := net.Pipe()
			t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
			c := addrConn{Conn: a, remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
			if _, ok := cap.admit(c); ok {
				served++
			}
		}
		return served
	}
	var members, one, outside []string
	for i := range 3 * maxStreamsPerSource {
		members = append(members, fmt.Sprintf("127.0.5.%d", i+1))
		one = append(one, "127.0.5.200")
		outside = append(outside, fmt.Sprintf("127.0.6.%d", i+1))
	}
	inOverlay := &streamCap{overlay: overlay}
	if got := streamCount(inOverlay, members); got != len(members) {
		t.Errorf("%d members of the overlay's /24, one stream each: %d served, want all", len(members), got)
	}
	if got := streamCount(inOverlay, one); got != maxStreamsPerSource {
		t.Errorf("%d streams from one overlay address: %d served, want %d", len(one), got, maxStreamsPerSource)
	}
	if got := streamCount(inOverlay, outside); got != maxStreamsPerSource {
		t.Errorf("%d streams from one /24 outside the overlay: %d served, want %d", len(outside), got, maxStreamsPerSource)
	}
	if got, want := inOverlay.refusedCount(), 2*(3*maxStreamsPerSource-maxStreamsPerSource); got != want {
		t.Errorf("refused %d streams, want %d", got, want)
	}
	if got := streamCount(&streamCap{}, members); got != maxStreamsPerSource {
		t.Errorf("without an overlay, %d addresses of one /24: %d served, want %d", len(members), got, maxStreamsPerSource)
	}
}

// addrConn is a net.Conn with the remote address a test gives it.
type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }
