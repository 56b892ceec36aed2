package agenttest_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// caller is one kind of client of the internal API.
type caller string

const (
	asControl caller = "control leaf"
	asWorker  caller = "worker leaf"
	asForeign caller = "leaf of a foreign CA"
	asNone    caller = "no certificate"
)

// route is one door of the internal API: who may pass, and a request body
// that would do harm (sign, apply, remove) if a caller who may not pass got
// through. allowedBody, when set, is what a caller who may pass sends
// instead, so the allowed cell checks the guard lets it in without the
// harm.
type route struct {
	method, path string
	allow        []caller
	harmfulBody  any
	allowedBody  any
	// allowedCode, when set, is the code an allowed caller's request
	// must get (the check behind the guard refuses it).
	allowedCode codes.Code
	// changesCaller marks a route that changes the caller's own record;
	// its allowed cells run last, with callers set aside for it.
	changesCaller bool
}

// TestInternalAPIAuthorization calls every internal API route on the CA
// holder (also the leader) with a control leaf, a worker leaf, a leaf of a
// foreign CA and no certificate. Each caller a route does not allow gets
// PeerRoleDenied (a foreign leaf is refused at the TLS handshake already),
// and the harmful requests they sent signed nothing, applied nothing and
// removed nothing. Loosening any route's guard fails this test.
func TestInternalAPIAuthorization(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	c2 := agenttest.NewNode(t, "c2", clock)
	w1 := agenttest.NewNode(t, "w1", clock)
	w2 := agenttest.NewNode(t, "w2", clock)
	origin.Init(t, "alpha")
	if _, err := c2.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "c2", Role: "control"})); err != nil {
		t.Fatalf("control join: %v", err)
	}
	for _, w := range []*agenttest.Node{w1, w2} {
		if _, err := w.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: w.Name})); err != nil {
			t.Fatalf("worker join %s: %v", w.Name, err)
		}
	}
	c2ID, w1ID := nodeRow(t, origin, "c2").ID, nodeRow(t, origin, "w1").ID

	clients := map[caller]*http.Client{
		asControl: memberClient(t, c2),
		asWorker:  memberClient(t, w1),
		asForeign: foreignClient(t, origin),
		asNone:    anonymousClient(t, origin),
	}

	keys := mustKeys(t, "intruder")
	removeW1, err := state.Track("authz-remove-w1", &state.SetNodeState{NodeID: w1ID, State: state.NodeRemoved, At: time.Now(), Actor: "intruder"})
	if err != nil {
		t.Fatal(err)
	}
	harmlessApply, err := state.Track("authz-allowed", &state.PruneTokens{Before: time.Now().Add(-time.Hour), At: time.Now(), Actor: "c2"})
	if err != nil {
		t.Fatal(err)
	}
	// Sign requests for an admission raft never recorded: even a control
	// node that passes the guard gets SignRefused, nothing signed.
	signTLS := control.SignRequest{NodeID: "intruder-id", Name: "intruder", Role: pki.RoleControl, CSR: keys.CSR}
	signNebula := control.SignRequest{NodeID: "intruder-id", Name: "intruder", Role: pki.RoleControl,
		OverlayIP: netip.MustParsePrefix("10.42.9.9/16")}
	intruderCA, err := pki.NewCA("intruder", netip.MustParsePrefix("10.42.0.0/16"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	intruderBundle, err := intruderCA.Bundle()
	if err != nil {
		t.Fatal(err)
	}
	foreignCA := control.CAReceive{CA: intruderBundle, Nonce: make([]byte, 32)}
	members := []caller{asControl, asWorker}
	controlOnly := []caller{asControl}

	routes := []route{
		{method: "GET", path: "/v1/nodes", allow: members},
		{method: "GET", path: "/v1/watch", allow: members},
		{method: "GET", path: "/v1/revocations", allow: members},
		{method: "GET", path: "/v1/gossip/keys", allow: members},
		{method: "GET", path: "/v1/self/nebula-cert", allow: members},
		{method: "GET", path: "/v1/self/tls-cert", allow: members},
		{method: "GET", path: "/v1/ca/bundle", allow: members},
		{method: "POST", path: "/v1/self/left", allow: members, harmfulBody: struct{}{}, changesCaller: true},
		// An active member's confirmation is a no-op; anyone else's is refused.
		{method: "POST", path: "/v1/self/confirm", allow: members, harmfulBody: struct{}{}},
		// A joiner undoes its own join (issue 52): the body names no node,
		// and an active member's undo is refused.
		{method: "POST", path: "/v1/self/abort", allow: members, harmfulBody: control.AbortJoinRequest{Cause: "intruder"},
			allowedCode: codes.JoinConfirmed},
		// A member records its own relay offer (issue 29): the body names no
		// node, so the caller's record is the only one it can change.
		{method: "POST", path: "/v1/self/relay", allow: members, harmfulBody: control.RelayRequest{Relay: true},
			allowedBody: control.RelayRequest{Relay: false}},
		// A member asks for the prefixes it would carry (issue 33): the
		// body names no node, so only the caller's own request changes.
		{method: "POST", path: "/v1/self/routes", allow: members,
			harmfulBody: control.SelfRoutesRequest{Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.77.0/24")}},
			allowedBody: control.SelfRoutesRequest{}},
		// A member's report of its own tunnels; the view of all of them
		// is for control nodes (issue 15).
		{method: "POST", path: "/v1/self/tunnels", allow: members, harmfulBody: control.TunnelsRequest{}},
		// A CA report not signed by the caller's recorded key: the check
		// behind the guard refuses it, nothing written.
		{method: "POST", path: "/v1/self/facts", allow: members,
			harmfulBody: control.FactsRequest{Version: "forged", CA: "a.b.c", CASig: []byte("not a signature")}, allowedCode: codes.FactsRefused},
		{method: "POST", path: "/v1/lighthouse/heard", allow: controlOnly, harmfulBody: control.HeardRequest{Addrs: []string{"10.42.0.9"}}},
		{method: "GET", path: "/v1/tunnels", allow: controlOnly},
		{method: "GET", path: "/v1/raft/index", allow: controlOnly},
		{method: "GET", path: "/v1/raft/stats", allow: controlOnly},
		{method: "POST", path: "/v1/raft/apply", allow: controlOnly,
			harmfulBody: map[string]any{"tracked": removeW1}, allowedBody: map[string]any{"tracked": harmlessApply}},
		{method: "POST", path: "/v1/raft/remove", allow: controlOnly,
			harmfulBody: map[string]string{"node_id": c2ID}, allowedBody: map[string]string{"node_id": "no-such-node"}},
		// The worker asks for itself, so only the role guard stands
		// between it and the leader's record check.
		{method: "POST", path: "/v1/raft/join", allow: controlOnly,
			harmfulBody: map[string]string{"node_id": w1ID}, allowedBody: map[string]string{"node_id": c2ID}},
		{method: "POST", path: "/v1/sign/tls", allow: controlOnly, harmfulBody: signTLS, allowedCode: codes.SignRefused},
		{method: "POST", path: "/v1/sign/nebula", allow: controlOnly, harmfulBody: signNebula, allowedCode: codes.SignRefused},
		// CA keys are taken only from the holder on record: c2 is not it.
		{method: "POST", path: "/v1/ca/receive", allow: controlOnly, harmfulBody: foreignCA, allowedCode: codes.NotCAHolder},
		{method: "POST", path: "/v1/ca/probe", allow: controlOnly,
			harmfulBody: control.CAProbeRequest{Nonce: make([]byte, 32)}},
	}

	// The test's own list of who may pass each door must cover the
	// agent's route table exactly and agree with it: a route added without
	// a row here, or a table entry loosened, fails before any call.
	table := control.Routes()
	if len(table) != len(routes) {
		t.Errorf("the internal API has %d routes, this test covers %d", len(table), len(routes))
	}
	for _, tr := range table {
		var row *route
		for i := range routes {
			if routes[i].method == tr.Method && routes[i].path == tr.Path {
				row = &routes[i]
			}
		}
		if row == nil {
			t.Errorf("route %s %s has no row in this test", tr.Method, tr.Path)
			continue
		}
		var roles []caller
		for _, r := range tr.Roles {
			roles = append(roles, map[pki.Role]caller{pki.RoleControl: asControl, pki.RoleWorker: asWorker}[r])
		}
		if fmt.Sprint(sortedCallers(roles)) != fmt.Sprint(sortedCallers(row.allow)) {
			t.Errorf("route %s %s lets %v in; this test expects %v", tr.Method, tr.Path, roles, row.allow)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	before := origin.Nodes(t)
	for _, rt := range routes {
		for _, who := range []caller{asControl, asWorker, asForeign, asNone} {
			if allowed(rt.allow, who) {
				continue
			}
			t.Run(fmt.Sprintf("%s %s by %s", rt.method, rt.path, who), func(t *testing.T) {
				status, code, body, err := call(clients[who], origin, rt.method, rt.path, rt.harmfulBody)
				if who == asForeign && err != nil {
					return // refused at the handshake: the leaf does not chain to the cluster CA
				}
				if err != nil {
					t.Fatalf("transport error %v; want an answer with %s", err, codes.PeerRoleDenied)
				}
				if status != codes.PeerRoleDenied.Status() || code != codes.PeerRoleDenied {
					t.Fatalf("HTTP %d, code %q, body %.200s; want %d %s", status, code, body, codes.PeerRoleDenied.Status(), codes.PeerRoleDenied)
				}
				if bytes.Contains(body, []byte("CERTIFICATE")) || bytes.Contains(body, []byte(`"cert"`)) {
					t.Fatalf("a refused caller got a certificate back: %.200s", body)
				}
			})
		}
	}
	// Nothing was applied or removed: every record and every raft role is
	// as it was, and no token or node appeared.
	if after := origin.Nodes(t); records(before) != records(after) {
		t.Fatalf("refused calls changed the cluster:\nbefore %+v\nafter  %+v", before, after)
	}
	if r := nodeRow(t, origin, "w1"); r.State != "active" {
		t.Fatalf("w1 is %q after refused applies", r.State)
	}
	if r := nodeRow(t, origin, "c2"); r.Raft != "voter" && r.Raft != "leader" {
		t.Fatalf("c2 is raft %q after refused removes", r.Raft)
	}

	// The allowed cells: the guard lets each allowed caller in, so the
	// refusals above are the guard's doing and not a broken client.
	for _, rt := range routes {
		if rt.changesCaller {
			continue
		}
		for _, who := range rt.allow {
			t.Run(fmt.Sprintf("%s %s by %s (allowed)", rt.method, rt.path, who), func(t *testing.T) {
				body := rt.allowedBody
				if body == nil {
					body = rt.harmfulBody
				}
				status, code, raw, err := call(clients[who], origin, rt.method, rt.path, body)
				if err != nil {
					t.Fatalf("transport error: %v", err)
				}
				// Any answer but PeerRoleDenied shows the guard let the
				// caller in (a leader-only route may answer NoLeader if
				// leadership moved: the guard runs before that check).
				if code == codes.PeerRoleDenied || (status != http.StatusOK && code == "") {
					t.Fatalf("HTTP %d, code %q, body %.200s; want the guard to let %s in", status, code, raw, who)
				}
				if rt.allowedCode != "" && code != rt.allowedCode {
					t.Fatalf("HTTP %d, code %q, body %.200s; want %s", status, code, raw, rt.allowedCode)
				}
				if rt.allowedCode != "" && bytes.Contains(raw, []byte(`"cert"`)) {
					t.Fatalf("a refused sign request got a certificate back: %.200s", raw)
				}
			})
		}
	}
	// The one route that changes its caller's own record: a control node
	// still in raft passes the guard but is refused (it leaves raft first:
	// a voter on record as left would be cut from raft and take the quorum
	// with it); a worker records itself left.
	status, code, raw, err := call(memberClient(t, c2), origin, "POST", "/v1/self/left", struct{}{})
	if err != nil || code != codes.BadRequest {
		t.Fatalf("control voter on /v1/self/left: HTTP %d, code %q, body %.200s, %v; want %s", status, code, raw, err, codes.BadRequest)
	}
	if r := nodeRow(t, origin, "c2"); r.State != "active" {
		t.Fatalf("c2 is %q after a refused /v1/self/left", r.State)
	}
	status, code, raw, err = call(memberClient(t, w2), origin, "POST", "/v1/self/left", struct{}{})
	if err != nil || status != http.StatusOK {
		t.Fatalf("worker on /v1/self/left: HTTP %d, code %q, body %.200s, %v", status, code, raw, err)
	}
	if r := nodeRow(t, origin, "w2"); r.State != "left" {
		t.Fatalf("w2 is %q after /v1/self/left", r.State)
	}
}

// records is the node list without the fields that liveness moves (gossip
// state, raft leadership): what a refused call must not have changed.
func records(ns []apitype.Node) string {
	var out []string
	for _, n := range ns {
		out = append(out, fmt.Sprintf("%s/%s/%s/%s/%s/%s/%s", n.Name, n.ID, n.Role, n.State, n.OverlayIP, n.Underlay, n.CertExpires))
	}
	return fmt.Sprint(out)
}

func sortedCallers(cs []caller) []caller {
	out := slices.Clone(cs)
	slices.Sort(out)
	return out
}

func allowed(allow []caller, who caller) bool {
	for _, a := range allow {
		if a == who {
			return true
		}
	}
	return false
}

// call sends one request to n's control port and returns the status, the
// error code in the body (if any), and the body.
func call(c *http.Client, n *agenttest.Node, method, path string, in any) (int, codes.Code, []byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, "", nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "https://"+net.JoinHostPort(n.IP, "7300")+path, body)
	if err != nil {
		return 0, "", nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, "", nil, err
	}
	var e apitype.Error
	_ = json.Unmarshal(raw, &e)
	return resp.StatusCode, e.ErrCode, raw, nil
}

// memberClient presents n's own CA-signed leaf.
func memberClient(t *testing.T, n *agenttest.Node) *http.Client {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(n.Dir, "identity"))
	if err != nil {
		t.Fatal(err)
	}
	conf, err := pki.ClientTLSConfig(id, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: conf}}
}

// foreignClient presents a control leaf of another CA, trusting the
// cluster's CA for the server side so only the client side is foreign.
func foreignClient(t *testing.T, origin *agenttest.Node) *http.Client {
	t.Helper()
	ca := pkitest.NewCA(t, "other")
	id := pkitest.NewIdentity(t, ca, "impostor", pki.RoleControl, pkitest.IP(7))
	cert, err := id.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	conf := anonymousTLS(t, origin)
	conf.Certificates = []tls.Certificate{cert}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: conf}}
}

// anonymousClient presents no certificate.
func anonymousClient(t *testing.T, origin *agenttest.Node) *http.Client {
	t.Helper()
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: anonymousTLS(t, origin)}}
}

// anonymousTLS trusts the cluster CA (read from origin's identity) and
// presents nothing.
func anonymousTLS(t *testing.T, origin *agenttest.Node) *tls.Config {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(origin.Dir, "identity"))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := id.CAPool()
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: "ignored",
		InsecureSkipVerify: true, VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("no server certificate")
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool})
			return err
		}}
}
