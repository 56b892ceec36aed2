package enroll_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// fakeVerifier answers every JWT with id, or err.
type fakeVerifier struct {
	id    enroll.Identity
	err   error
	calls int
}

func (v *fakeVerifier) Verify(_ context.Context, raw string) (enroll.Identity, error) {
	v.calls++
	return v.id, v.err
}

// TestEnrollByIdentity: a join by JWT is admitted with no token, the
// identity the verifier gave, and the node id its replay key gives the
// joiner's TLS key; what needs no verifier is refused before it is asked
// (a secret or name alongside, an oversized JWT, no trusted issuer), a
// verifier's refusal keeps its code, and nothing reaches Admit on any
// refusal.
func TestEnrollByIdentity(t *testing.T) {
	local := netip.MustParseAddr("127.0.0.1")
	sum := sha256.Sum256([]byte("iss\x00run-1"))
	id := enroll.Identity{Issuer: "https://ci.test", Subject: "repo:a", JTI: hex.EncodeToString(sum[:]),
		Expires: pkitest.Now.Add(time.Hour), Role: pki.RoleWorker, Prefix: "ci-"}
	c := newCluster(t)
	var asked []enroll.Admission
	c.ledger.admit = func(a enroll.Admission) error { asked = append(asked, a); return nil }
	v := &fakeVerifier{id: id}
	c.deps.Identities = v
	req, keys := c.request(t, "")
	req.Secret, req.JWT = enroll.Secret{}, "h.p.s"
	resp, err := c.server().Enroll(t.Context(), req, local)
	if err != nil {
		t.Fatalf("enroll by identity: %v", err)
	}
	key, _ := id.ReplayKey()
	tlsKey, _ := pki.CSRPublicKey(keys.CSR)
	if len(asked) != 1 || asked[0].Identity == nil || asked[0].Identity.JTI != id.JTI || asked[0].Token != (enroll.TokenHash{}) ||
		asked[0].NodeID != enroll.KeyNodeID(key, tlsKey) || resp.NodeID != asked[0].NodeID {
		t.Fatalf("admission %+v, answer %s", asked, resp.NodeID)
	}

	for _, tc := range []struct {
		name  string
		edit  func(*enroll.Request, *enroll.Deps, *fakeVerifier)
		want  codes.Code
		asked bool // the verifier is asked
	}{
		{"secret alongside", func(r *enroll.Request, _ *enroll.Deps, _ *fakeVerifier) { r.Secret = c.secret }, codes.EnrollRejected, false},
		{"name alongside", func(r *enroll.Request, _ *enroll.Deps, _ *fakeVerifier) { r.Name = "w9" }, codes.EnrollRejected, false},
		{"oversized", func(r *enroll.Request, _ *enroll.Deps, _ *fakeVerifier) {
			r.JWT = enroll.RawJWT(strings.Repeat("a", enroll.MaxJWT+1))
		}, codes.JWTInvalid, false},
		{"no issuers", func(_ *enroll.Request, d *enroll.Deps, _ *fakeVerifier) { d.Identities = nil }, codes.JWTIssuerUnknown, false},
		{"verifier refuses", func(_ *enroll.Request, _ *enroll.Deps, f *fakeVerifier) {
			f.err = codes.Wrap(codes.JWTAudience, errors.New("aud"))
		}, codes.JWTAudience, true},
		{"ephemeral control", func(r *enroll.Request, _ *enroll.Deps, f *fakeVerifier) {
			f.id.Role, r.Ephemeral = pki.RoleControl, true
		}, codes.BadRole, true},
		{"identity without a name or prefix", func(_ *enroll.Request, _ *enroll.Deps, f *fakeVerifier) { f.id.Prefix = "" }, codes.JWTNoRule, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked = nil
			f := &fakeVerifier{id: id}
			d := c.deps
			d.Identities = f
			r, _ := c.request(t, "")
			r.Secret, r.JWT = enroll.Secret{}, "h.p.s"
			tc.edit(&r, &d, f)
			_, err := enroll.NewServer(enroll.DefaultServerConfig(), c.ledger, c.signer, d).Enroll(t.Context(), r, local)
			if codes.Of(err) != tc.want || len(asked) != 0 || (f.calls > 0) != tc.asked {
				t.Fatalf("%v (code %s), %d admissions, verifier asked %d times; want %s, none, asked %v",
					err, codes.Of(err), len(asked), f.calls, tc.want, tc.asked)
			}
		})
	}
	if !slices.Contains(c.ledger.Calls(), "Admit") {
		t.Fatal("no admission at all")
	}
}

// TestRawJWTRedacted: a JWT prints and logs redacted, and travels whole.
func TestRawJWTRedacted(t *testing.T) {
	j := enroll.RawJWT("header.payload.signature")
	for _, s := range []string{j.String(), j.GoString(), j.LogValue().String()} {
		if strings.Contains(s, "signature") {
			t.Fatalf("%q shows the JWT", s)
		}
	}
	b, err := j.MarshalJSON()
	if err != nil || string(b) != `"header.payload.signature"` {
		t.Fatalf("MarshalJSON = %s, %v", b, err)
	}
}
