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
