package agenttest_test

import (
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// revokedFingerprints is the revocation list origin serves its members.
func revokedFingerprints(t *testing.T, origin *agenttest.Node) []string {
	t.Helper()
	status, code, raw, err := call(memberClient(t, origin), origin, "GET", "/v1/revocations", nil)
	if err != nil || status != 200 {
		t.Fatalf("revocations: HTTP %d %s %.200s %v", status, code, raw, err)
	}
	var r control.Revocations
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r.Fingerprints
}

// certifiedFor is the detail of every certs-recorded audit event of name
// on n: the fingerprints of each certificate pair signed for its joins.
func certifiedFor(t *testing.T, n *agenttest.Node, name string) []string {
	t.Helper()
	events, err := n.Client.Audit(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range events {
		if e.Code == codes.EventCertsRecorded && e.Subject == name {
			out = append(out, e.Detail)
		}
	}
	return out
}

// takeUDP binds ip:port over UDP until the test ends or release is called.
func takeUDP(t *testing.T, ip, port string) (release func()) {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	return func() { _ = pc.Close() }
}

// TestJoinPortTakenBeforeJoin (issue 52 item 10): the host checks a plan
// makes run again in the real join before the token is sent. With
// Nebula's UDP port taken, the join fails with PortInUse naming the port,
// nothing is recorded and the token stays unused; freed, the same token
// joins. (Before, the join was admitted and then failed starting Nebula
// with OverlayApply, leaving a joining record and a used token.)
func TestJoinPortTakenBeforeJoin(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	w1 := agenttest.NewNode(t, "w1", clock)
	origin.Init(t, "alpha")
	tok := origin.Admit(t, apitype.AdmitRequest{Name: "w1"})
	dirBefore := w1.DirDigest(t)

	release := takeUDP(t, w1.IP, "4242")
	_, err := w1.Join(t, tok)
	if codes.Of(err) != codes.PortInUse || !strings.Contains(err.Error(), "port nebula") {
		t.Fatalf("join with Nebula's port taken: %v (%s), want %s naming port nebula", err, codes.Of(err), codes.PortInUse)
	}
	if st := tokenState(t, origin, "w1"); st != apitype.TokenUnused {
		t.Fatalf("token %s after a join its own host check refused", st)
	}
	if slices.ContainsFunc(origin.Nodes(t), func(n apitype.Node) bool { return n.Name == "w1" }) {
		t.Fatal("the refused join left a record")
	}
	if w1.DirDigest(t) != dirBefore {
		t.Fatal("the refused join changed the joiner's state dir")
	}
	release()
	if _, err := w1.Join(t, tok); err != nil {
		t.Fatalf("the same token once the port is free: %v", err)
	}
}

// TestJoinOverlayFailsSpendsNothing (issue 52 item 10): a join whose
// Nebula cannot start after the cluster admitted it (its UDP port taken
// after the join's own checks passed, while it waited for an operator's
// approval) fails with JoinUndone naming the rejected setting
// (ports.nebula, taken, with OverlayApply's code). The cluster undid the
// admission: no record, the token unused, and both certificates signed
// for the failed attempt in the revocation list. A second join with the
// same token (approved again) succeeds, with certificates that are not
// revoked.
func TestJoinOverlayFailsSpendsNothing(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	w1 := agenttest.NewNode(t, "w1", clock)
	origin.Init(t, "alpha")
	tok := origin.Admit(t, apitype.AdmitRequest{Name: "w1", Approve: true})
	if got := revokedFingerprints(t, origin); len(got) != 0 {
		t.Fatalf("revocations before any join: %v", got)
	}
	dirBefore := w1.DirDigest(t)

	shown, done := approvalJoin(t, w1, tok)
	a := waitShown(t, shown, done) // the join passed its host checks and waits
	release := takeUDP(t, w1.IP, "4242")
	approved := time.Now()
	if _, err := origin.Client.Approve(t.Context(), apitype.ApproveRequest{Name: "w1", Code: a.Code}); err != nil {
		t.Fatalf("approve: %v", err)
	}
	err := waitDone(t, done)
	t.Logf("the join failed %s after the approval (admitted, certified, Nebula refused, undone): %v",
		time.Since(approved).Round(time.Millisecond), err)
	if codes.Of(err) != codes.JoinUndone {
		t.Fatalf("join whose overlay cannot start: %v (%s), want %s", err, codes.Of(err), codes.JoinUndone)
	}
	for _, want := range []string{string(codes.OverlayApply), `ports.nebula = "4242"`, "taken by another process"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the join's error does not say %q: %v", want, err)
		}
	}
	var e *apitype.Error
	if !errors.As(err, &e) {
		t.Fatalf("not a coded API error: %T", err)
	}

	// The admission is undone: no record, the token unused, and both
	// certificates signed for the attempt revoked.
	if slices.ContainsFunc(origin.Nodes(t), func(n apitype.Node) bool { return n.Name == "w1" }) {
		t.Fatal("the undone join left a record")
	}
	if st := tokenState(t, origin, "w1"); st != apitype.TokenUnused {
		t.Fatalf("token %s after the undone join, want %s", st, apitype.TokenUnused)
	}
	revoked := revokedFingerprints(t, origin)
	certified := certifiedFor(t, origin, "w1")
	if len(certified) != 1 || len(revoked) != 2 {
		t.Fatalf("certified %q, revoked %v: want one pair signed and both revoked", certified, revoked)
	}
	for _, fp := range revoked {
		if !strings.Contains(certified[0], fp) {
			t.Fatalf("revoked %s is not a certificate of the failed attempt (%s)", fp, certified[0])
		}
	}
	if w1.DirDigest(t) != dirBefore {
		t.Fatal("the undone join left files in the joiner's state dir")
	}

	// The same token joins, once the port is free and an operator approves
	// again; the new certificates are valid.
	release()
	shown, done = approvalJoin(t, w1, tok)
	a = waitShown(t, shown, done)
	if _, err := origin.Client.Approve(t.Context(), apitype.ApproveRequest{Name: "w1", Code: a.Code}); err != nil {
		t.Fatalf("approve again: %v", err)
	}
	if err := waitDone(t, done); err != nil {
		t.Fatalf("the same token after the undone join: %v", err)
	}
	id, err := pki.LoadIdentity(filepath.Join(w1.Dir, "identity"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pki.ParseCertPEM(id.Cert)
	if err != nil {
		t.Fatal(err)
	}
	nebulaFP, _, err := pki.NebulaCertInfo(id.NebulaCert)
	if err != nil {
		t.Fatal(err)
	}
	for _, fp := range []string{pki.FingerprintOf(leaf).String(), nebulaFP} {
		if slices.Contains(revokedFingerprints(t, origin), fp) {
			t.Fatalf("the second join's certificate %s is revoked", fp)
		}
	}
	checkNoSecrets(t, []string{tok}, origin, w1)
}
