//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// suspicionMarks are what memberlist logs when it suspects a member or
// declares it failed (gossip's log sink passes them to meshd's log).
var suspicionMarks = []string{"has failed, no acks received", "as failed, suspect timeout reached"}

// logMark is where each node's log ends now; suspicionsSince counts the
// suspicion lines written after it.
func logMark(t *testing.T, nodes []*Node) map[*Node]int64 {
	t.Helper()
	m := map[*Node]int64{}
	for _, nd := range nodes {
		fi, err := os.Stat(nd.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		m[nd] = fi.Size()
	}
	return m
}

func suspicionsSince(t testing.TB, mark map[*Node]int64) []string {
	return linesSince(t, mark, suspicionMarks)
}

// linesSince lists the lines holding any of marks that each node of mark
// wrote to its log after its offset, prefixed with the node's name.
func linesSince(t testing.TB, mark map[*Node]int64, marks []string) []string {
	t.Helper()
	var out []string
	for nd, off := range mark {
		b, err := os.ReadFile(nd.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b[min(off, int64(len(b))):]), "\n") {
			for _, m := range marks {
				if strings.Contains(line, m) {
					out = append(out, nd.NodeName+": "+line)
					break
				}
			}
		}
	}
	return out
}

// pingPath is the path `meshctl ping NAME -c 1` on from reports.
func pingPath(t testing.TB, from *Node, name string) (*apitype.PingPath, error) {
	var r struct {
		Probes []struct {
			Answered bool              `json:"answered"`
			Path     *apitype.PingPath `json:"path"`
		} `json:"probes"`
	}
	if err := from.CtlJSON(t.Context(), &r, "ping", name, "-c", "1"); err != nil {
		return nil, err
	}
	if len(r.Probes) != 1 || !r.Probes[0].Answered || r.Probes[0].Path == nil {
		return nil, fmt.Errorf("ping %s from %s: %+v", name, from.NodeName, r.Probes)
	}
	return r.Probes[0].Path, nil
}

// quietProbeRounds is how many full rounds of gossip probes
// TestNATPortPreservingDirect's quiet window spans: 6.5 s with lan timers
// and 3 nodes, 1.3 s with fast ones (it was a fixed 20 s and 15 s).
const quietProbeRounds = 3

// firstPing is how long from's first ICMP echo to ip takes to be
// answered, retrying each 200 ms probe at once, up to within.
func firstPing(t *testing.T, from *Node, ip string, within time.Duration) (time.Duration, error) {
	return waitFor(t.Context(), within, func() error { return from.Ping(t.Context(), ip) })
}

// TestNATPortPreservingDirect: a control node on the internet and two
// workers, each behind its own port-preserving NAT (the commonest home
// router). Right after w2 joins, w1 sends it a first packet: the tunnel
// runs on a direct path (a hole punched through the lighthouse: the path
// is w2's NAT's public address, not a relay) within 2 s of that packet.
// Gossip rides the overlay, so no member is suspected for its private
// underlay address: no suspicion in a quiet window on any node, the
// window quietProbeRounds full rounds of memberlist's probes (every node
// probes each of the others that many times: a probe of a private
// address that cannot be reached fails in every round). With meshd's
// default timers and with the suite's fast ones.
func TestNATPortPreservingDirect(t *testing.T) {
	for _, timers := range []string{"fast", "lan"} {
		t.Run(timers, func(t *testing.T) {
			n := NewNet(t)
			n.Timers, n.DefaultRaft = timers, timers == "lan"
			quiet := n.probeRounds(3, quietProbeRounds)
			a, b := n.AddSite("a", NATPortPreserving), n.AddSite("b", NATPortPreserving)
			c1 := n.NewNode("c1")
			c1.Start(t)
			c1.MustCtl(t, "init", "--cluster", "e2e")
			w1, w2 := a.NewNode("w1"), b.NewNode("w2")
			w1.Start(t)
			w2.Start(t)
			w1.MustCtl(t, "join", c1.Admit(t, "w1"))
			tok := c1.Admit(t, "w2")
			w2.MustCtl(t, "join", tok)
			w2IP := ""
			for _, nd := range c1.Nodes(t) {
				if nd.Name == "w2" {
					w2IP = nd.OverlayIP
				}
			}

			first := time.Now()
			if _, err := firstPing(t, w1, w2IP, 2*time.Second); err != nil {
				t.Fatalf("w1 behind a NAT does not reach w2 behind another over the overlay within 2s of its first packet: %v", err)
			}
			var path *apitype.PingPath
			want := b.Router.IP + ":"
			_, err := waitFor(t.Context(), 2*time.Second-time.Since(first), func() error {
				p, err := pingPath(t, w1, "w2")
				if err != nil {
					return err
				}
				if path = p; !strings.HasPrefix(p.Direct, want) {
					return fmt.Errorf("path %s", p)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("w1's path to w2 is not direct to w2's NAT at %s* within 2s of w1's first packet: %v", want, err)
			}
			t.Logf("timers %s: w1's path to w2 is %s %s after its first packet", timers, path,
				time.Since(first).Round(time.Millisecond))

			nodes := []*Node{c1, w1, w2}
			Eventually(t, 30*time.Second, "gossip on every node shows every node alive", func() error {
				return allAlive(t, nodes, "c1", "w1", "w2")
			})
			mark := logMark(t, nodes)
			deadline := time.Now().Add(quiet)
			for time.Now().Before(deadline) {
				if err := allAlive(t, nodes, "c1", "w1", "w2"); err != nil {
					t.Fatalf("during the quiet window: %v", err)
				}
				select {
				case <-t.Context().Done():
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
			if s := suspicionsSince(t, mark); len(s) > 0 {
				t.Fatalf("%d false suspicions in %s across the NATs:\n%s", len(s), quiet, strings.Join(s, "\n"))
			}
			if p, err := pingPath(t, w1, "w2"); err != nil || !strings.HasPrefix(p.Direct, want) {
				t.Fatalf("after the quiet window w1's path to w2 is %v (%v), want still direct", p, err)
			}
		})
	}
}

// TestNATSymmetricRelayed: two workers each behind a symmetric NAT (a new
// public port for every destination, so no hole can be punched) reach
// each other through a control node acting as a Nebula relay, with no
// relay setting anywhere: the relays come from raft. Traffic flows within
// 3 s of the first packet and `meshctl ping` says `relayed via NAME`;
// when that relay is killed, the tunnel moves to the other control node
// within 5 s (measured as the gap in pings every 100 ms). Two control
// nodes only: the killed one takes raft's quorum with it, which the data
// path does not need.
func TestNATSymmetricRelayed(t *testing.T) {
	for _, timers := range []string{"fast", "lan"} {
		t.Run(timers, func(t *testing.T) {
			n := NewNet(t)
			n.Timers, n.DefaultRaft = timers, timers == "lan"
			n.ExtraConfig = "metrics_addr: 127.0.0.1:9464\n" // each namespace has its own loopback
			c1 := n.NewNode("c1")
			c1.Start(t)
			c1.MustCtl(t, "init", "--cluster", "e2e")
			c2 := n.NewNode("c2")
			c2.Start(t)
			c2.MustCtl(t, "join", c1.Admit(t, "c2", "--role", "control"))
			control := map[string]*Node{"c1": c1, "c2": c2}
			var workers []*Node
			for _, s := range []*Site{n.AddSite("a", NATSymmetric), n.AddSite("b", NATSymmetric)} {
				w := s.NewNode(fmt.Sprintf("w%d", len(workers)+1))
				w.Start(t)
				w.MustCtl(t, "join", c1.Admit(t, w.NodeName))
				workers = append(workers, w)
			}
			all := []*Node{c1, c2, workers[0], workers[1]}
			Eventually(t, 30*time.Second, "gossip on every node shows every node alive", func() error {
				return allAlive(t, all, "c1", "c2", "w1", "w2")
			})
			w1, ips := workers[0], overlayIPs(t, c1)

			took, err := firstPing(t, w1, ips["w2"], 3*time.Second)
			built := time.Now()
			if err != nil {
				t.Fatalf("w1 behind a symmetric NAT does not reach w2 behind another within 3s of its first packet: %v", err)
			}
			var path *apitype.PingPath
			if _, err := waitFor(t.Context(), 5*time.Second, func() error { // w1's node list may not name w2 yet
				path, err = pingPath(t, w1, "w2")
				return err
			}); err != nil {
				t.Fatal(err)
			}
			relay := control[path.Relay]
			if relay == nil {
				t.Fatalf("w1's path to w2 is %s, want relayed via c1 or c2", path)
			}
			t.Logf("timers %s: w1 reached w2 %s after its first packet, %s", timers, took.Round(time.Millisecond), path)
			noTriesBetweenSymmetricNATs(t, workers, ips)

			// The relay dies under a tunnel older than Nebula's first
			// connection test (5 s with the defaults): with lan timers
			// such a tunnel did not move within 5 s in 4 of 5 runs until
			// member/relaydown.go rebuilt it on the relay's gossip
			// suspicion, where one killed at once moved in milliseconds.
			time.Sleep(time.Until(built.Add(10 * time.Second)))
			relay.Kill()
			gap, err := waitFor(t.Context(), 5*time.Second, func() error { return w1.Ping(t.Context(), ips["w2"]) })
			if err != nil {
				t.Fatalf("w1 does not reach w2 within 5s of its relay %s being killed: %v", relay.NodeName, err)
			}
			path, err = pingPath(t, w1, "w2")
			if err != nil {
				t.Fatal(err)
			}
			if path.Relay == "" || path.Relay == relay.NodeName {
				t.Fatalf("after %s was killed w1's path to w2 is %s, want relayed via the other control node", relay.NodeName, path)
			}
			t.Logf("timers %s: %s killed; w1 reached w2 again %s later, %s", timers, relay.NodeName, gap.Round(time.Millisecond), path)
		})
	}
}

// noTriesBetweenSymmetricNATs: of two workers behind symmetric NATs, the
// one with the lower overlay address (the one agent/pathup would have
// try) learnt from both nodes' gossip tag nat that no direct path can
// exist: it counts the relayed peer skipped, and makes no failed try (each
// would rebuild the tunnel, a gap in the pair's traffic) over the next 3 s.
func noTriesBetweenSymmetricNATs(t *testing.T, workers []*Node, ips map[string]string) {
	t.Helper()
	lower := workers[0]
	if netip.MustParseAddr(ips[workers[1].NodeName]).Less(netip.MustParseAddr(ips[lower.NodeName])) {
		lower = workers[1]
	}
	var before map[string]float64
	took := Eventually(t, 15*time.Second, lower.NodeName+" counts its relayed peer skipped (meshd_pathup_tries_total{outcome=\"skipped\"})", func() error {
		m, err := scrape(t.Context(), lower, "127.0.0.1:9464")
		if err != nil {
			return err
		}
		if v := m[`meshd_pathup_tries_total{outcome="skipped"}`]; v < 1 {
			return fmt.Errorf("skipped %v, failed %v", v, m[`meshd_pathup_tries_total{outcome="failed"}`])
		}
		before = m
		return nil
	})
	time.Sleep(3 * time.Second)
	after, err := scrape(t.Context(), lower, "127.0.0.1:9464")
	if err != nil {
		t.Fatal(err)
	}
	const failed = `meshd_pathup_tries_total{outcome="failed"}`
	if after[failed] != before[failed] {
		t.Fatalf("%s made %v failed tries in 3 s to a peer no direct path can reach", lower.NodeName, after[failed]-before[failed])
	}
	t.Logf("%s skipped its relayed peer %s after the pair was relayed; %v failed tries in all, none in the 3 s after", lower.NodeName, took.Round(time.Millisecond), after[failed])
}
