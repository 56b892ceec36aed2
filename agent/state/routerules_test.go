package state

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// The private ranges a worker asked for, to block everyone (issue 52).
var (
	rfc1918b = netip.MustParsePrefix("172.16.0.0/12")
	rfc1918c = netip.MustParsePrefix("192.168.0.0/16")
)

// activeRelay admits and confirms a worker that offers itself as a
// relay, claiming the underlay address claimed while its join came from
// seen.
func activeRelay(t *testing.T, f *FSM, seed byte, name, claimed, seen string) string {
	t.Helper()
	id := "n-" + name
	mustApply(t, f, MintToken{Record: tokenRecord(seed, name, pki.RoleWorker)})
	c := joinCmd(seed, id, name, pki.RoleWorker)
	c.Admission.Underlay, c.Admission.SourceAddr, c.Admission.Relay = claimed, seen, true
	mustApply(t, f, c)
	mustApply(t, f, joiningCertsCmd(id))
	mustApply(t, f, ConfirmJoin{NodeID: id, At: t0.Add(2 * time.Minute)})
	return id
}

func ask(id string, at time.Time, ps ...netip.Prefix) AdvertiseRoutes {
	return AdvertiseRoutes{NodeID: id, Prefixes: ps, At: at, Rules: RulesApproved}
}

func approve(id string, p netip.Prefix, at time.Time) ApproveRoute {
	return ApproveRoute{NodeID: id, Prefix: p, At: at, Actor: "uid=0@ctl-0", Rules: RulesApproved}
}

// asked is the prefixes node id's record asks for.
func asked(f *FSM, id string) []netip.Prefix {
	n, _ := f.Node(id)
	return prefixesOf(n.Routes)
}

// TestUnapprovedRequestsBlockNobody: a worker that asks for the private
// ranges, unapproved, refuses no one else's request; the overlap is
// judged when an operator approves, against approved prefixes only, and
// the refusal names the node in the way. Fails on 8b0a8d4: r1's request
// was refused RouteOverlap ("which node w9 asks to carry").
func TestUnapprovedRequestsBlockNobody(t *testing.T) {
	f := bootstrapped(t)
	w9 := activeWorker(t, f, 9, "w9")
	r1, r2, r3 := activeWorker(t, f, 1, "r1"), activeWorker(t, f, 2, "r2"), activeWorker(t, f, 3, "r3")
	at := t0.Add(time.Hour)
	mustApply(t, f, ask(w9, at, rfc1918b, rfc1918c))

	lan172 := netip.MustParsePrefix("172.16.4.0/24")
	if err := apply(t, f, ask(r1, at, lan50)); err != nil {
		t.Fatalf("r1 asks for %s beside w9's unapproved %s: %v", lan50, rfc1918c, err)
	}
	if err := apply(t, f, ask(r2, at, lan172)); err != nil {
		t.Fatalf("r2 asks for %s beside w9's unapproved %s: %v", lan172, rfc1918b, err)
	}
	if got := asked(f, r1); !slices.Equal(got, []netip.Prefix{lan50}) {
		t.Fatalf("r1 asks for %v, want [%s]", got, lan50)
	}

	// Judged at approval: the first approved wins the range.
	mustApply(t, f, approve(r1, lan50, at.Add(time.Second)))
	err := apply(t, f, approve(w9, rfc1918c, at.Add(2*time.Second)))
	if codes.Of(err) != codes.RouteOverlap {
		t.Fatalf("approving w9's %s over r1's approved %s: %v, want %s", rfc1918c, lan50, err, codes.RouteOverlap)
	}
	if !strings.Contains(err.Error(), "r1") || !strings.Contains(err.Error(), "meshctl routes withdraw r1 "+lan50.String()) {
		t.Errorf("the refusal does not name the node in the way and its remedy: %v", err)
	}
	if n, _ := f.Node(w9); slices.ContainsFunc(n.Routes, func(r Route) bool { return r.Approved }) {
		t.Errorf("a refused approval approved %v", n.Routes)
	}

	// An approved prefix constrains a new request.
	if err := apply(t, f, ask(r3, at, rfc1918c)); codes.Of(err) != codes.RouteOverlap {
		t.Errorf("r3 asks for %s over r1's approved %s: %v, want %s", rfc1918c, lan50, err, codes.RouteOverlap)
	}
	// Equal prefixes are failover, requested and approved.
	mustApply(t, f, ask(r3, at, lan50))
	mustApply(t, f, approve(r3, lan50, at.Add(3*time.Second)))
	if got := carrier(t, f, lan50); got != r1 {
		t.Errorf("carrier of %s is %q, want %s (approved first)", lan50, got, r1)
	}

	// A prefix asked again is not judged again until its approval: w9
	// keeps its requests while it asks for one more.
	extra := netip.MustParsePrefix("198.18.0.0/15")
	if err := apply(t, f, ask(w9, at.Add(4*time.Second), rfc1918b, rfc1918c, extra)); err != nil {
		t.Fatalf("w9 asks again for what it asked and one more: %v", err)
	}
	// Once r1 and r3 no longer hold it, the range is w9's to be approved.
	mustApply(t, f, WithdrawRoute{NodeID: r1, Prefix: lan50, At: at.Add(5 * time.Second)})
	mustApply(t, f, WithdrawRoute{NodeID: r3, Prefix: lan50, At: at.Add(5 * time.Second)})
	mustApply(t, f, approve(w9, rfc1918c, at.Add(6*time.Second)))
	if err := apply(t, f, approve(r1, lan50, at.Add(7*time.Second))); codes.Of(err) != codes.RouteOverlap {
		t.Errorf("approving r1's %s over w9's approved %s: %v, want %s", lan50, rfc1918c, err, codes.RouteOverlap)
	}
	// r2's 172.16.4.0/24 and w9's 172.16.0.0/12 were both asked; the
	// first approved stands.
	mustApply(t, f, approve(r2, lan172, at.Add(8*time.Second)))
	if err := apply(t, f, approve(w9, rfc1918b, at.Add(9*time.Second))); codes.Of(err) != codes.RouteOverlap {
		t.Errorf("approving w9's %s over r2's approved %s: %v, want %s", rfc1918b, lan172, err, codes.RouteOverlap)
	}
}

// TestRelayCountsWhereItWasSeen: a relay's claimed underlay address
// refuses nothing; the address its join came from (seen_from) does, at
// the request and at approval; a control node's advertised underlay
// still counts. Fails on 8b0a8d4: r1's request for 192.168.0.0/16 was
// refused RouteUnderlay by the relay's claim of 192.168.7.7.
func TestRelayCountsWhereItWasSeen(t *testing.T) {
	f := bootstrapped(t)
	activeRelay(t, f, 8, "relay1", "192.168.7.7", "203.0.113.9")
	r1 := activeWorker(t, f, 1, "r1")
	at := t0.Add(time.Hour)
	if err := apply(t, f, ask(r1, at, rfc1918c)); err != nil {
		t.Fatalf("r1 asks for %s, which holds only relay1's claimed address: %v", rfc1918c, err)
	}
	if err := apply(t, f, approve(r1, rfc1918c, at)); err != nil {
		t.Fatalf("approving %s, which holds only relay1's claimed address: %v", rfc1918c, err)
	}
	seen := netip.MustParsePrefix("203.0.113.0/24")
	if err := apply(t, f, ask(r1, at, rfc1918c, seen)); codes.Of(err) != codes.RouteUnderlay {
		t.Errorf("r1 asks for %s, which holds the address relay1 was seen from: %v, want %s", seen, err, codes.RouteUnderlay)
	}
	if err := apply(t, f, ask(r1, at, rfc1918c, netip.MustParsePrefix("192.0.2.0/24"))); codes.Of(err) != codes.RouteUnderlay {
		t.Errorf("a prefix holding the origin's advertised underlay: %v, want %s", err, codes.RouteUnderlay)
	}

	// Asked before a relay is seen inside it: refused at approval.
	later := netip.MustParsePrefix("198.51.200.0/24")
	mustApply(t, f, ask(r1, at, rfc1918c, later))
	activeRelay(t, f, 7, "relay2", "10.9.9.9", "198.51.200.7")
	if err := apply(t, f, approve(r1, later, at.Add(time.Second))); codes.Of(err) != codes.RouteUnderlay {
		t.Errorf("approving %s, which now holds relay2's seen address: %v, want %s", later, err, codes.RouteUnderlay)
	}
}

// TestRouteEntriesOfIssue33ReplayAsBefore: an entry written before issue
// 52 names no rules and is judged as it was then (each refusal's code is
// what the tracked result remembers), so a raft log replays to the state
// it made. The bytes are the form that release's Encode wrote (type 80,
// no "rules").
func TestRouteEntriesOfIssue33ReplayAsBefore(t *testing.T) {
	f := bootstrapped(t)
	activeRelay(t, f, 8, "relay1", "172.20.7.7", "203.0.113.9")
	w9, r1 := activeWorker(t, f, 9, "w9"), activeWorker(t, f, 1, "r1")
	old := func(id, prefixes string) error {
		t.Helper()
		b := append([]byte{byte(typeAdvertiseRoutes)}, `{"node_id":"`+id+`","prefixes":[`+prefixes+`],"at":"2026-01-01T01:00:00Z"}`...)
		c, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if c.(AdvertiseRoutes).Rules != RulesRequested {
			t.Fatalf("an entry without rules decodes to rules %d", c.(AdvertiseRoutes).Rules)
		}
		return apply(t, f, c)
	}
	if err := old(w9, `"192.168.0.0/16"`); err != nil {
		t.Fatal(err)
	}
	before := stateBytes(t, f)
	if err := old(r1, `"192.168.50.0/24"`); codes.Of(err) != codes.RouteOverlap {
		t.Errorf("an issue 33 entry overlapping an unapproved request: %v, want %s as then", err, codes.RouteOverlap)
	}
	if err := old(r1, `"172.20.0.0/16"`); codes.Of(err) != codes.RouteUnderlay {
		t.Errorf("an issue 33 entry holding a relay's claimed underlay: %v, want %s as then", err, codes.RouteUnderlay)
	}
	if got := stateBytes(t, f); string(got) != string(before) {
		t.Error("refused issue 33 entries changed the state")
	}
	if err := apply(t, f, ApproveRoute{NodeID: w9, Prefix: rfc1918c, At: t0}); err != nil {
		t.Errorf("an issue 33 approval: %v", err)
	}
	if err := apply(t, f, AdvertiseRoutes{NodeID: r1, Prefixes: []netip.Prefix{lan50}, Rules: RulesApproved + 1}); codes.Of(err) != codes.BadRequest {
		t.Errorf("rules this build does not know: %v, want %s", err, codes.BadRequest)
	}
}

// TestApprovedPrefixesNeverOverlap: whatever rules an approval names,
// two active nodes are never approved for overlapping prefixes (unless
// equal). Requests taken under RulesApproved can overlap, and an
// approval without rules (a leader of the release before, during an
// upgrade) must not approve both.
func TestApprovedPrefixesNeverOverlap(t *testing.T) {
	f := bootstrapped(t)
	w9, r1 := activeWorker(t, f, 9, "w9"), activeWorker(t, f, 1, "r1")
	mustApply(t, f, ask(w9, t0, rfc1918c))
	mustApply(t, f, ask(r1, t0, lan50))
	mustApply(t, f, ApproveRoute{NodeID: r1, Prefix: lan50, At: t0})
	if err := apply(t, f, ApproveRoute{NodeID: w9, Prefix: rfc1918c, At: t0}); codes.Of(err) != codes.RouteOverlap {
		t.Errorf("an approval without rules over an approved overlapping prefix: %v, want %s", err, codes.RouteOverlap)
	}
}
