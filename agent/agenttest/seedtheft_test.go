package agenttest_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// thief is a removed control node run by an attacker: its leaf (CA-signed,
// role control, still valid: a joiner cannot see revocation) on a TLS
// listener, keeping every enrollment it is sent.
type thief struct {
	addr string
	mu   sync.Mutex
	got  [][]byte // enrollment bodies received
}

func newThief(t *testing.T, id *pki.Identity, host string) *thief {
	t.Helper()
	cert, err := tls.X509KeyPair(append(append([]byte(nil), id.Cert...), id.CACert...), id.Key) // leaf and CA, as a seed sends them
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort(host, "0"), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	th := &thief{addr: ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != enroll.Path { // the clock: "an older meshd" that does not tell it
			http.NotFound(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		th.mu.Lock()
		th.got = append(th.got, b)
		th.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return th
}

// received reports whether the thief was sent any enrollment (each
// carries the joiner's secret).
func (th *thief) received() bool {
	th.mu.Lock()
	defer th.mu.Unlock()
	return len(th.got) > 0
}

// TestRemovedControlNodeGetsNoSecret is issue 27's attack 7. c2 is removed
// and its machine taken: the attacker serves enroll with c2's leaf. On
// main a joiner whose seed list led there (the address the token names
// for a control node now answered by the thief) passed the CA pin and
// the role check and sent its secret, and the thief joined first under
// that name. Now a token names each seed's node id: the joiner refuses
// c2's leaf where the token names the origin (codes.SeedNotNamed) and
// sends nothing; and the token minted while c2 was a seed was revoked
// with c2's removal, so its secret is worth nothing to whoever gets it.
func TestRemovedControlNodeGetsNoSecret(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNode(t, "origin", clock)
	origin.Init(t, "alpha")
	c2 := agenttest.NewNode(t, "c2", clock)
	if _, err := c2.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "c2", Role: "control"})); err != nil {
		t.Fatal(err)
	}
	before := origin.Admit(t, apitype.AdmitRequest{Name: "w1"}) // names origin and c2 as its seeds
	id, err := pki.LoadIdentity(filepath.Join(c2.Dir, statedir.IdentityDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := origin.Client.Remove(t.Context(), "c2"); err != nil {
		t.Fatalf("remove c2: %v", err)
	}
	c2.Stop(t)
	th := newThief(t, id, c2.IP)

	// A token minted after the removal names the origin alone; the
	// joiner's path to it leads to the thief.
	tok, err := enroll.ParseToken(origin.Admit(t, apitype.AdmitRequest{Name: "w2"}))
	if err != nil {
		t.Fatal(err)
	}
	tok.Seeds = []string{th.addr}
	led, err := tok.Encode()
	if err != nil {
		t.Fatal(err)
	}
	w2 := agenttest.NewNode(t, "w2", clock)
	_, err = w2.Join(t, led)
	if th.received() {
		t.Fatalf("the removed control node received the joiner's secret (join: %v)", err)
	}
	if codes.Of(err) != codes.SeedNotNamed {
		t.Fatalf("join led to the removed control node: %v, want %s", err, codes.SeedNotNamed)
	}

	// The token minted while c2 was a seed died with c2's removal.
	toks, err := origin.Client.Tokens(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range toks {
		if r.Name == "w1" {
			found = true
			if r.State != "revoked" {
				t.Fatalf("the token naming removed c2 is %q, want revoked", r.State)
			}
		}
	}
	if !found {
		t.Fatal("no token for w1 on the origin")
	}
	w1 := agenttest.NewNode(t, "w1", clock)
	if _, err := w1.Join(t, before); codes.Of(err) != codes.TokenRevoked {
		t.Fatalf("join with the token that named c2: %v, want %s", err, codes.TokenRevoked)
	}
}
