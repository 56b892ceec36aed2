package state

import (
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestNebulaMemberRemovalRevokesEveryCert (issue 35): a stock Nebula
// member is active once its one certificate is recorded (no TLS leaf, no
// confirmation); a renewal retires the first certificate; removal revokes
// both. A renewal token for a worker, or naming a removed member, is
// refused.
func TestNebulaMemberRemovalRevokesEveryCert(t *testing.T) {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: nebulaRecord(70, "phone", false)})
	mustApply(t, f, nebulaJoinCmd(70, "n-phone", "phone", 7))
	mustApply(t, f, RecordCerts{NodeID: "n-phone", NebulaCert: []byte("c1"), NebulaFingerprint: "fp-1",
		NebulaExpires: t0.Add(30 * 24 * time.Hour), At: t0.Add(20 * time.Minute), Joining: true})
	if n, _ := f.Node("n-phone"); n.State != NodeActive || n.Role != pki.RoleNebula || len(n.TLSCert) > 0 {
		t.Fatalf("phone after its certificate: %s %s, TLS %d bytes; want an active nebula member without a leaf", n.State, n.Role, len(n.TLSCert))
	}
	if err := apply(t, f, MintToken{Record: nebulaRecord(73, "w1", true)}); codes.Of(err) != codes.NebulaRenewRefused {
		t.Fatalf("renewal token for a name no member holds: %v, want %s", err, codes.NebulaRenewRefused)
	}
	mustApply(t, f, MintToken{Record: nebulaRecord(72, "phone", true)})
	mustApply(t, f, RenewNebulaMember{Token: secret(72).Hash(), NodeID: "n-phone", Cert: []byte("c2"), Fingerprint: "fp-2",
		Issued: t0.Add(21 * time.Minute), Expires: t0.Add(31 * 24 * time.Hour), At: t0.Add(21 * time.Minute)})
	mustApply(t, f, SetNodeState{NodeID: "n-phone", State: NodeRemoved, At: t0.Add(22 * time.Minute)})
	var got []string
	for _, r := range f.Revocations() {
		if r.NodeID == "n-phone" {
			got = append(got, r.Fingerprint)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"fp-1", "fp-2"}) {
		t.Fatalf("revoked for phone %v, want fp-1 and fp-2", got)
	}
}
