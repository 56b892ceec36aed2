package state

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestRenewTLSMovesCurrentPreviousRetired: each renewal makes the current
// leaf the previous one (still accepted) and retires the one before, so
// after three renewals the admission leaf and the first renewed one are
// retired, the second is previous and the third current.
func TestRenewTLSMovesCurrentPreviousRetired(t *testing.T) {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	mustApply(t, f, admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"))
	first, _ := f.Node("n-w1")
	for i, fp := range []string{"fp-1", "fp-2", "fp-3"} {
		mustApply(t, f, renewTLSCmd("n-w1", fp, t0.Add(time.Duration(48+i)*time.Hour)))
	}
	n, _ := f.Node("n-w1")
	if n.TLSFingerprint != "fp-3" || string(n.TLSCert) != "fp-3-pem" || !n.TLSExpires.Equal(t0.Add(50*time.Hour)) {
		t.Fatalf("current leaf %s %q expires %s", n.TLSFingerprint, n.TLSCert, n.TLSExpires)
	}
	if n.PrevTLSFingerprint != "fp-2" {
		t.Fatalf("previous leaf %q, want fp-2", n.PrevTLSFingerprint)
	}
	if want := []string{first.TLSFingerprint, "fp-1"}; !slices.Equal(n.Retired, want) {
		t.Fatalf("retired %v, want %v", n.Retired, want)
	}
	if !bytes.Equal(n.TLSPublicKey, []byte("key-n-w1")) {
		t.Fatalf("recorded key %q", n.TLSPublicKey)
	}
	if a := f.Audit(); a[len(a)-1].Code != codes.EventTLSRenewed || a[len(a)-1].Subject != "w1" {
		t.Fatalf("last audit event %+v", a[len(a)-1])
	}
}

func TestRenewTLSRefusals(t *testing.T) {
	later := t0.Add(48 * time.Hour)
	cases := []struct {
		name string
		prep func(*FSM)
		cmd  RenewTLS
		want codes.Code
	}{
		{"ok", nil, renewTLSCmd("n-w1", "fp-new", later), ""},
		{"fail/unknown-node", nil, renewTLSCmd("nobody", "fp-new", later), codes.NodeUnknown},
		{"fail/removed", func(f *FSM) {
			mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: t0})
		}, renewTLSCmd("n-w1", "fp-new", later), codes.BadRequest},
		{"fail/left", func(f *FSM) {
			mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeLeft, At: t0})
		}, renewTLSCmd("n-w1", "fp-new", later), codes.BadRequest},
		{"fail/no-cert", nil, RenewTLS{NodeID: "n-w1", PublicKey: []byte("k"), Fingerprint: "x", Expires: later}, codes.BadRequest},
		{"fail/no-key", nil, RenewTLS{NodeID: "n-w1", Cert: []byte("c"), Fingerprint: "x", Expires: later}, codes.BadRequest},
		{"fail/not-later", nil, renewTLSCmd("n-w1", "fp-new", t0.Add(time.Hour)), codes.BadRequest},
		{"fail/same-leaf", nil, renewTLSCmd("n-w1", "aa-n-w1", later), codes.BadRequest},
		{"fail/another-key", func(f *FSM) {
			mustApply(t, f, renewTLSCmd("n-w1", "fp-1", later))
		}, RenewTLS{NodeID: "n-w1", Cert: []byte("c"), PublicKey: []byte("someone else's"), Fingerprint: "fp-2",
			Expires: later.Add(time.Hour), At: t0}, codes.BadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := bootstrapped(t)
			mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
			mustApply(t, f, admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"))
			if tc.prep != nil {
				tc.prep(f)
			}
			before := stateBytes(t, f)
			err := apply(t, f, tc.cmd)
			if got := codes.Of(err); got != tc.want {
				t.Fatalf("code %q (%v), want %q", got, err, tc.want)
			}
			if tc.want != "" && !bytes.Equal(before, stateBytes(t, f)) {
				t.Fatal("a refused renewal changed the state")
			}
		})
	}
}

func TestRecordRevocationAcks(t *testing.T) {
	ack := func(id string, v int, at time.Time, pending ...string) RecordRevocationAcks {
		return RecordRevocationAcks{Ack: RevocationAck{NodeID: id, Version: v, Acked: []string{"origin", "c2"},
			Pending: pending, At: at}, Actor: originID}
	}
	setup := func(t *testing.T) *FSM {
		f := bootstrapped(t)
		mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
		mustApply(t, f, admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"))
		return f
	}
	t.Run("fail/not-removed", func(t *testing.T) {
		f := setup(t)
		if err := apply(t, f, ack("n-w1", 2, t0)); codes.Of(err) != codes.BadRequest {
			t.Fatalf("%v, want %s", err, codes.BadRequest)
		}
	})
	t.Run("fail/unknown", func(t *testing.T) {
		if err := apply(t, setup(t), ack("nobody", 2, t0)); codes.Of(err) != codes.NodeUnknown {
			t.Fatalf("%v, want %s", err, codes.NodeUnknown)
		}
	})
	t.Run("ok/then-newer-round-replaces", func(t *testing.T) {
		f := setup(t)
		mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: t0})
		mustApply(t, f, ack("n-w1", 2, t0.Add(time.Minute), "w3"))
		a, ok := f.RevocationAck("n-w1")
		if !ok || a.Version != 2 || !slices.Equal(a.Acked, []string{"c2", "origin"}) || !slices.Equal(a.Pending, []string{"w3"}) {
			t.Fatalf("recorded %+v, %v", a, ok)
		}
		if err := apply(t, f, ack("n-w1", 1, t0.Add(2*time.Minute))); codes.Of(err) != codes.BadRequest {
			t.Fatalf("an older version replaced the record: %v", err)
		}
		mustApply(t, f, ack("n-w1", 2, t0.Add(3*time.Minute)))
		if a, _ := f.RevocationAck("n-w1"); len(a.Pending) != 0 {
			t.Fatalf("after a complete round: %+v", a)
		}
		if e := f.Audit(); e[len(e)-1].Code != codes.EventRevocationAcks || strings.Contains(e[len(e)-1].Detail, "pending") {
			t.Fatalf("last audit event %+v, want the acknowledgements without a pending list", e[len(e)-1])
		}
	})
	t.Run("ok/audit-names-the-pending", func(t *testing.T) {
		f := setup(t)
		mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: t0})
		mustApply(t, f, ack("n-w1", 2, t0.Add(time.Minute), "w3", "w4"))
		if e := f.Audit(); !strings.HasSuffix(e[len(e)-1].Detail, "pending: w3,w4") {
			t.Fatalf("audit detail %q, want the pending members named", e[len(e)-1].Detail)
		}
	})
	t.Run("fail/version-zero", func(t *testing.T) {
		f := setup(t)
		mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: t0})
		if err := apply(t, f, ack("n-w1", 0, t0.Add(time.Minute))); codes.Of(err) != codes.BadRequest {
			t.Fatalf("a round for list version 0: %v, want %s", err, codes.BadRequest)
		}
		if _, ok := f.RevocationAck("n-w1"); ok {
			t.Fatal("a refused round was recorded")
		}
	})
}
