package enroll_test

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// x25519PEM is a well-formed Nebula X25519 public key (32 bytes of b).
func x25519PEM(b byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "NEBULA X25519 PUBLIC KEY", Bytes: bytes.Repeat([]byte{b}, 32)})
}

// TestNebulaDoor (issue 35): POST /v1/enroll/nebula is a public door
// behind the token, like /v1/enroll: a stranger's unknown secret is
// TokenUnknown and counts against the same throttle (then TokenThrottled
// before the body is read); a node without a NebulaLedger refuses; a
// P-256 or malformed key is NebulaKeyCurve; a meshd member's token is
// NotNebulaToken; and a meshd join with a stock member's token is
// NebulaOnlyToken. The ledger is asked to admit nothing in any of them.
func TestNebulaDoor(t *testing.T) {
	post := func(srv *enroll.Server, from string, req enroll.NebulaRequest) (int, enroll.ErrorBody) {
		t.Helper()
		body, _ := json.Marshal(req)
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, enroll.NebulaPath, bytes.NewReader(body))
		r.RemoteAddr = from + ":40000"
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		var eb enroll.ErrorBody
		_ = json.Unmarshal(w.Body.Bytes(), &eb)
		return w.Code, eb
	}
	c := newCluster(t)
	stranger, _ := enroll.NewSecret()
	req := enroll.NebulaRequest{Protocol: enroll.ProtocolVersion, Secret: c.secret, Name: "w1", PublicKey: x25519PEM(1), Clock: pkitest.Now}

	// No NebulaLedger: refused.
	if st, eb := post(c.server(), "192.0.2.1", req); st == http.StatusOK || eb.Code != string(codes.EnrollRejected) {
		t.Fatalf("a node without a NebulaLedger: %d %+v, want %s", st, eb, codes.EnrollRejected)
	}
	c.deps.Nebula = nebulaLedgerStub{}
	srv := c.server()
	for _, tc := range []struct {
		name string
		mod  func(*enroll.NebulaRequest)
		want codes.Code
	}{
		{"p256-key", func(r *enroll.NebulaRequest) {
			r.PublicKey = pem.EncodeToMemory(&pem.Block{Type: "NEBULA P256 PUBLIC KEY", Bytes: bytes.Repeat([]byte{4}, 65)})
		}, codes.NebulaKeyCurve},
		{"short-key", func(r *enroll.NebulaRequest) {
			r.PublicKey = pem.EncodeToMemory(&pem.Block{Type: "NEBULA X25519 PUBLIC KEY", Bytes: []byte{1}})
		}, codes.NebulaKeyCurve},
		{"worker-token", func(*enroll.NebulaRequest) {}, codes.NotNebulaToken},
	} {
		r := req
		tc.mod(&r)
		if st, eb := post(srv, "192.0.2.2", r); st == http.StatusOK || eb.Code != string(tc.want) || eb.Remedy == "" {
			t.Errorf("%s: %d %+v, want %s with a remedy", tc.name, st, eb, tc.want)
		}
	}
	// A stock member's token at the meshd join door: refused.
	c.rec.Role = pki.RoleNebula
	join, _ := c.request(t, "w1")
	if _, err := srv.Enroll(t.Context(), join, pkitest.IP(9).Addr()); codes.Of(err) != codes.NebulaOnlyToken {
		t.Errorf("meshd join with a stock member's token: %v, want %s", err, codes.NebulaOnlyToken)
	}
	if calls := c.ledger.Calls(); slices.Contains(calls, "Admit") {
		t.Fatalf("the ledger was asked to admit: %v", calls)
	}
	// A stranger's guesses: TokenUnknown, then the throttle.
	r := req
	r.Secret = stranger
	var last string
	for range enroll.DefaultFailLimit + 1 {
		_, eb := post(srv, "198.51.100.9", r)
		last = eb.Code
	}
	if last != string(codes.TokenThrottled) {
		t.Fatalf("after %d unknown secrets: %s, want %s", enroll.DefaultFailLimit+1, last, codes.TokenThrottled)
	}
}

// nebulaLedgerStub answers a NebulaLedger's questions with nothing known;
// the door's refusals come before any of them matter.
type nebulaLedgerStub struct{ enroll.NebulaLedger }
