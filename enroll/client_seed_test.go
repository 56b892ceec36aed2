package enroll_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// serveSilent accepts TCP connections and never reads or writes: a seed
// that is reachable but never speaks TLS.
func serveSilent(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// stalled is a real enroll server whose TLS handshakes never finish: it
// reads each client hello and then says nothing. hellos counts them; any
// request that got through would reach cp.
type stalled struct {
	addr   string
	cp     *capture
	hellos atomic.Int32
}

func serveStalled(t *testing.T, c *cluster) *stalled {
	t.Helper()
	st := &stalled{cp: &capture{h: c.server()}}
	cfg, err := pki.ServerTLSConfig(pkitest.NewIdentity(t, c.ca, "origin", pki.RoleControl, pkitest.IP(1)))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		st.hellos.Add(1)
		<-release
		return nil, errors.New("test over")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: st.cp, TLSConfig: cfg, ErrorLog: log.New(io.Discard, "", 0)}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.ServeTLS(ln, "", "") })
	t.Cleanup(func() {
		_ = srv.Close()
		wg.Wait()
	})
	t.Cleanup(func() { close(release) }) // runs first
	st.addr = ln.Addr().String()
	return st
}

// handshakeDeps are client deps with a short handshake timeout, well
// under the default (which the callers' contexts do not leave room for).
func handshakeDeps(st *steps, logs *bytes.Buffer) enroll.ClientDeps {
	d := clientDeps(st, logs)
	d.HandshakeTimeout = 300 * time.Millisecond
	return d
}

// TestClientSkipsSilentSeed: a seed that accepts the connection but never
// completes a TLS handshake is skipped once the handshake timeout has
// passed, as a connection failure, and the next seed enrolls. The
// context leaves less time than the default timeout: a client that
// ignored the configured one, or had none, would fail.
func TestClientSkipsSilentSeed(t *testing.T) {
	tests := []struct {
		name   string
		silent func(t *testing.T, c *cluster) (addr string, saw func() int)
	}{
		{name: "ok/tcp-only", silent: func(t *testing.T, _ *cluster) (string, func() int) {
			return serveSilent(t), func() int { return 0 }
		}},
		{name: "ok/tls-never-answers", silent: func(t *testing.T, c *cluster) (string, func() int) {
			s := serveStalled(t, c)
			return s.addr, func() int {
				reqs, _ := s.cp.seen()
				if s.hellos.Load() != 1 {
					t.Errorf("the stalled seed saw %d client hellos, want 1", s.hellos.Load())
				}
				return len(reqs)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			silent, saw := tt.silent(t, newCluster(t))
			good := c.seed(t)
			req, _ := c.request(t, "w1")
			ctx, cancel := context.WithTimeout(t.Context(), enroll.DefaultHandshakeTimeout*3/4)
			defer cancel()
			var st steps
			var logs bytes.Buffer
			resp, err := enroll.Enroll(ctx, c.token(silent, good), req, handshakeDeps(&st, &logs))
			if err != nil {
				t.Fatalf("Enroll: %v\nsteps:\n%s", err, &st)
			}
			if resp.Name != "w1" || len(c.ledger.Admitted()) != 1 {
				t.Fatalf("response %+v, %d admissions", resp, len(c.ledger.Admitted()))
			}
			if want := "seed " + silent + " connected but gave no answer: TLS handshake: no answer within 300ms"; !strings.Contains(st.String(), want) {
				t.Errorf("steps lack %q:\n%s", want, &st)
			}
			if n := saw(); n != 0 {
				t.Errorf("the silent seed got %d requests", n)
			}
		})
	}
}

// TestClientAllSeedsSilent: when no seed completes a handshake in any
// pass the error is SeedsUnreachable and says nothing was sent, that
// each seed connected and then did not answer, and over how many passes;
// no seed saw a request. A seed that connected and did not answer is
// asked a second time even with the budget spent (one late answer is not
// yet a consistent failure), and not a third once it is.
func TestClientAllSeedsSilent(t *testing.T) {
	c := newCluster(t)
	a, b := serveStalled(t, newCluster(t)), serveStalled(t, newCluster(t))
	seeds := []string{a.addr, serveSilent(t), b.addr}
	req, _ := c.request(t, "w1")
	ctx, cancel := context.WithTimeout(t.Context(), enroll.DefaultHandshakeTimeout*3/4)
	defer cancel()
	var st steps
	var logs bytes.Buffer
	d := handshakeDeps(&st, &logs)
	d.SeedBudget = 100 * time.Millisecond // spent by the first pass (3 x 300 ms)
	_, err := enroll.Enroll(ctx, c.token(seeds...), req, d)
	if codes.Of(err) != codes.SeedsUnreachable || !errors.Is(err, enroll.ErrNothingSent) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Enroll = %v (code %q), want %s with nothing sent, before the context's deadline", err, codes.Of(err), codes.SeedsUnreachable)
	}
	msg := err.Error()
	if !strings.Contains(msg, "no seed of 3 could be reached, nothing was sent") || strings.Contains(msg, "recorded") {
		t.Errorf("message does not say plainly that nothing was sent: %s", msg)
	}
	for _, s := range append(seeds, "the seeds were asked in 2 passes") {
		if !strings.Contains(msg, s) {
			t.Errorf("message does not name %q: %s", s, msg)
		}
	}
	for _, s := range []string{a.addr, b.addr} {
		if want := s + ": connected, then TLS handshake: no answer within 300ms"; !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	for _, s := range []*stalled{a, b} {
		if reqs, _ := s.cp.seen(); len(reqs) != 0 || s.hellos.Load() != 2 {
			t.Errorf("stalled seed saw %d requests, %d hellos; want 0 and 2", len(reqs), s.hellos.Load())
		}
	}
}

// loseAnswer reads the whole request, lets h handle it, and then drops
// the connection instead of answering: the cluster may have recorded the
// join, the joiner cannot know.
func loseAnswer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == enroll.TimePath { // the clock is answered; the enrollment's answer is lost
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&discard{header: http.Header{}}, r)
		panic(http.ErrAbortHandler)
	})
}

type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// TestClientAnswerLost: a seed that took the request and gave no answer is
// not "unreachable with nothing sent": the error says the join may have
// been recorded and how to resume it, even when the seeds after it cannot
// be reached.
func TestClientAnswerLost(t *testing.T) {
	c := newCluster(t)
	lost := serve(t, pkitest.NewIdentity(t, c.ca, "origin", pki.RoleControl, pkitest.IP(1)), loseAnswer(c.server()))
	dead := deadAddr(t)
	req, _ := c.request(t, "w1")
	var st steps
	var logs bytes.Buffer
	d := handshakeDeps(&st, &logs)
	d.SeedBudget = -1 // one pass: this fake ledger admits the same token again
	_, err := enroll.Enroll(t.Context(), c.token(lost, dead), req, d)
	if codes.Of(err) != codes.SeedsUnreachable || errors.Is(err, enroll.ErrNothingSent) {
		t.Fatalf("Enroll = %v (code %q), want %s without ErrNothingSent", err, codes.Of(err), codes.SeedsUnreachable)
	}
	if n := len(c.ledger.Admitted()); n != 1 {
		t.Fatalf("%d admissions; the test wants the lost answer to have been recorded", n)
	}
	msg := err.Error()
	for _, want := range []string{"no seed of 2 answered; the request went to " + lost + ", so the cluster may have recorded this join",
		"run the same join again", lost + ": read enroll response", dead + ": dial"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "nothing was sent") {
		t.Errorf("message claims nothing was sent: %s", msg)
	}
	if want := "seed " + lost + " took the request but gave no answer"; !strings.Contains(st.String(), want) {
		t.Errorf("steps lack %q:\n%s", want, &st)
	}
}

// TestClientStoppedBeforeSending: a context that ends while the seeds are
// silent stops the enrollment with SeedsUnreachable, nothing sent, and the
// context's error; the next seed is not tried.
func TestClientStoppedBeforeSending(t *testing.T) {
	c := newCluster(t)
	silent, good := serveSilent(t), c.seed(t)
	req, _ := c.request(t, "w1")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	var st steps
	var logs bytes.Buffer
	d := clientDeps(&st, &logs) // the default handshake timeout outlasts the context
	_, err := enroll.Enroll(ctx, c.token(silent, good), req, d)
	if codes.Of(err) != codes.SeedsUnreachable || !errors.Is(err, enroll.ErrNothingSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Enroll = %v (code %q), want %s, nothing sent, deadline exceeded", err, codes.Of(err), codes.SeedsUnreachable)
	}
	if !strings.Contains(err.Error(), "no seed of 2 could be reached, nothing was sent; enroll stopped: context deadline exceeded: "+silent) {
		t.Errorf("message: %v", err)
	}
	if strings.Contains(st.String(), "connecting to seed "+good) || len(c.ledger.Calls()) != 0 {
		t.Errorf("the next seed was tried after the context ended:\n%s", &st)
	}
}

// answerSick serves h but answers every join request with code, as a
// control node that cannot serve joins now does (no leader, stopping, a
// failing disk).
func answerSick(h http.Handler, code codes.Code) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != enroll.Path {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code.Status())
		_ = json.NewEncoder(w).Encode(enroll.ErrorBody{Code: code.String(), Cause: code.Cause(), Remedy: code.Remedy(), Detail: "sick"})
	})
}

// TestClientSickSeedStepsAside: a seed that answers it cannot serve a
// join now moves the join on to the token's next seed (issue 28: a
// disk-full former leader answered NoLeader and the join ended there,
// while another control node led); a refusal about the token does not.
// Every seed sick ends with the seeds' code.
func TestClientSickSeedStepsAside(t *testing.T) {
	for _, code := range []codes.Code{codes.NoLeader, codes.DaemonStarting, codes.DaemonStopping, codes.DiskFull, codes.SeedUnfit} {
		t.Run("ok/"+string(code), func(t *testing.T) {
			c := newCluster(t)
			id := pkitest.NewIdentity(t, c.ca, "c2", pki.RoleControl, pkitest.IP(2))
			sick, good := serve(t, id, answerSick(c.server(), code)), c.seed(t)
			req, _ := c.request(t, "w1")
			var st steps
			var logs bytes.Buffer
			resp, err := enroll.Enroll(t.Context(), c.token(sick, good), req, clientDeps(&st, &logs))
			if err != nil || resp.Name != "w1" {
				t.Fatalf("Enroll = %+v, %v; want w1 joined through the second seed\nsteps:\n%s", resp, err, &st)
			}
			if !strings.Contains(st.String(), "seed "+sick+" cannot serve the join now ("+string(code)+")") {
				t.Errorf("steps do not say the first seed stepped aside:\n%s", &st)
			}
		})
	}
	t.Run("fail/every-seed-sick", func(t *testing.T) {
		c := newCluster(t)
		a := serve(t, pkitest.NewIdentity(t, c.ca, "c2", pki.RoleControl, pkitest.IP(2)), answerSick(c.server(), codes.NoLeader))
		b := serve(t, pkitest.NewIdentity(t, c.ca, "c3", pki.RoleControl, pkitest.IP(3)), answerSick(c.server(), codes.SeedUnfit))
		req, _ := c.request(t, "w1")
		var st steps
		var logs bytes.Buffer
		d := clientDeps(&st, &logs)
		d.SeedBudget = 200 * time.Millisecond // NoLeader is asked again within it
		_, err := enroll.Enroll(t.Context(), c.token(a, b), req, d)
		if codes.Of(err) != codes.SeedUnfit || !strings.Contains(err.Error(), "no seed of 2 can serve the join now") {
			t.Fatalf("Enroll = %v (code %q), want %s naming both seeds", err, codes.Of(err), codes.SeedUnfit)
		}
	})
	t.Run("fail/sick-and-unreachable", func(t *testing.T) {
		// A minority's seed answers NoLeader, the majority's cannot be
		// reached: the join ends with the answer, not "unreachable".
		c := newCluster(t)
		a := serve(t, pkitest.NewIdentity(t, c.ca, "c2", pki.RoleControl, pkitest.IP(2)), answerSick(c.server(), codes.NoLeader))
		req, _ := c.request(t, "w1")
		var st steps
		var logs bytes.Buffer
		d := clientDeps(&st, &logs)
		d.SeedBudget = 200 * time.Millisecond
		_, err := enroll.Enroll(t.Context(), c.token(a, deadAddr(t)), req, d)
		if codes.Of(err) != codes.NoLeader || !strings.Contains(err.Error(), "run the same join again") {
			t.Fatalf("Enroll = %v (code %q), want %s saying to run it again", err, codes.Of(err), codes.NoLeader)
		}
	})
	t.Run("fail/token-refusal-ends-the-join", func(t *testing.T) {
		c := newCluster(t)
		c.rec.Expires = pkitest.Now.Add(-time.Second)
		first, second := c.seed(t), c.seed(t)
		req, _ := c.request(t, "w1")
		var st steps
		var logs bytes.Buffer
		_, err := enroll.Enroll(t.Context(), c.token(first, second), req, clientDeps(&st, &logs))
		if codes.Of(err) != codes.TokenExpired || strings.Contains(st.String(), "connecting to seed "+second) {
			t.Fatalf("Enroll = %v (code %q), want %s from the first seed alone\nsteps:\n%s", err, codes.Of(err), codes.TokenExpired, &st)
		}
	})
}
