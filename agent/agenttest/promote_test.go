package agenttest_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// TestNeverReplicatingControlNodeIsNotPromoted: a control node that is
// recorded but never replicates (nothing listens on its raft address) asks
// to join raft. The leader adds it as a non-voter, waits promote_timeout,
// removes it again and answers JoinUnconfirmed; the one-voter cluster keeps
// its leader and goes on admitting.
func TestNeverReplicatingControlNodeIsNotPromoted(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	origin.Init(t, "alpha")
	text := origin.Admit(t, apitype.AdmitRequest{Name: "ghost", Role: "control"})
	tok, err := enroll.ParseToken(text)
	if err != nil {
		t.Fatal(err)
	}
	keys := mustKeys(t, "ghost")
	ghostIP := agenttest.TakeIP(t) // nothing will listen there
	resp, err := enrollDirect(t, tok, ghostIP, keys.CSR, keys.NebulaPublicPEM,
		enroll.Ports{Gossip: 7946, Nebula: 4242, Control: 7300, Raft: 7301})
	if err != nil {
		t.Fatalf("enroll the ghost: %v", err)
	}
	id := &pki.Identity{CACert: resp.CACert, Cert: resp.TLSCert, Key: keys.TLSKeyPEM}
	conf, err := pki.ClientTLSConfig(id, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]string{"node_id": resp.NodeID})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}, Timeout: 30 * time.Second}
	start := time.Now()
	r, err := client.Post("https://"+net.JoinHostPort(origin.IP, "7300")+"/v1/raft/join", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var e apitype.Error
	_ = json.NewDecoder(r.Body).Decode(&e)
	if e.ErrCode != codes.JoinUnconfirmed {
		t.Fatalf("raft join of a node that never replicates: HTTP %d, code %q, want %s", r.StatusCode, e.ErrCode, codes.JoinUnconfirmed)
	}
	t.Logf("refused after %s", time.Since(start).Round(time.Millisecond))

	st, err := origin.Client.Status(t.Context())
	if err != nil || st.Raft != "leader" {
		t.Fatalf("origin after the refused promotion: %+v, %v", st, err)
	}
	for _, n := range origin.Nodes(t) {
		if n.Name == "ghost" && n.Raft != "none" {
			t.Fatalf("ghost is raft %q; membership should be as it was", n.Raft)
		}
	}
	origin.Admit(t, apitype.AdmitRequest{Name: "after"}) // the cluster still commits
}
