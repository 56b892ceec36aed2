package control

import (
	"encoding/json"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// seenFrom is where the test's workers' joins come from: another address
// than the underlay they advertise (127.0.0.1), as behind a NAT.
const seenFrom = "198.51.100.7"

// groupWorker admits and confirms a worker with groups, its join seen
// from seenFrom, and returns a client presenting its admitted leaf.
func (c *testCluster) groupWorker(t *testing.T, via *member, name string, groups ...string) *Client {
	t.Helper()
	id, keys, _ := c.identity(t, name, pki.RoleWorker)
	ctx := within(t, 10*time.Second)
	resp, err := via.p.Admit(ctx, apitype.AdmitRequest{Name: name, Role: string(pki.RoleWorker), Groups: groups}, "test")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := enroll.ParseToken(resp.Token)
	if err != nil {
		t.Fatal(err)
	}
	c.tlsKeys.Store(name, keys.TLSKeyPEM)
	r, err := enrollServer(via, "id-"+name).Enroll(ctx, enrollRequest(tok.Secret, name, keys, enroll.Ports{}), netip.MustParseAddr(seenFrom))
	if err != nil {
		t.Fatalf("admit %s: %v", name, err)
	}
	id.Cert = r.TLSCert
	c.confirm(t, "id-"+name)
	cl, err := NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)
	return cl
}

// readNodes is GET path on addr with cl: the rows, and each row's JSON
// keys by node name.
func readNodes(t *testing.T, cl *Client, addr, path string) (map[string]NodeRecord, map[string]map[string]json.RawMessage) {
	t.Helper()
	var raw []json.RawMessage
	if err := cl.Call(within(t, 10*time.Second), addr, path, false, nil, &raw); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	rows, keys := map[string]NodeRecord{}, map[string]map[string]json.RawMessage{}
	for _, b := range raw {
		var r NodeRecord
		var k map[string]json.RawMessage
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &k); err != nil {
			t.Fatal(err)
		}
		rows[r.Name], keys[r.Name] = r, k
	}
	return rows, keys
}

// TestWorkerReadsWatchView: through the real guard, a worker reading the
// node list (GET /v1/nodes, plain and strict) gets of every other node
// what its watch stream carries of the record (with a departed or joining
// node's name and role, and what the answering node sees of its liveness:
// gossip status, raft role, who cannot reach it): no groups, no address a
// join came from, no worker's TLS leaf, no version, expiry or ephemeral
// mark; its own record whole. A control node
// reading the same list, and the local API on a control node, get every
// record whole.
func TestWorkerReadsWatchView(t *testing.T) {
	c, origin := newCluster(t)
	w1 := c.groupWorker(t, origin, "w1", "db")
	c.groupWorker(t, origin, "w2", "web", "eu")
	c.enrollLeaf(t, origin, "w3", pki.RoleWorker, nil, enroll.Ports{}, nil) // joining: admitted, not confirmed
	origin.hooks.mu.Lock()
	origin.hooks.gossip = map[string]string{"origin": "alive", "w1": "alive", "w2": "alive"}
	origin.hooks.versions = map[string]string{"w2": "9.9.9"}
	origin.hooks.mu.Unlock()
	fsm := origin.p.Raft().FSM()
	node := func(name string) state.Node {
		t.Helper()
		for _, n := range fsm.Nodes() {
			if n.Name == name {
				return n
			}
		}
		t.Fatalf("no record named %s", name)
		return state.Node{}
	}
	if w2 := node("w2"); len(w2.Groups) != 2 || w2.SeenFrom != seenFrom || w2.TLSFingerprint == "" {
		t.Fatalf("w2's record lacks what the test hides: %+v", w2)
	}

	for _, path := range []string{PathNodes, PathNodes + StrictQuery} {
		t.Run("worker"+path, func(t *testing.T) {
			rows, keys := readNodes(t, w1, origin.addr, path)
			if len(rows) != 4 {
				t.Fatalf("%d rows, want origin, w1, w2 and w3: %v", len(rows), rows)
			}
			for _, name := range []string{"origin", "w2", "w3"} {
				for _, k := range []string{"groups", "seen_from", "behind_nat", "ephemeral", "cause", "revocation"} {
					if v, ok := keys[name][k]; ok {
						t.Errorf("%s's row carries %s: %s", name, k, v)
					}
				}
				if r := rows[name]; r.Version != "" || !r.CertExpires.IsZero() {
					t.Errorf("%s's row carries version %q, cert expiry %s", name, r.Version, r.CertExpires)
				}
				// Exactly the watch's record, and the views named above.
				n := node(name)
				want := recordOf(n).nodeRecord(n.ID)
				if n.State != state.NodeActive {
					want.Name, want.Role = n.Name, string(n.Role)
				}
				want.Gossip, want.Raft, want.LastSeen, want.UnreachableFrom = rows[name].Gossip, rows[name].Raft, rows[name].LastSeen, rows[name].UnreachableFrom
				if got, _ := json.Marshal(rows[name]); string(got) != string(mustJSON(want)) {
					t.Errorf("%s's row:\n%s\nwant what the watch carries:\n%s", name, got, mustJSON(want))
				}
			}
			for _, name := range []string{"w2", "w3"} {
				for _, k := range []string{"tls_fingerprint", "prev_tls_fingerprint", "tls_public_key"} {
					if v, ok := keys[name][k]; ok {
						t.Errorf("worker %s's row carries %s: %s", name, k, v)
					}
				}
			}
			if o := rows["origin"]; o.TLSFingerprint != node("origin").TLSFingerprint || len(o.TLSPublicKey) == 0 || o.Raft != "leader" {
				t.Errorf("the control node's row lacks its TLS leaf or raft role (a worker checks control leaves): %+v", o)
			}
			if w2 := rows["w2"]; w2.Gossip != "alive" || w2.OverlayIP == "" || w2.Underlay != "127.0.0.1" {
				t.Errorf("w2's row lacks what the watch carries or its gossip status: %+v", w2)
			}
			if w3 := rows["w3"]; w3.State != string(state.NodeJoining) || w3.Role != string(pki.RoleWorker) || w3.OverlayIP != "" {
				t.Errorf("joining w3's row: %+v", w3)
			}
			if own := rows["w1"]; !slices.Equal(own.Groups, []string{"db"}) || own.SeenFrom != seenFrom || !own.BehindNAT ||
				own.TLSFingerprint == "" || own.CertExpires.IsZero() {
				t.Errorf("w1's own row is not whole: %+v", own)
			}
		})
	}

	t.Run("control", func(t *testing.T) {
		rows, _ := readNodes(t, origin.p.client, origin.addr, PathNodes)
		w2 := rows["w2"]
		if !slices.Equal(w2.Groups, []string{"web", "eu"}) || w2.SeenFrom != seenFrom || !w2.BehindNAT ||
			w2.TLSFingerprint != node("w2").TLSFingerprint || len(w2.TLSPublicKey) == 0 || w2.CertExpires.IsZero() || w2.Version != "9.9.9" {
			t.Errorf("a control node reads w2's row short: %+v", w2)
		}
		local, err := origin.p.Nodes(within(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range local {
			if r.Name == "w2" && (!slices.Equal(r.Groups, []string{"web", "eu"}) || r.SeenFrom != seenFrom) {
				t.Errorf("the local API on a control node reads w2's row short: %+v", r)
			}
		}
	})
}
