package control

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestInternalAPIRefusals: each handler's own checks, past the guard,
// answer with their codes over the real listener.
func TestInternalAPIRefusals(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	ctx := within(t, 20*time.Second)
	prune := &state.PruneTokens{Before: time.Now().Add(-time.Hour), At: time.Now(), Actor: "x"}
	tracked, err := state.Track("req-1", prune)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		from      *member
		to        *member
		path      string
		forwarded bool
		in        any
		want      codes.Code
	}{
		{"apply on a follower", origin, c2, PathApply, true, ApplyRequest{Tracked: tracked}, codes.NoLeader},
		{"raft remove on a follower", origin, c2, PathRaftRemove, true, RaftRemoveRequest{NodeID: "id-nobody"}, codes.NoLeader},
		{"apply with an unknown field", c2, origin, PathApply, true, map[string]any{"tracked": tracked, "extra": 1}, codes.BadRequest},
		{"raft join for another node", c2, origin, PathRaftJoin, false, NodeRef{NodeID: origin.nodeID}, codes.PeerRoleDenied},
		{"forwarded raft join on a follower", origin, c2, PathRaftJoin, true, NodeRef{NodeID: origin.nodeID}, codes.NoLeader},
		{"raft join with junk", c2, origin, PathRaftJoin, false, "junk", codes.BadRequest},
		{"sign on a node without the CA", origin, c2, PathSignTLS, true, SignRequest{NodeID: "x"}, codes.CAHolderDown},
		{"sign with junk", c2, origin, PathSignTLS, true, 42, codes.BadRequest},
		{"sign a request naming no admission", c2, origin, PathSignNebula, true, pki.NebulaRequest{Name: "x"}, codes.BadRequest},
		{"sign for a node not admitted", c2, origin, PathSignNebula, true, SignRequest{NodeID: "id-nobody"}, codes.SignRefused},
	} {
		err := tc.from.p.client.Call(ctx, tc.to.addr, tc.path, tc.forwarded, tc.in, nil)
		if codes.Of(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	// The forwarded write the follower refused is applied by the leader.
	if err := c2.p.client.Call(ctx, origin.addr, PathApply, true, ApplyRequest{Tracked: tracked}, nil); err != nil {
		t.Fatalf("apply on the leader: %v", err)
	}
	// A remove of a non-member on the leader is a no-op success.
	if err := c2.p.client.Call(ctx, origin.addr, PathRaftRemove, true, RaftRemoveRequest{NodeID: "id-nobody"}, nil); err != nil {
		t.Fatalf("raft remove of a non-member: %v", err)
	}
	// The leader's read index is its FSM's index.
	var idx IndexResponse
	if err := c2.p.client.Call(ctx, origin.addr, PathIndex, true, nil, &idx); err != nil || idx.Index != origin.p.Raft().FSM().Index() {
		t.Fatalf("index %d (%v), leader's FSM at %d", idx.Index, err, origin.p.Raft().FSM().Index())
	}
	// A follower's stats show it in contact with the leader and caught up.
	var st RaftStats
	if err := origin.p.client.Call(ctx, c2.addr, PathRaftStats, true, nil, &st); err != nil || !st.caughtUp(origin.p.Raft().CommitIndex()) {
		t.Fatalf("stats %+v (%v), leader commit %d", st, err, origin.p.Raft().CommitIndex())
	}
	// Signing through the CA holder for an admitted (joining) node returns
	// its certificates; the Nebula cert lives for the holder's
	// NebulaLifetime (an hour here).
	keys, err := pki.NewKeys("c9")
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.CSRPublicKey(keys.CSR)
	if err != nil {
		t.Fatal(err)
	}
	ip, err := c2.p.Ledger().Admit(ctx, enroll.Admission{Token: mintSecret(t, c2, "c9", pki.RoleWorker).Hash(), NodeID: "id-c9",
		Name: "c9", Role: pki.RoleWorker, SourceAddr: "127.0.0.1", TLSPublicKey: key, NebulaPub: keys.NebulaPublicPEM, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	var signed SignedCert
	if err := c2.p.client.Call(ctx, origin.addr, PathSignTLS, true, SignRequest{NodeID: "id-c9", CSR: keys.CSR}, &signed); err != nil || len(signed.Cert) == 0 {
		t.Fatalf("sign through the CA holder: %d bytes, %v", len(signed.Cert), err)
	}
	want := time.Now().Add(time.Hour)
	cert, err := c2.p.Signer().SignNebula(ctx, enroll.SignRequest{NodeID: "id-c9", OverlayIP: ip.OverlayIP})
	if err != nil {
		t.Fatalf("sign Nebula through the CA holder: %v", err)
	}
	if _, exp, err := pki.NebulaCertInfo(cert); err != nil || exp.Sub(want).Abs() > time.Minute {
		t.Fatalf("expires %s (%v), want about %s", exp, err, want)
	}
}

// TestMemberRoutes: a worker reads the node list, the revocations and its
// own Nebula cert, and records itself left, after which it is no longer a
// member; a node without a record is no member either.
func TestMemberRoutes(t *testing.T) {
	c, origin := newCluster(t)
	wid, wkeys, _ := c.identity(t, "w1", pki.RoleWorker)
	c.admitLeaf(t, origin, "w1", pki.RoleWorker, wkeys, enroll.Ports{}, wid)
	wc, err := NewClient(wid)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.CloseIdle()
	ctx := within(t, 10*time.Second)
	seeds := []string{freePort(t), origin.addr} // the first seed is down

	var cert NebulaCertResponse
	if err := wc.AskSeeds(ctx, seeds, PathNebulaCert, &cert); err != nil {
		t.Fatalf("own Nebula cert: %v", err)
	}
	n, _ := origin.p.Raft().FSM().Node("id-w1")
	if string(cert.Cert) != string(n.NebulaCert) {
		t.Fatal("served a Nebula cert other than the recorded one")
	}
	var rows []map[string]any
	if err := wc.AskSeeds(ctx, seeds, PathNodes, &rows); err != nil || len(rows) != 2 {
		t.Fatalf("nodes: %d rows, %v", len(rows), err)
	}
	if err := wc.PostSeeds(ctx, seeds, PathLeft, NodeRef{NodeID: "id-w1"}, nil); err != nil {
		t.Fatalf("left: %v", err)
	}
	var rev Revocations
	if err := wc.Call(ctx, origin.addr, PathRevocations, false, nil, &rev); codes.Of(err) != codes.NotMember {
		t.Fatalf("a worker that left reads the revocations: %v, want %s", err, codes.NotMember)
	}
	if err := origin.p.client.Call(ctx, origin.addr, PathRevocations, false, nil, &rev); err != nil || len(rev.Gone) != 1 || rev.Gone[0] != "id-w1" {
		t.Fatalf("revocations %+v, %v", rev, err)
	}

	// A leaf of this CA for a node the cluster never recorded.
	sid, _, _ := c.identity(t, "stranger", pki.RoleWorker)
	sc, err := NewClient(sid)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.CloseIdle()
	if err := sc.Call(ctx, origin.addr, PathNebulaCert, false, nil, &cert); codes.Of(err) != codes.NotMember {
		t.Fatalf("a stranger's Nebula cert: %v, want %s", err, codes.NotMember)
	}
}

// TestClientFailures: an unreachable node wraps ErrUnreachable; seeds that
// are all down are SeedsUnreachable; an answered failure stops PostSeeds
// at once; a non-JSON failure still reports the status.
func TestClientFailures(t *testing.T) {
	c, origin := newCluster(t)
	ctx := within(t, 10*time.Second)
	down := freePort(t)
	cl := origin.p.client
	if err := cl.Call(ctx, down, PathIndex, false, nil, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("call to a closed port: %v", err)
	}
	if err := cl.AskSeeds(ctx, []string{down}, PathNodes, nil); codes.Of(err) != codes.SeedsUnreachable {
		t.Fatalf("ask seeds all down: %v", err)
	}
	if err := cl.AskSeeds(ctx, nil, PathNodes, nil); codes.Of(err) != codes.SeedsUnreachable {
		t.Fatalf("ask no seeds: %v", err)
	}
	if err := cl.PostSeeds(ctx, []string{down}, PathLeft, NodeRef{}, nil); codes.Of(err) != codes.SeedsUnreachable {
		t.Fatalf("post seeds all down: %v", err)
	}
	// An answered failure on the first seed is final: the second (which
	// would accept) is never asked.
	c2 := c.joinControl(t, origin, "c2")
	err := cl.PostSeeds(ctx, []string{c2.addr, origin.addr}, PathRaftJoin, NodeRef{NodeID: "id-someone-else"}, nil)
	if codes.Of(err) != codes.PeerRoleDenied {
		t.Fatalf("post seeds with an answered failure: %v", err)
	}
	// A path nobody serves: a plain 404 without a code.
	if err := cl.Call(ctx, origin.addr, "/v1/nothing", false, nil, nil); err == nil || codes.Of(err) != "" {
		t.Fatalf("unknown path: %v", err)
	}
	// An IP lost to a concurrent admission comes back as the sentinel.
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, enroll.ErrIPTaken)
	}), ReadHeaderTimeout: time.Second}
	id, _, _ := c.identity(t, "fake", pki.RoleControl)
	conf, err := pki.ServerTLSConfig(id)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.TLSConfig = conf
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	defer srv.Close()
	if err := cl.Call(ctx, ln.Addr().String(), PathApply, true, ApplyRequest{}, nil); !errors.Is(err, enroll.ErrIPTaken) {
		t.Fatalf("ip-taken answer: %v", err)
	}
}

// TestCAHolderUnreachable: when the CA holder cannot be reached (here:
// this node's client presents a leaf the CA holder refuses at the
// handshake, a transport failure), signing fails with CAHolderDown, so the
// admission records nothing; and a cluster record without the CA holder's
// address is CAHolderDown too.
func TestCAHolderUnreachable(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	ctx := within(t, 10*time.Second)
	foreign := &testCluster{ca: pkitest.NewCA(t, "other")}
	id, _, _ := foreign.identity(t, "c2", pki.RoleControl)
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	c2.p.client = cl
	s := c2.p.Signer()
	if _, err := s.SignTLS(ctx, enroll.SignRequest{NodeID: "x"}); codes.Of(err) != codes.CAHolderDown {
		t.Fatalf("sign TLS with the CA holder unreachable: %v, want %s", err, codes.CAHolderDown)
	}
	if _, err := s.SignNebula(ctx, enroll.SignRequest{NodeID: "x"}); codes.Of(err) != codes.CAHolderDown {
		t.Fatalf("sign Nebula with the CA holder unreachable: %v, want %s", err, codes.CAHolderDown)
	}
}
