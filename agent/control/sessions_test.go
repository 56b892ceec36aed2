package control

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// askNodes GETs the node list through cl on a connection of its own and
// returns that connection's TLS state with the answer.
func askNodes(t *testing.T, cl *Client, addr string) (tls.ConnectionState, error) {
	t.Helper()
	cl.CloseIdle() // a new connection: a full handshake or a resumed one
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+addr+PathNodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return *resp.TLS, answered(addr, resp.Status, raw)
	}
	return *resp.TLS, nil
}

// TestResumedSessionStillJudged (issue 54 item 4): a worker's second
// connection resumes its TLS session; once the worker is removed (its
// leaf revoked), a connection that resumes the same session is refused
// NotMember like a full handshake's: the guard judges the leaf a
// resumed session carries at every request.
func TestResumedSessionStillJudged(t *testing.T) {
	c, origin := newCluster(t)
	id, keys, _ := c.identity(t, "w1", pki.RoleWorker)
	c.admitLeaf(t, origin, "w1", pki.RoleWorker, keys, enroll.Ports{}, id)
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)
	cs, err := askNodes(t, cl, origin.addr)
	if err != nil || cs.DidResume {
		t.Fatalf("first connection: resumed %v, %v; want a full handshake answered", cs.DidResume, err)
	}
	cs, err = askNodes(t, cl, origin.addr)
	if err != nil || !cs.DidResume {
		t.Fatalf("second connection: resumed %v, %v; want a resumed session answered", cs.DidResume, err)
	}
	if _, err := origin.p.RemoveAndConfirm(within(t, 10*time.Second), "w1", "test", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	cs, err = askNodes(t, cl, origin.addr)
	if !cs.DidResume {
		t.Fatalf("after the removal: resumed %v, %v; the test needs a resumed connection", cs.DidResume, err)
	}
	if codes.Of(err) != codes.NotMember {
		t.Fatalf("a removed worker's resumed connection: %v, want %s", err, codes.NotMember)
	}
}

// TestResumedSessionServerChecked: a client's ServerCheck judges the
// server leaf of a resumed session too; the refused session is dropped,
// so the next connection makes a full handshake.
func TestResumedSessionServerChecked(t *testing.T) {
	c, origin := newCluster(t)
	id, keys, _ := c.identity(t, "w1", pki.RoleWorker)
	c.admitLeaf(t, origin, "w1", pki.RoleWorker, keys, enroll.Ports{}, id)
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)
	if _, err := askNodes(t, cl, origin.addr); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("not a control node this worker accepts")
	cl.CheckServers(func(*x509.Certificate) error { return refused })
	if _, err := askNodes(t, cl, origin.addr); !errors.Is(err, refused) {
		t.Fatalf("a resumed connection to a server the check refuses: %v, want the check's refusal", err)
	}
	cl.CheckServers(nil)
	cs, err := askNodes(t, cl, origin.addr)
	if err != nil || cs.DidResume {
		t.Fatalf("after the refusal: resumed %v, %v; want a full handshake answered", cs.DidResume, err)
	}
}

// TestSessionsFollowTheBundle: a client whose CA bundle changed (a CA
// rotation added the next CA, or dropped the old one at its finish)
// offers none of the sessions it made before, whose server leaves may be
// under a CA it no longer trusts: its next connection makes a full
// handshake, and the one after resumes again.
func TestSessionsFollowTheBundle(t *testing.T) {
	c, origin := newCluster(t)
	id, keys, _ := c.identity(t, "w1", pki.RoleWorker)
	c.admitLeaf(t, origin, "w1", pki.RoleWorker, keys, enroll.Ports{}, id)
	live, err := pki.NewLiveIdentity(id)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := NewLiveClient(live)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)
	for i, want := range []bool{false, true} {
		if cs, err := askNodes(t, cl, origin.addr); err != nil || cs.DidResume != want {
			t.Fatalf("connection %d: resumed %v, %v; want %v, answered", i+1, cs.DidResume, err, want)
		}
	}
	next, err := pki.NewCA("e2e", netip.MustParsePrefix("10.42.0.0/16"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	grown := *id
	grown.CACert = append(append([]byte{}, id.CACert...), next.CertPEM()...)
	if err := live.Swap(&grown); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true} {
		if cs, err := askNodes(t, cl, origin.addr); err != nil || cs.DidResume != want {
			t.Fatalf("after the bundle changed, connection %d: resumed %v, %v; want %v, answered", i+1, cs.DidResume, err, want)
		}
	}
}
