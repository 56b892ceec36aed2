package agenttest_test

import (
	"bytes"
	"encoding/pem"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/nebulabundle"
	"github.com/meshd/meshd/pki"
)

// bundle spends token for a stock Nebula member with the public key pub,
// as `meshctl nebula-bundle` does (enroll.NebulaBundle, no meshd behind it).
func bundle(t *testing.T, token string, pub []byte, renew bool) (*enroll.NebulaResponse, error) {
	t.Helper()
	tok, err := enroll.ParseToken(token)
	if err != nil {
		t.Fatalf("parse token: %v", err)
	}
	return enroll.NebulaBundle(t.Context(), tok, enroll.NebulaRequest{PublicKey: pub, Renew: renew},
		enroll.ClientDeps{Step: func(s string) { t.Log("bundle: " + s) }})
}

func nebulaKey(t *testing.T) []byte {
	t.Helper()
	pub, _, err := nebulabundle.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// TestStockNebulaMember (issue 35) against a real control node: a token
// minted with --nebula-only (a 2 h certificate lifetime, a group) spent
// with the device's own public key gives a Nebula certificate for that
// key, name, group and the record's overlay addresses; the member is an
// active node of role nebula whose certificate expiry `nodes` shows.
// Refused with their codes and nothing spent: a meshd join with that
// token, the bundle with a worker's token, a P-256 key, a key another
// node holds. A renewal token renews the certificate for the same key
// (later expiry); another key is refused. Removed, the name admitted
// again reuses the record.
func TestStockNebulaMember(t *testing.T) {
	clock := &agenttest.Clock{}
	c1 := agenttest.NewNode(t, "c1", clock)
	c1.Init(t, "alpha")
	admit := func(req apitype.AdmitRequest) string { return c1.Admit(t, req) }
	unused := func(name string) {
		t.Helper()
		toks, err := c1.Client.Tokens(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range toks {
			if tk.Name == name && tk.ConsumedBy != "" {
				t.Errorf("token for %s was spent by %s", name, tk.ConsumedBy)
			}
		}
	}

	// A meshd join with a stock member's token: refused, nothing spent.
	phoneTok := admit(apitype.AdmitRequest{Name: "phone", NebulaOnly: true, CertLifetime: 2 * time.Hour, Groups: []string{"mobile"}})
	m := agenttest.NewNode(t, "m1", clock)
	if _, err := m.Join(t, phoneTok); codes.Of(err) != codes.NebulaOnlyToken {
		t.Fatalf("meshd join with a --nebula-only token: %v, want %s", err, codes.NebulaOnlyToken)
	}
	// The bundle with a worker's token: refused, nothing spent.
	wTok := admit(apitype.AdmitRequest{Name: "w9"})
	if _, err := bundle(t, wTok, nebulaKey(t), false); codes.Of(err) != codes.NotNebulaToken {
		t.Fatalf("bundle with a worker token: %v, want %s", err, codes.NotNebulaToken)
	}
	unused("w9")
	// A P-256 key: refused before the ledger is asked.
	p256 := pem.EncodeToMemory(&pem.Block{Type: "NEBULA P256 PUBLIC KEY", Bytes: append([]byte{4}, bytes.Repeat([]byte{1}, 64)...)})
	if _, err := bundle(t, phoneTok, p256, false); codes.Of(err) != codes.NebulaKeyCurve {
		t.Fatalf("bundle with a P-256 key: %v, want %s", err, codes.NebulaKeyCurve)
	}
	unused("phone")

	pub := nebulaKey(t)
	resp, err := bundle(t, phoneTok, pub, false)
	if err != nil {
		t.Fatalf("bundle: %v", err)
	}
	if resp.Name != "phone" || !slices.Equal(resp.Groups, []string{"mobile"}) || len(resp.Lighthouses) != 1 || !resp.OverlayIP.IsValid() {
		t.Fatalf("bundle answered %+v", resp)
	}
	if err := pki.NebulaCertFor(resp.NebulaCert, pub, "phone", resp.OverlayIP, resp.OverlayIP6); err != nil {
		t.Fatalf("the certificate does not certify the device's key, name and addresses: %v", err)
	}
	_, exp, err := pki.NebulaCertInfo(resp.NebulaCert)
	if err != nil || exp.Sub(time.Now()) > 2*time.Hour+time.Minute || exp.Sub(time.Now()) < 2*time.Hour-10*time.Minute {
		t.Fatalf("certificate expires %v (%v), want in 2 h (--cert-lifetime)", exp, err)
	}
	var row apitype.Node
	for _, n := range c1.Nodes(t) {
		if n.Name == "phone" {
			row = n
		}
	}
	if row.Role != string(pki.RoleNebula) || row.State != "active" || !row.CertExpires.Equal(exp) || row.Gossip != "none" {
		t.Fatalf("nodes row %+v, want an active nebula member, gossip none, whose cert expires %v", row, exp)
	}
	// The same key for another device: refused, nothing spent.
	tabletTok := admit(apitype.AdmitRequest{Name: "tablet", NebulaOnly: true})
	if _, err := bundle(t, tabletTok, pub, false); codes.Of(err) != codes.NebulaKeyInUse {
		t.Fatalf("bundle with phone's key for tablet: %v, want %s", err, codes.NebulaKeyInUse)
	}
	unused("tablet")

	// Renewal: a first token is not a renewal token; another key is
	// refused; the member's own key gets a later certificate.
	renewTok := admit(apitype.AdmitRequest{Name: "phone", NebulaOnly: true, Renew: true, CertLifetime: 3 * time.Hour})
	if _, err := bundle(t, renewTok, nebulaKey(t), true); codes.Of(err) != codes.NebulaRenewRefused {
		t.Fatalf("renewal with another key: %v, want %s", err, codes.NebulaRenewRefused)
	}
	renewed, err := bundle(t, renewTok, pub, true)
	if err != nil {
		t.Fatalf("renewal: %v", err)
	}
	_, exp2, err := pki.NebulaCertInfo(renewed.NebulaCert)
	if err != nil || !exp2.After(exp) || renewed.OverlayIP != resp.OverlayIP {
		t.Fatalf("renewed certificate expires %v (%v), overlay %v; want after %v at %v", exp2, err, renewed.OverlayIP, exp, resp.OverlayIP)
	}
	if _, err := bundle(t, renewTok, pub, true); codes.Of(err) != codes.TokenConsumed {
		t.Fatalf("the renewal token again: %v, want %s", err, codes.TokenConsumed)
	}

	// Removed (state.TestNebulaMemberRemovalRevokesEveryCert: both
	// certificates revoked), the name admitted again reuses the record
	// (same node id and overlay IP) with a new key.
	if err := c1.Client.Remove(t.Context(), "phone"); err != nil {
		t.Fatalf("remove phone: %v", err)
	}
	again, err := bundle(t, admit(apitype.AdmitRequest{Name: "phone", NebulaOnly: true}), nebulaKey(t), false)
	if err != nil || again.OverlayIP != resp.OverlayIP || again.NodeID != resp.NodeID {
		t.Fatalf("phone admitted again: %+v, %v; want node %s at %v", again, err, resp.NodeID, resp.OverlayIP)
	}
}
