//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// auditOf is `meshctl audit -o json [args]` on nd.
func auditOf(t testing.TB, nd *Node, args ...string) []apitype.AuditEvent {
	t.Helper()
	var ev []apitype.AuditEvent
	if err := nd.CtlJSON(t.Context(), &ev, append([]string{"audit"}, args...)...); err != nil {
		t.Fatal(err)
	}
	return ev
}

// findEvent is the last event with code about subject, or fails.
func findEvent(t testing.TB, ev []apitype.AuditEvent, code codes.Code, subject string) apitype.AuditEvent {
	t.Helper()
	for i := len(ev) - 1; i >= 0; i-- {
		if ev[i].Code == code && ev[i].Subject == subject {
			return ev[i]
		}
	}
	t.Fatalf("no %s event about %q in the audit trail:\n%s", code, subject, dumpAudit(ev))
	return apitype.AuditEvent{}
}

// sameAudit: the same events, times compared as instants.
func sameAudit(a, b []apitype.AuditEvent) bool {
	return slices.EqualFunc(a, b, func(x, y apitype.AuditEvent) bool {
		x.At, y.At = x.At.UTC(), y.At.UTC()
		return x == y
	})
}

func dumpAudit(ev []apitype.AuditEvent) string {
	var b strings.Builder
	for _, e := range ev {
		fmt.Fprintf(&b, "  %s %-13s %-28s %-8s %s\n", e.At.Format(time.StampMilli), e.Event, e.Actor, e.Subject, e.Detail)
	}
	return b.String()
}

// TestAuditTrail: real meshd processes, two control nodes and two
// workers. `meshctl audit` on a control node lists who did what: the
// operator (uid 0, on the node whose socket they used) for init, for an
// admit run on the raft follower (forwarded to the leader, which records
// the follower's operator, not itself), for a removal; the seed node for
// the join and its confirmation; the worker's operator, relayed by a
// control node, for the worker's leave. The trail is the same on both
// control nodes and after a restart; --since filters it; -o json has the
// documented shape; a worker has none (NotControl).
func TestAuditTrail(t *testing.T) {
	n := NewNet(t)
	nodes := cluster(t, n)
	origin := nodes[0]
	c2 := n.NewNode("c2")
	c2.Start(t)
	c2.MustCtl(t, "join", origin.Admit(t, "c2", "--role", "control"))
	follower := c2
	if leaderOf(t, origin) != "origin" {
		follower = origin
	}
	w1, w2 := n.NewNode("w1"), n.NewNode("w2")
	w1.Start(t)
	w2.Start(t)
	w1.MustCtl(t, "join", follower.Admit(t, "w1"))
	w2.MustCtl(t, "join", origin.Admit(t, "w2"))

	ev := auditOf(t, origin)
	if e := findEvent(t, ev, codes.EventClusterCreated, "e2e"); e.Actor != "uid=0@origin" || e.Event != "init" {
		t.Errorf("init: %+v, want by uid=0@origin", e)
	}
	if e := findEvent(t, ev, codes.EventTokenMinted, "w1"); e.Actor != "uid=0@"+follower.NodeName || e.Event != "admit" {
		t.Errorf("admit of w1 on the follower %s: %+v, want by uid=0@%s", follower.NodeName, e, follower.NodeName)
	}
	for _, code := range []codes.Code{codes.EventNodeAdmitted, codes.EventNodeActive} {
		if e := findEvent(t, ev, code, "w1"); !strings.HasPrefix(e.Actor, "node:") {
			t.Errorf("%s of w1: %+v, want by the seed node", code, e)
		}
	}
	failsWith(t, w1, codes.NotControl, "audit")

	w1.MustCtl(t, "leave")
	w2.Kill()
	origin.MustCtl(t, "remove", "w2")
	ev = auditOf(t, origin)
	if e := findEvent(t, ev, codes.EventNodeLeft, "w1"); e.Event != "leave" ||
		(e.Actor != "uid=0@w1 via origin" && e.Actor != "uid=0@w1 via c2") {
		t.Errorf("leave of w1: %+v, want by uid=0@w1 via a control node", e)
	}
	if e := findEvent(t, ev, codes.EventNodeRemoved, "w2"); e.Actor != "uid=0@origin" || e.Event != "remove" {
		t.Errorf("removal of w2: %+v, want by uid=0@origin", e)
	}
	if e := findEvent(t, ev, codes.EventKeysRotated, "drop"); e.Actor != "uid=0@origin" {
		t.Errorf("the removal's key rotation: %+v, want by uid=0@origin", e)
	}
	t.Logf("the audit trail:\n%s", dumpAudit(ev))

	// -o json: an array of objects with these keys, and no others.
	out := c2.MustCtl(t, "audit", "-o", "json")
	var raw []map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil || len(raw) != len(ev) {
		t.Fatalf("audit -o json on c2: %d events, %v; want %d\n%s", len(raw), err, len(ev), out)
	}
	for _, o := range raw {
		for k := range o {
			if !slices.Contains([]string{"at", "code", "event", "actor", "subject", "detail"}, k) {
				t.Errorf("audit -o json: unknown key %q in %v", k, o)
			}
		}
		for _, k := range []string{"at", "code", "event", "actor"} {
			if _, ok := o[k]; !ok {
				t.Errorf("audit -o json: no %q in %v", k, o)
			}
		}
	}
	if got := auditOf(t, c2); !sameAudit(got, ev) {
		t.Errorf("c2's trail differs from the origin's:\n%s\nvs\n%s", dumpAudit(got), dumpAudit(ev))
	}

	// --since: a cut-off between init and w1's admission. meshd takes the
	// cut as its now minus the duration, so it lies between cutLo and cutHi
	// (the command's start and end): every event from cutHi on is listed,
	// none before cutLo.
	minted := findEvent(t, ev, codes.EventTokenMinted, "w1").At
	d := time.Since(ev[0].At.Add(minted.Sub(ev[0].At) / 2)).Round(time.Millisecond)
	start := time.Now()
	since := auditOf(t, origin, "--since", d.String())
	cutLo, cutHi := start.Add(-d-time.Millisecond), time.Now().Add(-d+time.Millisecond)
	if len(since) == 0 || since[0].At.Before(cutLo) || slices.ContainsFunc(since, func(e apitype.AuditEvent) bool {
		return e.Code == codes.EventClusterCreated
	}) {
		t.Errorf("--since: %d events, want some and none before %v:\n%s", len(since), cutLo, dumpAudit(since))
	}
	for _, e := range ev {
		if !e.At.Before(cutHi) && !slices.ContainsFunc(since, func(s apitype.AuditEvent) bool { return s.At.Equal(e.At) && s.Code == e.Code && s.Subject == e.Subject }) {
			t.Errorf("--since %v: %s %s at %v missing (listed: every event after %v)", d, e.Code, e.Subject, e.At, cutHi)
		}
	}
	findEvent(t, since, codes.EventNodeRemoved, "w2")
	if _, _, code := origin.Ctl(t.Context(), "audit", "--since=-5m"); code != 2 {
		t.Errorf("audit --since=-5m: exit %d, want 2 (usage)", code)
	}

	// In raft: a restarted control node lists the same trail.
	c2.Stop(t)
	c2.Start(t)
	Eventually(t, 20*time.Second, "c2 lists the same trail after a restart", func() error {
		var got []apitype.AuditEvent
		if err := c2.CtlJSON(t.Context(), &got, "audit"); err != nil {
			return err
		}
		if !sameAudit(got, ev) {
			return fmt.Errorf("%d events, want %d", len(got), len(ev))
		}
		return nil
	})
}
