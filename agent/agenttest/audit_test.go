package agenttest_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// lastEvent is the last audit event with code about subject.
func lastEvent(t *testing.T, ev []apitype.AuditEvent, code codes.Code, subject string) apitype.AuditEvent {
	t.Helper()
	for i := len(ev) - 1; i >= 0; i-- {
		if ev[i].Code == code && ev[i].Subject == subject {
			return ev[i]
		}
	}
	t.Fatalf("no %s about %q in %+v", code, subject, ev)
	return apitype.AuditEvent{}
}

// TestAuditActorIsTheOperator: the audit actor of an admit run on a raft
// follower is the operator who ran it (this test's uid, from the socket's
// peer credentials) on that follower, as the leader recorded it; the
// origin's init is its operator's. A local API body that names an actor is
// refused (unknown field) and mints nothing: no request field sets the
// actor. The trail is the same on both control nodes, --since filters it,
// and a worker has none.
func TestAuditActorIsTheOperator(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	c2 := agenttest.NewNode(t, "c2", clock)
	w1 := agenttest.NewNode(t, "w1", clock)
	origin.Init(t, "alpha")
	if _, err := c2.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "c2", Role: "control"})); err != nil {
		t.Fatal(err)
	}
	follower := c2
	if st, _ := origin.Client.Status(t.Context()); st.Raft != "leader" {
		follower = origin
	}
	uid := os.Getuid()
	if _, err := w1.Join(t, follower.Admit(t, apitype.AdmitRequest{Name: "w1"})); err != nil {
		t.Fatal(err)
	}

	// An actor in the body: refused before anything happens.
	code := rawPost(t, follower, apitype.PathAdmit, `{"name":"w9","actor":"uid=0@origin"}`)
	if code != http.StatusBadRequest {
		t.Errorf("admit with an actor in the body: HTTP %d, want 400", code)
	}

	ev, err := origin.Client.Audit(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if e := lastEvent(t, ev, codes.EventClusterCreated, "alpha"); e.Actor != fmt.Sprintf("uid=%d@origin", uid) {
		t.Errorf("init by %q, want uid=%d@origin", e.Actor, uid)
	}
	want := fmt.Sprintf("uid=%d@%s", uid, follower.Name)
	if e := lastEvent(t, ev, codes.EventTokenMinted, "w1"); e.Actor != want || e.Event != "admit" {
		t.Errorf("admit of w1 on %s: %+v, want by %s", follower.Name, e, want)
	}
	for _, e := range ev {
		if e.Subject == "w9" {
			t.Errorf("the refused admit left %+v", e)
		}
	}
	other, err := c2.Client.Audit(t.Context(), 0)
	if err != nil || len(other) != len(ev) {
		t.Fatalf("c2's trail: %d events, %v; want %d", len(other), err, len(ev))
	}

	// --since is measured on the serving node's clock (the test clock).
	clock.Advance(time.Hour)
	origin.Admit(t, apitype.AdmitRequest{Name: "late"})
	recent, err := origin.Client.Audit(t.Context(), 30*time.Minute)
	if err != nil || len(recent) != 1 || recent[0].Subject != "late" || recent[0].Code != codes.EventTokenMinted {
		t.Fatalf("audit --since 30m: %+v, %v; want only the admit of late", recent, err)
	}
	if _, err := w1.Client.Audit(t.Context(), 0); codes.Of(err) != codes.NotControl {
		t.Fatalf("audit on a worker: %v, want %s", err, codes.NotControl)
	}
}

// rawPost posts body to path on n's local socket and returns the status.
func rawPost(t *testing.T, n *agenttest.Node, path, body string) int {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", n.Socket)
	}}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+apitype.Host+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
