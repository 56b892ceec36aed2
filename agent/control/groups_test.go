package control

import (
	"slices"
	"testing"
	"time"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestAdmitGroups: `admit NAME --group G` puts the groups on the token's
// record; the admission copies them into the node's record; the CA holder
// signs the Nebula certificate with the role first, then the groups, and a
// renewal keeps them. A bad or reserved group is refused with
// codes.BadGroup and mints nothing.
func TestAdmitGroups(t *testing.T) {
	_, origin := newCluster(t)
	for _, bad := range [][]string{{"control"}, {"Bad"}, {"db", "db"}} {
		req := apitype.AdmitRequest{Name: "w-bad", Role: "worker", Groups: bad}
		if _, err := origin.p.Admit(within(t, 5*time.Second), req, "test"); codes.Of(err) != codes.BadGroup {
			t.Errorf("admit --group %q: %v, want %s", bad, err, codes.BadGroup)
		}
	}
	if len(origin.p.Raft().FSM().Tokens()) != 0 {
		t.Fatalf("a refused admit minted a token: %+v", origin.p.Raft().FSM().Tokens())
	}

	resp, err := origin.p.Admit(within(t, 5*time.Second), apitype.AdmitRequest{Name: "w1", Role: "worker", Groups: []string{"db", "eu-west"}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.Groups, []string{"db", "eu-west"}) {
		t.Errorf("response groups %v", resp.Groups)
	}
	tok, err := enroll.ParseToken(resp.Token)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pki.NewKeys("w1")
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.CSRPublicKey(keys.CSR)
	if err != nil {
		t.Fatal(err)
	}
	ip, err := origin.p.Ledger().Admit(within(t, 10*time.Second), enroll.Admission{Token: tok.Secret.Hash(), NodeID: "id-w1",
		Name: "w1", Role: pki.RoleWorker, Underlay: "192.0.2.44", SourceAddr: "127.0.0.1", TLSPublicKey: key,
		NebulaPub: keys.NebulaPublicPEM, Version: "test", At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	n, ok := origin.p.Raft().FSM().Node("id-w1")
	if !ok || !slices.Equal(n.Groups, []string{"db", "eu-west"}) {
		t.Fatalf("node record groups %v (found %t)", n.Groups, ok)
	}
	want := []string{"worker", "db", "eu-west"}
	nebPEM, err := origin.p.signAdmittedNebula(within(t, 5*time.Second), enroll.SignRequest{NodeID: "id-w1", OverlayIP: ip.OverlayIP})
	if err != nil {
		t.Fatal(err)
	}
	if got := nebulaGroups(t, nebPEM); !slices.Equal(got, want) {
		t.Errorf("admitted Nebula cert groups %v, want %v", got, want)
	}
	n.NebulaPublicKey = keys.NebulaPublicPEM
	if err := origin.p.renewNebulaFor(within(t, 5*time.Second), n, ip.OverlayIP.Bits(), time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	n, _ = origin.p.Raft().FSM().Node("id-w1")
	if got := nebulaGroups(t, n.NebulaCert); !slices.Equal(got, want) {
		t.Errorf("renewed Nebula cert groups %v, want %v", got, want)
	}
}

func nebulaGroups(t *testing.T, pemBytes []byte) []string {
	t.Helper()
	c, _, err := cert.UnmarshalCertificateFromPEM(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.Groups()
}
