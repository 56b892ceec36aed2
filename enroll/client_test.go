package enroll_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
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
			c.signer.signTLS = func(enroll.SignRequest) ([]byte, error) {
				return nil, codes.Wrap(codes.CAHolderDown, errors.New("origin unreachable"))
			}
		}, want: codes.CAHolderDown},
		{name: "fail/nebula-signing-fails", edit: func(c *cluster, _ *enroll.Token) {
			c.signer.signNebula = func(enroll.SignRequest) ([]byte, error) {
				return nil, codes.Wrap(codes.CAHolderDown, errors.New("origin unreachable"))
			}
		}, want: codes.CAHolderDown},
		{name: "fail/sign-refused", edit: func(c *cluster, _ *enroll.Token) {
			c.signer.signTLS = func(enroll.SignRequest) ([]byte, error) {
				return nil, codes.Wrap(codes.SignRefused, errors.New("no such admission"))
			}
		}, want: codes.SignRefused},
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

// TestClientSeedFallback: a seed that cannot be reached or hangs up moves
// the join on to the next; the response names the seed that answered
// (Response.Seed: the joiner's home seed).
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
			if resp.Name != "w1" || resp.Seed != second {
				t.Errorf("response %+v, want w1 enrolled through the second seed %s", resp, second)
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
	d := clientDeps(&st, &logs)
	d.SeedBudget = 300 * time.Millisecond // the passes: seedpass_test.go
	_, err := enroll.Enroll(t.Context(), c.token(seeds...), req, d)
	if codes.Of(err) != codes.SeedsUnreachable || !errors.Is(err, enroll.ErrNothingSent) {
		t.Fatalf("Enroll = %v, want %s with nothing sent", err, codes.SeedsUnreachable)
	}
	if !strings.Contains(err.Error(), "no seed of 2 could be reached, nothing was sent") {
		t.Errorf("error does not say that nothing was sent: %v", err)
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
				c.signer.signTLS = func(req enroll.SignRequest) ([]byte, error) {
					lr, err := c.signer.leaf(req)
					if err != nil {
						return nil, err
					}
					lr.CSR = other.CSR
					return c.ca.SignTLS(lr, pkitest.Now)
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
				c.signer.signTLS = func(req enroll.SignRequest) ([]byte, error) {
					lr, err := c.signer.leaf(req)
					if err != nil {
						return nil, err
					}
					return other.SignTLS(lr, pkitest.Now)
				}
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

func TestClientContextCancelled(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req, _ := c.request(t, "w1")
	var st steps
	var logs bytes.Buffer
	_, err := enroll.Enroll(ctx, c.token(c.seed(t), c.seed(t)), req, clientDeps(&st, &logs))
	if !errors.Is(err, context.Canceled) || codes.Of(err) != codes.SeedsUnreachable || !errors.Is(err, enroll.ErrNothingSent) {
		t.Fatalf("Enroll = %v, want context.Canceled as %s with nothing sent", err, codes.SeedsUnreachable)
	}
	if len(c.ledger.Calls()) != 0 {
		t.Errorf("ledger saw %v after cancellation", c.ledger.Calls())
	}
}

// TestClientRefusesOtherRole: a server that admits the joiner under another
// role than the token names (a consistent response: the certificate and the
// response agree with each other, not with the token) is refused, and the
// joiner reports no admission.
func TestClientRefusesOtherRole(t *testing.T) {
	tests := []struct {
		name          string
		token, server pki.Role
	}{
		{name: "fail/worker-token-control-cert", token: pki.RoleWorker, server: pki.RoleControl},
		{name: "fail/control-token-worker-cert", token: pki.RoleControl, server: pki.RoleWorker},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			c.rec.Role = tt.token
			tok := c.token(c.seed(t))
			c.rec.Role = tt.server // the cluster's record disagrees with the token it minted
			req, _ := c.request(t, "w1")
			var st steps
			var logs bytes.Buffer
			resp, err := enroll.Enroll(t.Context(), tok, req, clientDeps(&st, &logs))
			if resp != nil {
				t.Fatalf("Enroll returned an admission as %s (err %v), want a refusal", resp.Role, err)
			}
			if got := codes.Of(err); got != codes.EnrollRejected {
				t.Fatalf("Enroll = %v (code %q), want %s", err, got, codes.EnrollRejected)
			}
			if adm := c.ledger.Admitted(); len(adm) != 1 || adm[0].Role != tt.server {
				t.Fatalf("server admitted %+v, want one %s admission (the test's premise)", adm, tt.server)
			}
			if strings.Contains(st.String(), "admitted as") {
				t.Errorf("the joiner reported an admission:\n%s", &st)
			}
		})
	}
}

// capture records the enroll requests h receives, as they arrived on the
// wire, with the TLS server name the client asked for.
type capture struct {
	h http.Handler

	mu          sync.Mutex
	reqs        []enroll.Request
	serverNames []string
	paths       []string // every path asked, in order
}

// asked is every path asked so far, in order.
func (c *capture) asked() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.paths)
}

func (c *capture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.paths = append(c.paths, r.URL.Path)
	c.mu.Unlock()
	if r.Method == http.MethodGet { // the seed's time: no request body
		c.h.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req enroll.Request
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.serverNames = append(c.serverNames, r.TLS.ServerName)
	c.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	c.h.ServeHTTP(w, r)
}

func (c *capture) seen() ([]enroll.Request, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reqs), slices.Clone(c.serverNames)
}

// TestClientFillsRequest: the zero fields of a request are filled in from
// the token and the clock; fields already set are sent as they are.
func TestClientFillsRequest(t *testing.T) {
	clientNow := pkitest.Now.Add(30 * time.Second) // within every skew bound
	tests := []struct {
		name string
		edit func(req *enroll.Request)
		want func(tok enroll.Token, req enroll.Request) enroll.Request
	}{
		{
			name: "ok/zero-fields-filled",
			edit: func(req *enroll.Request) {
				req.Protocol, req.Secret, req.Name, req.Clock, req.Expires = 0, enroll.Secret{}, "", time.Time{}, time.Time{}
			},
			want: func(tok enroll.Token, req enroll.Request) enroll.Request {
				req.Protocol, req.Secret, req.Name, req.Clock, req.Expires = enroll.ProtocolVersion, tok.Secret, tok.Name, clientNow, tok.Expires
				return req
			},
		},
		{
			name: "ok/set-fields-kept",
			edit: func(req *enroll.Request) {
				req.Clock, req.Expires = pkitest.Now.Add(-time.Second), pkitest.Now.Add(time.Minute)
			},
			want: func(_ enroll.Token, req enroll.Request) enroll.Request { return req },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			cp := &capture{h: c.server()}
			seed := serve(t, pkitest.NewIdentity(t, c.ca, "origin", pki.RoleControl, pkitest.IP(1)), cp)
			tok := c.token(seed)
			req, _ := c.request(t, "w1")
			tt.edit(&req)
			want := tt.want(tok, req)
			var st steps
			var logs bytes.Buffer
			d := clientDeps(&st, &logs)
			d.Now = func() time.Time { return clientNow }
			if _, err := enroll.Enroll(t.Context(), tok, req, d); err != nil {
				t.Fatalf("Enroll: %v\nsteps:\n%s", err, &st)
			}
			got, _ := cp.seen()
			if len(got) != 1 {
				t.Fatalf("server saw %d requests, want 1", len(got))
			}
			g := got[0]
			if g.Protocol != want.Protocol || !g.Secret.Equal(want.Secret) || g.Name != want.Name || !g.Clock.Equal(want.Clock) ||
				!g.Expires.Equal(want.Expires) || want.Expires.IsZero() ||
				!bytes.Equal(g.CSR, want.CSR) || !bytes.Equal(g.NebulaPublic, want.NebulaPublic) || g.Underlay != want.Underlay {
				t.Errorf("server saw protocol %d name %q clock %s expires %s, secret match %v; want protocol %d name %q clock %s expires %s",
					g.Protocol, g.Name, g.Clock, g.Expires, g.Secret.Equal(want.Secret), want.Protocol, want.Name, want.Clock, want.Expires)
			}
		})
	}
}

// TestClientServerName: a seed given by DNS name is asked for by that name
// (SNI), so a seed behind a name-based TLS front end can be reached; an IP
// seed sends no server name.
func TestClientServerName(t *testing.T) {
	tests := []struct {
		name, seed, want string
	}{
		{name: "ok/dns-seed", seed: "ctl-1.example.net:7300", want: "ctl-1.example.net"},
		{name: "ok/ip-seed", seed: "192.0.2.7:7300", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			cp := &capture{h: c.server()}
			addr := serve(t, pkitest.NewIdentity(t, c.ca, "origin", pki.RoleControl, pkitest.IP(1)), cp)
			req, _ := c.request(t, "w1")
			var st steps
			var logs bytes.Buffer
			d := clientDeps(&st, &logs)
			var dialed []string
			d.Dial = func(ctx context.Context, network, seed string) (net.Conn, error) {
				dialed = append(dialed, seed)
				var nd net.Dialer
				return nd.DialContext(ctx, network, addr) // every seed name leads to the test server
			}
			if _, err := enroll.Enroll(t.Context(), c.token(tt.seed), req, d); err != nil {
				t.Fatalf("Enroll: %v\nsteps:\n%s", err, &st)
			}
			if !slices.Equal(dialed, []string{tt.seed}) {
				t.Errorf("dialed %v, want %v", dialed, tt.seed)
			}
			if _, names := cp.seen(); !slices.Equal(names, []string{tt.want}) {
				t.Errorf("TLS server names %q, want %q", names, tt.want)
			}
		})
	}
}

// padResponse wraps h so that a 200 answer is re-encoded to exactly size
// bytes, padded with spaces inside the JSON object: cutting any byte off
// breaks it.
func padResponse(t *testing.T, h http.Handler, size int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := bytes.TrimSpace(rec.Body.Bytes())
		if rec.Code != http.StatusOK || len(body) > size || body[len(body)-1] != '}' {
			t.Errorf("padResponse: status %d, %d bytes: %.200s", rec.Code, len(body), body)
			http.Error(w, "bad test response", http.StatusInternalServerError)
			return
		}
		padded := append(body[:len(body)-1:len(body)-1], bytes.Repeat([]byte{' '}, size-len(body))...)
		padded = append(padded, '}')
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(padded)
	})
}

// TestClientResponseSizeLimit: a response of exactly the limit is read in
// full and accepted; one byte more is refused, not truncated.
func TestClientResponseSizeLimit(t *testing.T) {
	tests := []struct {
		name string
		size int
		want codes.Code
	}{
		{name: "ok/at-limit", size: enroll.MaxResponseBody},
		{name: "fail/one-over-limit", size: enroll.MaxResponseBody + 1, want: codes.EnrollRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			seed := serve(t, pkitest.NewIdentity(t, c.ca, "origin", pki.RoleControl, pkitest.IP(1)), padResponse(t, c.server(), tt.size))
			req, _ := c.request(t, "w1")
			var st steps
			var logs bytes.Buffer
			resp, err := enroll.Enroll(t.Context(), c.token(seed), req, clientDeps(&st, &logs))
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("Enroll = %v (code %q), want %q", err, got, tt.want)
			}
			if tt.want == "" && (resp.Name != "w1" || resp.NodeID != "node-w1") {
				t.Errorf("response %s/%s", resp.Name, resp.NodeID)
			}
		})
	}
}

// TestClientErrorAnswers: a refusal carries the server's code, and the
// message the joiner shows has the cause (the code's own when the server
// gave none) and the server's detail. An unknown or missing code is
// codes.EnrollRejected.
func TestClientErrorAnswers(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		body     string
		want     codes.Code
		contains []string
		lacks    []string
	}{
		{
			name: "fail/code-cause-detail", status: 401,
			body:     `{"code":"` + string(codes.TokenConsumed) + `","cause":"the token was used","detail":"by node-7 at noon"}`,
			want:     codes.TokenConsumed,
			contains: []string{"HTTP 401", "the token was used", ": by node-7 at noon"},
			lacks:    []string{codes.TokenConsumed.Cause()},
		},
		{
			name: "fail/code-without-cause", status: 401,
			body:     `{"code":"` + string(codes.TokenExpired) + `"}`,
			want:     codes.TokenExpired,
			contains: []string{codes.TokenExpired.Cause()},
		},
		{
			name: "fail/unknown-code", status: 418,
			body:     `{"code":"X418999TEAPOT","cause":"short and stout"}`,
			want:     codes.EnrollRejected,
			contains: []string{"HTTP 418", "short and stout"},
		},
		{
			name: "fail/not-json", status: 502,
			body:     `<html>bad gateway</html>`,
			want:     codes.EnrollRejected,
			contains: []string{"HTTP 502", codes.EnrollRejected.Cause()},
			lacks:    []string{"bad gateway"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			seed := serve(t, pkitest.NewIdentity(t, c.ca, "origin", pki.RoleControl, pkitest.IP(1)),
				http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.WriteHeader(tt.status)
					_, _ = io.WriteString(w, tt.body)
				}))
			req, _ := c.request(t, "w1")
			var st steps
			var logs bytes.Buffer
			resp, err := enroll.Enroll(t.Context(), c.token(seed), req, clientDeps(&st, &logs))
			if got := codes.Of(err); got != tt.want || resp != nil {
				t.Fatalf("Enroll = %v (code %q), response %v; want %s", err, got, resp != nil, tt.want)
			}
			msg := err.Error()
			for _, s := range tt.contains {
				if !strings.Contains(msg, s) {
					t.Errorf("message lacks %q: %s", s, msg)
				}
			}
			for _, s := range tt.lacks {
				if strings.Contains(msg, s) {
					t.Errorf("message has %q: %s", s, msg)
				}
			}
			if strings.HasSuffix(msg, ": ") || strings.HasSuffix(msg, ":") {
				t.Errorf("message ends in an empty detail: %q", msg)
			}
		})
	}
}

// TestClientClockSkew pins the joiner's skew bounds: the seed's time is
// asked over the pinned session before the request; past the bound (5
// minutes by default) the enrollment fails with codes.ClockSkew showing
// both clocks, and the request carrying the secret is never sent; past
// 30 s it goes on with codes.ClockSkewWarning.
func TestClientClockSkew(t *testing.T) {
	tests := []struct {
		name    string
		server  time.Duration // the server's clock minus the joiner's
		maxSkew time.Duration // ClientDeps.MaxSkew; zero: the default
		warn    bool
		want    codes.Code
	}{
		{name: "ok/equal"},
		{name: "ok/ahead-30s", server: 30 * time.Second},
		{name: "ok/behind-30s", server: -30 * time.Second},
		{name: "warn/ahead", server: 31 * time.Second, warn: true},
		{name: "warn/behind", server: -31 * time.Second, warn: true},
		{name: "warn/ahead-at-bound", server: 5 * time.Minute, warn: true},
		{name: "warn/behind-at-bound", server: -5 * time.Minute, warn: true},
		{name: "fail/ahead", server: 5*time.Minute + time.Second, want: codes.ClockSkew},
		{name: "fail/behind", server: -5*time.Minute - time.Second, want: codes.ClockSkew},
		{name: "fail/custom-bound", server: 11 * time.Second, maxSkew: 10 * time.Second, want: codes.ClockSkew},
		{name: "ok/custom-bound", server: 10 * time.Second, maxSkew: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			cap := &capture{h: c.server()}
			seed := serve(t, pkitest.NewIdentity(t, c.ca, "origin", pki.RoleControl, pkitest.IP(1)), cap)
			req, _ := c.request(t, "w1")
			var st steps
			var logs bytes.Buffer
			deps := clientDeps(&st, &logs)
			deps.MaxSkew = tt.maxSkew
			// The seed's clock moves: the joiner's stays where the test
			// certificates are valid.
			c.deps.Now = func() time.Time { return pkitest.Now.Add(tt.server) }
			cap.h = c.server()
			var warned []codes.Code
			deps.Warn = func(code codes.Code, detail string) { warned = append(warned, code) }
			_, err := enroll.Enroll(t.Context(), c.token(seed), req, deps)
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("Enroll = %v (code %q), want %q", err, got, tt.want)
			}
			reqs, _ := cap.seen()
			paths := cap.asked()
			if tt.want != "" {
				if len(reqs) != 0 || slices.Contains(paths, enroll.Path) || len(c.ledger.Calls()) != 0 {
					t.Fatalf("refused for skew, yet the request went out: paths %v, ledger calls %v", paths, c.ledger.Calls())
				}
				for _, both := range []string{pkitest.Now.Format(time.RFC3339), pkitest.Now.Add(tt.server).Format(time.RFC3339)} {
					if !strings.Contains(err.Error(), both) {
						t.Errorf("error %q does not show clock %s", err, both)
					}
				}
				return
			}
			if got := slices.Contains(warned, codes.ClockSkewWarning); got != tt.warn {
				t.Errorf("skew %s: warned %v (%v), want %v\nsteps:\n%s", tt.server, got, warned, tt.warn, &st)
			}
			if got := strings.Contains(logs.String(), string(codes.ClockSkewWarning)); got != tt.warn {
				t.Errorf("skew %s: logged a warning %v, want %v\nlog:\n%s", tt.server, got, tt.warn, &logs)
			}
			if len(paths) < 2 || paths[0] != enroll.TimePath || paths[1] != enroll.Path {
				t.Errorf("paths asked %v, want the time first, then the enrollment", paths)
			}
		})
	}
}
