package control

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestAdmitRecordsAddresses: the ledger records a gossip address only for
// a node that gave a gossip port, and control (enroll, raft) addresses only
// for a control node that gave both its control and its raft port; a
// control node recorded without them is never promoted.
func TestAdmitRecordsAddresses(t *testing.T) {
	c, origin := newCluster(t)
	all := enroll.Ports{Control: 7300, Raft: 7301, Gossip: 7946, Nebula: 4242}
	for _, tc := range []struct {
		name                 string
		role                 pki.Role
		ports                enroll.Ports
		serf, enrollA, raftA string
		nebula               int
	}{
		{"w-none", pki.RoleWorker, enroll.Ports{}, "", "", "", 0},
		// gossip rides the overlay: the port alone is recorded (the FSM
		// picks the overlay address), never the underlay
		{"w-all", pki.RoleWorker, all, ":7946", "", "", 4242},
		{"c-all", pki.RoleControl, all, ":7946", "127.0.0.1:7300", "127.0.0.1:7301", 4242},
		{"c-no-control", pki.RoleControl, enroll.Ports{Raft: 7301}, "", "", "", 0},
		{"c-no-raft", pki.RoleControl, enroll.Ports{Control: 7300}, "", "", "", 0},
	} {
		id := c.admit(t, origin, tc.name, tc.role, nil, tc.ports)
		n, ok := origin.p.Raft().FSM().Node(id)
		if !ok || n.SerfAddr != tc.serf || n.EnrollAddr != tc.enrollA || n.RaftAddr != tc.raftA || n.NebulaPort != tc.nebula {
			t.Errorf("%s: serf %q enroll %q raft %q nebula %d; want %q %q %q %d", tc.name, n.SerfAddr, n.EnrollAddr,
				n.RaftAddr, n.NebulaPort, tc.serf, tc.enrollA, tc.raftA, tc.nebula)
		}
		if tc.role == pki.RoleControl && tc.enrollA == "" {
			if _, err := origin.p.promoteRecorded(within(t, 5*time.Second), id); codes.Of(err) != codes.NodeUnknown {
				t.Errorf("%s: promoted without control addresses: %v, want %s", tc.name, err, codes.NodeUnknown)
			}
		}
	}
	if origin.p.Raft().Voters() != 1 {
		t.Fatalf("%d voters after refused promotions", origin.p.Raft().Voters())
	}
}

// TestJoinFacts: a join response lists only active control nodes: their
// enroll addresses as seeds, their gossip addresses as serf peers, those
// with a Nebula port as lighthouses, and (for a joining control node only)
// their raft addresses.
func TestJoinFacts(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.admit(t, origin, "c2", pki.RoleControl, nil, enroll.Ports{Control: 7300, Raft: 7301, Gossip: 7946, Nebula: 4242})
	c3 := c.admit(t, origin, "c3", pki.RoleControl, nil, enroll.Ports{Control: 7310, Raft: 7311, Gossip: 7956, Nebula: 4252})
	c.admit(t, origin, "w1", pki.RoleWorker, nil, enroll.Ports{Control: 7320, Raft: 7321, Gossip: 7966, Nebula: 4262})
	ctx := within(t, 10*time.Second)
	if err := origin.p.Write(ctx, &state.SetNodeState{NodeID: c3, State: state.NodeLeft, At: time.Now(), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	c2rec, _ := origin.p.Raft().FSM().Node(c2)

	l := origin.p.Ledger()
	w, err := l.JoinFacts(ctx, pki.RoleWorker)
	if err != nil {
		t.Fatal(err)
	}
	if w.ClusterID != c.cluster.ID || w.ClusterName != "alpha" || w.Overlay != c.cluster.Overlay ||
		string(w.CACert) != string(c.ca.CertPEM()) || len(w.GossipKeys) != 1 {
		t.Fatalf("cluster facts %+v", w)
	}
	// Nodes come sorted by name: c2 before origin.
	wantSeeds := []string{"127.0.0.1:7300", origin.addr}
	wantSerf := []string{c2rec.OverlayIP.String() + ":7946"}                                // on the overlay; the origin's record has no gossip address
	wantLH := []enroll.Lighthouse{{OverlayIP: c2rec.OverlayIP, Underlay: "127.0.0.1:4242"}} // nor a Nebula port
	if !reflect.DeepEqual(w.Seeds, wantSeeds) || !reflect.DeepEqual(w.SerfPeers, wantSerf) ||
		!reflect.DeepEqual(w.Lighthouses, wantLH) || len(w.RaftPeers) != 0 {
		t.Fatalf("a worker's facts: seeds %v serf %v lighthouses %v raft %v; want %v %v %v and no raft peers",
			w.Seeds, w.SerfPeers, w.Lighthouses, w.RaftPeers, wantSeeds, wantSerf, wantLH)
	}
	ctl, err := l.JoinFacts(ctx, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	wantRaft := []enroll.RaftPeer{{ID: c2, Address: "127.0.0.1:7301"}, {ID: origin.nodeID, Address: origin.raftAddr}}
	if !reflect.DeepEqual(ctl.RaftPeers, wantRaft) || !reflect.DeepEqual(ctl.Seeds, wantSeeds) {
		t.Fatalf("a control node's facts: raft %v seeds %v; want %v %v", ctl.RaftPeers, ctl.Seeds, wantRaft, wantSeeds)
	}
}

// TestLedgerReads: the ledger's lookups (token, name, the admission a
// lost response resumes) answer from raft, and Admitted refuses a node
// that is removed, unknown, or has no admission certificate on record.
func TestLedgerReads(t *testing.T) {
	c, origin := newCluster(t)
	ctx := within(t, 10*time.Second)
	l := origin.p.Ledger()

	h := mint(t, origin, "w1", pki.RoleWorker)
	if rec, ok, err := l.Token(ctx, h); err != nil || !ok || rec.Name != "w1" || rec.Consumed() {
		t.Fatalf("token just minted: %+v, %v, %v", rec, ok, err)
	}
	var unknown enroll.TokenHash
	if _, ok, err := l.Token(ctx, unknown); err != nil || ok {
		t.Fatalf("unknown token: found %v, %v", ok, err)
	}

	keys, err := pki.NewKeys("w2")
	if err != nil {
		t.Fatal(err)
	}
	w2 := c.admit(t, origin, "w2", pki.RoleWorker, keys, enroll.Ports{})
	for name, want := range map[string]bool{"w2": true, "origin": true, "w1": false, "nobody": false} {
		if taken, err := l.NameTaken(ctx, name); err != nil || taken != want {
			t.Errorf("NameTaken(%s) = %v, %v; want %v", name, taken, err, want)
		}
	}

	rec, _ := origin.p.Raft().FSM().Node(w2)
	a, ok, err := l.Admitted(ctx, w2)
	if err != nil || !ok {
		t.Fatalf("Admitted(w2): %v, %v", ok, err)
	}
	if a.NodeID != w2 || a.Name != "w2" || a.Role != pki.RoleWorker || string(a.TLSCert) != string(rec.TLSCert) ||
		string(a.NebulaCert) != string(rec.NebulaCert) || string(a.NebulaPub) != string(keys.NebulaPublicPEM) ||
		a.OverlayIP != netip.PrefixFrom(rec.OverlayIP, c.cluster.Overlay.Bits()) {
		t.Fatalf("Admitted(w2) = %+v, record %+v", a, rec)
	}
	// The origin was bootstrapped, not admitted: it has no TLS leaf on record.
	for _, id := range []string{origin.nodeID, "id-nobody"} {
		if _, ok, err := l.Admitted(ctx, id); err != nil || ok {
			t.Errorf("Admitted(%s): %v, %v; want not found", id, ok, err)
		}
	}
	if err := origin.p.Remove(ctx, "w2", "test"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.Admitted(ctx, w2); err != nil || ok {
		t.Fatalf("Admitted(w2) after its removal: %v, %v; want not found", ok, err)
	}
}
