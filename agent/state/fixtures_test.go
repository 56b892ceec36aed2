package state

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// t0 is the fixed clock every test command carries.
var t0 = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

const originID = "n-origin"

// apply runs c through Encode and a real raft.Log, as raft would.
func apply(t testing.TB, f *FSM, c Command) error {
	t.Helper()
	data, err := Encode(c)
	if err != nil {
		t.Fatalf("Encode(%T): %v", c, err)
	}
	switch r := f.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: data}).(type) {
	case nil:
		return nil
	case error:
		return r
	default:
		t.Fatalf("Apply returned %T %v, want nil or error", r, r)
		return nil
	}
}

func mustApply(t testing.TB, f *FSM, c Command) {
	t.Helper()
	if err := apply(t, f, c); err != nil {
		t.Fatalf("apply %T: %v", c, err)
	}
}

func testCluster() Cluster {
	return Cluster{
		ID:            "00112233445566778899aabbccddeeff",
		Name:          "lab",
		CACert:        []byte("-----BEGIN CERTIFICATE-----\nY2E=\n-----END CERTIFICATE-----\n"),
		NebulaCACert:  []byte("-----BEGIN NEBULA CERTIFICATE-----\nbmViCg==\n-----END NEBULA CERTIFICATE-----\n"),
		CAFingerprint: "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf",
		Overlay:       netip.MustParsePrefix("10.42.0.0/16"),
		GossipKeys:    [][]byte{bytes.Repeat([]byte{7}, 32)},
	}
}

func testOrigin() Node {
	return Node{
		ID:                originID,
		Name:              "ctl-0",
		Role:              pki.RoleControl,
		Underlay:          "192.0.2.1",
		EnrollAddr:        "192.0.2.1:7300",
		RaftAddr:          "192.0.2.1:7301",
		SerfAddr:          "192.0.2.1:7946",
		NebulaPort:        4242,
		OverlayIP:         netip.MustParseAddr("10.42.0.1"),
		TLSFingerprint:    "aa01",
		TLSExpires:        t0.Add(365 * 24 * time.Hour),
		NebulaFingerprint: "bb01",
		NebulaExpires:     t0.Add(365 * 24 * time.Hour),
		NebulaPublicKey:   []byte("origin-nebula-pub"),
		Version:           "0.1.0",
	}
}

func bootstrapCmd() Bootstrap {
	return Bootstrap{Cluster: testCluster(), Origin: testOrigin(), At: t0, Actor: "uid:0"}
}

// secret returns a fixed, distinct secret per seed byte.
func secret(seed byte) enroll.Secret {
	var s enroll.Secret
	for i := range s {
		s[i] = seed + byte(i)
	}
	return s
}

func tokenRecord(seed byte, name string, role pki.Role) enroll.TokenRecord {
	return enroll.TokenRecord{
		Hash:     secret(seed).Hash(),
		Name:     name,
		Role:     role,
		Created:  t0,
		Expires:  t0.Add(enroll.DefaultTTL),
		MintedBy: originID,
	}
}

// admitCmd admits name with the token of seed at overlay ip, a minute
// after t0.
func admitCmd(seed byte, id, name string, role pki.Role, ip string) Admit {
	a := enroll.Admission{
		Token:      secret(seed).Hash(),
		NodeID:     id,
		Name:       name,
		Role:       role,
		Underlay:   "198.51.100.9",
		SourceAddr: "198.51.100.9",
		OverlayIP:  netip.MustParsePrefix(ip + "/16"),
		NebulaPub:  []byte("nebula-pub-" + name),
		Version:    "0.1.0",
		At:         t0.Add(time.Minute),
	}
	n := Node{
		ID: id, Name: name, Role: role, SerfAddr: "198.51.100.9:7946", NebulaPort: 4242,
		OverlayIP: a.OverlayIP.Addr(), TLSFingerprint: "aa-" + id, NebulaFingerprint: "bb-" + id,
		TLSExpires: t0.Add(24 * time.Hour), NebulaExpires: t0.Add(24 * time.Hour),
	}
	return Admit{Admission: a, Node: n, Actor: originID}
}

// bootstrapped returns an FSM with a cluster and its origin.
func bootstrapped(t testing.TB) *FSM {
	t.Helper()
	f := New()
	mustApply(t, f, bootstrapCmd())
	return f
}

// stateBytes is the encoded snapshot of f: equal bytes, equal state.
func stateBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	var b bytes.Buffer
	snap := f.snapshot()
	snap.Index = 0 // raft bookkeeping: every entry advances it, applied or refused
	if err := WriteSnapshot(&b, snap); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// isIPTaken reports whether err is enroll.ErrIPTaken carrying no code.
func isIPTaken(err error) bool { return errors.Is(err, enroll.ErrIPTaken) }

// rawLog wraps arbitrary bytes as a command entry.
func rawLog(b []byte) *raft.Log { return &raft.Log{Type: raft.LogCommand, Data: b} }

// joinCmd admits name with the token of seed as the enroll server does
// now: no overlay IP (the FSM picks), no certificates, the TLS key from
// the CSR; the node is recorded as joining.
func joinCmd(seed byte, id, name string, role pki.Role) Admit {
	a := enroll.Admission{
		Token: secret(seed).Hash(), NodeID: id, Name: name, Role: role,
		Underlay: "198.51.100.9", SourceAddr: "198.51.100.9",
		TLSPublicKey: []byte("tls-key-" + name), NebulaPub: []byte("nebula-pub-" + name),
		Version: "0.2.0", At: t0.Add(time.Minute),
	}
	n := Node{ID: id, Name: name, Role: role, SerfAddr: "198.51.100.9:7946", NebulaPort: 4242}
	return Admit{Admission: a, Node: n, Actor: originID}
}

// certsCmd records fake certificates for node id, two minutes after t0.
func certsCmd(id string) RecordCerts {
	return RecordCerts{NodeID: id, TLSCert: []byte("tls-pem-" + id), TLSFingerprint: "aa-" + id,
		TLSExpires: t0.Add(30 * 24 * time.Hour), NebulaCert: []byte("nebula-pem-" + id), NebulaFingerprint: "bb-" + id,
		NebulaExpires: t0.Add(365 * 24 * time.Hour), At: t0.Add(2 * time.Minute), Actor: originID}
}
