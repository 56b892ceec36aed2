package enroll_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// resumingLedger is a fakeLedger that can also look up what a token
// admitted (enroll.Resumer).
type resumingLedger struct {
	*fakeLedger
	admitted func(nodeID string) (enroll.Admitted, bool, error)
}

func (l *resumingLedger) Admitted(_ context.Context, nodeID string) (enroll.Admitted, bool, error) {
	l.record("Admitted")
	return l.admitted(nodeID)
}

// csrFor makes a fresh CSR signed by the private key in keyPEM.
func csrFor(t *testing.T, keyPEM []byte, name string) []byte {
	t.Helper()
	blk, _ := pem.Decode(keyPEM)
	if blk == nil {
		t.Fatal("no PEM key")
	}
	key, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}}, key.(crypto.Signer))
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

// TestEnrollResume: a joiner whose response was lost asks again with the
// same secret, Nebula key and TLS key, and gets the recorded certificates
// back. Anything that differs, or any lookup that fails, is the plain
// codes.TokenConsumed; nothing is signed or admitted either way.
func TestEnrollResume(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, c *cluster, l *resumingLedger, a *enroll.Admitted, req *enroll.Request, keys *pki.Keys)
		want codes.Code
		// calls: the ledger calls a resumed enrollment makes, when not
		// Token, Admitted, JoinFacts.
		calls []string
	}{
		{name: "ok/same-request"},
		{name: "ok/new-csr-same-key", edit: func(t *testing.T, _ *cluster, _ *resumingLedger, _ *enroll.Admitted, req *enroll.Request, keys *pki.Keys) {
			req.CSR = csrFor(t, keys.TLSKeyPEM, "w1")
		}},
		{name: "ok/facts-for-recorded-role", edit: func(_ *testing.T, c *cluster, _ *resumingLedger, a *enroll.Admitted, _ *enroll.Request, _ *pki.Keys) {
			c.rec.Role, a.Role = pki.RoleControl, pki.RoleControl
		}},
		{name: "ok/expires-in-a-second", edit: func(_ *testing.T, c *cluster, _ *resumingLedger, _ *enroll.Admitted, _ *enroll.Request, _ *pki.Keys) {
			c.rec.Expires = pkitest.Now.Add(time.Second)
		}},
		{name: "ok/used-between-two-reads", edit: func(_ *testing.T, c *cluster, _ *resumingLedger, _ *enroll.Admitted, _ *enroll.Request, _ *pki.Keys) {
			// The serving node applies the admission between its token
			// read (unused) and its name read (taken): found by
			// e2e.TestPartitionLedgerSplit, where such a join answered
			// TokenConsumed to its own re-run.
			used, calls := c.rec, 0
			c.ledger.token = func(enroll.TokenHash) (enroll.TokenRecord, bool, error) {
				calls++
				if calls == 1 {
					unused := used
					unused.ConsumedAt, unused.ConsumedBy = time.Time{}, ""
					return unused, true, nil
				}
				return used, true, nil
			}
			c.ledger.nameTaken = func(string) (bool, error) { return true, nil }
		}, calls: []string{"Token", "NameTaken", "Token", "Admitted", "JoinFacts"}},
		{name: "fail/token-expired-at-instant", edit: func(_ *testing.T, c *cluster, _ *resumingLedger, _ *enroll.Admitted, _ *enroll.Request, _ *pki.Keys) {
			c.rec.Expires = pkitest.Now
		}, want: codes.TokenConsumed},
		{name: "fail/consumed-by-nobody", edit: func(_ *testing.T, c *cluster, _ *resumingLedger, _ *enroll.Admitted, _ *enroll.Request, _ *pki.Keys) {
			c.rec.ConsumedBy = ""
		}, want: codes.TokenConsumed},
		{name: "fail/node-not-found", edit: func(_ *testing.T, _ *cluster, l *resumingLedger, _ *enroll.Admitted, _ *enroll.Request, _ *pki.Keys) {
			l.admitted = func(string) (enroll.Admitted, bool, error) { return enroll.Admitted{}, false, nil }
		}, want: codes.TokenConsumed},
		{name: "fail/lookup-error", edit: func(_ *testing.T, _ *cluster, l *resumingLedger, a *enroll.Admitted, _ *enroll.Request, _ *pki.Keys) {
			rec := *a
			l.admitted = func(string) (enroll.Admitted, bool, error) {
				return rec, true, codes.Wrap(codes.NoLeader, errors.New("raft: not leader"))
			}
		}, want: codes.NoLeader}, // not TokenConsumed: the joiner keeps its keys and resumes later
		{name: "fail/request-names-another-node", edit: func(_ *testing.T, _ *cluster, _ *resumingLedger, _ *enroll.Admitted, req *enroll.Request, _ *pki.Keys) {
			req.Name = "w2"
		}, want: codes.TokenConsumed},
		{name: "fail/record-names-another-node", edit: func(_ *testing.T, _ *cluster, _ *resumingLedger, a *enroll.Admitted, req *enroll.Request, _ *pki.Keys) {
			a.Name, req.Name = "w2", "w2" // the request agrees with the node, not with the token
		}, want: codes.TokenConsumed},
		{name: "fail/other-nebula-key", edit: func(t *testing.T, _ *cluster, _ *resumingLedger, _ *enroll.Admitted, req *enroll.Request, _ *pki.Keys) {
			other, err := pki.NewKeys("w1")
			if err != nil {
				t.Fatal(err)
			}
			req.NebulaPublic = other.NebulaPublicPEM
		}, want: codes.TokenConsumed},
		{name: "fail/csr-of-another-key", edit: func(t *testing.T, _ *cluster, _ *resumingLedger, _ *enroll.Admitted, req *enroll.Request, _ *pki.Keys) {
			other, err := pki.NewKeys("w1")
			if err != nil {
				t.Fatal(err)
			}
			req.CSR = other.CSR
		}, want: codes.TokenConsumed},
		{name: "fail/csr-bad-signature", edit: func(_ *testing.T, _ *cluster, _ *resumingLedger, _ *enroll.Admitted, req *enroll.Request, _ *pki.Keys) {
			req.CSR = slices.Clone(req.CSR)
			req.CSR[len(req.CSR)-1] ^= 0x01 // still parses; the signature no longer verifies
		}, want: codes.TokenConsumed},
		{name: "fail/csr-garbage", edit: func(_ *testing.T, _ *cluster, _ *resumingLedger, _ *enroll.Admitted, req *enroll.Request, _ *pki.Keys) {
			req.CSR = []byte("not a CSR")
		}, want: codes.TokenConsumed},
		{name: "fail/recorded-leaf-not-pem", edit: func(_ *testing.T, _ *cluster, _ *resumingLedger, a *enroll.Admitted, _ *enroll.Request, _ *pki.Keys) {
			a.TLSCert = []byte("not PEM")
		}, want: codes.TokenConsumed},
		{name: "fail/recorded-leaf-is-a-key", edit: func(_ *testing.T, _ *cluster, _ *resumingLedger, a *enroll.Admitted, _ *enroll.Request, keys *pki.Keys) {
			a.TLSCert = keys.TLSKeyPEM
		}, want: codes.TokenConsumed},
		{name: "fail/recorded-leaf-unparsable", edit: func(_ *testing.T, _ *cluster, _ *resumingLedger, a *enroll.Admitted, _ *enroll.Request, _ *pki.Keys) {
			a.TLSCert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})
		}, want: codes.TokenConsumed},
		{name: "fail/join-facts-error", edit: func(_ *testing.T, c *cluster, _ *resumingLedger, _ *enroll.Admitted, _ *enroll.Request, _ *pki.Keys) {
			c.ledger.joinFacts = func(pki.Role) (enroll.JoinFacts, error) {
				return enroll.JoinFacts{}, codes.Wrap(codes.NoLeader, errors.New("no leader"))
			}
		}, want: codes.NoLeader}, // the facts could not be read: the joiner keeps its keys and runs the join again
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			req, keys := c.request(t, "w1")
			// The first enrollment: admitted, but suppose its response was lost.
			first, err := c.server().Enroll(t.Context(), req, netip.MustParseAddr("127.0.0.1"))
			if err != nil {
				t.Fatal(err)
			}
			adm := c.ledger.Admitted()[0]
			tlsCert, nebulaCert, ok := c.ledger.certs(adm.NodeID)
			if !ok {
				t.Fatal("the first enrollment recorded no certificates")
			}
			c.rec.ConsumedAt, c.rec.ConsumedBy = pkitest.Now, first.NodeID
			a := enroll.Admitted{
				NodeID: adm.NodeID, Name: adm.Name, Role: adm.Role, TLSPublicKey: adm.TLSPublicKey, TLSCert: tlsCert,
				NebulaCert: nebulaCert, NebulaPub: adm.NebulaPub, OverlayIP: adm.OverlayIP,
			}
			l := &resumingLedger{fakeLedger: c.ledger}
			l.admitted = func(id string) (enroll.Admitted, bool, error) {
				if id != a.NodeID {
					return enroll.Admitted{}, false, nil
				}
				return a, true, nil
			}
			if tt.edit != nil {
				tt.edit(t, c, l, &a, &req, keys)
			}
			var facts []pki.Role
			joinFacts := c.ledger.joinFacts
			c.ledger.joinFacts = func(r pki.Role) (enroll.JoinFacts, error) {
				facts = append(facts, r)
				return joinFacts(r)
			}
			c.ledger.calls = nil
			var signed int
			c.signer.signTLS = func(enroll.SignRequest) ([]byte, error) { signed++; return nil, errors.New("signer called") }
			c.signer.signNebula = func(enroll.SignRequest) ([]byte, error) { signed++; return nil, errors.New("signer called") }

			resp, err := enroll.NewServer(enroll.DefaultServerConfig(), l, c.signer, c.deps).
				Enroll(t.Context(), req, netip.MustParseAddr("127.0.0.1"))
			if signed != 0 || slices.Contains(l.Calls(), "Admit") || len(c.ledger.Admitted()) != 1 {
				t.Errorf("a repeated enrollment signed %d certificates, ledger calls %v", signed, l.Calls())
			}
			if tt.want != "" {
				if got := codes.Of(err); got != tt.want || resp != nil {
					t.Fatalf("Enroll = %v (code %q), response %v; want %s", err, got, resp != nil, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Enroll: %v (ledger calls %v)", err, l.Calls())
			}
			if resp.NodeID != a.NodeID || resp.Name != a.Name || resp.Role != a.Role || resp.OverlayIP != a.OverlayIP ||
				!bytes.Equal(resp.TLSCert, a.TLSCert) || !bytes.Equal(resp.NebulaCert, a.NebulaCert) ||
				resp.ClusterName != "prod" || !bytes.Equal(resp.CACert, c.ca.CertPEM()) || !resp.ServerTime.Equal(pkitest.Now) {
				t.Errorf("resumed response %s/%s/%s ip %s, want the recorded %s/%s/%s ip %s",
					resp.NodeID, resp.Name, resp.Role, resp.OverlayIP, a.NodeID, a.Name, a.Role, a.OverlayIP)
			}
			if !slices.Equal(facts, []pki.Role{a.Role}) {
				t.Errorf("join facts asked for %v, want the recorded role %s", facts, a.Role)
			}
			want := tt.calls
			if want == nil {
				want = []string{"Token", "Admitted", "JoinFacts"}
			}
			if !slices.Equal(l.Calls(), want) {
				t.Errorf("ledger calls %v, want %v", l.Calls(), want)
			}
		})
	}
}

// TestEnrollResumeJoining: an admission whose signing failed and whose
// undo could not be written stays joining. The same join retried (same
// secret, same Nebula key, a CSR proving the recorded TLS key) finishes
// it: signed for the recorded node, certificates recorded, never a second
// Admit. A retry with other keys is the plain codes.TokenConsumed and
// signs nothing.
func TestEnrollResumeJoining(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, req *enroll.Request, keys *pki.Keys)
		want codes.Code
	}{
		{name: "ok/same-keys"},
		{name: "ok/new-csr-same-key", edit: func(t *testing.T, req *enroll.Request, keys *pki.Keys) {
			req.CSR = csrFor(t, keys.TLSKeyPEM, "w1")
		}},
		{name: "fail/csr-of-another-key", edit: func(t *testing.T, req *enroll.Request, _ *pki.Keys) {
			other, err := pki.NewKeys("w1")
			if err != nil {
				t.Fatal(err)
			}
			req.CSR = other.CSR
		}, want: codes.TokenConsumed},
		{name: "fail/other-nebula-key", edit: func(t *testing.T, req *enroll.Request, _ *pki.Keys) {
			other, err := pki.NewKeys("w1")
			if err != nil {
				t.Fatal(err)
			}
			req.NebulaPublic = other.NebulaPublicPEM
		}, want: codes.TokenConsumed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			req, keys := c.request(t, "w1")
			// The first attempt: admitted, the CA holder down, the undo lost.
			c.signer.signTLS = func(enroll.SignRequest) ([]byte, error) {
				return nil, codes.Wrap(codes.CAHolderDown, errors.New("origin unreachable"))
			}
			c.ledger.abort = func(string) error { return codes.Wrap(codes.NoLeader, errors.New("no leader")) }
			if _, err := c.server().Enroll(t.Context(), req, netip.MustParseAddr("127.0.0.1")); codes.Of(err) != codes.CAHolderDown {
				t.Fatalf("first attempt: %v, want %s", err, codes.CAHolderDown)
			}
			adm := c.ledger.Admitted()
			if len(adm) != 1 {
				t.Fatalf("%d admissions stand, want the joining one", len(adm))
			}
			joining := adm[0]
			c.rec.ConsumedAt, c.rec.ConsumedBy = pkitest.Now, joining.NodeID
			c.signer.signTLS, c.ledger.abort = nil, nil
			l := &resumingLedger{fakeLedger: c.ledger}
			l.admitted = func(id string) (enroll.Admitted, bool, error) {
				a, ok := c.ledger.admission(id)
				if !ok {
					return enroll.Admitted{}, false, nil
				}
				tlsCert, nebulaCert, active := c.ledger.certs(id)
				return enroll.Admitted{NodeID: a.NodeID, Name: a.Name, Role: a.Role, Joining: !active,
					TLSPublicKey: a.TLSPublicKey, TLSCert: tlsCert, NebulaCert: nebulaCert,
					NebulaPub: a.NebulaPub, OverlayIP: a.OverlayIP}, true, nil
			}
			if tt.edit != nil {
				tt.edit(t, &req, keys)
			}
			var signed int
			c.signer.signNebula = func(r enroll.SignRequest) ([]byte, error) {
				signed++
				return c.ca.SignNebula(pki.NebulaRequest{PublicKey: joining.NebulaPub, Name: joining.Name,
					IP: joining.OverlayIP, Groups: []string{"worker"}}, pkitest.Now)
			}
			c.ledger.calls = nil
			resp, err := enroll.NewServer(enroll.DefaultServerConfig(), l, c.signer, c.deps).
				Enroll(t.Context(), req, netip.MustParseAddr("127.0.0.1"))
			if slices.Contains(l.Calls(), "Admit") || len(c.ledger.Admitted()) != 1 {
				t.Fatalf("a resumed join admitted again: calls %v", l.Calls())
			}
			if tt.want != "" {
				if got := codes.Of(err); got != tt.want || resp != nil || signed != 0 {
					t.Fatalf("Enroll = %v (code %q), signed %d; want %s and nothing signed", err, got, signed, tt.want)
				}
				if _, _, active := c.ledger.certs(joining.NodeID); active {
					t.Fatal("a refused resume made the node active")
				}
				return
			}
			if err != nil {
				t.Fatalf("resume: %v (calls %v)", err, l.Calls())
			}
			if want := []string{"Token", "Admitted", "JoinFacts", "RecordCerts"}; !slices.Equal(l.Calls(), want) {
				t.Errorf("ledger calls %v, want %v", l.Calls(), want)
			}
			tlsCert, nebulaCert, active := c.ledger.certs(joining.NodeID)
			if !active || !bytes.Equal(tlsCert, resp.TLSCert) || !bytes.Equal(nebulaCert, resp.NebulaCert) {
				t.Fatal("the resumed response's certificates are not the recorded ones")
			}
			if resp.NodeID != joining.NodeID || resp.OverlayIP != joining.OverlayIP {
				t.Errorf("resumed as %s at %v, want the joining record %s at %v", resp.NodeID, resp.OverlayIP, joining.NodeID, joining.OverlayIP)
			}
			id := &pki.Identity{CACert: resp.CACert, Cert: resp.TLSCert, Key: keys.TLSKeyPEM}
			if _, err := id.TLSCertificate(); err != nil {
				t.Errorf("the resumed leaf does not certify the joiner's key: %v", err)
			}
		})
	}
}
