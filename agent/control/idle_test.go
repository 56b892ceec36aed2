package control

import (
	"bufio"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestThousandIdleConnectionsClosed: 1,000 kept-alive TLS connections,
// each idle after one request, from 16 sources (each under its cap of
// 64), are all closed by the server's idle timeout, and the per-source
// table is empty afterwards: parked connections cost the port nothing
// for long.
func TestThousandIdleConnectionsClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 TLS handshakes")
	}
	const total, sources = 1000, 16
	l := DefaultLimits()
	l.Idle, l.Request = time.Second, 2*time.Second
	addr, table := serveLimitedTable(t, l)
	tlsConf := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}

	conns := make([]net.Conn, total)
	var wg sync.WaitGroup
	errs := make(chan error, total)
	sem := make(chan struct{}, 32)
	for i := range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			src := net.IPv4(127, 0, 4, byte(1+i%sources))
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
			c, err := tls.DialWithDialer(d, "tcp", addr, tlsConf)
			if err != nil {
				errs <- err
				return
			}
			conns[i] = c
			if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
				errs <- err
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				errs <- err
				return
			}
			_ = resp.Body.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("opening the idle connections: %v", err)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	if n := table(); n != total {
		t.Fatalf("the server counts %d open connections, %d were opened", n, total)
	}

	start := time.Now()
	var open sync.WaitGroup
	stillOpen := make(chan int, total)
	for i, c := range conns {
		open.Add(1)
		go func() {
			defer open.Done()
			if !closedWithin(c, 10*time.Second) {
				stillOpen <- i
			}
		}()
	}
	open.Wait()
	close(stillOpen)
	if n := len(stillOpen); n > 0 {
		t.Fatalf("%d of %d idle connections still open 10 s after the last request (idle timeout %s)", n, total, l.Idle)
	}
	t.Logf("%d idle connections closed by the server within %s (idle timeout %s)", total, time.Since(start).Round(time.Millisecond), l.Idle)
	deadline := time.Now().Add(5 * time.Second)
	for table() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the per-source table still counts %d connections after every one closed", table())
		}
		time.Sleep(10 * time.Millisecond) // polling the table with a deadline
	}
}

// serveLimitedTable is serveLimited that also returns how many
// connections the per-source table counts (Listen's layers, built here so
// the test can read the table).
func serveLimitedTable(t *testing.T, l Limits) (string, func() int) {
	t.Helper()
	c := &testCluster{ca: pkitest.NewCA(t, "alpha")}
	id, _, _ := c.identity(t, "c1", pki.RoleControl)
	conf, err := pki.ServerTLSConfig(id)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := &sourceLimit{Listener: ln, max: l.ConnsPerSource, open: map[string]int{}}
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), l, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() { _ = srv.Serve(tls.NewListener(sl, conf)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), func() int {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		n := 0
		for _, v := range sl.open {
			n += v
		}
		return n
	}
}
