package agenttest_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// TestCAHolderKeepsItsCA (issue 13 item 1): on the CA holder, `init
// --force`, `join --force` and `join --plan --force` are refused with
// CAHolderStays, whatever the flag; ca/ is byte-identical afterwards, the
// node still admits, and the token the refused join was given was not
// consumed (another machine joins with it). A node keeping a copy of
// CA keys refuses `leave` before it departs.
func TestCAHolderKeepsItsCA(t *testing.T) {
	clock := &agenttest.Clock{}
	origin := agenttest.NewNodeAt(t, "origin", agenttest.TakeIP(t), clock)
	origin.Init(t, "alpha")
	before := caDigest(t, origin.Dir)

	_, err := origin.Client.Init(t.Context(), apitype.InitRequest{Cluster: "beta", Force: true})
	if codes.Of(err) != codes.CAHolderStays {
		t.Fatalf("init --force on the CA holder: %v (code %s), want %s", err, codes.Of(err), codes.CAHolderStays)
	}

	tok := origin.Admit(t, apitype.AdmitRequest{Name: "w1"})
	res, err := origin.Client.Plan(t.Context(), apitype.JoinRequest{Token: tok, Force: true}, func(apitype.PlanCheck) {})
	if err != nil {
		t.Fatalf("join --plan --force: %v", err)
	}
	wantCheck(t, res, "identity", apitype.CheckFail, codes.CAHolderStays)

	_, err = origin.Client.Join(t.Context(), apitype.JoinRequest{Token: tok, Force: true}, func(l apitype.JoinLine) {
		t.Logf("origin join --force: %s", l.Step)
	})
	if codes.Of(err) != codes.CAHolderStays {
		t.Fatalf("join --force on the CA holder: %v (code %s), want %s", err, codes.Of(err), codes.CAHolderStays)
	}

	if after := caDigest(t, origin.Dir); after != before {
		t.Fatalf("ca/ changed by the refused commands:\nbefore %s\nafter  %s", before, after)
	}
	if st, err := origin.Client.Status(t.Context()); err != nil || st.State != "running" || !st.CAHolder {
		t.Fatalf("origin after the refusals: %+v, %v; want running, CA holder", st, err)
	}
	w1 := agenttest.NewNodeAt(t, "w1", agenttest.TakeIP(t), clock)
	if _, err := w1.Join(t, tok); err != nil {
		t.Fatalf("the token the refused join --force was given: %v; want it unconsumed", err)
	}
	_ = origin.Admit(t, apitype.AdmitRequest{Name: "w2"}) // the CA still signs

	// A node that keeps a copy of CA keys without holding custody (a
	// handoff's unfinished copy) refuses leave before it departs: the
	// record stays active, nothing is wiped.
	if err := os.MkdirAll(filepath.Join(w1.Dir, "ca"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w1.Dir, "ca", "ca.key"), []byte("copy"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w1.Client.Leave(t.Context()); codes.Of(err) != codes.CAHolderStays {
		t.Fatalf("leave with a CA copy in the state dir: %v, want %s", err, codes.CAHolderStays)
	}
	for _, r := range origin.Nodes(t) {
		if r.Name == "w1" && r.State != "active" {
			t.Fatalf("w1 is %s after its refused leave; want active (refused before departing)", r.State)
		}
	}
	if _, err := os.Stat(filepath.Join(w1.Dir, "node.json")); err != nil {
		t.Fatalf("w1's node.json after the refused leave: %v", err)
	}
}

// caDigest is a SHA-256 over every file under dir/ca (name, mode, bytes).
func caDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	root := filepath.Join(dir, "ca")
	n := 0
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		c, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		h.Write([]byte(p + info.Mode().String()))
		h.Write(c)
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("read %s: %d files, %v", root, n, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
