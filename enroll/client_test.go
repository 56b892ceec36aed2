package enroll_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
	"github.com/slackhq/nebula/cert"
)

func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// serve runs h behind TLS with id's chain on a fresh 127.0.0.1 listener,
// kept open until the test ends, and returns its address.
func serve(t *testing.T, id *pki.Identity, h http.Handler) string {
	t.Helper()
	cfg, err := pki.ServerTLSConfig(id)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Time = pkitest.Clock()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: cfg, ErrorLog: log.New(io.Discard, "", 0)}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.ServeTLS(ln, "", "") })
	t.Cleanup(func() {
		_ = srv.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// serveHangUp accepts connections and closes them at once: reachable, but
// no TLS handshake completes.
func serveHangUp(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// deadAddr returns an address with nothing listening: a port that was just
// closed. This is a seed that refuses connections, not a port to reuse.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// seedOf serves c's enroll server behind a control leaf of c's CA.
func (c *cluster) seed(t *testing.T) string {
	t.Helper()
	id := pkitest.NewIdentity(t, c.ca, "origin", pki.RoleControl, pkitest.IP(1))
	return serve(t, id, c.server())
}

func (c *cluster) token(seeds ...string) enroll.Token {
	return enroll.Token{
		ClusterID: "0123456789abcdef0123456789abcdef", CA: c.ca.Fingerprint(), Seeds: seeds,
		Name: c.rec.Name, Role: c.rec.Role, Expires: c.rec.Expires, Secret: c.secret,
	}
}

// steps collects the client's progress messages.
type steps struct {
	mu   sync.Mutex
	msgs []string
}

func (s *steps) add(m string) { s.mu.Lock(); defer s.mu.Unlock(); s.msgs = append(s.msgs, m) }

func (s *steps) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.msgs, "\n")
}

func clientDeps(st *steps, log io.Writer) enroll.ClientDeps {
	return enroll.ClientDeps{Log: slogTo(log), Now: pkitest.Clock(), Step: st.add}
}

func TestClientEnroll(t *testing.T) {
	for _, role := range []pki.Role{pki.RoleWorker, pki.RoleControl} {
		t.Run("ok/"+string(role), func(t *testing.T) {
			c := newCluster(t)
			c.rec.Role = role
			seed := c.seed(t)
			req, keys := c.request(t, "w1")
			var st steps
			var logs bytes.Buffer
			resp, err := enroll.Enroll(t.Context(), c.token(seed), req, clientDeps(&st, &logs))
			if err != nil {
				t.Fatalf("Enroll: %v\nsteps:\n%s", err, &st)
			}
			if resp.Name != "w1" || resp.Role != role || resp.NodeID != "node-w1" || resp.ClusterName != "prod" {
				t.Errorf("response %+v", resp)
			}
			id := &pki.Identity{CACert: resp.CACert, Cert: resp.TLSCert, Key: keys.TLSKeyPEM}
			if _, err := id.TLSCertificate(); err != nil {
				t.Errorf("issued leaf does not match the joiner's key: %v", err)
			}
			pool, err := cert.NewCAPoolFromPEM(resp.NebulaCACert)
			if err != nil {
				t.Fatal(err)
			}
			host, _, err := cert.UnmarshalCertificateFromPEM(resp.NebulaCert)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.VerifyCertificate(pkitest.Now, host); err != nil {
				t.Errorf("Nebula certificate: %v", err)
			}
			if !slices.Equal(host.Networks(), []netip.Prefix{resp.OverlayIP}) {
				t.Errorf("Nebula networks %v, overlay IP %v", host.Networks(), resp.OverlayIP)
			}
			for _, want := range []string{"connecting to seed " + seed, "seed verified: CA sha256 matches token, role control"} {
				if !strings.Contains(st.String(), want) {
					t.Errorf("steps lack %q:\n%s", want, &st)
				}
			}
			if strings.Contains(st.String(), string(codes.ClockSkew)) {
				t.Errorf("clock skew reported with equal clocks:\n%s", &st)
			}
		})
	}
}

// TestClientServerCodes runs each refusal over real TLS and checks that
// the joiner sees the server's code and that nothing was admitted.
func TestClientServerCodes(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *cluster, tok *enroll.Token)
		want codes.Code
	}{
		{name: "fail/unknown", edit: func(_ *cluster, tok *enroll.Token) { tok.Secret, _ = enroll.NewSecret() }, want: codes.TokenUnknown},
		{name: "fail/consumed", edit: func(c *cluster, _ *enroll.Token) { c.rec.ConsumedAt = pkitest.Now.Add(-time.Minute) }, want: codes.TokenConsumed},
		{name: "fail/expired", edit: func(c *cluster, _ *enroll.Token) { c.rec.Expires = pkitest.Now.Add(-time.Second) }, want: codes.TokenExpired},
		{name: "fail/wrong-addr", edit: func(c *cluster, _ *enroll.Token) { c.rec.Addr = "192.0.2.1" }, want: codes.TokenWrongAddr},
		{name: "fail/name-differ", edit: func(c *cluster, tok *enroll.Token) { c.rec.Name = "w2" }, want: codes.TokenNameDiffer},
		{name: "fail/name-taken", edit: func(c *cluster, _ *enroll.Token) {
			c.ledger.nameTaken = func(string) (bool, error) { return true, nil }
		}, want: codes.NameTaken},
		{name: "fail/ca-holder-down", edit: func(c *cluster, _ *enroll.Token) {
			c.signer.signTLS = func(pki.LeafRequest) ([]byte, error) {
				return nil, codes.Wrap(codes.CAHolderDown, errors.New("origin unreachable"))
			}
		}, want: codes.CAHolderDown},
		{name: "fail/nebula-signing-fails", edit: func(c *cluster, _ *enroll.Token) {
			c.signer.signNebula = func(pki.NebulaRequest) ([]byte, error) {
				return nil, codes.Wrap(codes.CAHolderDown, errors.New("origin unreachable"))
			}
		}, want: codes.CAHolderDown},
		{name: "fail/ip-always-taken", edit: func(c *cluster, _ *enroll.Token) {
			c.ledger.admit = func(enroll.Admission) error { return enroll.ErrIPTaken }
		}, want: codes.RaftApply},
		{name: "fail/internal", edit: func(c *cluster, _ *enroll.Token) {
			c.ledger.nameTaken = func(string) (bool, error) { return false, errors.New("disk on fire") }
		}, want: codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			tok := c.token() // the token as minted, before the edit
			tt.edit(c, &tok)
			tok.Seeds = []string{c.seed(t)}
			req, _ := c.request(t, "w1")
			req.Secret, req.Name = enroll.Secret{}, "" // filled in from the token
			var st steps
			var logs bytes.Buffer
			_, err := enroll.Enroll(t.Context(), tok, req, clientDeps(&st, &logs))
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("Enroll = %v (code %q), want %s", err, got, tt.want)
			}
			if n := len(c.ledger.Admitted()); n != 0 {
				t.Errorf("%d admissions recorded for a refused enrollment", n)
			}
			if tt.want == codes.Internal && strings.Contains(err.Error(), "disk on fire") {
				t.Errorf("internal detail reached the joiner: %v", err)
			}
		})
	}
}

// TestClientFailsClosed: a seed that fails verification ends the join at
// once. Nothing is sent to it, and the next (good) seed is never tried.
func TestClientFailsClosed(t *testing.T) {
	tests := []struct {
		name  string
		badID func(t *testing.T, c *cluster) *pki.Identity
		want  codes.Code
	}{
		{
			name: "fail/other-ca",
			badID: func(t *testing.T, _ *cluster) *pki.Identity {
				return pkitest.NewIdentity(t, pkitest.NewCA(t, "prod"), "origin", pki.RoleControl, pkitest.IP(1))
			},
			want: codes.CAMismatch,
		},
		{
			name: "fail/worker-leaf",
			badID: func(t *testing.T, c *cluster) *pki.Identity {
				return pkitest.NewIdentity(t, c.ca, "w9", pki.RoleWorker, pkitest.IP(9))
			},
			want: codes.SeedNotControl,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := newCluster(t) // the impostor's own ledger: it must see nothing
			good := newCluster(t)
			good.secret, good.rec = bad.secret, bad.rec
			bad.ca = good.ca // a worker leaf of the right CA, for fail/worker-leaf
			badSeed := serve(t, tt.badID(t, bad), bad.server())
			goodSeed := good.seed(t)

			req, _ := good.request(t, "w1")
			var st steps
			var logs bytes.Buffer
			_, err := enroll.Enroll(t.Context(), good.token(badSeed, goodSeed), req, clientDeps(&st, &logs))
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("Enroll = %v (code %q), want %s", err, got, tt.want)
			}
			if calls := bad.ledger.Calls(); len(calls) != 0 {
				t.Errorf("the unverified seed's ledger saw %v: the request was sent", calls)
			}
			if calls := good.ledger.Calls(); len(calls) != 0 {
				t.Errorf("the second seed's ledger saw %v: a verification failure was retried", calls)
			}
			if strings.Contains(st.String(), goodSeed) {
				t.Errorf("the second seed was tried:\n%s", &st)
			}
		})
	}
}

func TestClientSeedFallback(t *testing.T) {
	tests := []struct {
		name  string
		first func(t *testing.T) string
	}{
		{name: "ok/dead-first-seed", first: deadAddr},
		{name: "ok/hang-up-first-seed", first: serveHangUp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			first, second := tt.first(t), c.seed(t)
			req, _ := c.request(t, "w1")
			var st steps
			var logs bytes.Buffer
			resp, err := enroll.Enroll(t.Context(), c.token(first, second), req, clientDeps(&st, &logs))
			if err != nil {
				t.Fatalf("Enroll: %v\nsteps:\n%s", err, &st)
			}
			if resp.Name != "w1" {
				t.Errorf("response %+v", resp)
			}
			if !strings.Contains(st.String(), "connecting to seed "+first) || !strings.Contains(st.String(), "connecting to seed "+second) {
				t.Errorf("steps:\n%s", &st)
			}
		})
	}
}

func TestClientAllSeedsUnreachable(t *testing.T) {
	c := newCluster(t)
	seeds := []string{deadAddr(t), serveHangUp(t)}
	req, _ := c.request(t, "w1")
	var st steps
	var logs bytes.Buffer
	_, err := enroll.Enroll(t.Context(), c.token(seeds...), req, clientDeps(&st, &logs))
	if codes.Of(err) != codes.SeedsUnreachable {
		t.Fatalf("Enroll = %v, want %s", err, codes.SeedsUnreachable)
	}
	for _, s := range seeds {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not name seed %s: %v", s, err)
		}
	}
	out := fmt.Sprint(err, &st, logs.String())
	secretJSON, _ := c.secret.MarshalJSON()
	if strings.Contains(out, strings.Trim(string(secretJSON), `"`)) {
		t.Errorf("output shows the secret:\n%s", out)
	}
}

func TestClientIPTakenOnceThenAdmitted(t *testing.T) {
	c := newCluster(t)
	taken := false
	c.ledger.admit = func(a enroll.Admission) error {
		if !taken {
			taken = true
			return enroll.ErrIPTaken
		}
		return nil
	}
	seed := c.seed(t)
	req, _ := c.request(t, "w1")
	var st steps
	var logs bytes.Buffer
	resp, err := enroll.Enroll(t.Context(), c.token(seed), req, clientDeps(&st, &logs))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Token", "NameTaken", "JoinFacts", "FreeOverlayIP", "Admit", "FreeOverlayIP", "Admit"}
	if got := c.ledger.Calls(); !slices.Equal(got, want) {
		t.Errorf("ledger calls %v, want %v", got, want)
	}
	adm := c.ledger.Admitted()
	if len(adm) != 1 || adm[0].OverlayIP != pkitest.IP(12) || resp.OverlayIP != pkitest.IP(12) {
		t.Errorf("admitted %v, response IP %v; want the second IP %v", adm, resp.OverlayIP, pkitest.IP(12))
	}
	host, _, err := cert.UnmarshalCertificateFromPEM(resp.NebulaCert)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(host.Networks(), []netip.Prefix{pkitest.IP(12)}) {
		t.Errorf("Nebula certificate for %v, want the re-picked IP", host.Networks())
	}
}

func TestClientChecksResponse(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, c *cluster)
		want codes.Code
	}{
		{
			name: "fail/leaf-for-another-key",
			edit: func(t *testing.T, c *cluster) {
				other, err := pki.NewKeys("w1")
				if err != nil {
					t.Fatal(err)
				}
				c.signer.signTLS = func(req pki.LeafRequest) ([]byte, error) {
					req.CSR = other.CSR
					return c.ca.SignTLS(req, pkitest.Now)
				}
			},
			want: codes.EnrollRejected,
		},
		{
			name: "fail/facts-name-another-ca",
			edit: func(t *testing.T, c *cluster) {
				other := pkitest.NewCA(t, "prod")
				facts := c.ledger.joinFacts
				c.ledger.joinFacts = func(r pki.Role) (enroll.JoinFacts, error) {
					f, err := facts(r)
					f.CACert = other.CertPEM()
					return f, err
				}
			},
			want: codes.CAMismatch,
		},
		{
			name: "fail/leaf-from-another-ca",
			edit: func(t *testing.T, c *cluster) {
				other := pkitest.NewCA(t, "prod")
				c.signer.signTLS = func(req pki.LeafRequest) ([]byte, error) { return other.SignTLS(req, pkitest.Now) }
			},
			want: codes.EnrollRejected,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			tt.edit(t, c)
			seed := c.seed(t)
			req, _ := c.request(t, "w1")
			var st steps
			var logs bytes.Buffer
			_, err := enroll.Enroll(t.Context(), c.token(seed), req, clientDeps(&st, &logs))
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("Enroll = %v (code %q), want %s", err, got, tt.want)
			}
		})
	}
}

func TestClientWarnsClockSkew(t *testing.T) {
	c := newCluster(t)
	c.deps.Now = func() time.Time { return pkitest.Now.Add(5 * time.Minute) }
	seed := c.seed(t)
	req, _ := c.request(t, "w1")
	var st steps
	var logs bytes.Buffer
	if _, err := enroll.Enroll(t.Context(), c.token(seed), req, clientDeps(&st, &logs)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.String(), string(codes.ClockSkew)) || !strings.Contains(logs.String(), string(codes.ClockSkew)) {
		t.Errorf("no %s warning; steps:\n%s\nlog:\n%s", codes.ClockSkew, &st, &logs)
	}
}

func TestClientContextCancelled(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req, _ := c.request(t, "w1")
	var st steps
	var logs bytes.Buffer
	_, err := enroll.Enroll(ctx, c.token(c.seed(t), c.seed(t)), req, clientDeps(&st, &logs))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Enroll = %v, want context.Canceled", err)
	}
	if len(c.ledger.Calls()) != 0 {
		t.Errorf("ledger saw %v after cancellation", c.ledger.Calls())
	}
}
