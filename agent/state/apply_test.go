package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

func TestBootstrap(t *testing.T) {
	f := New()
	if _, ok := f.Cluster(); ok {
		t.Fatal("new FSM has a cluster")
	}
	mustApply(t, f, bootstrapCmd())

	cl, ok := f.Cluster()
	want := testCluster()
	want.Created, want.CAHolder = t0, originID
	if !ok || !reflect.DeepEqual(cl, want) {
		t.Fatalf("Cluster() = %+v, %v\nwant %+v", cl, ok, want)
	}
	n, ok := f.Node(originID)
	if !ok || n.State != NodeActive || n.Role != pki.RoleControl || !n.Created.Equal(t0) || n.Name != "ctl-0" {
		t.Fatalf("origin = %+v, %v", n, ok)
	}
	if !f.IPAllocated(netip.MustParseAddr("10.42.0.1")) {
		t.Fatal("origin overlay IP not allocated")
	}
	if a := f.Audit(); len(a) != 1 || a[0].Code != codes.EventClusterCreated || a[0].Actor != "uid:0" || !a[0].At.Equal(t0) {
		t.Fatalf("audit = %+v", a)
	}

	before := stateBytes(t, f)
	if got := codes.Of(apply(t, f, bootstrapCmd())); got != codes.AlreadyInitialised {
		t.Fatalf("second bootstrap: code %q", got)
	}
	if !bytes.Equal(before, stateBytes(t, f)) {
		t.Fatal("refused bootstrap changed the state")
	}
}

// An origin with no role becomes a control node: it holds the CA.
func TestBootstrapOriginRoleDefaultsToControl(t *testing.T) {
	f := New()
	c := bootstrapCmd()
	c.Origin.Role = ""
	mustApply(t, f, c)
	if n, ok := f.Node(originID); !ok || n.Role != pki.RoleControl {
		t.Fatalf("origin = %+v, %v; want role %s", n, ok, pki.RoleControl)
	}
}

func TestNodeStateValid(t *testing.T) {
	for s, want := range map[NodeState]bool{
		NodeJoining: true, NodeActive: true, NodeLeft: true, NodeRemoved: true,
		"": false, "sleeping": false, "Active": false,
	} {
		if got := s.Valid(); got != want {
			t.Errorf("NodeState(%q).Valid() = %v, want %v", s, got, want)
		}
	}
}

func TestBootstrapRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Bootstrap)
		want codes.Code
	}{
		{"no-cluster-id", func(b *Bootstrap) { b.Cluster.ID = "" }, codes.BadRequest},
		{"no-overlay", func(b *Bootstrap) { b.Cluster.Overlay = netip.Prefix{} }, codes.BadRequest},
		{"no-origin-id", func(b *Bootstrap) { b.Origin.ID = "" }, codes.BadRequest},
		{"bad-origin-name", func(b *Bootstrap) { b.Origin.Name = "Ctl_0" }, codes.BadNodeName},
		{"worker-origin", func(b *Bootstrap) { b.Origin.Role = pki.RoleWorker }, codes.BadRole},
		{"ip-outside", func(b *Bootstrap) { b.Origin.OverlayIP = netip.MustParseAddr("10.1.0.1") }, codes.BadRequest},
		{"ip-network", func(b *Bootstrap) { b.Origin.OverlayIP = netip.MustParseAddr("10.42.0.0") }, codes.BadRequest},
		{"ip-missing", func(b *Bootstrap) { b.Origin.OverlayIP = netip.Addr{} }, codes.BadRequest},
		{"ip-v6-in-v4", func(b *Bootstrap) { b.Origin.OverlayIP = netip.MustParseAddr("fd00::1") }, codes.BadRequest},
		{"overlay-too-small", func(b *Bootstrap) {
			b.Cluster.Overlay = netip.MustParsePrefix("10.42.0.1/32")
			b.Origin.OverlayIP = netip.MustParseAddr("10.42.0.1")
		}, codes.BadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New()
			c := bootstrapCmd()
			tc.edit(&c)
			before := stateBytes(t, f)
			if got := codes.Of(apply(t, f, c)); got != tc.want {
				t.Fatalf("code %q, want %q", got, tc.want)
			}
			if !bytes.Equal(before, stateBytes(t, f)) {
				t.Fatal("refused bootstrap changed the state")
			}
		})
	}
}

func TestMintToken(t *testing.T) {
	f := bootstrapped(t)
	rec := tokenRecord(1, "w1", pki.RoleWorker)
	mustApply(t, f, MintToken{Record: rec, Actor: "uid:0"})
	if got, ok := f.Token(rec.Hash); !ok || !reflect.DeepEqual(got, rec) {
		t.Fatalf("Token() = %+v, %v", got, ok)
	}
	if a := f.Audit(); a[len(a)-1].Code != codes.EventTokenMinted || a[len(a)-1].Subject != "w1" {
		t.Fatalf("audit = %+v", a)
	}
	later := tokenRecord(2, "w2", pki.RoleControl)
	later.Created = t0.Add(time.Second)
	later.Expires = later.Created.Add(enroll.MaxTTL)
	earlier := tokenRecord(3, "w3", pki.RoleWorker)
	earlier.Created = t0.Add(-time.Second)
	earlier.Expires = earlier.Created.Add(enroll.MinTTL)
	mustApply(t, f, MintToken{Record: later})
	mustApply(t, f, MintToken{Record: earlier})
	var names []string
	for _, r := range f.Tokens() {
		names = append(names, r.Name)
	}
	if fmt.Sprint(names) != "[w3 w1 w2]" {
		t.Fatalf("Tokens() order %v, want by creation time", names)
	}

	for _, tc := range []struct {
		name string
		fsm  *FSM
		edit func(*enroll.TokenRecord)
		want codes.Code
	}{
		{"no-cluster", New(), func(*enroll.TokenRecord) {}, codes.NotInCluster},
		{"duplicate-hash", f, func(r *enroll.TokenRecord) { r.Name = "other" }, codes.BadRequest},
		{"zero-hash", f, func(r *enroll.TokenRecord) { r.Hash = enroll.TokenHash{} }, codes.BadRequest},
		{"bad-name", f, func(r *enroll.TokenRecord) { r.Hash, r.Name = secret(50).Hash(), "-x" }, codes.BadNodeName},
		{"bad-role", f, func(r *enroll.TokenRecord) { r.Hash, r.Role = secret(51).Hash(), "admin" }, codes.BadRole},
		{"ttl-too-long", f, func(r *enroll.TokenRecord) { r.Hash, r.Expires = secret(52).Hash(), r.Created.Add(2*time.Hour) }, codes.TokenBadTTL},
		{"ttl-negative", f, func(r *enroll.TokenRecord) { r.Hash, r.Expires = secret(53).Hash(), r.Created.Add(-time.Hour) }, codes.TokenBadTTL},
		{"bad-addr", f, func(r *enroll.TokenRecord) { r.Hash, r.Addr = secret(54).Hash(), "nowhere" }, codes.BadRequest},
		{"consumed", f, func(r *enroll.TokenRecord) { r.Hash, r.ConsumedAt = secret(55).Hash(), t0 }, codes.BadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tokenRecord(1, "w1", pki.RoleWorker)
			tc.edit(&r)
			before := stateBytes(t, tc.fsm)
			if got := codes.Of(apply(t, tc.fsm, MintToken{Record: r})); got != tc.want {
				t.Fatalf("code %q, want %q", got, tc.want)
			}
			if !bytes.Equal(before, stateBytes(t, tc.fsm)) {
				t.Fatal("refused mint changed the state")
			}
		})
	}
}

func TestSetNodeState(t *testing.T) {
	f := admitFixture(t)
	mustApply(t, f, admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"))

	if got := codes.Of(apply(t, f, SetNodeState{NodeID: "nope", State: NodeLeft, At: t0})); got != codes.NodeUnknown {
		t.Fatalf("unknown node: code %q", got)
	}
	if got := codes.Of(apply(t, f, SetNodeState{NodeID: "n-w1", State: NodeJoining, At: t0})); got != codes.BadRequest {
		t.Fatalf("to joining: code %q", got)
	}
	if got := codes.Of(apply(t, f, SetNodeState{NodeID: "n-w1", State: "sleeping", At: t0})); got != codes.BadRequest {
		t.Fatalf("to an unknown state: code %q", got)
	}

	at := t0.Add(time.Hour)
	for _, step := range []struct {
		state NodeState
		event codes.Code
	}{{NodeActive, codes.EventNodeActive}, {NodeLeft, codes.EventNodeLeft}, {NodeRemoved, codes.EventNodeRemoved}} {
		mustApply(t, f, SetNodeState{NodeID: "n-w1", State: step.state, At: at, Actor: "uid:0"})
		n, _ := f.Node("n-w1")
		if n.State != step.state || !n.Updated.Equal(at) {
			t.Fatalf("after %s: %+v", step.state, n)
		}
		if a := f.Audit(); a[len(a)-1].Code != step.event || a[len(a)-1].Subject != "w1" {
			t.Fatalf("after %s: audit %+v", step.state, a[len(a)-1])
		}
		if step.state == NodeLeft {
			// Issue 52: a node that left comes back only by a new admission.
			if got := codes.Of(apply(t, f, SetNodeState{NodeID: "n-w1", State: NodeActive, At: at})); got != codes.BadRequest {
				t.Fatalf("left to active: code %q", got)
			}
		}
	}

	want := []Revocation{
		{NodeID: "n-gone", Fingerprint: "bb-n-gone", At: t0.Add(time.Minute)},
		{NodeID: "n-gone", Fingerprint: "aa-n-gone", At: t0.Add(time.Minute)},
		{NodeID: "n-w1", Fingerprint: "bb-n-w1", At: at},
		{NodeID: "n-w1", Fingerprint: "aa-n-w1", At: at},
	}
	if got := f.Revocations(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Revocations() = %+v\nwant %+v", got, want)
	}
	if _, ok := f.NodeByName("w1"); ok {
		t.Fatal("NodeByName found a removed node")
	}
	if !f.IPAllocated(netip.MustParseAddr("10.42.0.2")) {
		t.Fatal("a removed node's IP was freed while its record exists")
	}
	before := stateBytes(t, f)
	if got := codes.Of(apply(t, f, SetNodeState{NodeID: "n-w1", State: NodeActive, At: at})); got != codes.BadRequest {
		t.Fatalf("removed -> active: code %q", got)
	}
	if !bytes.Equal(before, stateBytes(t, f)) {
		t.Fatal("refused state change changed the state")
	}
}

func TestAuditRing(t *testing.T) {
	f := bootstrapped(t)
	const extra = 40
	for i := range AuditSize + extra {
		mustApply(t, f, SetNodeState{NodeID: originID, State: NodeActive, At: t0.Add(time.Duration(i+1) * time.Second)})
	}
	a := f.Audit()
	if len(a) != AuditSize {
		t.Fatalf("audit holds %d events, want %d", len(a), AuditSize)
	}
	// The bootstrap event and the oldest extra state events are gone.
	if first := t0.Add((extra + 1) * time.Second); !a[0].At.Equal(first) {
		t.Fatalf("oldest event at %s, want %s", a[0].At, first)
	}
	for i := 1; i < len(a); i++ {
		if !a[i-1].At.Before(a[i].At) {
			t.Fatalf("audit out of order at %d", i)
		}
	}
}

func TestFreeIP(t *testing.T) {
	if _, err := New().FreeIP(); codes.Of(err) != codes.NotInCluster {
		t.Fatalf("no cluster: %v", err)
	}
	f := admitFixture(t) // .1 origin, .5 removed node, .9 w9
	ip, err := f.FreeIP()
	if err != nil || ip != netip.MustParseAddr("10.42.0.2") {
		t.Fatalf("FreeIP() = %v, %v", ip, err)
	}

	// A /29 has six hosts, .1-.6; the network and broadcast are never handed out.
	small := New()
	c := bootstrapCmd()
	c.Cluster.Overlay = netip.MustParsePrefix("10.9.0.0/29")
	c.Origin.OverlayIP = netip.MustParseAddr("10.9.0.1")
	mustApply(t, small, c)
	var got []string
	for i := range 10 {
		ip, err := small.FreeIP()
		if err != nil {
			if codes.Of(err) != codes.Internal {
				t.Fatalf("full overlay: %v", err)
			}
			break
		}
		got = append(got, ip.String())
		name := fmt.Sprintf("w%d", i)
		mustApply(t, small, MintToken{Record: tokenRecord(byte(10+i), name, pki.RoleWorker)})
		a := admitCmd(byte(10+i), "n-"+name, name, pki.RoleWorker, ip.String())
		a.Admission.OverlayIP = netip.PrefixFrom(ip, 29)
		mustApply(t, small, a)
	}
	if fmt.Sprint(got) != "[10.9.0.2 10.9.0.3 10.9.0.4 10.9.0.5 10.9.0.6]" {
		t.Fatalf("handed out %v", got)
	}

	// A restored cluster without an overlay prefix has no address to give.
	var b bytes.Buffer
	b.WriteString(snapshotMagic + "\x01" + `{"cluster":{"id":"c"}}`)
	noOverlay := New()
	if err := noOverlay.Restore(io.NopCloser(&b)); err != nil {
		t.Fatal(err)
	}
	if ip, err := noOverlay.FreeIP(); codes.Of(err) != codes.Internal {
		t.Fatalf("no overlay: FreeIP() = %v, %v; want code %s", ip, err, codes.Internal)
	}
}

func TestReadsAreCopies(t *testing.T) {
	f := bootstrapped(t)
	cl, _ := f.Cluster()
	cl.GossipKeys[0][0] ^= 0xff
	cl.CACert[0] = 'x'
	n, _ := f.Node(originID) // by value: its fields are the caller's, its slices read-only (Nodes)
	n.Name = "mallory"
	f.Audit()[0].Actor = "mallory"

	again, _ := f.Cluster()
	if !reflect.DeepEqual(again, func() Cluster { c := testCluster(); c.Created, c.CAHolder = t0, originID; return c }()) {
		t.Fatal("Cluster() returned shared memory")
	}
	if n, _ := f.Node(originID); n.Name != testOrigin().Name {
		t.Fatal("Node() returned shared memory")
	}
	if f.Audit()[0].Actor != "uid:0" {
		t.Fatal("Audit() returned shared memory")
	}
}

// TestNodesViewFollowsApply: Nodes shares one sorted list between applied
// commands (the same slice, not a copy), and every applied command (or
// restore) is seen by the next Nodes; a refused command keeps the list.
// Writes into the shared list: records_test.go.
func TestNodesViewFollowsApply(t *testing.T) {
	f := bootstrapped(t)
	mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker), Actor: originID})
	first := f.Nodes()
	if len(first) != 1 {
		t.Fatalf("after bootstrap, Nodes() = %d records, want the origin", len(first))
	}
	if &f.Nodes()[0] != &first[0] || &f.View().Nodes[0] != &first[0] {
		t.Fatal("two reads between changes returned different lists: a copy per read")
	}

	mustApply(t, f, joinCmd(1, "w1id", "w1", pki.RoleWorker))
	nodes := f.Nodes()
	if len(nodes) != 2 || nodes[1].Name != "w1" || nodes[1].State != NodeJoining {
		t.Fatalf("after an admission, Nodes() = %+v; want the origin and w1 joining", nodes)
	}
	mustApply(t, f, certsCmd("w1id"))
	if n := f.Nodes()[1]; string(n.TLSCert) != "tls-pem-w1id" {
		t.Fatalf("after its certificates were recorded, w1's TLS cert in Nodes() = %q", n.TLSCert)
	}
	before := fmt.Sprint(f.Nodes())
	if err := apply(t, f, joinCmd(1, "w1id", "w1", pki.RoleWorker)); err == nil {
		t.Fatal("the token was admitted twice")
	}
	if after := fmt.Sprint(f.Nodes()); after != before {
		t.Fatalf("a refused command changed Nodes():\nbefore %s\nafter  %s", before, after)
	}

	var b bytes.Buffer
	if err := WriteSnapshot(&b, bootstrapped(t).snapshot()); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(&b)); err != nil {
		t.Fatal(err)
	}
	if nodes := f.Nodes(); len(nodes) != 1 {
		t.Fatalf("after restoring a one-node snapshot, Nodes() = %d records", len(nodes))
	}
}

// BenchmarkFSMNodes is what a control node's readers pay per Nodes call
// at 1,000 records: "shared", a call between two changes (the list built
// once and shared, read-only: BenchmarkFSMReads); "after-change", the first call
// after an applied command (the list rebuilt: every record copied, then
// sorted), what every call paid before the list was shared.
func BenchmarkFSMNodes(b *testing.B) {
	f := bootstrapped(b)
	for i := range 1000 {
		name := fmt.Sprintf("w%04d", i)
		rec := tokenRecord(0, name, pki.RoleWorker)
		var sec enroll.Secret
		binary.BigEndian.PutUint32(sec[:], uint32(i+1))
		rec.Hash = sec.Hash()
		mustApply(b, f, MintToken{Record: rec, Actor: originID})
		cmd := joinCmd(0, fmt.Sprintf("id%04d", i), name, pki.RoleWorker)
		cmd.Admission.Token = rec.Hash
		mustApply(b, f, cmd)
		mustApply(b, f, certsCmd(fmt.Sprintf("id%04d", i)))
	}
	if n := len(f.Nodes()); n != 1001 {
		b.Fatalf("%d records, want 1,001", n)
	}
	b.Run("shared", func(b *testing.B) {
		for range b.N {
			_ = f.Nodes()
		}
	})
	b.Run("after-change", func(b *testing.B) {
		for range b.N {
			f.view.Store(nil) // as an applied command does
			_ = f.Nodes()
		}
	})
}

func TestNodesSorted(t *testing.T) {
	f := admitFixture(t)
	var names []string
	for _, n := range f.Nodes() {
		names = append(names, n.Name)
	}
	if fmt.Sprint(names) != "[ctl-0 gone w9]" {
		t.Fatalf("Nodes() = %v", names)
	}
}
