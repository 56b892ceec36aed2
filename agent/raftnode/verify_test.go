package raftnode_test

import (
	"crypto/x509"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// layer is a stream layer for a control leaf called name on a loopback
// port, closed when the test ends.
func layer(t *testing.T, ca *pki.CA, name string, opts ...raftnode.StreamOption) *raftnode.TLSStreamLayer {
	t.Helper()
	server, client := controlTLS(t, ca, name)
	s, err := raftnode.NewTLSStreamLayer("127.0.0.1:0", nil, server, client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// closedSoon reports whether c's peer closes it within d (a read ends in
// EOF or a reset rather than the deadline).
func closedSoon(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestStreamLayerVerify: a peer the Verify callback refuses never reaches
// raft (Accept) and its connection is closed; a dialed server the
// callback refuses fails Dial; Recheck closes an open connection, in
// either direction, once its peer no longer passes.
func TestStreamLayerVerify(t *testing.T) {
	var refuse atomic.Value // the common name refused
	refuse.Store("bad")
	verify := func(leaf *x509.Certificate) error {
		if leaf.Subject.CommonName == refuse.Load().(string) {
			return errors.New("not a member")
		}
		return nil
	}
	ca := pkitest.NewCA(t, "alpha")
	srv := layer(t, ca, "srv", raftnode.WithVerify(verify))
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	addr := raftAddress(srv.ListenAddr().String())

	// A refused peer: its handshake completes, then the server closes the
	// connection and raft never sees it.
	bad := layer(t, ca, "bad")
	c, err := bad.Dial(addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial as bad: %v", err)
	}
	defer c.Close()
	if !closedSoon(c, 2*time.Second) {
		t.Fatal("the refused peer's connection stayed open")
	}
	select {
	case <-accepted:
		t.Fatal("Accept handed raft a refused peer")
	default:
	}

	// An accepted peer, open in both directions.
	good := layer(t, ca, "good")
	gc, err := good.Dial(addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial as good: %v", err)
	}
	defer gc.Close()
	var sc net.Conn
	select {
	case sc = <-accepted:
	case <-time.After(2 * time.Second):
		t.Fatal("the accepted peer never reached Accept")
	}
	defer sc.Close()
	if n := srv.OpenConns(); n != 1 {
		t.Fatalf("server tracks %d connections, want 1", n)
	}
	if n := srv.Recheck(); n != 0 || closedSoon(gc, 100*time.Millisecond) {
		t.Fatalf("recheck closed %d connections of a peer that still passes", n)
	}

	// The dialing side checks the server's leaf too.
	picky := layer(t, ca, "picky", raftnode.WithVerify(func(leaf *x509.Certificate) error {
		if leaf.Subject.CommonName == "srv" {
			return errors.New("srv is not a member")
		}
		return nil
	}))
	if pc, err := picky.Dial(addr, 2*time.Second); err == nil {
		_ = pc.Close()
		t.Fatal("dialed a server the check refuses")
	}
	select { // srv accepted picky (srv's check lets it in): close that end
	case pc := <-accepted:
		_ = pc.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("srv never accepted picky's connection")
	}

	// The peer stops passing: Recheck closes its open connection at once.
	refuse.Store("good")
	if n := srv.Recheck(); n != 1 {
		t.Fatalf("recheck closed %d connections, want 1", n)
	}
	if !closedSoon(gc, 2*time.Second) {
		t.Fatal("the peer's open connection survived the recheck")
	}
	if n := srv.OpenConns(); n != 0 {
		t.Fatalf("server still tracks %d connections", n)
	}
	// And a new connection of it is refused.
	gc2, err := good.Dial(addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer gc2.Close()
	if !closedSoon(gc2, 2*time.Second) {
		t.Fatal("the no longer passing peer connected again")
	}
}

// TestCloseWaitsForRaftsHandler: Close cuts an accepted connection under
// raft's handler and returns only once that handler has closed it, so the
// store behind raft is never closed while a heartbeat is being handled
// (raft's fast path saved its term into a closed store: "failed to save
// current term: database not open", a panic seen twice in control's
// tests).
func TestCloseWaitsForRaftsHandler(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	a, b := layer(t, ca, "c1"), layer(t, ca, "c2")
	dialed, err := b.Dial(raftAddress(a.ListenAddr().String()), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	served, err := a.Accept()
	if err != nil {
		t.Fatal(err)
	}
	readFailed, release := make(chan struct{}), make(chan struct{})
	var handlerClosed atomic.Bool
	go func() { // raft's handleConn: read until the connection fails, finish the command, close
		_, _ = served.Read(make([]byte, 1))
		close(readFailed)
		<-release
		handlerClosed.Store(true)
		_ = served.Close()
	}()
	closed := make(chan struct{})
	go func() { _ = a.Close(); close(closed) }()
	<-readFailed // Close cut the socket under the handler
	select {
	case <-closed:
		t.Fatal("Close returned while raft's handler still held the connection")
	case <-time.After(300 * time.Millisecond): // a bounded look for what must not happen
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return once the handler closed the connection")
	}
	if !handlerClosed.Load() {
		t.Fatal("Close returned before the handler closed its connection")
	}
}
