package agenttest_test

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

func nodeRow(t *testing.T, n *agenttest.Node, name string) apitype.Node {
	t.Helper()
	for _, r := range n.Nodes(t) {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("%s does not list %s", n.Name, name)
	return apitype.Node{}
}

// TestControlJoinAndAdmitAnywhere: a control node joins as a non-voter and
// its join returns only once it is a voter; it then admits a worker itself,
// with the signing forwarded to the CA holder and the ledger write to the
// leader.
func TestControlJoinAndAdmitAnywhere(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	c2 := agenttest.NewNode(t, "c2", clock)
	w1 := agenttest.NewNode(t, "w1", clock)
	origin.Init(t, "alpha")

	res, err := c2.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "c2", Role: "control"}))
	if err != nil {
		t.Fatalf("control join: %v", err)
	}
	if res.Role != "control" {
		t.Fatalf("join result %+v", res)
	}
	st, err := c2.Client.Status(t.Context())
	if err != nil || st.Raft != "voter" || st.Role != "control" {
		t.Fatalf("c2 status after join: %+v, %v", st, err)
	}
	if r := nodeRow(t, origin, "c2"); r.Raft != "voter" {
		t.Fatalf("origin sees c2 as raft %q", r.Raft)
	}

	// c2, a follower without the CA keys, admits a worker.
	tok := c2.Admit(t, apitype.AdmitRequest{Name: "w1"})
	parsed, err := enroll.ParseToken(tok)
	if err != nil || len(parsed.Seeds) != 2 {
		t.Fatalf("token from c2 lists seeds %v (%v); want both control nodes", parsed.Seeds, err)
	}
	if _, err := w1.Join(t, tok); err != nil {
		t.Fatalf("worker join on a token minted by a follower: %v", err)
	}
	for _, n := range []*agenttest.Node{origin, c2} {
		if r := nodeRow(t, n, "w1"); r.Role != "worker" || r.Raft != "none" {
			t.Fatalf("%s lists w1 as %+v", n.Name, r)
		}
	}
}

// TestTokenSingleUseAcrossControlNodes: two joins race with one token, one
// through each control node; exactly one wins, the other gets the
// consumed code.
func TestTokenSingleUseAcrossControlNodes(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	c2 := agenttest.NewNode(t, "c2", clock)
	origin.Init(t, "alpha")
	if _, err := c2.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "c2", Role: "control"})); err != nil {
		t.Fatal(err)
	}
	tok := origin.Admit(t, apitype.AdmitRequest{Name: "racer"})
	// The same secret with the seeds in the other order: the second joiner
	// enrolls through c2 first.
	parsed, err := enroll.ParseToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	parsed.Seeds[0], parsed.Seeds[1] = parsed.Seeds[1], parsed.Seeds[0]
	parsed.SeedIDs[0], parsed.SeedIDs[1] = parsed.SeedIDs[1], parsed.SeedIDs[0] // each seed keeps its node id
	viaC2, err := parsed.Encode()
	if err != nil {
		t.Fatal(err)
	}
	j1 := agenttest.NewNode(t, "j1", clock)
	j2 := agenttest.NewNode(t, "j2", clock)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, j := range []struct {
		n   *agenttest.Node
		tok string
	}{{j1, tok}, {j2, viaC2}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = j.n.Client.Join(t.Context(), apitype.JoinRequest{Token: j.tok}, nil)
		}()
	}
	wg.Wait()
	won, consumed := 0, 0
	for _, err := range errs {
		switch codes.Of(err) {
		case "":
			won++
		case codes.TokenConsumed:
			consumed++
		default:
			t.Errorf("unexpected join error: %v", err)
		}
	}
	if won != 1 || consumed != 1 {
		t.Fatalf("%d joins won and %d were refused as consumed; want exactly one of each (%v)", won, consumed, errs)
	}
}

// TestWorkerLeafRefused: a worker's own CA-signed leaf gets nowhere on the
// raft port (refused at the TLS handshake) or on control-only internal API
// routes (PeerRoleDenied).
func TestWorkerLeafRefused(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	w1 := agenttest.NewNode(t, "w1", clock)
	origin.Init(t, "alpha")
	if _, err := w1.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "w1"})); err != nil {
		t.Fatal(err)
	}
	id, err := pki.LoadIdentity(filepath.Join(w1.Dir, "identity"))
	if err != nil {
		t.Fatal(err)
	}
	conf, err := pki.ClientTLSConfig(id, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	// The raft port: the handshake fails (TLS 1.3 reports the server's
	// refusal on the first read).
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", net.JoinHostPort(origin.IP, "7301"), conf)
	if err == nil {
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	// An accepted connection waits for raft's first request, so its read
	// times out; only the server's alert is a refusal.
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a worker leaf was accepted on the raft port (read: %v)", err)
	}
	// A control-only internal route.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}}
	resp, err := client.Get(fmt.Sprintf("https://%s/v1/raft/index", net.JoinHostPort(origin.IP, "7300")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body apitype.Error
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != codes.PeerRoleDenied.Status() || body.ErrCode != codes.PeerRoleDenied {
		t.Fatalf("worker on /v1/raft/index: HTTP %d, code %q", resp.StatusCode, body.ErrCode)
	}
}
