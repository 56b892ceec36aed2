package enroll_test

import (
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestJoinerResumesSessions (issue 54 item 4): a joiner's connections to
// one seed share a session cache (ClientDeps.Sessions): the first is a
// full handshake, the next resumes, still verified against the token's
// pin; a token pinning another CA is not offered that session, and
// without a cache nothing resumes.
func TestJoinerResumesSessions(t *testing.T) {
	c := newCluster(t)
	var mu sync.Mutex
	var resumed []bool
	srv := c.server()
	seed := serve(t, pkitest.NewIdentity(t, c.ca, "origin", pki.RoleControl, pkitest.IP(1)),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			resumed = append(resumed, r.TLS.DidResume)
			mu.Unlock()
			srv.ServeHTTP(w, r)
		}))
	last := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return resumed[len(resumed)-1]
	}
	st := &steps{}
	d := clientDeps(st, io.Discard)
	d.Sessions = enroll.NewSessions()
	probe := func(tok enroll.Token, d enroll.ClientDeps) {
		t.Helper()
		if r := enroll.ProbeSeed(t.Context(), tok, seed, d); r.Err != nil {
			t.Fatalf("probe: %v\n%s", r.Err, st)
		}
	}
	tok := c.token(seed)
	probe(tok, d)
	if last() {
		t.Fatal("the first connection resumed a session")
	}
	probe(tok, d)
	if !last() {
		t.Fatal("the second connection with the same cache made a full handshake")
	}
	// Under another pin (the next CA of a rotation, say) the session is
	// not offered; the seed does not chain to that pin, so the probe
	// fails closed, as it would have on a full handshake.
	other := tok
	other.CA = pkitest.NewCA(t, "beta").Fingerprint()
	if r := enroll.ProbeSeed(t.Context(), other, seed, d); r.Err == nil {
		t.Fatal("a token pinning another CA accepted the seed")
	}
	d.Sessions = nil
	probe(tok, d)
	if last() {
		t.Fatal("a connection without a session cache resumed")
	}
}
