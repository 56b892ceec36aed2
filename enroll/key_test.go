package enroll_test

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// keyCluster is newCluster whose secret is a reusable key's (uses, the
// prefix "web-", --name-from-host).
func keyCluster(t *testing.T, uses int) *cluster {
	c := newCluster(t)
	c.rec.Name = ""
	c.rec.Expires = pkitest.Now.Add(24 * time.Hour)
	c.rec.Key = enroll.KeyLimits{Uses: uses, NamePrefix: "web-", NameFromHost: true}
	return c
}

// TestEnrollWithKey: a key's joiner names no node: the server admits it
// with no name and its hostname, under the node id the key gives its TLS
// key, and answers with the name the ledger gave. The server refuses an
// exhausted key (KeyExhausted) before anything is written, and sends the
// hostname only for a key minted with --name-from-host.
func TestEnrollWithKey(t *testing.T) {
	local := netip.MustParseAddr("127.0.0.1")
	c := keyCluster(t, 2)
	var asked []enroll.Admission
	c.ledger.admit = func(a enroll.Admission) error { asked = append(asked, a); return nil }
	req, keys := c.request(t, "")
	req.HostName = "builder-3"
	resp, err := c.server().Enroll(t.Context(), req, local)
	if err != nil {
		t.Fatalf("enroll with a key: %v", err)
	}
	adm := asked[0]
	tlsKey, err := pki.CSRPublicKey(keys.CSR)
	if err != nil {
		t.Fatal(err)
	}
	if adm.Name != "" || adm.HostName != "builder-3" || adm.NodeID != enroll.KeyNodeID(c.rec.Hash, tlsKey) {
		t.Fatalf("admission name %q host %q id %s; want no name, the hostname, the key's node id", adm.Name, adm.HostName, adm.NodeID)
	}
	if resp.Name != "key-1" || resp.NodeID != adm.NodeID {
		t.Fatalf("answer names %q (%s), want the ledger's key-1", resp.Name, resp.NodeID)
	}

	c.rec.Key.NameFromHost = false
	second, _ := c.request(t, "")
	second.HostName = "builder-4"
	if _, err := c.server().Enroll(t.Context(), second, local); err != nil {
		t.Fatalf("second enroll: %v", err)
	}
	if adm := asked[1]; adm.HostName != "" {
		t.Fatalf("a key without --name-from-host sent hostname %q", adm.HostName)
	}

	c.rec.Key.Used = 2
	c.ledger.calls = nil
	third, _ := c.request(t, "")
	if _, err := c.server().Enroll(t.Context(), third, local); codes.Of(err) != codes.KeyExhausted {
		t.Fatalf("enroll past the key's uses: %v, want %s", err, codes.KeyExhausted)
	}
	if slices.Contains(c.ledger.Calls(), "Admit") {
		t.Fatalf("an exhausted key reached Admit: %v", c.ledger.Calls())
	}
	// A one-time token still needs the name.
	tok := newCluster(t)
	noName, _ := tok.request(t, "")
	if _, err := tok.server().Enroll(t.Context(), noName, local); codes.Of(err) != codes.BadNodeName {
		t.Fatalf("a token's join without a name: %v, want %s", err, codes.BadNodeName)
	}
}

// TestEnrollWithKeyResumes: the same machine asking again with the same
// key and keys (its answer lost) gets its recorded admission back and
// nothing new is admitted or signed; another machine is admitted anew.
func TestEnrollWithKeyResumes(t *testing.T) {
	local := netip.MustParseAddr("127.0.0.1")
	c := keyCluster(t, 5)
	req, _ := c.request(t, "")
	first, err := c.server().Enroll(t.Context(), req, local)
	if err != nil {
		t.Fatal(err)
	}
	adm := c.ledger.Admitted()[0]
	tlsCert, nebulaCert, _ := c.ledger.certs(adm.NodeID)
	l := &resumingLedger{fakeLedger: c.ledger}
	l.admitted = func(id string) (enroll.Admitted, bool, error) {
		if id != adm.NodeID {
			return enroll.Admitted{}, false, nil
		}
		return enroll.Admitted{NodeID: adm.NodeID, Name: first.Name, Role: adm.Role, TLSPublicKey: adm.TLSPublicKey,
			TLSCert: tlsCert, NebulaCert: nebulaCert, NebulaPub: adm.NebulaPub, OverlayIP: adm.OverlayIP}, true, nil
	}
	srv := enroll.NewServer(enroll.DefaultServerConfig(), l, c.signer, c.deps)
	again, err := srv.Enroll(t.Context(), req, local)
	if err != nil {
		t.Fatalf("the same machine again: %v", err)
	}
	if again.NodeID != first.NodeID || again.Name != first.Name || len(c.ledger.Admitted()) != 1 {
		t.Fatalf("resumed %s/%s with %d admissions; want %s/%s and one", again.NodeID, again.Name, len(c.ledger.Admitted()), first.NodeID, first.Name)
	}
	other, _ := c.request(t, "")
	if _, err := srv.Enroll(t.Context(), other, local); err != nil || len(c.ledger.Admitted()) != 2 {
		t.Fatalf("another machine: %v, %d admissions", err, len(c.ledger.Admitted()))
	}
}
