package agenttest_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// TestEnrolmentKey: one reusable key, four machines joining with it at
// once: exactly its three uses admit three of them, each under its own
// name the cluster gave (web-1..web-3) and overlay IP, and the fourth is
// refused KeyExhausted; `tokens` shows the key exhausted with no use left
// and the audit log records each use. A revoked key admits nobody
// (TokenRevoked); a key whose prefix overlaps a live key's is refused
// (KeyPrefixTaken) before anything is written.
func TestEnrolmentKey(t *testing.T) {
	clock := &agenttest.Clock{}
	c1 := agenttest.NewNode(t, "c1", clock)
	c1.Init(t, "alpha")
	resp, err := c1.Client.Admit(t.Context(), apitype.AdmitRequest{Reusable: true, Uses: 3, NamePrefix: "web-", Ephemeral: true})
	if err != nil {
		t.Fatalf("mint key: %v", err)
	}
	if !resp.Reusable || resp.Uses != 3 || resp.NamePrefix != "web-" || resp.Name != "" || !strings.HasPrefix(resp.Token, "mesh1_") {
		t.Fatalf("admit --reusable answered %+v", resp)
	}
	key := resp.Token

	var (
		mu      sync.Mutex
		names   []string
		refused []codes.Code
		wg      sync.WaitGroup
	)
	for i := range 4 {
		m := agenttest.NewNode(t, fmt.Sprintf("m%d", i), clock)
		wg.Go(func() {
			res, err := m.Join(t, key)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refused = append(refused, codes.Of(err))
				return
			}
			names = append(names, res.Node)
		})
	}
	wg.Wait()
	slices.Sort(names)
	if !slices.Equal(names, []string{"web-1", "web-2", "web-3"}) || !slices.Equal(refused, []codes.Code{codes.KeyExhausted}) {
		t.Fatalf("four joins with a 3-use key: admitted %v, refused %v; want web-1..web-3 and one KeyExhausted", names, refused)
	}
	ips := map[string]string{}
	for _, n := range c1.Nodes(t) {
		if !strings.HasPrefix(n.Name, "web-") {
			continue
		}
		if other, dup := ips[n.OverlayIP]; dup {
			t.Fatalf("%s and %s share overlay IP %s", n.Name, other, n.OverlayIP)
		}
		ips[n.OverlayIP] = n.Name
	}
	if len(ips) != 3 {
		t.Fatalf("nodes lists %d key-admitted nodes, want 3: %v", len(ips), ips)
	}

	toks, err := c1.Client.Tokens(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(toks, func(tk apitype.Token) bool { return tk.ID == resp.ID })
	if i < 0 || toks[i].Key == nil || toks[i].Key.Left != 0 || toks[i].Key.Used != 3 || toks[i].State != apitype.TokenExhausted || !toks[i].Ephemeral {
		t.Fatalf("tokens row of the key: %+v", toks)
	}
	audit, err := c1.Client.Audit(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	uses := 0
	for _, e := range audit {
		if e.Code == codes.EventNodeAdmitted && strings.Contains(e.Detail, "key "+resp.ID) {
			uses++
		}
	}
	if uses != 3 {
		t.Fatalf("the audit log records %d uses of the key, want 3", uses)
	}

	// The exhausted key is no longer live: its prefix is free again.
	second, err := c1.Client.Admit(t.Context(), apitype.AdmitRequest{Reusable: true, Uses: 2, NamePrefix: "web-"})
	if err != nil {
		t.Fatalf("mint a key with an exhausted key's prefix: %v", err)
	}
	if _, err := c1.Client.Admit(t.Context(), apitype.AdmitRequest{Reusable: true, Uses: 2, NamePrefix: "web-1"}); codes.Of(err) != codes.KeyPrefixTaken {
		t.Fatalf("a prefix overlapping a live key's: %v, want %s", err, codes.KeyPrefixTaken)
	}
	if _, err := c1.Client.RevokeToken(t.Context(), second.ID); err != nil {
		t.Fatalf("revoke the key: %v", err)
	}
	late := agenttest.NewNode(t, "m9", clock)
	if _, err := late.Join(t, second.Token); codes.Of(err) != codes.TokenRevoked {
		t.Fatalf("join with a revoked key: %v, want %s", err, codes.TokenRevoked)
	}
}
