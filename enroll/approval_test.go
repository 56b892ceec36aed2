package enroll_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
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

// sessionPair runs one TLS handshake over a pipe and returns both ends'
// connection states.
func sessionPair(t *testing.T, id *pki.Identity) (client, server tls.ConnectionState) {
	t.Helper()
	scfg, err := pki.ServerTLSConfig(id)
	if err != nil {
		t.Fatal(err)
	}
	scfg.Time = pkitest.Clock()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	sc := tls.Server(a, scfg)
	cc := tls.Client(b, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	var wg sync.WaitGroup
	var serr error
	wg.Go(func() { serr = sc.Handshake() })
	if err := cc.Handshake(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if serr != nil {
		t.Fatal(serr)
	}
	return cc.ConnectionState(), sc.ConnectionState()
}

// TestSessionCode: both ends of one TLS session derive the same 6-digit
// code for a token; another session, or another token, gives another.
func TestSessionCode(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "origin", pki.RoleControl, pkitest.IP(1))
	s1, _ := enroll.NewSecret()
	s2, _ := enroll.NewSecret()
	c1, srv1 := sessionPair(t, id)
	c2, _ := sessionPair(t, id)
	code := func(cs tls.ConnectionState, s enroll.Secret) string {
		t.Helper()
		c, err := enroll.SessionCode(cs, s.Hash())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := enroll.ParseCode(c); err != nil {
			t.Fatalf("code %q: %v", c, err)
		}
		return c
	}
	joiner, seed := code(c1, s1), code(srv1, s1)
	if joiner != seed {
		t.Fatalf("joiner's code %s, seed's %s: want equal", joiner, seed)
	}
	// A 6-digit code collides with probability 1e-6: a collision here is
	// a bug, not bad luck.
	if other := code(c2, s1); other == joiner {
		t.Fatalf("another session gave the same code %s", other)
	}
	if other := code(c1, s2); other == joiner {
		t.Fatalf("another token gave the same code %s", other)
	}
	if enroll.HashCode(s1.Hash(), joiner) == enroll.HashCode(s2.Hash(), joiner) {
		t.Fatal("a code's hash does not depend on its token")
	}
	for in, want := range map[string]string{"123456": "123456", " 123 456 ": "123456", "123-456": "123456"} {
		if got, err := enroll.ParseCode(in); err != nil || got != want {
			t.Errorf("ParseCode(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "12345", "1234567", "12a456", "١٢٣٤٥٦"} {
		if _, err := enroll.ParseCode(in); codes.Of(err) != codes.BadRequest {
			t.Errorf("ParseCode(%q): %v, want %s", in, err, codes.BadRequest)
		}
	}
}

// approvals is the cluster's token record with the approval state raft
// would keep (the same transitions the FSM applies), and an operator.
type approvals struct {
	*fakeLedger
	mu       sync.Mutex
	rec      enroll.TokenRecord
	nrequest int
}

// requests is how many times a session was recorded waiting.
func (a *approvals) requests() int { a.mu.Lock(); defer a.mu.Unlock(); return a.nrequest }

func (a *approvals) RequestApproval(_ context.Context, h enroll.TokenHash, p enroll.PendingJoin) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if h != a.rec.Hash {
		return codes.Wrap(codes.TokenUnknown, errors.New("no such token"))
	}
	p.Via = "origin"
	a.rec.Approval, _ = a.rec.Approval.WithPending(p, pkitest.Now)
	if a.rec.Approval.IsBurnt() {
		a.rec.RevokedAt = pkitest.Now
	}
	a.nrequest++
	return nil
}

// newApprovals makes c's token an --approve one kept by a.
func newApprovals(c *cluster) *approvals {
	c.rec.Approve = true
	a := &approvals{fakeLedger: c.ledger, rec: c.rec}
	c.ledger.token = func(h enroll.TokenHash) (enroll.TokenRecord, bool, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if h != a.rec.Hash {
			return enroll.TokenRecord{}, false, nil
		}
		return a.rec, true, nil
	}
	return a
}

// try is an operator typing code.
func (a *approvals) try(code string) enroll.Attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	next, out := a.rec.Approval.Try(enroll.HashCode(a.rec.Hash, code), "uid=0@origin", pkitest.Now)
	a.rec.Approval = next
	if out == enroll.AttemptBurnt {
		a.rec.RevokedAt = pkitest.Now
	}
	return out
}

// approvalRun is one join with an --approve token over real TLS: the
// joiner's shown codes arrive on shown, and operate plays the operator.
type approvalRun struct {
	c     *cluster
	logs  syncBuf // the seed's log
	a     *approvals
	shown chan enroll.ApprovalShown
	clock atomic.Int64 // seconds past pkitest.Now, for both ends
}

func newApprovalRun(t *testing.T) *approvalRun {
	c := newCluster(t)
	r := &approvalRun{c: c, a: newApprovals(c), shown: make(chan enroll.ApprovalShown, 4)}
	c.deps.Now = r.now
	c.deps.Log = slogTo(&r.logs)
	return r
}

// syncBuf is a bytes.Buffer safe for a logger and a test to share.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }

func (s *syncBuf) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func (r *approvalRun) now() time.Time {
	return pkitest.Now.Add(time.Duration(r.clock.Load()) * time.Second)
}

// join runs the joiner against a seed serving r's cluster, with the
// server's long poll cut to poll.
func (r *approvalRun) join(t *testing.T, poll time.Duration) (*enroll.Response, error, *steps) {
	t.Helper()
	cfg := enroll.DefaultServerConfig()
	cfg.ApprovalPoll = poll
	srv := enroll.NewServer(cfg, r.a, r.c.signer, r.c.deps)
	id := pkitest.NewIdentity(t, r.c.ca, "origin", pki.RoleControl, pkitest.IP(1))
	seed := serve(t, id, srv)
	req, _ := r.c.request(t, "w1")
	var st steps
	var logs bytes.Buffer
	d := clientDeps(&st, &logs)
	d.Now = r.now
	d.Approval = func(a enroll.ApprovalShown) { r.shown <- a }
	resp, err := enroll.Enroll(t.Context(), r.c.token(seed), req, d)
	return resp, err, &st
}

// TestEnrollApproval: a join with an --approve token waits after the
// pinned handshake and shows its session's code; the operator's right
// code lets it through, five wrong ones burn the token and end it with
// codes.ApprovalBurnt, and no approval before the token expires ends it
// with codes.ApprovalTimeout. Nothing is admitted unless approved.
func TestEnrollApproval(t *testing.T) {
	t.Run("approved", func(t *testing.T) {
		r := newApprovalRun(t)
		codeShown := make(chan string, 1)
		go func() {
			a := <-r.shown
			codeShown <- a.Code
			if r.a.try("000000") == enroll.AttemptApproved && a.Code != "000000" {
				t.Error("a wrong code approved")
			}
			if out := r.a.try(a.Code); out != enroll.AttemptApproved {
				t.Errorf("the shown code: %v", out)
			}
		}()
		resp, err, st := r.join(t, 50*time.Millisecond)
		if err != nil {
			t.Fatalf("Enroll: %v\nsteps:\n%s", err, st)
		}
		if resp.Name != "w1" || len(r.c.ledger.Admitted()) != 1 {
			t.Fatalf("response %+v, admitted %v", resp, r.c.ledger.Admitted())
		}
		if r.a.requests() != 1 {
			t.Errorf("the session was recorded waiting %d times, want once", r.a.requests())
		}
		// The seed logs that a join waits, never its code.
		code := <-codeShown
		if logs := r.logs.String(); !strings.Contains(logs, string(codes.EventApprovalRequested)) || strings.Contains(logs, code) {
			t.Errorf("the seed's log lacks the waiting join or holds its code %s:\n%s", code, logs)
		}
	})
	t.Run("burnt", func(t *testing.T) {
		r := newApprovalRun(t)
		go func() {
			a := <-r.shown
			for i := range enroll.ApprovalMaxWrong {
				wrong := fmt.Sprintf("%06d", i)
				if wrong == a.Code {
					wrong = "999999"
				}
				r.a.try(wrong)
			}
		}()
		_, err, st := r.join(t, 50*time.Millisecond)
		if codes.Of(err) != codes.ApprovalBurnt {
			t.Fatalf("Enroll: %v (code %q), want %s\nsteps:\n%s", err, codes.Of(err), codes.ApprovalBurnt, st)
		}
		if n := len(r.c.ledger.Admitted()); n != 0 {
			t.Fatalf("%d admissions with a burnt token", n)
		}
		// The right code no longer helps, and a new join is refused.
		_, err, _ = r.join(t, 50*time.Millisecond)
		if codes.Of(err) != codes.ApprovalBurnt {
			t.Fatalf("a join after the burn: %v, want %s", err, codes.ApprovalBurnt)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		r := newApprovalRun(t)
		go func() {
			<-r.shown
			r.clock.Store(int64(16 * time.Minute / time.Second)) // past the 15-minute token
		}()
		_, err, st := r.join(t, time.Hour) // the seed's own check ends the wait, not the poll bound
		if codes.Of(err) != codes.ApprovalTimeout {
			t.Fatalf("Enroll: %v (code %q), want %s\nsteps:\n%s", err, codes.Of(err), codes.ApprovalTimeout, st)
		}
		if n := len(r.c.ledger.Admitted()); n != 0 {
			t.Fatalf("%d admissions without approval", n)
		}
	})
	t.Run("old-joiner", func(t *testing.T) {
		r := newApprovalRun(t)
		srv := enroll.NewServer(enroll.DefaultServerConfig(), r.a, r.c.signer, r.c.deps)
		req, _ := r.c.request(t, "w1")
		if _, err := srv.Enroll(t.Context(), req, netip.MustParseAddr("127.0.0.1")); codes.Of(err) != codes.EnrollRejected {
			t.Fatalf("a joiner that cannot show a code: %v, want %s", err, codes.EnrollRejected)
		}
		if r.a.requests() != 0 || len(r.c.ledger.Admitted()) != 0 {
			t.Fatal("a refused join was recorded")
		}
	})
}

// hangUpOnce serves h, but cuts the connection of the nth enroll request
// instead of answering it (a seed that died while a join waited).
type hangUpOnce struct {
	h    http.Handler
	n    int32
	seen atomic.Int32
}

func (c *hangUpOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == enroll.Path && c.seen.Add(1) == c.n {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	c.h.ServeHTTP(w, r)
}

// TestEnrollApprovalNewSession: a join whose connection breaks while it
// waits goes on through the next seed on a new TLS session, records that
// session waiting and shows its new code. Either code approves it: the
// new one, or the first one typed late, since the same joiner (the key
// its CSR proves) is on the new session.
func TestEnrollApprovalNewSession(t *testing.T) {
	for _, approve := range []string{"new", "old"} {
		t.Run(approve+"-code", func(t *testing.T) {
			r := newApprovalRun(t)
			cfg := enroll.DefaultServerConfig()
			cfg.ApprovalPoll = 50 * time.Millisecond
			srv := enroll.NewServer(cfg, r.a, r.c.signer, r.c.deps)
			id := pkitest.NewIdentity(t, r.c.ca, "origin", pki.RoleControl, pkitest.IP(1))
			first := serve(t, id, &hangUpOnce{h: srv, n: 2}) // answers 202, then hangs up on the long poll
			second := serve(t, id, srv)
			shown := make(chan string, 2)
			go func() {
				a := <-r.shown
				b := <-r.shown
				shown <- a.Code
				shown <- b.Code
				code := b.Code
				if approve == "old" {
					code = a.Code
				}
				if out := r.a.try(code); out != enroll.AttemptApproved {
					t.Errorf("the %s session's code: %v", approve, out)
				}
			}()
			req, _ := r.c.request(t, "w1")
			var st steps
			d := clientDeps(&st, io.Discard)
			d.Now = r.now
			d.Approval = func(a enroll.ApprovalShown) { r.shown <- a }
			resp, err := enroll.Enroll(t.Context(), r.c.token(first, second), req, d)
			if err != nil {
				t.Fatalf("Enroll: %v\nsteps:\n%s", err, &st)
			}
			a, b := <-shown, <-shown
			if a == b {
				t.Fatalf("both sessions showed code %s", a)
			}
			if resp.Name != "w1" || len(r.c.ledger.Admitted()) != 1 || r.a.requests() != 2 {
				t.Fatalf("response %+v, %d admitted, %d sessions recorded waiting (want 2)", resp, len(r.c.ledger.Admitted()), r.a.requests())
			}
			if !strings.Contains(st.String(), "seed "+first+" took the request but gave no answer") {
				t.Errorf("steps do not say the first seed hung up:\n%s", &st)
			}
		})
	}
}

// TestApprovalOtherJoinerRefused: two joins wait with the same token (the
// owner's and a leaked copy's, each with its own key and session); the
// operator approves the owner's code; the owner is admitted and the
// other join is refused with codes.TokenConsumed, nothing admitted for it.
func TestApprovalOtherJoinerRefused(t *testing.T) {
	r := newApprovalRun(t)
	cfg := enroll.DefaultServerConfig()
	cfg.ApprovalPoll = 50 * time.Millisecond
	srv := enroll.NewServer(cfg, r.a, r.c.signer, r.c.deps)
	id := pkitest.NewIdentity(t, r.c.ca, "origin", pki.RoleControl, pkitest.IP(1))
	seed := serve(t, id, srv)
	owner, thief := make(chan string, 1), make(chan string, 1)
	go func() {
		o, th := <-owner, <-thief // both wait before the operator acts
		if o == th {
			t.Errorf("both sessions show code %s", o)
		}
		if out := r.a.try(o); out != enroll.AttemptApproved {
			t.Errorf("the owner's code: %v", out)
		}
	}()
	errs := map[string]chan error{"owner": make(chan error, 1), "thief": make(chan error, 1)}
	for who, shown := range map[string]chan string{"owner": owner, "thief": thief} {
		go func() {
			req, _ := r.c.request(t, "w1")
			d := clientDeps(&steps{}, io.Discard)
			d.Now = r.now
			d.Approval = func(a enroll.ApprovalShown) { shown <- a.Code }
			_, err := enroll.Enroll(t.Context(), r.c.token(seed), req, d)
			errs[who] <- err
		}()
	}
	if err := <-errs["owner"]; err != nil {
		t.Fatalf("the owner's join: %v", err)
	}
	if err := <-errs["thief"]; codes.Of(err) != codes.TokenConsumed {
		t.Fatalf("the other join: %v, want %s", err, codes.TokenConsumed)
	}
	if n := len(r.c.ledger.Admitted()); n != 1 {
		t.Fatalf("%d admissions, want the owner's only", n)
	}
}
