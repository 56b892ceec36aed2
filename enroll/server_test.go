package enroll_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
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
)

// fakeLedger is a Ledger made of func fields; it records every call and
// keeps the admissions that stand, as raft would: Admit records one as
// joining (with the IP the FSM would pick), RecordCerts makes it active,
// AbortAdmission deletes it.
type fakeLedger struct {
	token       func(h enroll.TokenHash) (enroll.TokenRecord, bool, error)
	nameTaken   func(name string) (bool, error)
	pickIP      func() netip.Prefix // the IP the "FSM" picks
	admit       func(a enroll.Admission) error
	recordCerts func(nodeID string, tlsCert, nebulaCert []byte) error
	abort       func(nodeID string) error
	joinFacts   func(r pki.Role) (enroll.JoinFacts, error)

	mu       sync.Mutex
	calls    []string
	admitted []enroll.Admission // standing admissions, OverlayIP as picked
	active   map[string][2][]byte
}

func (l *fakeLedger) record(call string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, call)
}

// Calls returns the names of the methods called so far.
func (l *fakeLedger) Calls() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// Admitted returns the admissions that stand (recorded, not undone).
func (l *fakeLedger) Admitted() []enroll.Admission {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.admitted)
}

// admission returns the standing admission of nodeID.
func (l *fakeLedger) admission(nodeID string) (enroll.Admission, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.admitted {
		if a.NodeID == nodeID {
			return a, true
		}
	}
	return enroll.Admission{}, false
}

// certs returns the certificates recorded for nodeID; ok is false while
// it is joining (or unknown).
func (l *fakeLedger) certs(nodeID string) (tlsCert, nebulaCert []byte, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.active[nodeID]
	return c[0], c[1], ok
}

func (l *fakeLedger) Token(_ context.Context, h enroll.TokenHash) (enroll.TokenRecord, bool, error) {
	l.record("Token")
	return l.token(h)
}

func (l *fakeLedger) NameTaken(_ context.Context, name string) (bool, error) {
	l.record("NameTaken")
	return l.nameTaken(name)
}

func (l *fakeLedger) Admit(_ context.Context, a enroll.Admission) (enroll.Placement, error) {
	l.record("Admit")
	if err := l.admit(a); err != nil {
		return enroll.Placement{}, err
	}
	if !a.OverlayIP.IsValid() {
		a.OverlayIP = l.pickIP()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if a.Name == "" { // a key's joiner: the "FSM" gives the next name
		a.Name = fmt.Sprintf("key-%d", len(l.admitted)+1)
	}
	l.admitted = append(l.admitted, a)
	return enroll.Placement{Name: a.Name, OverlayIP: a.OverlayIP}, nil
}

func (l *fakeLedger) RecordCerts(_ context.Context, nodeID string, tlsCert, nebulaCert []byte) error {
	l.record("RecordCerts")
	if l.recordCerts != nil {
		if err := l.recordCerts(nodeID, tlsCert, nebulaCert); err != nil {
			return err
		}
	}
	if _, ok := l.admission(nodeID); !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("no admission of %s", nodeID))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, done := l.active[nodeID]; done {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("%s has its certificates", nodeID))
	}
	if l.active == nil {
		l.active = map[string][2][]byte{}
	}
	l.active[nodeID] = [2][]byte{tlsCert, nebulaCert}
	return nil
}

func (l *fakeLedger) AbortAdmission(_ context.Context, nodeID string) error {
	l.record("AbortAdmission")
	if l.abort != nil {
		if err := l.abort(nodeID); err != nil {
			return err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, done := l.active[nodeID]; done {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("%s is active", nodeID))
	}
	i := slices.IndexFunc(l.admitted, func(a enroll.Admission) bool { return a.NodeID == nodeID })
	if i < 0 {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("no admission of %s", nodeID))
	}
	l.admitted = slices.Delete(l.admitted, i, i+1)
	return nil
}

func (l *fakeLedger) JoinFacts(_ context.Context, r pki.Role) (enroll.JoinFacts, error) {
	l.record("JoinFacts")
	return l.joinFacts(r)
}

// caSigner is the real pki.CA behind the Signer interface, signing what
// the fake ledger recorded for the node a request names, as the CA holder
// does; the hooks replace it.
type caSigner struct {
	ca         *pki.CA
	ledger     *fakeLedger
	signTLS    func(req enroll.SignRequest) ([]byte, error) // nil: the CA signs
	signNebula func(req enroll.SignRequest) ([]byte, error)
}

// leaf is what the CA holder would sign for req: the recorded node's name,
// role and (for a control node) underlay IP, the CSR's key.
func (s *caSigner) leaf(req enroll.SignRequest) (pki.LeafRequest, error) {
	a, ok := s.ledger.admission(req.NodeID)
	if !ok {
		return pki.LeafRequest{}, codes.Wrap(codes.SignRefused, fmt.Errorf("no admission of %s", req.NodeID))
	}
	var ips []netip.Addr
	if a.Role == pki.RoleControl {
		ips = []netip.Addr{netip.MustParseAddr(a.Underlay)}
	}
	return pki.LeafRequest{CSR: req.CSR, Name: a.Name, NodeID: a.NodeID, Role: a.Role, IPs: ips}, nil
}

func (s *caSigner) SignTLS(_ context.Context, req enroll.SignRequest) ([]byte, error) {
	if s.signTLS != nil {
		return s.signTLS(req)
	}
	lr, err := s.leaf(req)
	if err != nil {
		return nil, err
	}
	return s.ca.SignTLS(lr, pkitest.Now)
}

func (s *caSigner) SignNebula(_ context.Context, req enroll.SignRequest) ([]byte, error) {
	if s.signNebula != nil {
		return s.signNebula(req)
	}
	a, ok := s.ledger.admission(req.NodeID)
	if !ok {
		return nil, codes.Wrap(codes.SignRefused, fmt.Errorf("no admission of %s", req.NodeID))
	}
	return s.ca.SignNebula(pki.NebulaRequest{PublicKey: a.NebulaPub, Name: a.Name, IP: a.OverlayIP,
		Groups: []string{string(a.Role)}}, pkitest.Now)
}

// cluster is one test cluster: a CA, a ledger holding one token and an
// enroll server.
type cluster struct {
	ca     *pki.CA
	secret enroll.Secret
	rec    enroll.TokenRecord
	ledger *fakeLedger
	signer *caSigner
	deps   enroll.Deps
	nextIP byte
	base   *enroll.Request // badRequest's template
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	secret, err := enroll.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{
		ca:     pkitest.NewCA(t, "prod"),
		secret: secret,
		rec: enroll.TokenRecord{
			Hash: secret.Hash(), Name: "w1", Role: pki.RoleWorker,
			Created: pkitest.Now, Expires: pkitest.Now.Add(15 * time.Minute), MintedBy: "origin",
		},
		deps:   enroll.Deps{Now: pkitest.Clock(), NewNodeID: func() string { return "node-w1" }},
		nextIP: 10,
	}
	c.ledger = &fakeLedger{
		token: func(h enroll.TokenHash) (enroll.TokenRecord, bool, error) {
			if h != c.rec.Hash {
				return enroll.TokenRecord{}, false, nil
			}
			return c.rec, true, nil
		},
		nameTaken: func(string) (bool, error) { return false, nil },
		pickIP: func() netip.Prefix {
			c.nextIP++
			return pkitest.IP(c.nextIP)
		},
		admit: func(enroll.Admission) error { return nil },
		joinFacts: func(pki.Role) (enroll.JoinFacts, error) {
			return enroll.JoinFacts{
				ClusterID: "0123456789abcdef0123456789abcdef", ClusterName: "prod",
				CACert: c.ca.CertPEM(), NebulaCACert: c.ca.NebulaCertPEM(), Overlay: pkitest.Overlay,
				GossipKeys: [][]byte{bytes.Repeat([]byte{7}, 32)}, Seeds: []string{"127.0.0.1:7300"},
			}, nil
		},
	}
	c.signer = &caSigner{ca: c.ca, ledger: c.ledger}
	return c
}

func (c *cluster) server() *enroll.Server {
	return enroll.NewServer(enroll.DefaultServerConfig(), c.ledger, c.signer, c.deps)
}

// request builds a joiner's request with fresh keys.
func (c *cluster) request(t *testing.T, name string) (enroll.Request, *pki.Keys) {
	t.Helper()
	keys, err := pki.NewKeys(name)
	if err != nil {
		t.Fatal(err)
	}
	return enroll.Request{
		Protocol: enroll.ProtocolVersion, Secret: c.secret, Name: name, CSR: keys.CSR,
		NebulaPublic: keys.NebulaPublicPEM, Underlay: "127.0.0.1", Version: "test", Clock: pkitest.Now,
	}, keys
}

// TestEnrollCheckOrder drives Server.Enroll directly: one fault per case,
// and cases with several faults to pin which check comes first.
func TestEnrollCheckOrder(t *testing.T) {
	local := netip.MustParseAddr("127.0.0.1")
	tests := []struct {
		name   string
		edit   func(c *cluster, req *enroll.Request)
		source netip.Addr
		want   codes.Code
	}{
		{name: "ok/worker"},
		{name: "ok/bound-addr-mapped-source", edit: func(c *cluster, _ *enroll.Request) { c.rec.Addr = "127.0.0.1" }, source: netip.MustParseAddr("::ffff:127.0.0.1")},
		{name: "fail/protocol", edit: func(_ *cluster, r *enroll.Request) { r.Protocol = 2 }, want: codes.EnrollRejected},
		{name: "fail/bad-name", edit: func(_ *cluster, r *enroll.Request) { r.Name = "W_1" }, want: codes.BadNodeName},
		{name: "fail/unknown", edit: func(c *cluster, r *enroll.Request) { r.Secret, _ = enroll.NewSecret() }, want: codes.TokenUnknown},
		{name: "fail/consumed", edit: func(c *cluster, _ *enroll.Request) { c.rec.ConsumedAt = pkitest.Now }, want: codes.TokenConsumed},
		{name: "fail/expired-at-instant", edit: func(c *cluster, _ *enroll.Request) { c.rec.Expires = pkitest.Now }, want: codes.TokenExpired},
		{name: "fail/wrong-addr", edit: func(c *cluster, _ *enroll.Request) { c.rec.Addr = "192.0.2.1" }, want: codes.TokenWrongAddr},
		{name: "fail/name-differ", edit: func(c *cluster, _ *enroll.Request) { c.rec.Name = "w2" }, want: codes.TokenNameDiffer},
		{name: "fail/name-taken", edit: func(c *cluster, _ *enroll.Request) {
			c.ledger.nameTaken = func(string) (bool, error) { return true, nil }
		}, want: codes.NameTaken},
		{name: "fail/control-without-underlay", edit: func(c *cluster, r *enroll.Request) { c.rec.Role = pki.RoleControl; r.Underlay = "" }, want: codes.EnrollRejected},
		{name: "fail/bad-underlay", edit: func(_ *cluster, r *enroll.Request) { r.Underlay = "nowhere" }, want: codes.EnrollRejected},
		{name: "fail/bad-csr", edit: func(_ *cluster, r *enroll.Request) { r.CSR = []byte("x") }, want: codes.EnrollRejected},
		{name: "fail/ledger-no-leader", edit: func(c *cluster, _ *enroll.Request) {
			c.ledger.token = func(enroll.TokenHash) (enroll.TokenRecord, bool, error) {
				return enroll.TokenRecord{}, false, codes.Wrap(codes.NoLeader, errors.New("no leader"))
			}
		}, want: codes.NoLeader},
		{name: "order/consumed-before-expired", edit: func(c *cluster, _ *enroll.Request) {
			c.rec.ConsumedAt, c.rec.Expires = pkitest.Now, pkitest.Now
		}, want: codes.TokenConsumed},
		{name: "order/expired-before-wrong-addr", edit: func(c *cluster, _ *enroll.Request) {
			c.rec.Expires, c.rec.Addr = pkitest.Now, "192.0.2.1"
		}, want: codes.TokenExpired},
		{name: "order/wrong-addr-before-name-differ", edit: func(c *cluster, _ *enroll.Request) {
			c.rec.Addr, c.rec.Name = "192.0.2.1", "w2"
		}, want: codes.TokenWrongAddr},
		{name: "order/protocol-before-name", edit: func(_ *cluster, r *enroll.Request) { r.Protocol, r.Name = 0, "" }, want: codes.EnrollRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			req, _ := c.request(t, "w1")
			if tt.edit != nil {
				tt.edit(c, &req)
			}
			source := tt.source
			if !source.IsValid() {
				source = local
			}
			resp, err := c.server().Enroll(t.Context(), req, source)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if resp.NodeID != "node-w1" || resp.Role != pki.RoleWorker || !resp.ServerTime.Equal(pkitest.Now) {
					t.Errorf("response %+v", resp)
				}
				if n := len(c.ledger.Admitted()); n != 1 {
					t.Errorf("%d admissions, want 1", n)
				}
				return
			}
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("Enroll = %v (code %q), want %s", err, got, tt.want)
			}
			if slices.Contains(c.ledger.Calls(), "Admit") {
				t.Error("a refused enrollment reached Admit")
			}
		})
	}
}

func TestEnrollAdmission(t *testing.T) {
	c := newCluster(t)
	c.rec.Role = pki.RoleControl
	req, _ := c.request(t, "w1")
	resp, err := c.server().Enroll(t.Context(), req, netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	adm := c.ledger.Admitted()
	if len(adm) != 1 {
		t.Fatalf("%d admissions, want 1", len(adm))
	}
	a := adm[0]
	key, err := pki.CSRPublicKey(req.CSR)
	if err != nil {
		t.Fatal(err)
	}
	if a.Token != c.secret.Hash() || a.NodeID != "node-w1" || a.Name != "w1" || a.Role != pki.RoleControl ||
		a.SourceAddr != "127.0.0.1" || a.Underlay != "127.0.0.1" || a.OverlayIP != resp.OverlayIP ||
		!bytes.Equal(a.TLSPublicKey, key) || !bytes.Equal(a.NebulaPub, req.NebulaPublic) || !a.At.Equal(pkitest.Now) {
		t.Errorf("admission %+v does not match response %+v", a, resp)
	}
	tlsCert, nebulaCert, ok := c.ledger.certs(a.NodeID)
	if !ok || !bytes.Equal(tlsCert, resp.TLSCert) || !bytes.Equal(nebulaCert, resp.NebulaCert) {
		t.Errorf("recorded certificates (%v) differ from the response's", ok)
	}
	leaf, err := (&pki.Identity{Cert: resp.TLSCert}).Leaf()
	if err != nil {
		t.Fatal(err)
	}
	if len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != "127.0.0.1" {
		t.Errorf("control leaf IP SANs = %v, want the underlay", leaf.IPAddresses)
	}
}

// TestEnrollAdmitsBeforeSigning: the admission is recorded (joining, the
// IP left to the FSM, the CSR's key) before anything is signed; each sign
// request (both go out together) names that admission; the certificates
// are recorded last.
func TestEnrollAdmitsBeforeSigning(t *testing.T) {
	c := newCluster(t)
	req, _ := c.request(t, "w1")
	var admittedIP netip.Prefix
	c.ledger.admit = func(a enroll.Admission) error {
		if a.OverlayIP.IsValid() {
			t.Errorf("the enroll server proposed overlay IP %v; the FSM picks it", a.OverlayIP)
		}
		return nil
	}
	var mu sync.Mutex // the two sign requests go out together
	var signs []string
	check := func(what string, r enroll.SignRequest) {
		mu.Lock()
		defer mu.Unlock()
		signs = append(signs, what)
		a, ok := c.ledger.admission(r.NodeID)
		if !ok {
			t.Errorf("%s signed for %q before its admission was recorded", what, r.NodeID)
			return
		}
		admittedIP = a.OverlayIP
		if _, _, active := c.ledger.certs(r.NodeID); active {
			t.Errorf("%s: the node is active before signing", what)
		}
		if r.Name != "w1" || r.Role != pki.RoleWorker || r.OverlayIP != a.OverlayIP {
			t.Errorf("%s request %+v does not name the admission %+v", what, r, a)
		}
		if (what == "tls") != (r.CSR != nil) {
			t.Errorf("%s request carries CSR %v", what, r.CSR != nil)
		}
	}
	c.signer.signTLS = func(r enroll.SignRequest) ([]byte, error) {
		check("tls", r)
		lr, err := c.signer.leaf(r)
		if err != nil {
			return nil, err
		}
		return c.ca.SignTLS(lr, pkitest.Now)
	}
	c.signer.signNebula = func(r enroll.SignRequest) ([]byte, error) {
		check("nebula", r)
		a, _ := c.ledger.admission(r.NodeID)
		return c.ca.SignNebula(pki.NebulaRequest{PublicKey: a.NebulaPub, Name: a.Name, IP: a.OverlayIP, Groups: []string{"worker"}}, pkitest.Now)
	}
	resp, err := c.server().Enroll(t.Context(), req, netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"Token", "NameTaken", "JoinFacts", "Admit", "RecordCerts"}; !slices.Equal(c.ledger.Calls(), want) {
		t.Errorf("ledger calls %v, want %v", c.ledger.Calls(), want)
	}
	slices.Sort(signs)
	if !slices.Equal(signs, []string{"nebula", "tls"}) {
		t.Errorf("signed %v, want tls and nebula, once each", signs)
	}
	if resp.OverlayIP != admittedIP || resp.OverlayIP != pkitest.IP(11) {
		t.Errorf("response IP %v, want the IP the ledger picked (%v)", resp.OverlayIP, admittedIP)
	}
}

// TestEnrollSignFailureAborts: when signing or recording the certificates
// fails, the admission is undone (the token is unused again: the same
// token then joins) and the joiner gets the failure's code. When the undo
// fails too, the record stays joining and the error says so.
func TestEnrollSignFailureAborts(t *testing.T) {
	down := func(enroll.SignRequest) ([]byte, error) {
		return nil, codes.Wrap(codes.CAHolderDown, errors.New("origin unreachable"))
	}
	refused := func(enroll.SignRequest) ([]byte, error) {
		return nil, codes.Wrap(codes.SignRefused, errors.New("no admission"))
	}
	tests := []struct {
		name       string
		edit       func(c *cluster)
		want       codes.Code
		abortFails bool
	}{
		{name: "tls-ca-holder-down", edit: func(c *cluster) { c.signer.signTLS = down }, want: codes.CAHolderDown},
		{name: "nebula-refused", edit: func(c *cluster) { c.signer.signNebula = refused }, want: codes.SignRefused},
		{name: "record-no-leader", edit: func(c *cluster) {
			c.ledger.recordCerts = func(string, []byte, []byte) error { return codes.Wrap(codes.NoLeader, errors.New("no leader")) }
		}, want: codes.NoLeader},
		{name: "abort-fails-too", edit: func(c *cluster) {
			c.signer.signTLS = down
			c.ledger.abort = func(string) error { return codes.Wrap(codes.NoLeader, errors.New("no leader")) }
		}, want: codes.CAHolderDown, abortFails: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			tt.edit(c)
			req, _ := c.request(t, "w1")
			resp, err := c.server().Enroll(t.Context(), req, netip.MustParseAddr("127.0.0.1"))
			if got := codes.Of(err); got != tt.want || resp != nil {
				t.Fatalf("Enroll = %v (code %q), want %s", err, got, tt.want)
			}
			if !slices.Contains(c.ledger.Calls(), "AbortAdmission") {
				t.Fatalf("no abort after the failure: calls %v", c.ledger.Calls())
			}
			if tt.abortFails {
				if adm := c.ledger.Admitted(); len(adm) != 1 || !strings.Contains(err.Error(), "could not be undone") {
					t.Fatalf("abort failed: %d admissions stand, error %q; want the joining one and a message saying so", len(adm), err)
				}
				if _, _, active := c.ledger.certs(c.ledger.Admitted()[0].NodeID); active {
					t.Fatal("the record became active")
				}
				return
			}
			if n := len(c.ledger.Admitted()); n != 0 {
				t.Fatalf("%d admissions stand after the abort", n)
			}
			// The token is unused again: the same join, retried once the
			// fault is gone, is admitted.
			c.signer.signTLS, c.signer.signNebula, c.ledger.recordCerts = nil, nil, nil
			if _, err := c.server().Enroll(t.Context(), req, netip.MustParseAddr("127.0.0.1")); err != nil {
				t.Fatalf("retry after the abort: %v", err)
			}
		})
	}
}

func TestServeHTTP(t *testing.T) {
	c := newCluster(t)
	srv := c.server()
	good, _ := c.request(t, "w1")
	goodBody, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		method     string
		path       string
		body       []byte
		wantStatus int
		wantCode   codes.Code
	}{
		{name: "fail/get", method: http.MethodGet, path: enroll.Path, wantStatus: http.StatusMethodNotAllowed, wantCode: codes.EnrollRejected},
		{name: "fail/other-path", method: http.MethodPost, path: "/v1/other", body: goodBody, wantStatus: http.StatusNotFound, wantCode: codes.EnrollRejected},
		{name: "fail/bad-json", method: http.MethodPost, path: enroll.Path, body: []byte("{"), wantStatus: 400, wantCode: codes.EnrollRejected},
		{name: "fail/trailing-data", method: http.MethodPost, path: enroll.Path, body: append(slices.Clone(goodBody), " {}"...), wantStatus: 400, wantCode: codes.EnrollRejected},
		{name: "fail/too-large", method: http.MethodPost, path: enroll.Path, body: []byte(`{"version":"` + strings.Repeat("a", 70<<10) + `"}`), wantStatus: 400, wantCode: codes.EnrollRejected},
		{name: "ok/enroll", method: http.MethodPost, path: enroll.Path, body: goodBody, wantStatus: 200},
		{name: "fail/consumed-second-time", method: http.MethodPost, path: enroll.Path, body: goodBody, wantStatus: 401, wantCode: codes.TokenConsumed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequestWithContext(t.Context(), tt.method, tt.path, bytes.NewReader(tt.body))
			r.RemoteAddr = "127.0.0.1:40000"
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, r)
			if w.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.wantStatus, w.Body)
			}
			if tt.wantCode == "" {
				var resp enroll.Response
				if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp.Name != "w1" {
					t.Fatalf("response %s: %v", w.Body, err)
				}
				// The ledger now knows the token as consumed.
				c.rec.ConsumedAt, c.rec.ConsumedBy = pkitest.Now, resp.NodeID
				return
			}
			var body enroll.ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("error body %s: %v", w.Body, err)
			}
			if body.Code != string(tt.wantCode) || body.Cause == "" || body.Remedy == "" {
				t.Errorf("error body %+v, want code %s with cause and remedy", body, tt.wantCode)
			}
		})
	}
}

func TestServeHTTPInternalErrorHidesDetail(t *testing.T) {
	c := newCluster(t)
	c.ledger.token = func(enroll.TokenHash) (enroll.TokenRecord, bool, error) {
		return enroll.TokenRecord{}, false, errors.New("bolt: database at /var/lib/meshd/raft.db is locked")
	}
	var logs bytes.Buffer
	c.deps.Log = slogTo(&logs)
	req, _ := c.request(t, "w1")
	body, _ := json.Marshal(req)
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, enroll.Path, bytes.NewReader(body))
	r.RemoteAddr = "127.0.0.1:40000"
	w := httptest.NewRecorder()
	c.server().ServeHTTP(w, r)
	var eb enroll.ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil {
		t.Fatal(err)
	}
	if w.Code != 500 || eb.Code != string(codes.Internal) || eb.Detail != "" {
		t.Errorf("status %d body %+v, want 500 %s without detail", w.Code, eb, codes.Internal)
	}
	if !strings.Contains(logs.String(), "raft.db is locked") {
		t.Errorf("the internal error was not logged: %s", logs.String())
	}
	secretJSON, _ := json.Marshal(c.secret)
	if strings.Contains(logs.String(), strings.Trim(string(secretJSON), `"`)) {
		t.Errorf("log shows the token secret: %s", logs.String())
	}
}

func FuzzServeHTTP(f *testing.F) {
	f.Add([]byte(`{"protocol":1,"name":"w1","secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`))
	f.Add([]byte(`{"protocol":1,"csr":"!!","clock":"x"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c := newCluster(t)
		r := httptest.NewRequest(http.MethodPost, enroll.Path, bytes.NewReader(body))
		r.RemoteAddr = "127.0.0.1:40000"
		w := httptest.NewRecorder()
		c.server().ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			return
		}
		var eb enroll.ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil {
			t.Fatalf("status %d with a body that is no ErrorBody: %q", w.Code, w.Body)
		}
		if _, ok := codes.Code(eb.Code).Info(); !ok {
			t.Fatalf("unknown code %q", eb.Code)
		}
	})
}

func TestServerConfigValidate(t *testing.T) {
	if err := enroll.DefaultServerConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	withSkew := func(d time.Duration) enroll.ServerConfig {
		c := enroll.DefaultServerConfig()
		c.MaxSkew = d
		return c
	}
	if err := withSkew(time.Nanosecond).Validate(); err != nil {
		t.Fatalf("1ns max skew: %v", err)
	}
	for _, skew := range []time.Duration{0, -time.Second} {
		if got := codes.Of(withSkew(skew).Validate()); got != codes.ConfigInvalid {
			t.Errorf("max skew %s: code %q, want %s", skew, got, codes.ConfigInvalid)
		}
	}
}

// TestEnrollNameTakenByThisToken: when the name is taken because a
// concurrent join with this very token just used it, the joiner is told
// the token was consumed, not that the name is taken.
func TestEnrollNameTakenByThisToken(t *testing.T) {
	tests := []struct {
		name  string
		again func(c *cluster) (enroll.TokenRecord, bool, error) // the second token lookup
		want  codes.Code
	}{
		{name: "fail/consumed-meanwhile", again: func(c *cluster) (enroll.TokenRecord, bool, error) {
			r := c.rec
			r.ConsumedAt, r.ConsumedBy = pkitest.Now, "node-other"
			return r, true, nil
		}, want: codes.TokenConsumed},
		{name: "fail/still-unused", again: func(c *cluster) (enroll.TokenRecord, bool, error) { return c.rec, true, nil }, want: codes.NameTaken},
		{name: "fail/gone-meanwhile", again: func(*cluster) (enroll.TokenRecord, bool, error) {
			return enroll.TokenRecord{}, false, nil
		}, want: codes.NameTaken},
		{name: "fail/second-lookup-fails", again: func(c *cluster) (enroll.TokenRecord, bool, error) {
			r := c.rec
			r.ConsumedAt = pkitest.Now
			return r, true, errors.New("raft: leadership lost")
		}, want: codes.NameTaken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			lookups := 0
			c.ledger.token = func(h enroll.TokenHash) (enroll.TokenRecord, bool, error) {
				lookups++
				if lookups == 1 {
					return c.rec, true, nil
				}
				return tt.again(c)
			}
			c.ledger.nameTaken = func(string) (bool, error) { return true, nil }
			req, _ := c.request(t, "w1")
			_, err := c.server().Enroll(t.Context(), req, netip.MustParseAddr("127.0.0.1"))
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("Enroll = %v (code %q), want %s", err, got, tt.want)
			}
			if want := []string{"Token", "NameTaken", "Token"}; !slices.Equal(c.ledger.Calls(), want) {
				t.Errorf("ledger calls %v, want %v", c.ledger.Calls(), want)
			}
		})
	}
}

// logRecords parses JSON log lines.
func logRecords(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range bytes.Lines(b) {
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// TestEnrollClockSkew: the server refuses, with codes.ClockSkew and
// before it asks the ledger, a request whose claimed clock is more than
// MaxSkew off either way (default 5 minutes); past 30 s it admits and logs
// codes.ClockSkewWarning. A request without a clock is not judged, and a
// zero MaxSkew disables the check.
func TestEnrollClockSkew(t *testing.T) {
	tests := []struct {
		name    string
		cfg     enroll.ServerConfig
		joiner  time.Duration // the joiner's clock minus the server's
		noClock bool
		warn    bool
		want    codes.Code
	}{
		{name: "ok/equal", cfg: enroll.DefaultServerConfig()},
		{name: "ok/ahead-30s", cfg: enroll.DefaultServerConfig(), joiner: 30 * time.Second},
		{name: "warn/ahead", cfg: enroll.DefaultServerConfig(), joiner: 31 * time.Second, warn: true},
		{name: "warn/behind-at-bound", cfg: enroll.DefaultServerConfig(), joiner: -5 * time.Minute, warn: true},
		{name: "fail/ahead", cfg: enroll.DefaultServerConfig(), joiner: 5*time.Minute + time.Second, want: codes.ClockSkew},
		{name: "fail/behind", cfg: enroll.DefaultServerConfig(), joiner: -5*time.Minute - time.Second, want: codes.ClockSkew},
		{name: "ok/no-clock", cfg: enroll.DefaultServerConfig(), noClock: true},
		{name: "ok/zero-max-skew-disables", cfg: enroll.ServerConfig{}, joiner: time.Hour},
		{name: "fail/custom-bound", cfg: enroll.ServerConfig{MaxSkew: time.Second}, joiner: -2 * time.Second, want: codes.ClockSkew},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			var logs bytes.Buffer
			c.deps.Log = slog.New(slog.NewJSONHandler(&logs, nil))
			req, _ := c.request(t, "w1")
			req.Clock = pkitest.Now.Add(tt.joiner)
			if tt.noClock {
				req.Clock = time.Time{}
			}
			_, err := enroll.NewServer(tt.cfg, c.ledger, c.signer, c.deps).Enroll(t.Context(), req, netip.MustParseAddr("127.0.0.1"))
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("Enroll = %v (code %q), want %q", err, got, tt.want)
			}
			if tt.want != "" {
				if calls := c.ledger.Calls(); len(calls) != 0 {
					t.Errorf("refused for skew after asking the ledger: %v", calls)
				}
				if !strings.Contains(err.Error(), req.Clock.UTC().Format(time.RFC3339)) || !strings.Contains(err.Error(), pkitest.Now.UTC().Format(time.RFC3339)) {
					t.Errorf("error %q does not show both clocks", err)
				}
				return
			}
			warned := false
			for _, r := range logRecords(t, logs.Bytes()) {
				if r["code"] == string(codes.ClockSkewWarning) {
					warned = true
					if r["level"] != "WARN" || r["name"] != "w1" {
						t.Errorf("skew record %v, want a WARN naming w1", r)
					}
				}
			}
			if warned != tt.warn {
				t.Errorf("joiner %s off: warned %v, want %v\n%s", tt.joiner, warned, tt.warn, &logs)
			}
		})
	}
}

// failingWriter is a ResponseWriter whose body writes fail, as when the
// joiner has hung up.
type failingWriter struct{ *httptest.ResponseRecorder }

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestServeHTTPLogLevels: a refusal with a code is a warning, an uncoded
// failure an error, each with its code; a clean admission logs no warning,
// and a response that cannot be written is a warning naming the node.
func TestServeHTTPLogLevels(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(c *cluster)
		broken bool
		want   map[string]string // level -> code ("" for a record without one)
	}{
		{name: "ok/admitted", want: map[string]string{"INFO": string(codes.EventNodeAdmitted)}},
		{name: "warn/refused", edit: func(c *cluster) { c.rec.Expires = pkitest.Now }, want: map[string]string{"WARN": string(codes.TokenExpired)}},
		{name: "error/internal", edit: func(c *cluster) {
			c.ledger.nameTaken = func(string) (bool, error) { return false, errors.New("disk on fire") }
		}, want: map[string]string{"ERROR": string(codes.Internal)}},
		{name: "warn/response-unwritable", broken: true, want: map[string]string{"INFO": string(codes.EventNodeAdmitted), "WARN": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			if tt.edit != nil {
				tt.edit(c)
			}
			var logs bytes.Buffer
			c.deps.Log = slog.New(slog.NewJSONHandler(&logs, nil))
			req, _ := c.request(t, "w1")
			body, _ := json.Marshal(req)
			r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, enroll.Path, bytes.NewReader(body))
			r.RemoteAddr = "127.0.0.1:40000"
			var w http.ResponseWriter = httptest.NewRecorder()
			if tt.broken {
				w = failingWriter{httptest.NewRecorder()}
			}
			c.server().ServeHTTP(w, r)
			got := map[string]string{}
			for _, rec := range logRecords(t, logs.Bytes()) {
				level, _ := rec["level"].(string)
				code, _ := rec["code"].(string)
				if _, dup := got[level]; dup {
					t.Errorf("two %s records:\n%s", level, &logs)
				}
				got[level] = code
				if level != "INFO" && rec["name"] != "w1" {
					t.Errorf("%s record does not name the node: %v", level, rec)
				}
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("log levels and codes %v, want %v\n%s", got, tt.want, &logs)
			}
		})
	}
}
