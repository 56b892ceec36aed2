package state

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

func TestRenewNebula(t *testing.T) {
	renew := func(id string, expires time.Time) RenewNebula {
		return RenewNebula{NodeID: id, Cert: []byte("new-cert"), Fingerprint: "fp-new",
			Issued: t0, Expires: expires, At: t0, Actor: "ca"}
	}
	later := t0.Add(400 * 24 * time.Hour)
	cases := []struct {
		name string
		prep func(*FSM)
		cmd  RenewNebula
		want codes.Code
	}{
		{"ok", nil, renew(originID, later), ""},
		{"fail/unknown-node", nil, renew("nobody", later), codes.NodeUnknown},
		{"fail/no-cert", nil, RenewNebula{NodeID: originID, Fingerprint: "x", Issued: t0, Expires: later}, codes.BadRequest},
		{"fail/not-later", nil, renew(originID, t0.Add(time.Hour)), codes.BadRequest},
		{"fail/removed", func(f *FSM) {
			mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
			mustApply(t, f, admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"))
			mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: t0})
		}, renew("n-w1", later), codes.BadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := bootstrapped(t)
			if tc.prep != nil {
				tc.prep(f)
			}
			before := stateBytes(t, f)
			err := apply(t, f, tc.cmd)
			if got := codes.Of(err); got != tc.want {
				t.Fatalf("code %q (%v), want %q", got, err, tc.want)
			}
			if tc.want != "" {
				if !bytes.Equal(before, stateBytes(t, f)) {
					t.Fatal("a refused renewal changed the state")
				}
				return
			}
			n, _ := f.Node(originID)
			if string(n.NebulaCert) != "new-cert" || n.NebulaFingerprint != "fp-new" || !n.NebulaExpires.Equal(later) || !n.NebulaIssued.Equal(t0) {
				t.Fatalf("node after renewal: %+v", n)
			}
			if !slices.Equal(n.Retired, []string{"bb01"}) {
				t.Fatalf("retired after renewal: %q, want the replaced bb01", n.Retired)
			}
			if a := f.Audit(); a[len(a)-1].Code != codes.EventCertRenewed {
				t.Fatalf("last audit event %v", a[len(a)-1])
			}
		})
	}
}
