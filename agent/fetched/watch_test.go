package fetched

import (
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/watch"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

func newTestCopies(t testing.TB) *Copies {
	t.Helper()
	ca := pkitest.NewCA(t, "alpha")
	cl, err := control.NewClient(pkitest.NewIdentity(t, ca, "w1", pki.RoleWorker, pkitest.IP(3)))
	if err != nil {
		t.Fatal(err)
	}
	return New(cl, "id-w1", nil, "", t.TempDir(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func nodesChange(index uint64, full bool, recs map[string]string) watch.Change {
	ch := watch.Change{Index: index, Full: full, Put: map[string]map[string]json.RawMessage{control.SectionNodes: {}}}
	for id, raw := range recs {
		ch.Put[control.SectionNodes][id] = json.RawMessage(raw)
	}
	return ch
}

// TestApplyChangeKeepsRecords: a second whole table that changes nothing
// (a strict ask answered from index 0 beside the stream's first line)
// leaves the records as they are, and the change after it adds to them:
// found by e2e.TestAuditTrail, where the list was then only the next
// change's record and the worker refused every control node.
func TestApplyChangeKeepsRecords(t *testing.T) {
	c := newTestCopies(t)
	first := map[string]string{
		"id-c1": `{"name":"c1","role":"control","state":"active","ea":"127.0.0.1:7300","tls":"fp-c1"}`,
		"id-w1": `{"state":"joining"}`,
	}
	for _, ch := range []watch.Change{nodesChange(5, true, first), nodesChange(5, true, first),
		nodesChange(6, false, map[string]string{"id-w1": `{"name":"w1","state":"active","ip":"10.42.0.3"}`})} {
		if _, err := c.applyChange(ch, 100); err != nil {
			t.Fatal(err)
		}
	}
	list, ok := c.Records()
	if !ok || len(list) != 2 || list[0].Name != "c1" || !list[0].Active() || list[1].Name != "w1" || !list[1].Active() {
		t.Fatalf("records after two whole tables and a change: %+v", list)
	}
	if seeds := c.Seeds(); len(seeds) != 1 || seeds[0] != "127.0.0.1:7300" {
		t.Fatalf("seeds %v, want c1's control address", seeds)
	}
	if st := c.Stats(); st.Full != 2 || st.Deltas != 1 || st.Index != 6 {
		t.Fatalf("stats %+v", st)
	}
	// A whole table without this node (a control node behind its
	// admission) is refused and changes nothing.
	if _, err := c.applyChange(nodesChange(7, true, map[string]string{"id-c1": first["id-c1"]}), 100); err == nil {
		t.Fatal("a table without this node was applied")
	}
	if list, _ := c.Records(); len(list) != 2 {
		t.Fatalf("records after a refused table: %+v", list)
	}
}
