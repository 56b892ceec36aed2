package control

import (
	"context"
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

// TestClientStaysUnderSourceCap: a node's client opens at most
// maxConnsPerPeer connections to one control node, so 40 concurrent calls
// (a follower forwarding a burst of joins) all succeed against a port
// whose per-source cap (20 here, 64 in production) they would otherwise
// exceed; the calls past the bound wait for a free connection.
func TestClientStaysUnderSourceCap(t *testing.T) {
	c := &testCluster{ca: pkitest.NewCA(t, "alpha")}
	srvID, _, _ := c.identity(t, "c1", pki.RoleControl)
	cliID, _, _ := c.identity(t, "c2", pki.RoleControl)
	conf, err := pki.ServerTLSConfig(srvID)
	if err != nil {
		t.Fatal(err)
	}
	l := DefaultLimits()
	l.ConnsPerSource = 20
	ln, err := Listen("127.0.0.1:0", conf, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	open, most := 0, 0
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(20 * time.Millisecond) // a call that takes a while: the others pile up
		w.WriteHeader(http.StatusOK)
	}), l, slog.New(slog.DiscardHandler))
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch st {
		case http.StateNew:
			open++
			most = max(most, open)
		case http.StateClosed, http.StateHijacked:
			open--
		}
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	cl, err := NewClient(cliID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Go(func() {
			errs <- cl.Call(ctx, ln.Addr().String(), "/v1/test", false, map[string]int{"x": 1}, nil)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call failed: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most > maxConnsPerPeer {
		t.Fatalf("the client held %d connections to one server at once, want at most %d", most, maxConnsPerPeer)
	}
	t.Logf("40 concurrent calls over at most %d connections", most)
}

// TestAskSeedsMovesOnFromASilentSeed: a control node that takes the
// connection but never answers (a worker's packets dropped on it) costs
// a read askPerSeed, then the next seed answers; the caller's budget is
// not spent waiting on the first.
func TestAskSeedsMovesOnFromASilentSeed(t *testing.T) {
	c := &testCluster{ca: pkitest.NewCA(t, "alpha")}
	srvID, _, _ := c.identity(t, "c1", pki.RoleControl)
	cliID, _, _ := c.identity(t, "w1", pki.RoleWorker)
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	conf, err := pki.ServerTLSConfig(srvID)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0", conf, DefaultLimits(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `["answered"]`)
	}), DefaultLimits(), slog.New(slog.DiscardHandler))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	cl, err := NewClient(cliID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*askPerSeed)
	defer cancel()
	start := time.Now()
	var got []string
	if err := cl.AskSeeds(ctx, []string{silent.Addr().String(), ln.Addr().String()}, "/v1/test", &got); err != nil {
		t.Fatalf("asked a silent seed then an answering one: %v", err)
	}
	took := time.Since(start)
	if len(got) != 1 || got[0] != "answered" {
		t.Fatalf("got %v", got)
	}
	if took < askPerSeed || took > 3*askPerSeed {
		t.Fatalf("answered after %v; want the silent seed given askPerSeed (%v), then the next", took, askPerSeed)
	}
	t.Logf("a silent first seed cost %v", took.Round(time.Millisecond))
}
