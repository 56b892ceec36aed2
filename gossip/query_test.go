package gossip

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"
)

// answerer answers every query on n with its name and the payload,
// unless silent, until the test ends.
func answerer(t *testing.T, n *node, silent bool) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for q := range n.g.Queries() {
			if silent || time.Now().After(q.Deadline) {
				continue
			}
			_ = q.Respond(append([]byte(n.cfg.Name+":"), q.Payload...))
		}
	}()
	t.Cleanup(func() { _ = n.g.Shutdown(); wg.Wait() })
}

// TestAsk: a query reaches every member, the asker included; the answers
// come back by member name; a member that stays silent is absent when the
// timeout passes; done ends the wait as soon as it is satisfied.
func TestAsk(t *testing.T) {
	nodes, _ := cluster(t, newKey(t), "a", "b", "c")
	answerer(t, nodes[0], false)
	answerer(t, nodes[1], false)
	answerer(t, nodes[2], true)

	start := time.Now()
	got, err := nodes[0].g.Ask(t.Context(), "meshd-test", []byte("v7"), 2*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("answers from %v, want [a b] (c is silent)", keys)
	}
	if !bytes.Equal(got["b"], []byte("b:v7")) {
		t.Fatalf("b answered %q", got["b"])
	}
	if waited := time.Since(start); waited < 2*time.Second {
		t.Fatalf("returned after %s with a member silent; want the whole 2s bound", waited)
	}

	start = time.Now()
	got, err = nodes[0].g.Ask(t.Context(), "meshd-test", []byte("v8"), 10*time.Second,
		func(a map[string][]byte) bool { return len(a) == 2 })
	if err != nil || len(got) != 2 {
		t.Fatalf("answers %v, %v", got, err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("done was satisfied, yet Ask waited %s", waited)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if got, err := nodes[1].g.Ask(ctx, "meshd-test", nil, 10*time.Second, nil); err != nil || len(got) > 3 {
		t.Fatalf("cancelled Ask: %v, %v", got, err)
	}
}

// TestAskAgain: a member that misses the first query (here: ignores it,
// as one the broadcast never reached) answers when the query goes out
// again within the timeout, and is among the answers.
func TestAskAgain(t *testing.T) {
	nodes, _ := cluster(t, newKey(t), "a", "b")
	answerer(t, nodes[0], false)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		first := true
		for q := range nodes[1].g.Queries() {
			if first {
				first = false
				continue
			}
			_ = q.Respond([]byte("b:again"))
		}
	}()
	t.Cleanup(func() { _ = nodes[1].g.Shutdown(); wg.Wait() })

	start := time.Now()
	got, err := nodes[0].g.Ask(t.Context(), "meshd-test", []byte("v9"), 30*time.Second,
		func(a map[string][]byte) bool { return len(a) == 2 })
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got["b"], []byte("b:again")) {
		t.Fatalf("answers %q: b, which missed the first query, did not answer the second", got)
	}
	// Asked again after askAgain (1 s), not after a third of the 30 s
	// timeout: a key rotation step lost 10 s to one missed query.
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("b's answer to the second query came %s after the first, want about %s", took, askAgain)
	}
}
