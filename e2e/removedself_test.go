//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// TestRemovedWhilePartitioned (issue 52 item 9), with `timers: lan` and
// a real TUN: a worker cut off from the network is removed, then its link
// comes back. Every control node refuses it NotMember; it says so within
// a bound of the heal (status "removed" with RemovedByCluster), stops
// answering names (REFUSED from its own meshd), cannot reach the origin
// over the overlay, logs one error, and `meshctl leave` on it clears it.
// On main it said "running", answered names and retried every 5 s.
func TestRemovedWhilePartitioned(t *testing.T) {
	requireDig(t)
	n := NewNet(t)
	n.Timers = "lan"
	nodes := controlCluster(t, n, "w1")
	origin, w1 := nodes[0], nodes[3]
	ips := overlayIPs(t, origin)
	Eventually(t, 20*time.Second, "w1 answers c2's name and reaches the origin", func() error {
		r, err := dig(t.Context(), w1.Host, "@"+nodeDNS, "c2."+namesDomain, "A")
		if err != nil || r.Status != "NOERROR" || len(r.Answers) != 1 {
			return fmt.Errorf("dig: %+v %v", r, err)
		}
		return w1.Ping(t.Context(), ips["origin"])
	})

	w1.Host.Cut()
	origin.MustCtl(t, "remove", "w1")
	w1.Host.Heal()
	took := Eventually(t, 60*time.Second, "w1 says the cluster removed it", func() error {
		var st apitype.Status
		if err := w1.CtlJSON(t.Context(), &st, "status"); err != nil {
			return err
		}
		if st.State != apitype.StateRemoved || st.Error == nil || st.Error.ErrCode != codes.RemovedByCluster || st.Removed == nil {
			return fmt.Errorf("w1's status: state %q, error %+v", st.State, st.Error)
		}
		return nil
	})
	cut := Eventually(t, 5*time.Second, "w1 answers no names and reaches no one", func() error {
		r, err := dig(t.Context(), w1.Host, "@"+nodeDNS, "c2."+namesDomain, "A")
		if err != nil || r.Status != "REFUSED" {
			return fmt.Errorf("dig: %+v %v", r, err)
		}
		if w1.Ping(t.Context(), ips["origin"]) == nil {
			return fmt.Errorf("w1 still reaches the origin over the overlay")
		}
		return nil
	})
	t.Logf("w1 said it was removed %s after its link came back; names refused and overlay cut %s later (timers: lan)",
		took.Round(time.Millisecond), cut.Round(time.Millisecond))
	logs, err := os.ReadFile(w1.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	errs, coded := 0, 0
	for _, l := range strings.Split(string(logs), "\n") {
		if strings.Contains(l, "level=ERROR") {
			errs++
			if strings.Contains(l, string(codes.RemovedByCluster)) {
				coded++
			}
		}
	}
	if coded != 1 {
		t.Fatalf("w1 logged %d errors, %d with %s; want exactly one with the code", errs, coded, codes.RemovedByCluster)
	}
	w1.MustCtl(t, "leave")
	var st apitype.Status
	if err := w1.CtlJSON(t.Context(), &st, "status"); err != nil || st.State != "unjoined" {
		t.Fatalf("w1 after leave: %+v %v", st, err)
	}
}
