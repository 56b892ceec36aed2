//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/mesh"
)

// TestIdleTunnelsClose (issue 54 item 3, step 3): one control node and two
// workers out of the gossip pool at `timers: fast` (the workers' Nebula
// closes a tunnel idle for mesh.IdleTimeoutFast, 10 s; meshd's default,
// `timers: lan`, has mesh.IdleTimeout, 2 min: 2 min 8 s measured once, in
// docs/performance.md, with n.Timers = "lan" and a 5-minute bound). w1 pings w2; with nothing sent after, both workers'
// tunnels to each other close and each keeps only its tunnel to the
// control node (its lighthouse); then w1's next ping to w2 is answered
// over a new tunnel. Prints how long the tunnel took to close and the
// ping's time (a whole `meshctl ping -c 1`: the process and its API call
// besides the handshake).
func TestIdleTunnelsClose(t *testing.T) {
	n := NewNet(t)
	n.Timers = "fast"
	nodes := outOfPoolCluster(t, n, "w1", "w2")
	w1, w2 := nodes[1], nodes[2]
	// A ping, then w1's status lists the tunnel (the list follows
	// Nebula's tunnel changes: it may trail the ping's answer).
	Eventually(t, 60*time.Second, "w1 pings w2 and lists its tunnel", func() error {
		if err := pings(t, w1, "w2"); err != nil {
			return err
		}
		if got := tunnelsOf(t, w1); !slices.Contains(got, "w2") {
			return fmt.Errorf("w1's tunnels after its ping to w2: %v", got)
		}
		return nil
	})
	last := time.Now()
	only := []string{"origin"}
	Eventually(t, 4*mesh.IdleTimeoutFast+20*time.Second, "w1 and w2 hold only their tunnel to the control node", func() error {
		for _, w := range []*Node{w1, w2} {
			if got := tunnelsOf(t, w); !slices.Equal(got, only) {
				return fmt.Errorf("%s holds tunnels to %v", w.NodeName, got)
			}
		}
		return nil
	})
	t.Logf("timers fast: the idle w1-w2 tunnel closed on both sides %s after the last ping (IdleTimeout %s); each worker holds [origin]",
		time.Since(last).Round(time.Second), mesh.IdleTimeoutFast)
	t0 := time.Now()
	out, errs, code := w1.Ctl(t.Context(), "ping", "w2", "-c", "1", "-W", "2s")
	took := time.Since(t0)
	if code != 0 {
		t.Fatalf("w1 pings w2 after the close: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("w1's first ping to w2 after the close answered; meshctl ping -c 1 took %s (shared 2-core box): %s",
		took.Round(time.Millisecond), strings.TrimSpace(out))
}
