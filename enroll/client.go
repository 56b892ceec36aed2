package enroll

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/trust"
)

// maxResponseBody bounds an enroll response body.
const maxResponseBody = 1 << 20

// DefaultHandshakeTimeout bounds the TLS handshake with one seed.
const DefaultHandshakeTimeout = 5 * time.Second

// ErrNothingSent is in the error of an enrollment that sent its request to
// no seed: the cluster cannot have recorded it, and the token is as it was.
var ErrNothingSent = errors.New("nothing was sent")

// ClientDeps are the joiner's collaborators.
type ClientDeps struct {
	Log  *slog.Logger     // nil discards
	Now  func() time.Time // nil means time.Now
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Step, if set, is told each step as it happens, e.g.
	// "connecting to seed 127.0.0.2:7300".
	Step func(msg string)
	// Warn, if set, is told each warning (codes.ClockSkewWarning); unset,
	// warnings go to Step.
	Warn func(code codes.Code, detail string)
	// MaxSkew is how far the seed's clock may differ from this one before
	// the enrollment is refused with codes.ClockSkew, before the secret is
	// sent. Zero means DefaultMaxSkew.
	MaxSkew time.Duration
	// Approval, if set, is told the approval code of the session a join
	// waits on (a token minted with --approve): the joiner shows it, and
	// an operator types it into `meshctl approve`. Unset, it goes to Step.
	// It is told again, with a new code, if the join moves to a new
	// session.
	Approval func(ApprovalShown)
	// HandshakeTimeout bounds the TLS handshake with each seed: a seed
	// that accepts the connection but does not complete the handshake in
	// time is skipped like one that cannot be reached. Zero means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// SeedBudget is how long Enroll goes on asking the seeds again, in
	// passes with a jittered wait between them, after a pass in which
	// none answered or each that did was busy. Zero means
	// DefaultSeedBudget; below zero, one pass only.
	SeedBudget time.Duration
	// Sessions, if set, keeps the seeds' TLS sessions for the next
	// connection to resume (sessions.go; NewSessions); nil: every
	// connection makes a full handshake.
	Sessions tls.ClientSessionCache
}

// Enroll sends req to the cluster tok names and returns its verified
// response. It tries tok.Seeds in order, moving on only when a seed cannot
// be reached, does not complete the TLS handshake within the handshake
// timeout, the connection fails before or after verification, or the
// seed answers that it cannot serve a join now (stepsAside). The
// TLS handshake succeeds only when trust.VerifyPinned accepts the seed's
// chain against tok.CA; a verification failure ends the enrollment at once
// with its code, before anything is sent and without trying another seed.
// Over the verified connection the seed's time is asked first: a clock
// more than d.MaxSkew off moves on to the next seed before the secret is
// sent, and ends the enrollment with codes.ClockSkew, both clocks shown,
// when every seed's is (more than WarnSkew is a
// codes.ClockSkewWarning to d.Warn).
//
// A pass over the seeds in which none answered, or each that did said it
// is busy (no leader, starting, stopping), is followed by another after a
// jittered wait, within d.SeedBudget (seedpass.go); a seed that accepted
// the connection and answered late is asked a second time whatever the
// budget. A seed that took SlowSeedAfter or more to answer is a
// codes.SeedSlow warning to d.Warn, with the time, and the join goes on.
//
// When no seed answers in any pass, the error is codes.SeedsUnreachable;
// it says which seeds accepted the connection and then answered late. If
// the request went to no seed it wraps ErrNothingSent; if it went to a
// seed whose answer was lost, the cluster may have recorded the join, and
// the error says so.
//
// Zero fields of req are filled in: Protocol, Secret, Name and Expires
// from tok, Clock from d.Now.
func Enroll(ctx context.Context, tok Token, req Request, d ClientDeps) (*Response, error) {
	c := newClient(tok, d)
	if tok.CA.IsZero() {
		return nil, codes.Wrap(codes.CAMismatch, errors.New("the join token pins no CA"))
	}
	if req.Protocol == 0 {
		req.Protocol = ProtocolVersion
	}
	if tok.JWT != "" {
		req.JWT = tok.JWT // a join by identity: no secret, no name
	} else if req.Secret.IsZero() {
		req.Secret = tok.Secret
	}
	if req.Name == "" && !tok.Key && tok.JWT == "" { // a key's joiner is named by the cluster
		req.Name = tok.Name
	}
	if req.Expires.IsZero() {
		req.Expires = tok.Expires
	}
	if req.Clock.IsZero() {
		req.Clock = c.now()
	}
	req.Approval = true // this client shows an approval code when asked
	csr, err := x509.ParseCertificateRequest(req.CSR)
	if err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("enroll request CSR: %w", err))
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode enroll request: %w", err)
	}
	return c.enrollSeeds(ctx, body, csr.PublicKey)
}

// seedError marks a failure to reach or talk to a seed, which moves on to
// the next seed. Verification failures and the server's answers never do.
// sent is set once the request may have reached the seed; noConn when not
// even a TCP connection was made (refused, no route, dial timeout), as
// against a seed that accepted one and then answered late or not at all.
type seedError struct {
	err    error
	sent   bool
	noConn bool
}

func (e *seedError) Error() string { return e.err.Error() }
func (e *seedError) Unwrap() error { return e.err }

type client struct {
	tok       Token
	log       *slog.Logger
	now       func() time.Time
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	step      func(string)
	warn      func(codes.Code, string)
	approval  func(ApprovalShown)
	handshake time.Duration
	budget    time.Duration // SeedBudget
	maxSkew   time.Duration
	seen      seenRevocations        // the freshest revocation list the seeds told
	sessions  tls.ClientSessionCache // nil: none
}

func newClient(tok Token, d ClientDeps) *client {
	c := &client{tok: tok, log: d.Log, now: d.Now, dial: d.Dial, step: d.Step, warn: d.Warn,
		approval: d.Approval, handshake: d.HandshakeTimeout, budget: d.SeedBudget, maxSkew: d.MaxSkew}
	if d.Sessions != nil {
		c.sessions = newPinnedSessions(d.Sessions, tok)
	}
	if c.maxSkew <= 0 {
		c.maxSkew = DefaultMaxSkew
	}
	if c.handshake <= 0 {
		c.handshake = DefaultHandshakeTimeout
	}
	if c.budget == 0 {
		c.budget = DefaultSeedBudget
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("component", "enroll")
	if c.now == nil {
		c.now = time.Now
	}
	if c.dial == nil {
		c.dial = seedDialer().DialContext
	}
	if c.step == nil {
		c.step = func(string) {}
	}
	if c.approval == nil {
		step := c.step
		c.approval = func(a ApprovalShown) { step(a.String()) }
	}
	if c.warn == nil {
		step := c.step
		c.warn = func(code codes.Code, detail string) {
			step(fmt.Sprintf("warning %s: %s; %s", code, detail, code.Remedy()))
		}
	}
	return c
}

// seedDialer is the default dialer: its timeout bounds what a seed that
// drops packets costs before the next seed is tried.
func seedDialer() *net.Dialer { return &net.Dialer{Timeout: 5 * time.Second} }

// try enrolls through one seed: connect, verify, compare clocks, then
// POST body over the verified connection. since is when this enrollment
// first tried seed, tries how often it has (this time included): a seed
// that took SlowSeedAfter to answer is said to be slow.
func (c *client) try(ctx context.Context, seed string, body []byte, since time.Time, tries int) (*Response, error) {
	s, err := c.open(ctx, seed)
	if err != nil {
		return nil, err
	}
	defer s.close()
	// The seed's time, before the secret goes out: a clock too far off
	// costs the joiner nothing, and the token stays unused. Its answer
	// also says which departed control nodes' leaves are revoked: the
	// secret never goes to one of them.
	if err := c.judgeClock(ctx, s); err != nil {
		return nil, err
	}
	if err := c.seen.judge(s); err != nil {
		return nil, err
	}
	c.answered(seed, since, tries)
	// From here on the request may have reached the seed, even when
	// writing it fails part way. The connection is kept: a join that
	// waits for approval asks again over it (the code is the session's).
	status, data, err := s.roundTrip(ctx, http.MethodPost, Path, body, true)
	for err == nil && status == http.StatusAccepted {
		if err := c.waitApproval(s, data); err != nil {
			return nil, err
		}
		status, data, err = s.roundTrip(ctx, http.MethodPost, Path, body, true)
	}
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		err := errorFromBody(seed, status, data)
		if s.shown && codes.Of(err) == codes.TokenExpired {
			// The token expired while the join waited for approval.
			return nil, codes.Wrap(codes.ApprovalTimeout, fmt.Errorf("no operator approved the join of %s before its token expired: %w", c.tok.Name, err))
		}
		return nil, err
	}
	var resp Response
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("seed %s: malformed enroll response: %w", seed, err))
	}
	return &resp, nil
}

// errorFromBody turns a failed enroll answer into an error with the
// server's code; an unknown or missing code is codes.EnrollRejected.
func errorFromBody(seed string, status int, data []byte) error {
	var body ErrorBody
	_ = json.Unmarshal(data, &body)
	code := codes.Code(body.Code)
	if _, known := code.Info(); !known {
		code = codes.EnrollRejected
	}
	cause := body.Cause
	if cause == "" {
		cause = code.Cause()
	}
	msg := fmt.Sprintf("seed %s refused the enrollment (HTTP %d): %s", seed, status, cause)
	if body.Detail != "" {
		msg += ": " + body.Detail
	}
	return codes.Wrap(code, errors.New(msg))
}

// pinnedBundle parses an answer's CA bundle (two CAs during a CA
// rotation), which came over the session the pinned CA authenticated: it
// must hold a CA the token pins, else codes.CAMismatch. what names the
// answer in the error ("enroll", "bundle").
func (c *client) pinnedBundle(bundle []byte, what string) ([]*x509.Certificate, error) {
	cas, err := trust.BundleCerts(bundle)
	if err != nil || len(cas) == 0 {
		return nil, codes.Wrap(codes.CAMismatch, fmt.Errorf("%s response CA certificate: %v", what, err))
	}
	for _, ca := range cas {
		if slices.Contains(c.tok.Pins(), trust.FingerprintOf(ca)) {
			return cas, nil
		}
	}
	return nil, codes.Wrap(codes.CAMismatch, fmt.Errorf("%s response names CA sha256:%s, the token pins sha256:%s", what, trust.FingerprintOf(cas[0]), c.tok.CA))
}

// check verifies a successful answer: it must name the pinned CA and
// certify our own TLS key, chained to that CA, for the token's name and
// role.
func (c *client) check(resp *Response, csrKey crypto.PublicKey) error {
	cas, err := c.pinnedBundle(resp.CACert, "enroll")
	if err != nil {
		return err
	}
	rejected := func(format string, args ...any) error {
		return codes.Wrap(codes.EnrollRejected, fmt.Errorf("enroll response: "+format, args...))
	}
	leaf, err := trust.ParseCertPEM(resp.TLSCert)
	if err != nil {
		return rejected("TLS certificate: %w", err)
	}
	roots := x509.NewCertPool()
	for _, ca := range cas {
		roots.AddCert(ca)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: c.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return rejected("TLS certificate does not chain to the cluster CA: %w", err)
	}
	pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(csrKey) {
		return rejected("TLS certificate does not certify this node's key")
	}
	if c.tok.Key || c.tok.JWT != "" {
		// The cluster named this node: any valid name, the certificate's.
		if err := ValidName(resp.Name); err != nil || leaf.Subject.CommonName != resp.Name {
			return rejected("admitted name %q, certificate names %q", resp.Name, leaf.Subject.CommonName)
		}
	} else if resp.Name != c.tok.Name || leaf.Subject.CommonName != c.tok.Name {
		return rejected("admitted name %q, the token names %q", resp.Name, c.tok.Name)
	}
	if role, err := trust.RoleOf(leaf); err != nil || resp.Role != role || (c.tok.Role != "" && role != c.tok.Role) {
		return rejected("admitted role %q (certificate %q), the token names %q", resp.Role, role, c.tok.Role)
	}
	c.step(fmt.Sprintf("admitted as %s (%s), node id %s, overlay IP %s", resp.Name, resp.Role, resp.NodeID, resp.OverlayIP))
	return nil
}
