//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// TestCAHandoffDuringRotation (issue 13 items 2 and 4 together): a CA
// rotation begun on c1 (phase reissue, certificates not yet reissued) is
// handed off with custody: c2 receives both CAs' keys (ca/ and ca/next/),
// c1 keeps neither and can no longer drive the rotation (NotCAHolder);
// `ca rotate --now` on c2 resumes and finishes it; a worker admitted
// through c1 afterwards joins, signed by c2 under the new CA, and every
// node reaches every other over Nebula.
func TestCAHandoffDuringRotation(t *testing.T) {
	n := NewNet(t)
	ns := custodyCluster(t, n, "", "c2")
	c1, c2 := ns[0], ns[1]
	w1 := joinWorker(t, n, c1, "w1")
	holderIs(t, c1, c1, c2)

	var st apitype.CAStatus
	if err := c1.CtlJSON(t.Context(), &st, "ca", "rotate"); err != nil {
		t.Fatalf("ca rotate: %v", err)
	}
	if st.Phase != "reissue" || st.Next == "" {
		t.Fatalf("after ca rotate: %+v", st)
	}
	next := st.Next

	var r apitype.CACustody
	if err := c1.CtlJSON(t.Context(), &r, "ca", "handoff", "c2"); err != nil {
		t.Fatal(err)
	}
	if !r.Released || r.To != "c2" {
		t.Fatalf("handoff during the rotation: %+v", r)
	}
	holderIs(t, c2, c1, c2)
	if caCopy(t, c1) || !caCopy(t, c2) {
		t.Fatalf("ca/ copies: c1 %t c2 %t, want only c2", caCopy(t, c1), caCopy(t, c2))
	}
	if _, err := os.Stat(filepath.Join(c2.Dir, "ca", "next", "ca.key")); err != nil {
		t.Fatalf("c2 has no next CA keys after the handoff: %v", err)
	}
	wantCode(t, c1, codes.NotCAHolder, "ca", "rotate", "--now")

	st = apitype.CAStatus{}
	if err := c2.CtlJSON(t.Context(), &st, "ca", "rotate", "--now"); err != nil {
		t.Fatalf("ca rotate --now on c2: %v", err)
	}
	Eventually(t, 30*time.Second, "the rotation finished by c2", func() error {
		var s apitype.CAStatus
		if err := c1.CtlJSON(t.Context(), &s, "ca", "status"); err != nil {
			return err
		}
		if s.Phase != "none" || s.Current != next || s.Holder != "c2" {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
	Eventually(t, 10*time.Second, "c2's ca/next moved into ca/", func() error {
		if _, err := os.Stat(filepath.Join(c2.Dir, "ca", "next")); !os.IsNotExist(err) {
			return fmt.Errorf("ca/next still there: %v", err)
		}
		return nil
	})
	before := signedCount(c2)
	w2 := joinWorker(t, n, c1, "w2")
	if got := signedCount(c2); got <= before {
		t.Fatalf("c2 signed %d admissions before w2's join and %d after; want more", before, got)
	}
	allPairsPing(t, []*Node{c1, c2, w1, w2}, 20*time.Second)
}
