package control

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// serveLimited serves a trivial handler on port-7300 terms with limits l.
func serveLimited(t *testing.T, l Limits) string {
	t.Helper()
	c := &testCluster{ca: pkitest.NewCA(t, "alpha")}
	id, _, _ := c.identity(t, "c1", pki.RoleControl)
	conf, err := pki.ServerTLSConfig(id)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0", conf, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}), l, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// closedWithin reports whether the server closes c within d (a read ends
// in EOF or a reset rather than our own deadline).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.ReadAll(c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

func dialFrom(t *testing.T, src net.IP, addr string) net.Conn {
	t.Helper()
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 2 * time.Second}).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestPortLimitsPerSource: one source holds at most ConnsPerSource
// connections; one more is closed at once, another source is not
// affected, and a closed connection gives its slot back.
func TestPortLimitsPerSource(t *testing.T) {
	l := DefaultLimits()
	l.ConnsPerSource = 8
	addr := serveLimited(t, l)
	a, b := net.IPv4(127, 0, 3, 1), net.IPv4(127, 0, 3, 2)
	var held []net.Conn
	for range 8 {
		held = append(held, dialFrom(t, a, addr))
	}
	if !closedWithin(dialFrom(t, a, addr), time.Second) {
		t.Fatal("the 9th connection from one source was held open")
	}
	if closedWithin(dialFrom(t, b, addr), 200*time.Millisecond) {
		t.Fatal("another source was refused")
	}
	_ = held[0].Close()
	c := dialFrom(t, a, addr)
	// The slot comes back once the server has seen the close; give it the
	// time to, then the new connection must stay open.
	deadline := time.Now().Add(2 * time.Second)
	for closedWithin(c, 200*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a closed connection did not give its source's slot back")
		}
		c = dialFrom(t, a, addr)
	}
}

// TestPortLimitsTimeouts: an idle kept-alive connection and a body
// trickled in slowly are both cut off by their timeouts; headers over the
// limit are refused.
func TestPortLimitsTimeouts(t *testing.T) {
	l := DefaultLimits()
	l.Request, l.Idle, l.HeaderBytes = 300*time.Millisecond, 300*time.Millisecond, 1<<10
	addr := serveLimited(t, l)
	tlsConf := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}

	// Idle after one request: closed by the idle timeout.
	c, err := tls.Dial("tcp", addr, tlsConf)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("first request: %v %v", resp, err)
	}
	start := time.Now()
	if !closedWithin(c, 3*time.Second) {
		t.Fatal("an idle kept-alive connection stayed open")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("idle connection closed after %s, idle timeout %s", d, l.Idle)
	}

	// A body of 100 bytes trickled one byte at a time: cut off.
	s, err := tls.Dial("tcp", addr, tlsConf)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	cut := false
	for range 30 {
		if _, err := s.Write([]byte("x")); err != nil {
			cut = true
			break
		}
		time.Sleep(50 * time.Millisecond) // the slow client under test, not a wait for the server
	}
	if !cut && !closedWithin(s, 2*time.Second) {
		t.Fatal("a body trickled in over 1.5 s was still being read")
	}

	// Headers over the limit.
	h, err := tls.Dial("tcp", addr, tlsConf)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	big := "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n"
	if _, err := h.Write([]byte(big)); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(bufio.NewReader(h), nil)
	if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("8 KiB of headers over a 1 KiB limit: %v %v", resp, err)
	}
}

// TestDefaultLimits: production runs with the limits docs/security.md
// promises (64 connections per source, whole requests within 10 s, idle
// connections closed after 60 s, 16 KiB of headers); the tests above
// shorten them, so nothing else would notice a change. A zero would mean
// no limit at all to net/http. Answering gets 60 s, more than a raft join
// waits for its promotion by default (20 s + 10 s).
func TestDefaultLimits(t *testing.T) {
	want := Limits{ConnsPerSource: 64, Request: 10 * time.Second, Answer: 60 * time.Second, Idle: 60 * time.Second,
		HeaderBytes: 16 << 10}
	if got := DefaultLimits(); got != want {
		t.Fatalf("DefaultLimits() = %+v, want %+v", got, want)
	}
}

// TestSourceSlots: a source's count goes down by one as each of its
// connections closes (once, however often it is closed), and a source
// with nothing open leaves no entry behind, so addresses that came and
// went do not grow the table.
func TestSourceSlots(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := &sourceLimit{Listener: ln, max: 2, open: map[string]int{}}
	defer sl.Close()
	src := net.IPv4(127, 0, 3, 3)
	accept := func() net.Conn {
		t.Helper()
		dialFrom(t, src, ln.Addr().String())
		c, err := sl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	held := func() (int, int) {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		return sl.open[src.String()], len(sl.open)
	}
	a, b := accept(), accept()
	if n, _ := held(); n != 2 {
		t.Fatalf("%d connections counted, 2 open", n)
	}
	_ = a.Close()
	_ = a.Close()
	if n, _ := held(); n != 1 {
		t.Fatalf("%d connections counted after one of two closed (twice)", n)
	}
	_ = b.Close()
	if n, entries := held(); n != 0 || entries != 0 {
		t.Fatalf("after every connection closed: %d counted, %d entries", n, entries)
	}
}
