//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"
)

// Default ports of a control node (DESIGN §3).
const (
	controlPort = "7300"
	raftPort    = "7301"
)

// parkConns opens n TCP connections from host h to addr and leaves them
// silent (never a TLS byte); they are closed when the test ends. It
// returns how many the far side accepted (a connection past a limit may be
// closed by it at once; that is the point).
func parkConns(t *testing.T, h *Host, addr string, n int) int {
	t.Helper()
	var conns []net.Conn
	err := inNetns(h.Name, func() error {
		for range n {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return fmt.Errorf("park a connection on %s: %w", addr, err)
			}
			conns = append(conns, c)
		}
		return nil
	})
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(conns)
}

// TestParkedConnectionsDuringLeaderRestart: an unauthenticated host parks
// 60 silent TCP connections on port 7300 and 60 on port 7301 of every
// control node, then the leader is killed and restarted. Admission works
// again on a surviving control node within 5 s of the kill, and on the
// restarted node once it is back, and a worker joins with that token:
// parked connections hold neither the handshake slots of raft nor the
// control port (issue 9 finding 5).
func TestParkedConnectionsDuringLeaderRestart(t *testing.T) {
	n := NewNet(t)
	nodes := controlCluster(t, n)
	attacker := n.AddHost("x")
	for _, c := range nodes[:3] {
		for _, port := range []string{controlPort, raftPort} {
			parkConns(t, attacker, net.JoinHostPort(c.IP, port), 60)
		}
	}
	leader := ""
	Eventually(t, 10*time.Second, "a leader", func() error {
		if leader = leaderOf(t, nodes[1]); leader == "" {
			return fmt.Errorf("no leader")
		}
		return nil
	})
	victim := byName(nodes, leader)
	var survivor *Node
	for _, c := range nodes[:3] {
		if c != victim {
			survivor = c
			break
		}
	}

	victim.Kill()
	killed := time.Now()
	victim.Start(t)
	// Connections parked again on the restarted node's fresh listeners.
	for _, port := range []string{controlPort, raftPort} {
		parkConns(t, attacker, net.JoinHostPort(victim.IP, port), 60)
	}
	// The 5 s run from the kill: the restart and the parking count.
	ctx, cancel := context.WithDeadline(t.Context(), killed.Add(5*time.Second))
	defer cancel()
	var tok string
	_, err := waitFor(ctx, time.Until(killed.Add(5*time.Second)), func() error {
		var r struct{ Token string }
		if err := survivor.CtlJSON(ctx, &r, "admit", "w1"); err != nil {
			return err
		}
		tok = r.Token
		return nil
	})
	if err != nil {
		t.Fatalf("no admission on %s within 5 s of killing the leader %s (60+60 parked connections per control node): %v",
			survivor.NodeName, victim.NodeName, err)
	}
	t.Logf("admission on %s answered %s after the leader (%s) was killed and started again, with 60+60 parked connections per control node",
		survivor.NodeName, time.Since(killed).Round(time.Millisecond), victim.NodeName)
	w1 := n.NewNode("w1")
	w1.Start(t)
	w1.MustCtl(t, "join", tok)

	Eventually(t, 15*time.Second, "admission on the restarted node", func() error {
		var r struct{ Token string }
		return victim.CtlJSON(t.Context(), &r, "admit", "w2")
	})
}
