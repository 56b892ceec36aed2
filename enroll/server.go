package enroll

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// maxRequestBody bounds an enroll request body.
const maxRequestBody = 64 << 10

// abortTimeout bounds the write that undoes an admission whose signing
// failed; it runs even when the joiner has hung up.
const abortTimeout = 10 * time.Second

// ServerConfig configures the enroll server.
type ServerConfig struct {
	// MaxSkew is how far a joiner's clock may differ from this node's
	// before the admission is logged with codes.ClockSkew.
	MaxSkew time.Duration

	// The failed-token throttle: a source (an IPv4 address or an IPv6
	// /64) that has made FailLimit failed token attempts within FailWindow
	// of its first is refused with codes.TokenThrottled, before anything
	// else is done, until the window has passed. At most MaxSources
	// sources are tracked. NewServer puts the default in place of a zero.
	FailLimit  int
	FailWindow time.Duration
	MaxSources int
}

// DefaultServerConfig returns the defaults: MaxSkew one minute; 10 failed
// token attempts per source per minute; 4096 sources tracked.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{MaxSkew: time.Minute, FailLimit: DefaultFailLimit, FailWindow: DefaultFailWindow, MaxSources: DefaultMaxSources}
}

// Validate checks the config.
func (c ServerConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return codes.Wrap(codes.ConfigInvalid, fmt.Errorf(format, args...))
	}
	if c.MaxSkew <= 0 {
		return bad("enroll max skew %s: want a positive duration", c.MaxSkew)
	}
	if c.FailLimit < 1 {
		return bad("enroll fail limit %d: want at least 1", c.FailLimit)
	}
	if c.FailWindow <= 0 {
		return bad("enroll fail window %s: want a positive duration", c.FailWindow)
	}
	if c.MaxSources < 1 || c.MaxSources > MaxMaxSources {
		return bad("enroll max sources %d: want 1 to %d", c.MaxSources, MaxMaxSources)
	}
	return nil
}

// Deps are the enroll server's collaborators.
type Deps struct {
	Log       *slog.Logger     // nil discards
	Now       func() time.Time // nil means time.Now
	NewNodeID func() string    // nil means 16 random bytes, hex
}

// Server admits joiners: it checks an enroll request against the ledger,
// records the admission (the node joining, its keys, the overlay IP the
// cluster picks), has the signer certify what was recorded, and records
// the certificates, which makes the node active. It serves Path over HTTP; the caller runs
// it behind TLS with this node's control leaf.
type Server struct {
	cfg      ServerConfig
	throttle *throttle
	ledger   Ledger
	signer   Signer
	log      *slog.Logger
	now      func() time.Time
	nodeID   func() string
}

// NewServer returns a server that admits against l and signs with s.
func NewServer(cfg ServerConfig, l Ledger, s Signer, d Deps) *Server {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.NewNodeID == nil {
		d.NewNodeID = randomNodeID
	}
	def := DefaultServerConfig()
	if cfg.FailLimit == 0 {
		cfg.FailLimit = def.FailLimit
	}
	if cfg.FailWindow == 0 {
		cfg.FailWindow = def.FailWindow
	}
	if cfg.MaxSources == 0 {
		cfg.MaxSources = def.MaxSources
	}
	return &Server{
		cfg: cfg, throttle: newThrottle(cfg.FailLimit, cfg.FailWindow, cfg.MaxSources),
		ledger: l, signer: s, log: d.Log.With("component", "enroll"), now: d.Now, nodeID: d.NewNodeID,
	}
}

// randomNodeID is 16 random bytes in hex.
func randomNodeID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// Enroll admits the joiner that sent req from source, or fails with a
// coded error and nothing recorded. The token's ledger record decides name
// and role; the request's claims decide nothing. A source that has failed
// too often with its token is refused with codes.TokenThrottled before any
// check (see ServerConfig). Checks run in a fixed order: first those that
// need no ledger (protocol, name, a secret present, the expiry the joiner
// read from its token), then token known, unused, not revoked, unexpired,
// source address, name equal to the token's, name free.
func (s *Server) Enroll(ctx context.Context, req Request, source netip.Addr) (*Response, error) {
	source = source.Unmap()
	if err := s.throttled(source); err != nil {
		return nil, err
	}
	resp, err := s.enroll(ctx, req, source)
	s.count(source, err)
	return resp, err
}

// throttled refuses a source that has failed too often with its token. It
// logs the first refusal of the source's window and no other.
func (s *Server) throttled(source netip.Addr) error {
	throttled, first, f := s.throttle.check(source, s.now())
	if !throttled {
		return nil
	}
	if first {
		s.log.Warn("enroll throttled: too many failed token attempts; more from this source are refused unlogged until the window closes",
			"code", codes.TokenThrottled, "source", source, "failures", f.count, "window_opened", f.since, "window", s.cfg.FailWindow)
	}
	return codes.Wrap(codes.TokenThrottled, fmt.Errorf("%d failed token attempts from %s within %s; try again later", f.count, source, s.cfg.FailWindow))
}

// count feeds the outcome of an attempt from source to the throttle.
func (s *Server) count(source netip.Addr, err error) {
	if tokenFault(err) {
		s.throttle.fail(source, s.now())
	}
}

// enroll is Enroll without the throttle.
func (s *Server) enroll(ctx context.Context, req Request, source netip.Addr) (*Response, error) {
	if req.Protocol != ProtocolVersion {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("enroll protocol %d, this node speaks %d", req.Protocol, ProtocolVersion))
	}
	if err := ValidName(req.Name); err != nil {
		return nil, err
	}
	// Everything that needs no ledger comes first: on a follower, looking
	// up a token this node does not hold costs a round trip to the leader.
	if req.Secret.IsZero() {
		return nil, codes.Wrap(codes.TokenUnknown, errors.New("the request carries no token secret"))
	}
	if !req.Expires.IsZero() && !s.now().Before(req.Expires) {
		return nil, codes.Wrap(codes.TokenExpired, fmt.Errorf("token for %s expired at %s", req.Name, req.Expires.UTC().Format(time.RFC3339)))
	}
	hash := req.Secret.Hash()
	rec, ok, err := s.ledger.Token(ctx, hash)
	if err != nil {
		return nil, fmt.Errorf("look up token: %w", err)
	}
	if !ok {
		return nil, codes.Wrap(codes.TokenUnknown, fmt.Errorf("no token %s in the cluster", shortHash(hash)))
	}
	if rec.Consumed() {
		if resp, err := s.resume(ctx, req, rec); resp != nil || err != nil {
			return resp, err
		}
		return nil, codes.Wrap(codes.TokenConsumed, fmt.Errorf("token for %s was used at %s", rec.Name, rec.ConsumedAt.UTC().Format(time.RFC3339)))
	}
	if rec.Revoked() {
		return nil, codes.Wrap(codes.TokenRevoked, fmt.Errorf("token for %s was revoked at %s", rec.Name, rec.RevokedAt.UTC().Format(time.RFC3339)))
	}
	now := s.now()
	if !now.Before(rec.Expires) {
		return nil, codes.Wrap(codes.TokenExpired, fmt.Errorf("token for %s expired at %s", rec.Name, rec.Expires.UTC().Format(time.RFC3339)))
	}
	if rec.Addr != "" && !sameAddr(rec.Addr, source) {
		return nil, codes.Wrap(codes.TokenWrongAddr, fmt.Errorf("token for %s is bound to %s, request came from %s", rec.Name, rec.Addr, source))
	}
	if req.Name != rec.Name {
		return nil, codes.Wrap(codes.TokenNameDiffer, fmt.Errorf("token admits %s, request names %s", rec.Name, req.Name))
	}
	taken, err := s.ledger.NameTaken(ctx, req.Name)
	if err != nil {
		return nil, fmt.Errorf("check name %s: %w", req.Name, err)
	}
	if taken {
		// A concurrent join with this very token may have taken the name
		// between the two reads: say so rather than blame the name.
		if again, ok, err := s.ledger.Token(ctx, hash); err == nil && ok && again.Consumed() {
			return nil, codes.Wrap(codes.TokenConsumed, fmt.Errorf("token for %s was used at %s", again.Name, again.ConsumedAt.UTC().Format(time.RFC3339)))
		}
		return nil, codes.Wrap(codes.NameTaken, fmt.Errorf("a node named %s already exists", req.Name))
	}
	if s.cfg.MaxSkew > 0 && !req.Clock.IsZero() && absDuration(req.Clock.Sub(now)) > s.cfg.MaxSkew {
		s.log.Warn("joiner clock skew", "code", codes.ClockSkew, "name", req.Name, "skew", req.Clock.Sub(now).Round(time.Second))
	}

	if req.Underlay != "" {
		if _, err := netip.ParseAddr(req.Underlay); err != nil {
			return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("underlay address %q: %w", req.Underlay, err))
		}
	} else if rec.Role == pki.RoleControl {
		return nil, codes.Wrap(codes.EnrollRejected, errors.New("a control node must advertise its underlay address"))
	}
	tlsKey, err := pki.CSRPublicKey(req.CSR)
	if err != nil {
		return nil, err
	}

	// Fetch the facts before anything is written: a failure here costs the
	// joiner nothing, while after Admit it would cost an abort.
	facts, err := s.ledger.JoinFacts(ctx, rec.Role)
	if err != nil {
		return nil, fmt.Errorf("join facts: %w", err)
	}
	nodeID, err := s.admissionID(ctx, rec.Name)
	if err != nil {
		return nil, fmt.Errorf("look up a former node named %s: %w", rec.Name, err)
	}
	overlayIP, err := s.ledger.Admit(ctx, Admission{
		Token: hash, NodeID: nodeID, Name: rec.Name, Role: rec.Role,
		Underlay: req.Underlay, SourceAddr: source.String(),
		TLSPublicKey: tlsKey, NebulaPub: req.NebulaPublic,
		Version: req.Version, Ports: req.Ports, At: s.now(),
	})
	if err != nil {
		return nil, fmt.Errorf("admit %s: %w", rec.Name, err)
	}
	tlsCert, nebulaCert, err := s.certify(ctx, SignRequest{NodeID: nodeID, Name: rec.Name, Role: rec.Role,
		OverlayIP: overlayIP, CSR: req.CSR})
	if err != nil {
		return nil, err
	}
	s.log.Info("node admitted", "code", codes.EventNodeAdmitted, "name", rec.Name, "role", rec.Role,
		"node_id", nodeID, "token", shortHash(hash), "overlay_ip", overlayIP, "source", source)

	return &Response{
		NodeID:       nodeID,
		Name:         rec.Name,
		Role:         rec.Role,
		ClusterID:    facts.ClusterID,
		ClusterName:  facts.ClusterName,
		CACert:       facts.CACert,
		TLSCert:      tlsCert,
		NebulaCACert: facts.NebulaCACert,
		NebulaCert:   nebulaCert,
		OverlayIP:    overlayIP,
		GossipKeys:   facts.GossipKeys,
		Seeds:        facts.Seeds,
		SerfPeers:    facts.SerfPeers,
		Lighthouses:  facts.Lighthouses,
		RaftPeers:    facts.RaftPeers,
		ServerTime:   s.now(),
	}, nil
}

// certify has the signer certify the joining node req names, then records
// both certificates, which makes the node active. If any step fails the
// admission is undone (AbortAdmission: record deleted, IP freed, token
// unused again) and the step's error returned. If even the undo cannot be
// written the node stays recorded as joining: the same join retried with
// the same token and keys resumes it (see resume).
func (s *Server) certify(ctx context.Context, req SignRequest) (tlsCert, nebulaCert []byte, err error) {
	tlsCert, err = s.signer.SignTLS(ctx, req)
	if err != nil {
		return nil, nil, s.abort(ctx, req, fmt.Errorf("sign TLS leaf for %s: %w", req.Name, err))
	}
	nreq := req
	nreq.CSR = nil
	nebulaCert, err = s.signer.SignNebula(ctx, nreq)
	if err != nil {
		return nil, nil, s.abort(ctx, req, fmt.Errorf("sign Nebula certificate for %s: %w", req.Name, err))
	}
	if err := s.ledger.RecordCerts(ctx, req.NodeID, tlsCert, nebulaCert); err != nil {
		return nil, nil, s.abort(ctx, req, fmt.Errorf("record certificates of %s: %w", req.Name, err))
	}
	return tlsCert, nebulaCert, nil
}

// abort undoes the admission of req's node after cause and returns cause,
// saying so when the undo failed too. It writes even if ctx is done (the
// joiner hung up), within abortTimeout.
func (s *Server) abort(ctx context.Context, req SignRequest, cause error) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	if err := s.ledger.AbortAdmission(actx, req.NodeID); err != nil {
		s.log.Warn("admission could not be undone; the node stays recorded as joining until the same join is retried or it is removed",
			"code", codes.OrInternal(err), "name", req.Name, "node_id", req.NodeID, "cause", cause, "err", err)
		return fmt.Errorf("%w (the admission could not be undone: retry the join with the same token to finish it)", cause)
	}
	s.log.Info("admission undone: nothing was certified, the token is unused again",
		"code", codes.EventAdmissionAborted, "name", req.Name, "node_id", req.NodeID, "cause_code", codes.OrInternal(cause))
	return cause
}

// ServeHTTP serves the enroll endpoint: POST Path with a JSON Request of
// at most 64 KiB. Success is 200 with a JSON Response; a failure is an
// ErrorBody with its code's status. Errors without a code are answered as
// codes.Internal, without detail, and logged.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		s.writeError(w, http.StatusNotFound, codes.Wrap(codes.EnrollRejected, fmt.Errorf("no endpoint %s", r.URL.Path)))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.writeError(w, http.StatusMethodNotAllowed, codes.Wrap(codes.EnrollRejected, fmt.Errorf("method %s, want POST", r.Method)))
		return
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		s.fail(w, "", fmt.Errorf("remote address %q: %w", r.RemoteAddr, err))
		return
	}
	source := ap.Addr().Unmap()
	// A throttled source is answered before its body is read, and only its
	// first refusal is logged.
	if err := s.throttled(source); err != nil {
		s.writeError(w, codes.TokenThrottled.Status(), err)
		return
	}
	req, err := decodeRequest(http.MaxBytesReader(w, r.Body, maxRequestBody))
	var resp *Response
	if err == nil {
		resp, err = s.enroll(r.Context(), req, source)
	}
	if err != nil {
		s.count(source, err)
		s.fail(w, req.Name, err) // req is zero if it did not decode
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if err := json.NewEncoder(w).Encode(resp); err != nil {
		s.log.Warn("write enroll response", "name", resp.Name, "err", err)
	}
}

// decodeRequest reads one JSON Request; anything malformed is
// codes.EnrollRejected. The error never quotes the body.
func decodeRequest(r io.Reader) (Request, error) {
	var req Request
	dec := json.NewDecoder(r)
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return Request{}, codes.Wrap(codes.EnrollRejected, fmt.Errorf("enroll request larger than %d bytes", tooBig.Limit))
		}
		if errors.Is(err, errBadSecret) {
			return Request{}, codes.Wrap(codes.EnrollRejected, fmt.Errorf("enroll request: %w", errBadSecret))
		}
		return Request{}, codes.Wrap(codes.EnrollRejected, errors.New("enroll request is not valid JSON"))
	}
	if dec.More() {
		return Request{}, codes.Wrap(codes.EnrollRejected, errors.New("enroll request has trailing data"))
	}
	return req, nil
}

// fail logs err and answers it with its code's status.
func (s *Server) fail(w http.ResponseWriter, name string, err error) {
	code := codes.OrInternal(err)
	if codes.Of(err) == "" {
		s.log.Error("enroll failed", "code", code, "name", name, "err", err)
	} else {
		s.log.Warn("enroll refused", "code", code, "name", name, "err", err)
	}
	s.writeError(w, code.Status(), err)
}

// writeError writes err as an ErrorBody. Detail carries the message of a
// coded error only: an uncoded one may describe internals.
func (s *Server) writeError(w http.ResponseWriter, status int, err error) {
	code := codes.OrInternal(err)
	body := ErrorBody{Code: code.String(), Cause: code.Cause(), Remedy: code.Remedy()}
	if codes.Of(err) != "" {
		body.Detail = err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// sameAddr reports whether the token's bound address is source.
func sameAddr(bound string, source netip.Addr) bool {
	a, err := netip.ParseAddr(bound)
	return err == nil && a.Unmap() == source
}

// shortHash is a token hash prefix: enough to find it in `meshctl tokens`.
func shortHash(h TokenHash) string { return h.String()[:12] }

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
