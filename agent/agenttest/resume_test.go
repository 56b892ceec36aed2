package agenttest_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// TestJoinResumesAfterLostResponse: the cluster recorded a join whose
// response never reached the joiner (simulated by enrolling with the
// joiner's pending keys directly, then dropping the answer). Running the
// same join again reuses the pending keys, proves possession of them, and
// gets the recorded node back instead of "token already used".
func TestJoinResumesAfterLostResponse(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	origin.Init(t, "alpha")
	j := agenttest.NewNode(t, "j", clock)
	text := origin.Admit(t, apitype.AdmitRequest{Name: "j"})
	tok, err := enroll.ParseToken(text)
	if err != nil {
		t.Fatal(err)
	}

	// The first attempt: keys saved as pending, the request reaches the
	// cluster, the answer is lost.
	keys := mustKeys(t, "j")
	pending, _ := json.Marshal(map[string]any{"token": tok.Secret.Hash().String(), "keys": keys})
	if err := os.WriteFile(filepath.Join(j.Dir, "pending-join.json"), pending, 0o600); err != nil {
		t.Fatal(err)
	}
	lost, err := enrollDirect(t, tok, j.IP, keys.CSR, keys.NebulaPublicPEM, enroll.Ports{Gossip: 7946, Nebula: 4242})
	if err != nil {
		t.Fatalf("first attempt: %v", err)
	}

	// Someone with the token and the public Nebula key, but not the TLS
	// private key, gets nothing back.
	other := mustKeys(t, "j")
	_, err = enrollDirect(t, tok, j.IP, other.CSR, keys.NebulaPublicPEM, enroll.Ports{Gossip: 7946, Nebula: 4242})
	if got := codes.Of(err); got != codes.TokenConsumed {
		t.Fatalf("resume with another TLS key: code %q (%v), want %q", got, err, codes.TokenConsumed)
	}

	// The same join again.
	var steps []string
	res, err := j.Client.Join(t.Context(), apitype.JoinRequest{Token: text}, func(l apitype.JoinLine) { steps = append(steps, l.Step) })
	if err != nil {
		t.Fatalf("re-run of the join: %v (steps %q)", err, steps)
	}
	if res.NodeID != lost.NodeID {
		t.Fatalf("re-run joined as node %s, the cluster recorded %s", res.NodeID, lost.NodeID)
	}
	if _, err := os.Stat(filepath.Join(j.Dir, "pending-join.json")); !os.IsNotExist(err) {
		t.Fatalf("pending keys left after a confirmed join: %v", err)
	}
	if n := len(origin.Nodes(t)); n != 2 {
		t.Fatalf("the cluster lists %d nodes, want 2 (no duplicate for the resumed join)", n)
	}
}
