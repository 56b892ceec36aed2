package enroll

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/crash"
	"github.com/meshd/meshd/trust"
)

// maxRequestBody bounds an enroll request body.
const maxRequestBody = 64 << 10

// abortTimeout bounds the write that undoes an admission whose signing
// failed; it runs even when the joiner has hung up.
const abortTimeout = 10 * time.Second

// ServerConfig configures the enroll server.
type ServerConfig struct {
	// MaxSkew is how far the clock a joiner claims may differ from this
	// node's before its request is refused with codes.ClockSkew (past
	// WarnSkew it is logged with codes.ClockSkewWarning). Zero disables
	// the check.
	MaxSkew time.Duration

	// The failed-token throttle: a source (an IPv4 address or an IPv6
	// /64) that has made FailLimit failed token attempts within FailWindow
	// of its first is refused with codes.TokenThrottled, before anything
	// else is done, until the window has passed. At most MaxSources
	// sources are tracked. NewServer puts the default in place of a zero.
	FailLimit  int
	FailWindow time.Duration
	MaxSources int

	// STUNPort is the UDP port this node answers STUN on (ports.stun),
	// told to joiners with its clock (TimeResponse) so that a missing
	// STUN answer reads as UDP blocked only against a node that serves
	// it. Zero: not told.
	STUNPort int

	// ApprovalPoll bounds one long poll of a join that waits for an
	// operator's approval (approval.go); zero means DefaultApprovalPoll.
	ApprovalPoll time.Duration
}

// DefaultServerConfig returns the defaults: MaxSkew DefaultMaxSkew (5
// minutes); 10 failed token attempts per source per minute; 4096 sources
// tracked; a 20 s long poll for a join that waits for approval.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{MaxSkew: DefaultMaxSkew, FailLimit: DefaultFailLimit, FailWindow: DefaultFailWindow, MaxSources: DefaultMaxSources,
		ApprovalPoll: DefaultApprovalPoll}
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
	if c.STUNPort < 0 || c.STUNPort > 65535 {
		return bad("enroll STUN port %d: want 0 (not told) to 65535", c.STUNPort)
	}
	return nil
}

// Deps are the enroll server's collaborators.
type Deps struct {
	Log       *slog.Logger     // nil discards
	Now       func() time.Time // nil means time.Now
	NewNodeID func() string    // nil means 16 random bytes, hex
	// Observe, if set, is told the outcome of every join request served
	// at Path (observe.go): "ok", "pending" or the refusal's code, and
	// how long it took. The agent counts them for its metrics.
	Observe func(outcome string, elapsed time.Duration)
	// Unfit, if set, is why this control node cannot serve a join now (a
	// failing disk, a clock off from the other control nodes'), nil when
	// it can. A join arriving while it is not nil is answered
	// codes.SeedUnfit before its request is read: the joiner moves on to
	// the token's next seed.
	Unfit func() error
	// Identities, if set, verifies the JWT of a join by identity
	// (identity.go); nil refuses every such join with
	// codes.JWTIssuerUnknown.
	Identities IdentityVerifier
	// Nebula, if set, serves stock Nebula members' bundle requests
	// (NebulaPath, nebula.go); nil refuses them.
	Nebula NebulaLedger
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
	observe  func(outcome string, elapsed time.Duration)
	unfit    func() error
	ids      IdentityVerifier
	nebula   NebulaLedger
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
	if cfg.ApprovalPoll <= 0 {
		cfg.ApprovalPoll = DefaultApprovalPoll
	}
	return &Server{
		cfg: cfg, throttle: newThrottle(cfg.FailLimit, cfg.FailWindow, cfg.MaxSources),
		ledger: l, signer: s, log: d.Log.With("component", "enroll"), now: d.Now, nodeID: d.NewNodeID,
		observe: d.Observe, unfit: d.Unfit, ids: d.Identities, nebula: d.Nebula,
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
	resp, err := s.enroll(ctx, req, source, "")
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

// enroll is Enroll without the throttle. code is the approval code of the
// TLS session the request came over ("" without one): a token minted with
// --approve admits only once an operator approved that session.
func (s *Server) enroll(ctx context.Context, req Request, source netip.Addr, code string) (*Response, error) {
	if req.Protocol != ProtocolVersion {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("enroll protocol %d, this node speaks %d", req.Protocol, ProtocolVersion))
	}
	if req.JWT != "" {
		return s.enrollIdentity(ctx, req, source)
	}
	ahead := s.lookAhead(ctx, req.Name) // the former-node read, alongside the token checks' reads
	defer ahead.wait()
	rec, err := s.admissible(ctx, claim{Secret: req.Secret, Name: req.Name, Clock: req.Clock, Expires: req.Expires}, source)
	if err != nil && rec.Consumed() {
		// The join that used the token may have been this one, its answer
		// lost: resume it.
		if resp, rerr := s.resume(ctx, req, rec); resp != nil || rerr != nil {
			return resp, rerr
		}
	}
	if err != nil {
		return nil, err
	}
	if rec.Role == trust.RoleNebula {
		return nil, nebulaOnly(rec)
	}
	if rec.Approve {
		if err := s.approve(ctx, req, rec, source, code); err != nil {
			return nil, err
		}
	}
	crash.At(crash.EnrollAfterLookup)
	hash := req.Secret.Hash()

	if req.Underlay != "" {
		if _, err := netip.ParseAddr(req.Underlay); err != nil {
			return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("underlay address %q: %w", req.Underlay, err))
		}
	} else if rec.Role == trust.RoleControl {
		return nil, codes.Wrap(codes.EnrollRejected, errors.New("a control node must advertise its underlay address"))
	}
	if req.Ephemeral && rec.Role != trust.RoleWorker {
		return nil, codes.Wrap(codes.BadRole, fmt.Errorf("only a worker can be ephemeral; the token admits a %s node", rec.Role))
	}
	tlsKey, err := trust.CSRPublicKey(req.CSR)
	if err != nil {
		return nil, err
	}

	// Fetch the facts before anything is written: a failure here costs the
	// joiner nothing, while after Admit it would cost an abort.
	facts, err := s.ledger.JoinFacts(ctx, rec.Role)
	if err != nil {
		return nil, fmt.Errorf("join facts: %w", err)
	}
	var nodeID, hostName string
	if rec.IsKey() {
		// The same machine asking again with the same key is the same
		// node: a join whose answer was lost resumes (resumeKey).
		nodeID = KeyNodeID(hash, tlsKey)
		if resp, err := s.resumeKey(ctx, req, rec, nodeID); resp != nil || err != nil {
			return resp, err
		}
		if rec.Key.NameFromHost {
			hostName = req.HostName
		}
	} else if nodeID, err = s.idFor(ctx, ahead, rec.Name, !rec.Approve); err != nil {
		return nil, fmt.Errorf("look up a former node named %s: %w", rec.Name, err)
	}
	placed, err := s.ledger.Admit(ctx, Admission{
		Token: hash, NodeID: nodeID, Name: rec.Name, Role: rec.Role,
		Underlay: req.Underlay, SourceAddr: source.String(), Relay: req.Relay,
		TLSPublicKey: tlsKey, NebulaPub: req.NebulaPublic,
		Version: req.Version, Ports: req.Ports, At: s.now(),
		HostName: hostName, Ephemeral: req.Ephemeral,
	})
	if err != nil {
		return nil, fmt.Errorf("admit %s: %w", admittedName(rec), err)
	}
	crash.At(crash.EnrollAfterAdmit)
	name, overlayIP := placed.Name, placed.OverlayIP
	tlsCert, nebulaCert, err := s.certify(ctx, SignRequest{NodeID: nodeID, Name: name, Role: rec.Role,
		OverlayIP: overlayIP, CSR: req.CSR})
	if err != nil {
		return nil, err
	}
	s.log.Info("node admitted", "code", codes.EventNodeAdmitted, "name", name, "role", rec.Role,
		"node_id", nodeID, "token", shortHash(hash), "key", rec.IsKey(), "overlay_ip", overlayIP, "source", source)

	return s.answer(facts, Admitted{NodeID: nodeID, Name: name, Role: rec.Role, TLSCert: tlsCert, NebulaCert: nebulaCert,
		OverlayIP: overlayIP}), nil
}

// Check answers whether the token whose secret req carries would admit
// req.Name from source now, by the same checks as Enroll and the same
// throttle. It consumes and records nothing.
func (s *Server) Check(ctx context.Context, req CheckRequest, source netip.Addr) (*CheckResponse, error) {
	source = source.Unmap()
	if err := s.throttled(source); err != nil {
		return nil, err
	}
	resp, err := s.check(ctx, req, source)
	s.count(source, err)
	return resp, err
}

func (s *Server) check(ctx context.Context, req CheckRequest, source netip.Addr) (*CheckResponse, error) {
	if req.Protocol != ProtocolVersion {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("enroll protocol %d, this node speaks %d", req.Protocol, ProtocolVersion))
	}
	rec, err := s.admissible(ctx, claim{Secret: req.Secret, Name: req.Name, Clock: req.Clock, Expires: req.Expires}, source)
	if err != nil {
		return nil, err
	}
	if rec.Role == trust.RoleNebula {
		return nil, nebulaOnly(rec)
	}
	return &CheckResponse{Name: rec.Name, Role: rec.Role, Expires: rec.Expires, ServerTime: s.now(), Approve: rec.Approve}, nil
}

// certify has the signer certify the joining node req names, then records
// both certificates, which makes the node active. If any step fails the
// admission is undone (AbortAdmission: record deleted, IP freed, token
// unused again) and the step's error returned. If even the undo cannot be
// written the node stays recorded as joining: the same join retried with
// the same token and keys resumes it (see resume). The two signing
// requests go out together: on a control node away from the CA holder
// each is a round trip to it (100 ms across TestSites' two sites).
func (s *Server) certify(ctx context.Context, req SignRequest) (tlsCert, nebulaCert []byte, err error) {
	nreq := req
	nreq.CSR = nil
	var nebErr error
	var wg sync.WaitGroup
	wg.Go(func() { nebulaCert, nebErr = s.signer.SignNebula(ctx, nreq) })
	tlsCert, err = s.signer.SignTLS(ctx, req)
	wg.Wait()
	if err != nil {
		return nil, nil, s.abort(ctx, req, fmt.Errorf("sign TLS leaf for %s: %w", req.Name, err))
	}
	if nebErr != nil {
		return nil, nil, s.abort(ctx, req, fmt.Errorf("sign Nebula certificate for %s: %w", req.Name, nebErr))
	}
	crash.At(crash.EnrollAfterSign)
	if err := s.ledger.RecordCerts(ctx, req.NodeID, tlsCert, nebulaCert); err != nil {
		return nil, nil, s.abort(ctx, req, fmt.Errorf("record certificates of %s: %w", req.Name, err))
	}
	crash.At(crash.EnrollAfterRecord)
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

// admittedName is what a log line or error calls the node a record
// admits: its name, or for a key the names it gives.
func admittedName(rec TokenRecord) string {
	if rec.IsKey() {
		return rec.Key.NamePrefix + "N (key " + shortHash(rec.Hash) + ")"
	}
	return rec.Name
}
