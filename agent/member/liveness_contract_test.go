package member

import (
	"crypto/rand"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/loopbacktest"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// TestLivenessContract (issue 54 item 3): both sources of liveness give
// the same answers for the same situation. Node a watches b (alive), c
// (killed: gossip finds it failed, the control nodes' verdict is Unheard),
// d (left: it leaves gossip, its record departs) and e (removed: its
// record departs while it still gossips). Gossip (real serf on the
// loopback) and the record-fed source (the same node list, its change
// log) must agree on the gossip view status and `nodes` read (a and b
// alive, c failed, d and e left), on the statuses by address the relay
// loop reads (b alive, c failed, d left) and on LastSeen. Where they
// differ by design, nothing is compared: serf's own status of the removed
// e (alive until it is cut off; the record-fed source says left at once),
// and a record forgotten (reaped): the record-fed source drops it at
// once, serf after its reap timeout; that case is checked on the
// record-fed source alone.
func TestLivenessContract(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	names := []string{"a", "b", "c", "d", "e"}
	g, ip := map[string]*gossip.Gossip{}, map[string]netip.Addr{}
	var recs []control.NodeRecord
	for _, n := range names {
		g[n], ip[n] = startTaggedGossip(t, n, key)
		recs = append(recs, taggedRecord(n, pki.RoleWorker, ip[n]))
	}
	for _, n := range names[1:] {
		if _, err := g[n].Join(t.Context(), []string{net.JoinHostPort(ip["a"].String(), strconv.Itoa(forgedViewPort))}); err != nil {
			t.Fatalf("%s joins a: %v", n, err)
		}
	}
	waitUntil(t, 10*time.Second, "a's gossip shows all five alive", func() bool {
		ms := g["a"].Members()
		return len(ms) == 5 && !slices.ContainsFunc(ms, func(m gossip.Member) bool { return m.Status != gossip.StatusAlive })
	})
	facts := newLogFacts(recs...)
	heard := newRecordLiveness(facts, g["a"], "id-a", time.Now)
	heard.sync() // it knows every member while all are active, as a worker does
	sources := map[string]*Runtime{
		"gossip":  livenessNode(t, "a", ip["a"], facts, g["a"], nil),
		"records": livenessNode(t, "a", ip["a"], facts, g["a"], heard),
	}

	// The situation.
	if err := g["c"].Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := g["d"].Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := taggedRecord("c", pki.RoleWorker, ip["c"])
	c.Unheard = time.Now().Truncate(time.Second)
	departed := func(n, state string) control.NodeRecord { // a departed record carries its state alone
		return control.NodeRecord{Node: apitype.Node{ID: "id-" + n, State: state}}
	}
	facts.set(c, departed("d", "left"), departed("e", "removed"))
	heard.sync()
	waitUntil(t, 20*time.Second, "a's gossip shows c failed and d left", func() bool {
		ms := g["a"].Members()
		return statusOf(ms, "c") == gossip.StatusFailed && statusOf(ms, "d") == gossip.StatusLeft
	})

	wantView := map[string]gossip.Status{"a": gossip.StatusAlive, "b": gossip.StatusAlive, "c": gossip.StatusFailed,
		"d": gossip.StatusLeft, "e": gossip.StatusLeft}
	wantStatus := map[string]gossip.Status{"b": gossip.StatusAlive, "c": gossip.StatusFailed, "d": gossip.StatusLeft}
	for name, rt := range sources {
		var view map[string]gossip.Status
		waitUntil(t, 5*time.Second, name+": the gossip view (c's failure shown once a's own probe of it failed)", func() bool {
			view = rt.members.gossipView()
			return maps.Equal(view, wantView)
		})
		status := rt.peers().Statuses()
		for n, want := range wantStatus {
			if got := status[ip[n]]; got != want {
				t.Errorf("%s: %s's status by address %q, want %q", name, n, got, want)
			}
		}
		for n, want := range map[string]bool{"b": false, "c": true, "d": true} {
			if _, ok := rt.peers().LastSeen(n); ok != want {
				t.Errorf("%s: LastSeen(%s) known %v, want %v", name, n, ok, want)
			}
		}
		if got := rt.members.gossipStatus(); got.Members != 5 || got.Alive != 2 {
			t.Errorf("%s: status counts %d members, %d alive; want 5 and 2", name, got.Members, got.Alive)
		}
	}

	facts.forget("id-d") // the record reaped: no longer listed
	heard.sync()
	if got := statusOf(heard.Members(), "d"); got != "" {
		t.Fatalf("records: d is %q once its record is forgotten, want absent (as serf once it reaps)", got)
	}
}

// TestReadersFollowRecordLiveness: on a worker reading its node list, the
// readers follow the records' verdicts, not gossip (whose pool here holds
// this node alone): pair health's targets drop a member once its record
// is unheard (and this node's own probe of it failed), the status view
// counts it failed, and the relay-down loop is woken (the path bell's
// source rang) and names the tunnel whose relay's record went unheard.
func TestReadersFollowRecordLiveness(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	a, aIP := startTaggedGossip(t, "a", key)
	ip := map[string]netip.Addr{"a": aIP}
	recs := []control.NodeRecord{taggedRecord("a", pki.RoleWorker, aIP)}
	for _, n := range []string{"b", "c", "r"} { // never gossip: only their records speak for them
		ip[n] = netip.MustParseAddr(loopbacktest.TakeIP(t, "127.82"))
		recs = append(recs, taggedRecord(n, pki.RoleWorker, ip[n]))
	}
	facts := newLogFacts(recs...)
	heard := newRecordLiveness(facts, a, "id-a", time.Now)
	rt := livenessNode(t, "a", aIP, facts, a, heard)
	targets := func() []string {
		var out []string
		for _, tg := range rt.pairTargets() {
			out = append(out, tg.name)
		}
		return out
	}
	if got := targets(); !slices.Equal(got, []string{"b", "c", "r"}) {
		t.Fatalf("pair targets %v, want [b c r]: every other record is heard", got)
	}
	if st := rt.members.gossipStatus(); st.Members != 4 || st.Alive != 4 {
		t.Fatalf("status counts %d members, %d alive; want 4 and 4", st.Members, st.Alive)
	}
	tunnels := []mesh.Tunnel{{OverlayIP: ip["b"], Relayed: true, Relays: []netip.Addr{ip["r"]}}}
	if got := relaysDown(tunnels, rt.peers().Statuses()); len(got) != 0 {
		t.Fatalf("relays down %v, want none", got)
	}

	wake := rt.peers().Changes() // what runPathWake waits on to wake the relay-down loop and the path upgrades
	unheard := func(n string) control.NodeRecord {
		r := taggedRecord(n, pki.RoleWorker, ip[n])
		r.Unheard = time.Now().Truncate(time.Second)
		return r
	}
	facts.set(unheard("c"), unheard("r"))
	rt.recordsChanged() // what the watch stream's hook (watched) does
	if !closed(wake) {
		t.Fatal("the liveness source did not ring at the records' change: the relay-down loop would sleep through it")
	}
	waitUntil(t, 5*time.Second, "pair targets drop c and r", func() bool { return slices.Equal(targets(), []string{"b"}) })
	if st := rt.members.gossipStatus(); st.Members != 4 || st.Alive != 2 {
		t.Fatalf("status counts %d members, %d alive; want 4 and 2", st.Members, st.Alive)
	}
	if got := relaysDown(tunnels, rt.peers().Statuses()); !slices.Equal(got, []netip.Addr{ip["b"]}) {
		t.Fatalf("relays down %v, want [%v]: its relay r is unheard", got, ip["b"])
	}
	if got := statusOf(a.Members(), "c"); got != "" {
		t.Fatalf("the pool lists c (%q): this test's verdicts would not be the records'", got)
	}
}
