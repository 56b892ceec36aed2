package control

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// joining records name as joining through via's ledger (the first step
// of an admission) and returns its node id, keys and overlay IP.
func joining(t *testing.T, via *member, name string, role pki.Role) (string, *pki.Keys, netip.Prefix) {
	t.Helper()
	keys, err := pki.NewKeys(name)
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.CSRPublicKey(keys.CSR)
	if err != nil {
		t.Fatal(err)
	}
	id := "id-" + name
	ip, err := via.p.Ledger().Admit(within(t, 10*time.Second), enroll.Admission{Token: mintSecret(t, via, name, role).Hash(),
		NodeID: id, Name: name, Role: role, Underlay: "192.0.2.44", SourceAddr: "127.0.0.1", TLSPublicKey: key,
		NebulaPub: keys.NebulaPublicPEM, Version: "test", At: time.Now()})
	if err != nil {
		t.Fatalf("admit %s: %v", name, err)
	}
	return id, keys, ip.OverlayIP
}

// TestSignOnlyAdmitted: the CA holder, asked over mTLS by another control
// node, refuses with codes.SignRefused (and signs nothing) a request for
// a node raft does not record as joining without certificates, for a key
// other than the recorded one, or expecting another name, role or IP; for
// the admitted node it signs exactly what raft records, whatever the
// requester asked for.
func TestSignOnlyAdmitted(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	id, keys, ip := joining(t, c2, "j1", pki.RoleControl)
	other, err := pki.NewKeys("j1")
	if err != nil {
		t.Fatal(err)
	}
	removed, _, _ := joining(t, c2, "gone", pki.RoleWorker)
	if err := origin.p.Write(within(t, 5*time.Second), &state.SetNodeState{NodeID: removed, State: state.NodeRemoved, At: time.Now(), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	ctx := within(t, 20*time.Second)
	for _, tc := range []struct {
		name string
		path string
		req  SignRequest
	}{
		{"tls/unknown-node", PathSignTLS, SignRequest{NodeID: "id-nobody", CSR: keys.CSR}},
		{"tls/no-node-id", PathSignTLS, SignRequest{CSR: keys.CSR}},
		{"nebula/unknown-node", PathSignNebula, SignRequest{NodeID: "id-nobody"}},
		{"tls/active-node", PathSignTLS, SignRequest{NodeID: c2.nodeID, CSR: c2.keys.CSR}},
		{"nebula/active-node", PathSignNebula, SignRequest{NodeID: c2.nodeID}},
		{"nebula/removed-while-joining", PathSignNebula, SignRequest{NodeID: removed}},
		{"tls/csr-of-another-key", PathSignTLS, SignRequest{NodeID: id, CSR: other.CSR}},
		{"tls/csr-of-the-requester", PathSignTLS, SignRequest{NodeID: id, CSR: c2.keys.CSR}},
		{"tls/another-name", PathSignTLS, SignRequest{NodeID: id, Name: "root", CSR: keys.CSR}},
		{"tls/another-role", PathSignTLS, SignRequest{NodeID: id, Role: pki.RoleWorker, CSR: keys.CSR}},
		{"nebula/another-ip", PathSignNebula, SignRequest{NodeID: id, OverlayIP: netip.PrefixFrom(ip.Addr().Next(), ip.Bits())}},
		{"nebula/another-prefix", PathSignNebula, SignRequest{NodeID: id, OverlayIP: netip.PrefixFrom(ip.Addr(), 32)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(origin.logs.withCode(codes.SignRefused))
			var out SignedCert
			err := c2.p.client.Call(ctx, origin.addr, tc.path, true, tc.req, &out)
			if codes.Of(err) != codes.SignRefused || len(out.Cert) != 0 {
				t.Fatalf("%v (code %q), %d bytes signed; want %s and nothing", err, codes.Of(err), len(out.Cert), codes.SignRefused)
			}
			if got := len(origin.logs.withCode(codes.SignRefused)); got != before+1 {
				t.Fatalf("%d refusals logged by the CA holder, want %d", got, before+1)
			}
		})
	}

	// The admitted node: the leaf and host cert say what raft records.
	var leafOut, nebOut SignedCert
	if err := c2.p.client.Call(ctx, origin.addr, PathSignTLS, true, SignRequest{NodeID: id, CSR: keys.CSR}, &leafOut); err != nil {
		t.Fatalf("sign TLS for the admitted node: %v", err)
	}
	if err := c2.p.client.Call(ctx, origin.addr, PathSignNebula, true, SignRequest{NodeID: id, Name: "j1", Role: pki.RoleControl, OverlayIP: ip}, &nebOut); err != nil {
		t.Fatalf("sign Nebula for the admitted node: %v", err)
	}
	checkSigned(t, leafOut.Cert, nebOut.Cert, id, "j1", pki.RoleControl, keys, ip, "192.0.2.44")
}

// checkSigned checks a leaf and a Nebula host cert against a record.
func checkSigned(t *testing.T, leafPEM, nebPEM []byte, id, name string, role pki.Role, keys *pki.Keys, ip netip.Prefix, underlay string) {
	t.Helper()
	leaf, err := pki.ParseCertPEM(leafPEM)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := pki.RoleOf(leaf)
	var ips []string
	for _, a := range leaf.IPAddresses {
		ips = append(ips, a.String())
	}
	wantIPs := fmt.Sprint([]string(nil))
	if role == pki.RoleControl {
		wantIPs = fmt.Sprint([]string{underlay})
	}
	key, _ := x509.MarshalPKIXPublicKey(leaf.PublicKey)
	want, _ := pki.CSRPublicKey(keys.CSR)
	if leaf.Subject.CommonName != name || pki.NodeIDOf(leaf) != id || r != role || fmt.Sprint(ips) != wantIPs || !bytes.Equal(key, want) {
		t.Errorf("leaf %s/%s role %s IPs %v, want %s/%s role %s IPs %s for the recorded key",
			leaf.Subject.CommonName, pki.NodeIDOf(leaf), r, ips, name, id, role, wantIPs)
	}
	if err := pki.NebulaCertFor(nebPEM, keys.NebulaPublicPEM, name, ip, netip.Prefix{}); err != nil {
		t.Errorf("Nebula cert: %v", err)
	}
	host, _, err := cert.UnmarshalCertificateFromPEM(nebPEM)
	if err != nil || len(host.Groups()) != 1 || host.Groups()[0] != string(role) {
		t.Errorf("Nebula groups %v (%v), want [%s]", host.Groups(), err, role)
	}
}

// TestAdmitControlThroughFollower: a follower that does not hold the CA admits a
// control node end to end: the record is joining with the IP the FSM
// picked, the CA holder signs for it through the follower's remoteSigner,
// and the certificates, recorded, make it active.
func TestAdmitControlThroughFollower(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	if c2.p.Raft().IsLeader() || c2.p.HoldsCA() {
		t.Fatal("c2 must follow and not hold the CA")
	}
	id, keys, ip := joining(t, c2, "c3", pki.RoleControl)
	if n, _ := c2.p.Raft().FSM().Node(id); n.State != state.NodeJoining || netip.PrefixFrom(n.OverlayIP, ip.Bits()) != ip {
		t.Fatalf("c3 recorded %s at %v, want joining at %v", n.State, n.OverlayIP, ip)
	}
	ctx := within(t, 10*time.Second)
	s := c2.p.Signer()
	req := enroll.SignRequest{NodeID: id, Name: "c3", Role: pki.RoleControl, OverlayIP: ip, CSR: keys.CSR}
	leaf, err := s.SignTLS(ctx, req)
	if err != nil {
		t.Fatalf("sign TLS through the follower: %v", err)
	}
	req.CSR = nil
	neb, err := s.SignNebula(ctx, req)
	if err != nil {
		t.Fatalf("sign Nebula through the follower: %v", err)
	}
	checkSigned(t, leaf, neb, id, "c3", pki.RoleControl, keys, ip, "192.0.2.44")

	// The ledger refuses certificates that are not for the record.
	other, err := pki.NewKeys("c3")
	if err != nil {
		t.Fatal(err)
	}
	foreignLeaf, err := c.ca.SignTLS(pki.LeafRequest{CSR: other.CSR, Name: "c3", NodeID: id, Role: pki.RoleControl}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	foreignNeb, err := c.ca.SignNebula(pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: "c3",
		IP: netip.PrefixFrom(ip.Addr().Next(), ip.Bits())}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	l := c2.p.Ledger()
	for name, pair := range map[string][2][]byte{"leaf-for-another-key": {foreignLeaf, neb}, "nebula-for-another-ip": {leaf, foreignNeb}} {
		if err := l.RecordCerts(ctx, id, pair[0], pair[1]); err == nil {
			t.Errorf("%s: recorded", name)
		}
	}
	if n, _ := origin.p.Raft().FSM().Node(id); n.State != state.NodeJoining {
		t.Fatalf("after refused certificates c3 is %s", n.State)
	}

	if err := l.RecordCerts(ctx, id, leaf, neb); err != nil {
		t.Fatalf("record certificates: %v", err)
	}
	n, _ := origin.p.Raft().FSM().Node(id)
	parsed, _ := pki.ParseCertPEM(leaf)
	if n.State != state.NodeJoining || n.TLSFingerprint != pki.FingerprintOf(parsed).String() || !bytes.Equal(n.NebulaCert, neb) {
		t.Fatalf("after RecordCerts: %s, TLS %s", n.State, n.TLSFingerprint)
	}
	// Certified: nothing more is signed for it.
	if _, err := s.SignNebula(ctx, req); codes.Of(err) != codes.SignRefused {
		t.Fatalf("sign again for a certified node: %v, want %s", err, codes.SignRefused)
	}
	if err := l.RecordCerts(ctx, id, leaf, neb); err == nil {
		t.Fatal("certificates recorded twice")
	}
}

// downSigner is a CA holder that cannot be reached.
type downSigner struct{}

func (downSigner) SignTLS(context.Context, enroll.SignRequest) ([]byte, error) {
	return nil, codes.Wrap(codes.CAHolderDown, errors.New("stand-in: unreachable"))
}

func (downSigner) SignNebula(context.Context, enroll.SignRequest) ([]byte, error) {
	return nil, codes.Wrap(codes.CAHolderDown, errors.New("stand-in: unreachable"))
}

// TestEnrollCAHolderDownAborts: through a follower's real ledger, an
// enrollment whose signing fails with codes.CAHolderDown is undone in raft:
// no record, the IP free, the token unused; with the CA holder back the
// same token joins, at the same IP.
func TestEnrollCAHolderDownAborts(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	secret := mintSecret(t, c2, "w1", pki.RoleWorker)
	keys, err := pki.NewKeys("w1")
	if err != nil {
		t.Fatal(err)
	}
	ip := freeIP(t, c2)
	down := enroll.NewServer(enroll.DefaultServerConfig(), c2.p.Ledger(), downSigner{},
		enroll.Deps{NewNodeID: func() string { return "id-w1" }})
	_, err = down.Enroll(within(t, 20*time.Second), enrollRequest(secret, "w1", keys, enroll.Ports{}), netip.MustParseAddr("127.0.0.1"))
	if codes.Of(err) != codes.CAHolderDown {
		t.Fatalf("enroll with the CA holder unreachable: %v, want %s", err, codes.CAHolderDown)
	}
	// origin may have lost its leadership under load: its record is read
	// after the leader's (else an undo not yet applied would pass).
	if err := origin.p.SyncRead(within(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	f := origin.p.Raft().FSM()
	if _, ok := f.Node("id-w1"); ok || f.IPAllocated(ip.Addr()) {
		t.Fatal("the undone admission left a record or an IP")
	}
	if rec, _ := f.Token(secret.Hash()); rec.Consumed() {
		t.Fatalf("token after the undo: %+v, want unused", rec)
	}
	resp, err := enrollServer(c2, "id-w1").Enroll(within(t, 20*time.Second), enrollRequest(secret, "w1", keys, enroll.Ports{}), netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatalf("the same token with the CA holder back: %v", err)
	}
	if err := origin.p.SyncRead(within(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.Node("id-w1"); n.State != state.NodeJoining || n.TLSFingerprint == "" || resp.OverlayIP != ip {
		t.Fatalf("w1 is %s at %v, want joining (certified, until it confirms) at %v", n.State, resp.OverlayIP, ip)
	}
}

// TestConcurrentAdmissions admits 30 nodes at once through 3 control
// nodes (10 each, the leader and two followers): every one succeeds, with
// 30 distinct overlay IPs and no retry. Run with -v for the time taken.
func TestConcurrentAdmissions(t *testing.T) {
	c, origin := newCluster(t)
	members := []*member{origin, c.joinControl(t, origin, "c2"), c.joinControl(t, origin, "c3")}
	const perMember = 10
	type job struct {
		via    *member
		name   string
		secret enroll.Secret
		keys   *pki.Keys
	}
	var jobs []job
	for i, m := range members {
		for j := range perMember {
			name := fmt.Sprintf("w%d-%d", i, j)
			keys, err := pki.NewKeys(name)
			if err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, job{m, name, mintSecret(t, m, name, pki.RoleWorker), keys})
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	ips := make([]netip.Prefix, len(jobs))
	errs := make([]error, len(jobs))
	start := time.Now()
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := enrollServer(j.via, "id-"+j.name).Enroll(ctx, enrollRequest(j.secret, j.name, j.keys, enroll.Ports{}), netip.MustParseAddr("127.0.0.1"))
			if err == nil {
				ips[i] = resp.OverlayIP
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	took := time.Since(start)
	// The origin may have lost the lead under load: read what raft
	// committed, not what its FSM has applied so far.
	if err := origin.p.SyncRead(ctx); err != nil {
		t.Fatalf("read index on the origin: %v", err)
	}
	seen := map[netip.Prefix]string{}
	for i, j := range jobs {
		if errs[i] != nil {
			t.Errorf("%s through %s: %v", j.name, j.via.name, errs[i])
			continue
		}
		if other, dup := seen[ips[i]]; dup {
			t.Errorf("%s and %s both got %v", j.name, other, ips[i])
		}
		seen[ips[i]] = j.name
		if n, _ := origin.p.Raft().FSM().Node("id-" + j.name); n.State != state.NodeJoining || n.TLSFingerprint == "" ||
			netip.PrefixFrom(n.OverlayIP, ips[i].Bits()) != ips[i] {
			t.Errorf("%s recorded %s at %v, answered %v", j.name, n.State, n.OverlayIP, ips[i])
		}
	}
	t.Logf("%d concurrent admissions through %d control nodes: %d succeeded with %d distinct IPs in %s",
		len(jobs), len(members), len(seen), len(seen), took.Round(time.Millisecond))
}
