//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// TestMoveToV2 (issue 34): an IPv4-only cluster (`init --overlay-cidr6
// none`: v1 certificates; an origin, a second control node and two
// workers) moves to v2 certificates and a dual-stack overlay with the CA
// rotation machinery, while every node pings every other over IPv4 every
// 100 ms. `ca rotate --dual-stack` returns in phase reissue with no node
// on v2 yet; a worker that joins then gets a v2 certificate (IPv4 and
// IPv6) and reaches the v1 nodes over IPv4 and they reach it: mixed v1/v2
// peers. `ca rotate --now` reissues the rest and finishes; `ca status`
// counts the nodes on v2 at each step. At the end every node lists an
// IPv6 overlay address and all pairs ping over IPv6; no ping was lost
// (ca_move_v2_pings_lost). Bad input changes nothing: a move with a /48,
// and a second move of the now dual-stack cluster.
//
// It runs with the suite's fast timers and with `timers: lan`, meshd's
// default (subtests fast and lan; the lan figure is recorded as
// ca_move_v2_pings_lost_lan).
func TestMoveToV2(t *testing.T) {
	for _, timers := range []string{"fast", "lan"} {
		t.Run(timers, func(t *testing.T) { moveToV2(t, timers) })
	}
}

func moveToV2(t *testing.T, timers string) {
	n := NewNet(t)
	n.Timers = timers
	origin := n.NewNode("origin")
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e", "--overlay-cidr6", "none")
	nodes := []*Node{origin}
	for _, name := range []string{"c2", "w1", "w2"} {
		nd := n.NewNode(name)
		nd.Start(t)
		args := []string{}
		if name == "c2" {
			args = []string{"--role", "control"}
		}
		nd.MustCtl(t, "join", origin.Admit(t, name, args...))
		nodes = append(nodes, nd)
	}
	for _, row := range origin.Nodes(t) {
		if row.OverlayIP6 != "" {
			t.Fatalf("an IPv4-only cluster lists %s at %s", row.Name, row.OverlayIP6)
		}
	}
	allPairsPing(t, nodes, 20*time.Second)
	caStatus := func() apitype.CAStatus {
		t.Helper()
		var st apitype.CAStatus
		if err := origin.CtlJSON(t.Context(), &st, "ca", "status"); err != nil {
			t.Fatalf("ca status: %v", err)
		}
		return st
	}
	if st := caStatus(); st.Overlay6 != "" || st.DualStack != 0 || st.Active != 4 {
		t.Fatalf("ca status before the move: %+v", st)
	}
	failsWith(t, origin, codes.Overlay6Invalid, "ca", "rotate", "--dual-stack", "--overlay-cidr6", "fd00:1::/48")
	if st := caStatus(); st.Phase != "none" || st.Overlay6 != "" {
		t.Fatalf("a refused move changed the rotation: %+v", st)
	}

	ips := overlayIPs(t, origin)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var sent, lost atomic.Int64
	var lostMu sync.Mutex
	var lostAt []string
	for _, a := range nodes {
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				for _, b := range nodes {
					if a == b {
						continue
					}
					sent.Add(1)
					if err := a.Ping(ctx, ips[b.NodeName]); err != nil && ctx.Err() == nil {
						lost.Add(1)
						lostMu.Lock()
						lostAt = append(lostAt, fmt.Sprintf("%s %s->%s", time.Now().Format("15:04:05.000"), a.NodeName, b.NodeName))
						lostMu.Unlock()
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	stopPings := func() {
		cancel()
		wg.Wait()
	}
	defer stopPings()

	start := time.Now()
	var st apitype.CAStatus
	if err := origin.CtlJSON(t.Context(), &st, "ca", "rotate", "--dual-stack", "--overlay-cidr6", "fd00:34::/64"); err != nil {
		t.Fatalf("ca rotate --dual-stack: %v", err)
	}
	t.Logf("ca rotate --dual-stack returned after %s: %+v", time.Since(start).Round(time.Millisecond), st)
	if st.Phase != "reissue" || !st.Moving || st.Overlay6 != "fd00:34::/64" || st.DualStack != 0 || st.Active != 4 {
		t.Fatalf("after ca rotate --dual-stack: %+v, want phase reissue, moving to fd00:34::/64, 0 of 4 on v2", st)
	}
	for _, row := range origin.Nodes(t) {
		if row.OverlayIP6 == "" {
			t.Errorf("%s has no IPv6 overlay address once the move began", row.Name)
		}
	}

	// Mixed: w3 joins on a v2 certificate while the others run v1.
	w3 := n.NewNode("w3")
	w3.Start(t)
	w3.MustCtl(t, "join", origin.Admit(t, "w3"))
	if st := caStatus(); st.DualStack != 1 || st.Active != 5 || !st.Moving {
		t.Fatalf("ca status with w3 joined during the move: %+v, want 1 of 5 on v2", st)
	}
	mixed := append([]*Node{w3}, nodes...)
	for _, nd := range nodes {
		Eventually(t, 10*time.Second, fmt.Sprintf("v1 %s and v2 w3 reach each other over IPv4", nd.NodeName), func() error {
			if err := nd.Ping(t.Context(), overlayIPs(t, origin)["w3"]); err != nil {
				return err
			}
			return w3.Ping(t.Context(), ips[nd.NodeName])
		})
	}

	if err := origin.CtlJSON(t.Context(), &st, "ca", "rotate", "--now"); err != nil {
		t.Fatalf("ca rotate --now: %v", err)
	}
	took := Eventually(t, 60*time.Second, "the move finished", func() error {
		s := caStatus()
		if s.Phase != "none" || s.Moving || s.Overlay6 != "fd00:34::/64" || s.DualStack != 5 || s.Active != 5 {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
	t.Logf("move finished %s after ca rotate --now", took.Round(time.Millisecond))
	for _, nd := range mixed {
		Eventually(t, 10*time.Second, nd.NodeName+" reports its IPv6 overlay address", func() error {
			if s := nd.status(t); s.OverlayIP6 == "" {
				return fmt.Errorf("status has no overlay_ip6")
			}
			return nil
		})
	}
	allPairsPing6(t, mixed, 20*time.Second)
	time.Sleep(time.Second) // pings after the move
	stopPings()
	lostMu.Lock()
	t.Logf("measured (timers: %s): %d of %d pings lost between every ordered pair of 4 nodes (every 100 ms) over %s of the move; lost at %v",
		timers, lost.Load(), sent.Load(), time.Since(start).Round(time.Millisecond), lostAt)
	lostMu.Unlock()
	key := "ca_move_v2_pings_lost"
	if timers == "lan" {
		key += "_lan"
	}
	Record(t, key, "count", float64(lost.Load()))
	if lost.Load() > 0 {
		t.Errorf("%d pings lost during the move, target none", lost.Load())
	}
	failsWith(t, origin, codes.Overlay6Exists, "ca", "rotate", "--dual-stack")
	allPairsPing(t, mixed, 10*time.Second)
}
