package raftnode

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

const (
	// handshakeTimeout bounds one peer's TLS handshake on the raft port.
	// Handshakes run off the accept loop, so a peer that connects and says
	// nothing holds only its own slot, never the port.
	handshakeTimeout = 3 * time.Second
	// maxHandshakes bounds the handshakes in progress at once; a
	// connection beyond it is closed at once.
	maxHandshakes = 128
	// maxHandshakesPerSource bounds them per source network, so one host
	// cannot take every slot (slots.go).
	maxHandshakesPerSource = 16
)

// TLSStreamLayer carries raft over mutual TLS: both ends present
// role=control leaves of this cluster's CA (pki.ServerTLSConfig and
// pki.ClientTLSConfig enforce it at the handshake). Accept hands raft a
// connection only after its handshake succeeded and the peer's leaf passed
// the layer's Verify check; handshakes run in their own goroutines with a
// deadline, bounded in number overall and per source. Every open
// connection, accepted or dialed, is tracked so Recheck can close the
// ones whose peer no longer passes.
type TLSStreamLayer struct {
	ln        net.Listener
	server    *tls.Config
	advertise net.Addr
	client    *tls.Config

	ready  chan net.Conn
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	slots handshakeSlots

	// served counts the connections Accept handed to raft that raft's
	// handler has not closed yet (peerConn.Close).
	served sync.WaitGroup

	mu      sync.Mutex
	pending map[net.Conn]struct{}
	verify  Verify                 // guarded by mu; nil accepts every handshake
	open    map[*peerConn]struct{} // guarded by mu
}

// Verify judges a raft peer by its leaf (already verified against the CA
// and for the control role at the handshake): nil admits it. It is called
// for every accepted and dialed connection, and again for each open one
// on Recheck.
type Verify func(leaf *x509.Certificate) error

// StreamOption configures a TLSStreamLayer.
type StreamOption func(*TLSStreamLayer)

// WithVerify makes the layer admit only peers v accepts.
func WithVerify(v Verify) StreamOption { return func(s *TLSStreamLayer) { s.verify = v } }

// WithPeers gives the layer raft's configured servers' addresses, whose
// handshakes get slots nobody else can take (slots.go). A raftnode.Node
// sets it to its own configuration (Open).
func WithPeers(peers func() []netip.Addr) StreamOption {
	return func(s *TLSStreamLayer) { s.setPeers(peers) }
}

func (s *TLSStreamLayer) setPeers(peers func() []netip.Addr) {
	s.slots.mu.Lock()
	s.slots.peers, s.slots.known = peers, nil
	s.slots.mu.Unlock()
}

var _ raft.StreamLayer = (*TLSStreamLayer)(nil)

// ErrStreamClosed is what Accept returns once the layer is closed.
var ErrStreamClosed = errors.New("raft stream layer closed")

// NewTLSStreamLayer listens on bind with server and dials with client;
// advertise is the address other servers reach this one at.
func NewTLSStreamLayer(bind string, advertise net.Addr, server, client *tls.Config, opts ...StreamOption) (*TLSStreamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	s := &TLSStreamLayer{ln: ln, server: server, advertise: advertise, client: client,
		ready: make(chan net.Conn), closed: make(chan struct{}),
		pending: map[net.Conn]struct{}{}, open: map[*peerConn]struct{}{},
		slots: handshakeSlots{byNet: map[netip.Prefix]int{}, byPeer: map[netip.Addr]int{}, now: time.Now}}
	for _, o := range opts {
		o(s)
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// acceptLoop takes TCP connections and starts a bounded handshake for
// each; it never waits on a peer.
func (s *TLSStreamLayer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		sl, ok := s.slots.take(sourceAddr(c))
		if !ok {
			_ = c.Close()
			continue
		}
		s.mu.Lock()
		s.pending[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.handshake(c, sl)
	}
}

func (s *TLSStreamLayer) release(c net.Conn, sl slot) {
	s.mu.Lock()
	delete(s.pending, c)
	s.mu.Unlock()
	s.slots.give(sl)
}

// handshake completes one peer's handshake within handshakeTimeout and
// hands the connection to Accept, or closes it.
func (s *TLSStreamLayer) handshake(raw net.Conn, sl slot) {
	defer s.wg.Done()
	tc := tls.Server(raw, s.server)
	_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
	err := tc.Handshake()
	s.release(raw, sl)
	if err != nil {
		_ = tc.Close()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	pc, err := s.admit(tc)
	if err != nil {
		return
	}
	select {
	case s.ready <- pc:
	case <-s.closed:
		_ = pc.Close()
	}
}

// Accept returns the next connection whose handshake has succeeded, so a
// peer without a control leaf never reaches raft.
func (s *TLSStreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.ready:
		if pc, ok := c.(*peerConn); ok {
			s.served.Add(1)
			pc.served = true
		}
		return c, nil
	case <-s.closed:
		return nil, ErrStreamClosed
	}
}

// Close stops accepting, ends the handshakes in progress and the open
// connections, and waits for the handshakes' goroutines.
func (s *TLSStreamLayer) Close() error {
	var err error
	s.once.Do(func() {
		close(s.closed)
		err = s.ln.Close()
		s.mu.Lock()
		for c := range s.pending {
			_ = c.Close()
		}
		open := make([]*peerConn, 0, len(s.open))
		for c := range s.open {
			open = append(open, c)
		}
		s.mu.Unlock()
		// Open connections too: raft's transport does not close the ones
		// it accepted, and a heartbeat read on one after raft shut down
		// made raft save its term in a store already closed (a panic,
		// "failed to save current term: database not open", seen once in
		// control's tests).
		for _, c := range open {
			c.cut()
		}
		s.wg.Wait()
		// And wait for raft's handlers to be done with the connections
		// Accept gave them: a heartbeat being handled when the socket was
		// cut still ran raft's fast path after Shutdown (the same panic,
		// again in control's tests after the first fix). Bounded: a
		// handler that never closes its connection costs a few seconds of
		// shutdown, never a hang.
		drained := make(chan struct{})
		go func() { s.served.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(drainBound):
		}
	})
	return err
}

// drainBound is how long Close waits for raft's handlers to close the
// connections they were given.
const drainBound = 5 * time.Second

// ListenAddr is the address the layer listens on.
func (s *TLSStreamLayer) ListenAddr() net.Addr { return s.ln.Addr() }

// Addr is the address other servers reach this one at.
func (s *TLSStreamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to a raft peer and completes the handshake, and the
// server's leaf passes Verify, before raft writes a byte.
func (s *TLSStreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	tc, err := tls.DialWithDialer(d, "tcp", string(addr), s.client)
	if err != nil {
		return nil, err
	}
	pc, err := s.admit(tc)
	if err != nil {
		return nil, fmt.Errorf("raft peer %s refused: %w", addr, err)
	}
	return pc, nil
}
