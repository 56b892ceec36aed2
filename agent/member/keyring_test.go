package member

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestAnswerKeyring: a member answers a rotation's keyring query once it
// runs the asked keyring, with that keyring and its node id, and not
// before; one that never gets there stays silent and gives up at the
// query's deadline.
func TestAnswerKeyring(t *testing.T) {
	rt := &keyring{node: &node{facts: &statedir.Facts{NodeID: "id-w1", Name: "w1"}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	rt.id = "old"
	ask := func(want string, deadline time.Duration) (<-chan []byte, <-chan struct{}) {
		answers, returned := make(chan []byte, 2), make(chan struct{})
		payload, _ := json.Marshal(control.KeyringQuery{Keyring: want})
		q := gossip.NewQuery(control.KeyringQueryName, payload, time.Now().Add(deadline), func(b []byte) error {
			answers <- b
			return nil
		})
		go func() { defer close(returned); rt.answerKeyring(context.Background(), q) }()
		return answers, returned
	}

	answers, returned := ask("new", 5*time.Second)
	select {
	case b := <-answers:
		t.Fatalf("answered %s while running the old keyring", b)
	case <-time.After(100 * time.Millisecond):
	}
	rt.mu.Lock()
	rt.id = "new" // applyKeys installed the step
	rt.mu.Unlock()
	select {
	case b := <-answers:
		var got control.KeyringQuery
		if err := json.Unmarshal(b, &got); err != nil || got.Keyring != "new" || got.ID != "id-w1" {
			t.Fatalf("answer %s (%v), want keyring new from id-w1", b, err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no answer within 2 s of running the asked keyring")
	}
	<-returned

	start := time.Now()
	answers, returned = ask("other", 200*time.Millisecond)
	select {
	case <-returned:
	case <-time.After(3 * time.Second):
		t.Fatal("still waiting 3 s after the query's 200 ms deadline")
	}
	if len(answers) != 0 || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("%d answers for a keyring never reached, returned after %s", len(answers), time.Since(start))
	}
}

// TestAnswerKeyringSigned: asked with a nonce (this release's rotation),
// a member signs its answer with its TLS key, bound to the nonce: the
// signature verifies against the key its leaf certifies, and not for
// another nonce.
func TestAnswerKeyringSigned(t *testing.T) {
	id := pkitest.NewIdentity(t, pkitest.NewCA(t, "alpha"), "w1", pki.RoleWorker, pkitest.IP(5))
	live, err := pki.NewLiveIdentity(id)
	if err != nil {
		t.Fatal(err)
	}
	rt := &keyring{node: &node{facts: &statedir.Facts{NodeID: "id-w1", Name: "w1"}, live: live,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}, id: "kr1"}
	nonce := []byte("0123456789abcdef")
	payload, _ := json.Marshal(control.KeyringQuery{Keyring: "kr1", Nonce: nonce})
	answers := make(chan []byte, 1)
	rt.answerKeyring(t.Context(), gossip.NewQuery(control.KeyringQueryName, payload, time.Now().Add(2*time.Second),
		func(b []byte) error { answers <- b; return nil }))
	var got control.KeyringQuery
	select {
	case b := <-answers:
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("no answer")
	}
	pub, _ := pki.PublicKeyDER(id.Cert)
	if err := pki.VerifyAttestation(pub, pki.AttestKeyring, nonce, control.KeyringStatement("id-w1", "kr1"), got.Sig); err != nil {
		t.Fatalf("answer %+v: %v", got, err)
	}
	if pki.VerifyAttestation(pub, pki.AttestKeyring, []byte("another nonce..."), control.KeyringStatement("id-w1", "kr1"), got.Sig) == nil {
		t.Fatal("the signature verifies for another nonce")
	}
}
