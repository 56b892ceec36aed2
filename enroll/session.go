package enroll

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/trust"
)

// session is one TLS connection to a seed that trust.VerifyPinned accepted:
// the joiner asks the seed's time over it, then sends at most one request
// that carries the secret.
type session struct {
	seed  string
	conn  *tls.Conn
	br    *bufio.Reader
	leaf  string // the SHA-256 fingerprint of the seed's leaf
	role  trust.Role
	local netip.Addr // this end's address: the source the kernel chose
	stop  func() bool
	shown bool // its approval code was shown
}

func (s *session) close() {
	s.stop()
	_ = s.conn.Close()
}

// open connects to seed and verifies it. A connection failure is a
// *seedError (the next seed may be tried); a verification failure is
// returned as it is (fail closed: nothing was sent).
func (c *client) open(ctx context.Context, seed string) (*session, error) {
	c.step("connecting to seed " + seed)
	raw, err := c.dial(ctx, "tcp", seed)
	if err != nil {
		return nil, &seedError{err: err, noConn: true}
	}
	var (
		leaf      *x509.Certificate // the seed's leaf, as VerifyPinned accepted it
		verifyErr error
	)
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by VerifyConnection: pinned CA and control role
		VerifyConnection: func(cs tls.ConnectionState) error {
			rawCerts := make([][]byte, len(cs.PeerCertificates))
			for i, pc := range cs.PeerCertificates {
				rawCerts[i] = pc.Raw
			}
			leaf, verifyErr = trust.VerifyPinnedAny(rawCerts, c.tok.Pins(), c.now())
			if verifyErr == nil {
				verifyErr = checkSeedID(c.tok, seed, leaf)
			}
			return verifyErr
		},
		// Names the CA the token pins: during a CA rotation a seed whose
		// leaf was reissued answers with the leaf it holds under it.
		NextProtos: []string{trust.PinProto(c.tok.CA), "http/1.1"},
		// A resumed session meets the VerifyConnection above too
		// (sessions.go); crypto/tls drops one whose seed leaf expired by
		// the clock the pins are judged at.
		ClientSessionCache: c.sessions,
		Time:               c.now,
	}
	if host, _, err := net.SplitHostPort(seed); err == nil && net.ParseIP(host) == nil {
		cfg.ServerName = host
	}
	conn := tls.Client(raw, cfg)
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	fail := func(err error) (*session, error) {
		stop()
		_ = conn.Close()
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	hctx, cancel := context.WithTimeout(ctx, c.handshake)
	defer cancel()
	if err := conn.HandshakeContext(hctx); err != nil {
		if verifyErr != nil {
			// Fail closed: never retried elsewhere, nothing was sent.
			return fail(fmt.Errorf("seed %s: %w", seed, verifyErr))
		}
		if ctx.Err() == nil && hctx.Err() != nil {
			// A connection failure, like a refused connection: the seed
			// said nothing, so nothing was verified or refused.
			return fail(&seedError{err: fmt.Errorf("TLS handshake: no answer within %s", c.handshake)})
		}
		return fail(&seedError{err: fmt.Errorf("TLS handshake: %w", err)})
	}
	s := &session{seed: seed, conn: conn, br: bufio.NewReader(conn), stop: stop, leaf: trust.FingerprintOf(leaf).String()}
	if r, err := trust.RoleOf(leaf); err == nil {
		s.role = r
	}
	if ap, err := netip.ParseAddrPort(raw.LocalAddr().String()); err == nil {
		s.local = ap.Addr().Unmap()
	}
	role := string(s.role)
	if role == "" {
		role = "?"
	}
	c.step(fmt.Sprintf("seed verified: CA sha256 matches token, role %s", role))
	return s, nil
}

// roundTrip sends one request over the session and reads its whole answer.
// keep leaves the connection open for another request.
func (s *session) roundTrip(ctx context.Context, method, path string, body []byte, keep bool) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	what := endpointName(path)
	hreq, err := http.NewRequestWithContext(ctx, method, "https://"+s.seed+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%s request: %w", what, err)
	}
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	hreq.Close = !keep
	if err := hreq.Write(s.conn); err != nil {
		return 0, nil, &seedError{err: fmt.Errorf("send %s request: %w", what, err), sent: true}
	}
	hresp, err := http.ReadResponse(s.br, hreq)
	if err != nil {
		return 0, nil, &seedError{err: fmt.Errorf("read %s response: %w", what, err), sent: true}
	}
	defer hresp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, maxResponseBody+1))
	if err != nil {
		return 0, nil, &seedError{err: fmt.Errorf("read %s response: %w", what, err), sent: true}
	}
	if len(data) > maxResponseBody {
		return 0, nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("seed %s: %s response larger than %d bytes", s.seed, what, maxResponseBody))
	}
	return hresp.StatusCode, data, nil
}

// endpointName names an enroll endpoint in errors: "enroll", "check",
// "time".
func endpointName(path string) string {
	switch path {
	case CheckPath:
		return "check"
	case TimePath:
		return "time"
	}
	return "enroll"
}

// clock asks the seed its time over the session, before anything secret is
// sent, and the STUN port it serves (0: it does not say). ok is false when
// the seed does not say its time (an older meshd answers 404); a
// connection failure is a *seedError that sent nothing.
func (c *client) clock(ctx context.Context, s *session) (sk Skew, stunPort int, ok bool, err error) {
	sent := c.now()
	status, data, err := s.roundTrip(ctx, http.MethodGet, TimePath, nil, true)
	received := c.now()
	if err != nil {
		if se, isSeed := err.(*seedError); isSeed {
			se.sent = false // a GET that carries nothing
		}
		return Skew{}, 0, false, err
	}
	var tr TimeResponse
	if status != http.StatusOK || json.Unmarshal(data, &tr) != nil || tr.ServerTime.IsZero() {
		return Skew{}, 0, false, nil
	}
	if tr.STUNPort < 0 || tr.STUNPort > 65535 {
		tr.STUNPort = 0 // nonsense is not a port it serves
	}
	c.seen.learn(tr)
	return Skew{Peer: "seed " + s.seed, Local: midpoint(sent, received), Remote: tr.ServerTime}, tr.STUNPort, true, nil
}

// judgeClock compares this clock with the seed's and fails with
// codes.ClockSkew past c.maxSkew; it warns past WarnSkew.
func (c *client) judgeClock(ctx context.Context, s *session) error {
	sk, _, ok, err := c.clock(ctx, s)
	if err != nil {
		return err
	}
	if !ok {
		c.step(fmt.Sprintf("seed %s does not report its time (an older meshd): clocks not compared before sending", s.seed))
		return nil
	}
	warn, err := sk.Judge(c.maxSkew)
	if err != nil {
		c.log.Warn("clock skew: join refused before the token was sent", "code", codes.ClockSkew, "seed", s.seed,
			"offset", sk.Offset().Round(time.Millisecond))
		return err
	}
	if warn {
		c.log.Warn("clock skew", "code", codes.ClockSkewWarning, "seed", s.seed, "offset", sk.Offset().Round(time.Millisecond))
		c.warn(codes.ClockSkewWarning, sk.String())
		return nil
	}
	c.step(fmt.Sprintf("clock checked against seed %s: %s apart", s.seed, absDuration(sk.Offset()).Round(time.Millisecond)))
	return nil
}

// checkSeedID refuses a seed whose leaf is not the node the token names at
// that address: a control node removed with its leaf still valid (the
// joiner cannot see revocation) fails here, as removal revoked every
// unused token naming it and a newer token names only active control
// nodes. A token of the previous release names none: the CA pin and the
// role are all it checks.
func checkSeedID(tok Token, seed string, leaf *x509.Certificate) error {
	want := tok.SeedID(seed)
	if want == "" {
		return nil
	}
	if got := trust.NodeIDOf(leaf); got != want {
		return codes.Wrap(codes.SeedNotNamed, fmt.Errorf("the token names node %s at %s, and the seed's certificate is node %q's", want, seed, got))
	}
	return nil
}
