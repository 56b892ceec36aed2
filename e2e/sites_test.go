//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
)

// Sites (issue 29 item 6): three control nodes across two sites 50 ms
// apart one way (a round trip of 100 ms), the NAT lab's SiteDelay. Site A
// holds the origin c1, c2 and router A; site B holds c3 and router B. All
// three control nodes have public addresses on the hub; the workers sit
// behind their site's router.

// sitesOneWay is the delay between the two sites, one way.
const sitesOneWay = 50 * time.Millisecond

// sitesLab is the sites cluster: control nodes c1, c2 (site A) and c3
// (site B), and one worker behind each site's NAT.
type sitesLab struct {
	Net     *Net
	A, B    *Site
	Control []*Node // c1, c2, c3
	WA, WB  *Node   // the workers behind A's and B's routers
}

// SiteOf says which site a node is on.
func (l *sitesLab) SiteOf(nd *Node) string {
	switch nd {
	case l.Control[0], l.Control[1], l.WA:
		return "A"
	}
	return "B"
}

// All is every node of the lab, the control nodes first.
func (l *sitesLab) All() []*Node {
	return append(append([]*Node{}, l.Control...), l.WA, l.WB)
}

// newSitesLab builds the sites with the delay between them in place
// before anything starts (c3 joins across the link), then the cluster:
// c1 inits, c2 and c3 join as control nodes, and the workers wa (behind
// A's router, mode a) and wb (behind B's, mode b) are admitted, wb through
// c3. It returns once every node sees every node alive and every control
// node names the same leader.
func newSitesLab(t testing.TB, timers string, a, b NATMode) *sitesLab {
	t.Helper()
	n := NewNet(t)
	// Raft at meshd's defaults whatever the gossip timers: the suite's
	// 300 ms raft timing does not hold across a 100 ms round trip (two
	// elections in a 12 s window, the leader's 150 ms lease lapsing; see
	// docs/performance.md, "Sites"), and it is a test knob, not a
	// profile anyone runs.
	n.Timers, n.DefaultRaft = timers, true
	c1, c2, c3 := n.NewNode("c1"), n.NewNode("c2"), n.NewNode("c3")
	l := &sitesLab{Net: n, A: n.AddSite("a", a), B: n.AddSite("b", b), Control: []*Node{c1, c2, c3}}
	n.SiteDelay(sitesOneWay, []*Host{c1.Host, c2.Host, l.A.Router}, []*Host{c3.Host, l.B.Router})
	c1.Start(t)
	c1.MustCtl(t, "init", "--cluster", "e2e")
	for _, c := range []*Node{c2, c3} {
		c.Start(t)
		c.MustCtl(t, "join", c1.Admit(t, c.NodeName, "--role", "control"))
	}
	l.WA, l.WB = l.A.NewNode("wa"), l.B.NewNode("wb")
	for _, w := range []*Node{l.WA, l.WB} {
		w.Start(t)
	}
	l.WA.MustCtl(t, "join", c1.Admit(t, "wa"))
	l.WB.MustCtl(t, "join", c3.Admit(t, "wb"))
	Eventually(t, 30*time.Second, "gossip on every node shows every node alive", func() error {
		return allAlive(t, l.All(), "c1", "c2", "c3", "wa", "wb")
	})
	Eventually(t, 30*time.Second, "every control node a voter, one leader named by all", func() error {
		_, err := sameLeader(t, l.Control)
		return err
	})
	return l
}

// sameLeader is the leader every control node names (with its term), or
// an error when they differ, one names none or is not a voter.
func sameLeader(t testing.TB, control []*Node) (apitype.Status, error) {
	var first apitype.Status
	for i, c := range control {
		var st apitype.Status
		if err := c.CtlJSON(t.Context(), &st, "status"); err != nil {
			return first, err
		}
		if st.Raft != "leader" && st.Raft != "voter" {
			return first, fmt.Errorf("%s is raft %q", c.NodeName, st.Raft)
		}
		if st.Leader == "" {
			return first, fmt.Errorf("%s names no leader", c.NodeName)
		}
		if i == 0 {
			first = st
		} else if st.Leader != first.Leader || st.RaftTerm != first.RaftTerm {
			return first, fmt.Errorf("%s names %s in term %d, %s names %s in term %d",
				control[0].NodeName, first.Leader, first.RaftTerm, c.NodeName, st.Leader, st.RaftTerm)
		}
	}
	return first, nil
}

// leaderWatch reads every control node's `meshctl status -o json` every
// 250 ms and keeps what changed: each node's (leader, term), as the raft
// fields of apitype.Status say.
type leaderWatch struct {
	mu       sync.Mutex
	last     map[string]apitype.Status
	changes  []string // "c2: c1/term 2 -> c3/term 3 at 4.2s"
	noLeader int      // readings in which a node named no leader
	samples  int
	errs     int // status calls that failed
	start    time.Time
	stop     chan struct{}
	done     chan struct{}
}

// watchLeader starts a leaderWatch; Stop ends it.
func watchLeader(t testing.TB, control []*Node) *leaderWatch {
	w := &leaderWatch{last: map[string]apitype.Status{}, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, c := range control {
				var st apitype.Status
				err := c.CtlJSON(t.Context(), &st, "status")
				w.mu.Lock()
				w.samples++
				switch {
				case err != nil:
					w.errs++
				case st.Leader == "":
					w.noLeader++
				default:
					if prev, ok := w.last[c.NodeName]; ok && (prev.Leader != st.Leader || prev.RaftTerm != st.RaftTerm) {
						w.changes = append(w.changes, fmt.Sprintf("%s: %s/term %d -> %s/term %d at %s", c.NodeName,
							prev.Leader, prev.RaftTerm, st.Leader, st.RaftTerm, time.Since(w.start).Round(time.Millisecond)))
					}
					w.last[c.NodeName] = st
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-t.Context().Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// Stop ends the watch and says what it saw; flaps is every change of
// leader or term on any node plus every reading without a leader.
func (w *leaderWatch) Stop() (flaps int, report string) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	report = fmt.Sprintf("%d status readings over %s: %d leader/term changes, %d without a leader, %d failed",
		w.samples, time.Since(w.start).Round(time.Second), len(w.changes), w.noLeader, w.errs)
	if len(w.changes) > 0 {
		report += "\n" + strings.Join(w.changes, "\n")
	}
	return len(w.changes) + w.noLeader, report
}

// electionMarks are what hashicorp/raft logs when a node stops waiting for
// its leader and stands for election (raftnode passes them to meshd's log).
var electionMarks = []string{"heartbeat timeout reached", "entering candidate state"}

// electionsSince counts those lines on nodes written after mark.
func electionsSince(t testing.TB, mark map[*Node]int64) []string {
	return linesSince(t, mark, electionMarks)
}

// admitAndJoin is one admission end to end: `meshctl admit NAME` on on
// (a token whose first seed is on itself, so the joiner enrolls on its
// own site), then `meshctl join TOKEN` on w (already running) until it
// exits 0.
func admitAndJoin(t testing.TB, on, w *Node) (total, admit time.Duration) {
	t.Helper()
	for range 40 {
		var r struct {
			Token, ID string
			Seeds     []string
		}
		start := time.Now()
		if err := on.CtlJSON(t.Context(), &r, "admit", w.NodeName); err != nil {
			t.Fatal(err)
		}
		admit = time.Since(start)
		if len(r.Seeds) == 0 || !strings.HasPrefix(r.Seeds[0], on.IP+":") {
			on.MustCtl(t, "tokens", "revoke", r.ID) // not timed: another seed first
			continue
		}
		join, steps := w.joinTimed(t, r.Token)
		t.Logf("%s joins through %s (admit %s):\n%s", w.NodeName, on.NodeName, admit.Round(time.Millisecond), steps)
		return admit + join, admit
	}
	t.Fatalf("40 tokens minted on %s, none naming it first", on.NodeName)
	return 0, 0
}

// sitesAdmitSite and sitesAdmitAcross bound an admission end to end on
// site A (the raft leader's and the CA holder's, c1) and on site B, whose
// enrolling control node c3 forwards the admission to the leader and both
// signing requests to the CA holder across the 100 ms round trip: issue
// 29's 2 s, on both. Measured in TestSites (fast and lan timers alike):
// 0.42-0.53 s on site A, 1.59-1.66 s on site B; they were 0.9-2.0 s and
// 2.1-3.4 s before a join stopped waiting out fixed intervals and extra
// round trips (docs/performance.md, "Sites"). On site B about ten
// sequential round trips across the link remain (admit, enroll, the
// first node list, the confirmation; see there): about 1.2 s of it.
const sitesAdmitSite = 2 * time.Second

const sitesAdmitAcross = 2 * time.Second

// sitesWindow is how long TestSites watches the leader in `make test`;
// the 10-minute window is TestSitesWindow's (make bench).
const sitesWindow = 12 * time.Second

// TestSites is issue 29 item 6 and the sites' part of item 2, with raft
// at meshd's defaults (1 s heartbeat and election timeouts, 500 ms lease)
// and the suite's fast gossip timers, then `timers: lan`: three
// control nodes across two sites 50 ms apart one way keep one leader with
// no flap over sitesWindow (every control node's status read every
// 250 ms: no change of leader or term, never no leader, and no raft
// election line in any log), while two workers are admitted end to end
// (`meshctl admit` to `meshctl join` exiting 0), each enrolling with a
// control node on its own site: one on site A through the follower c2 in
// < sitesAdmitSite, one on site B through c3 in < sitesAdmitAcross (both
// the 2 s; each join's steps are logged with their times), and
// then a killed worker is seen failed by every node: with fast timers
// within the lighthouse verdict's bound (7 s; the workers are out of the
// gossip pool, where the issue's < 2 s on its own site and < 3 s across
// the link held); with lan timers within gossipFailBound (memberlist's),
// the figure logged. The window
// holds the admissions and the kills (sitesWindow, or longer if they
// take longer): they run under the watch rather than after it.
func TestSites(t *testing.T) {
	for _, timers := range []string{"fast", "lan"} {
		t.Run(timers, func(t *testing.T) {
			l := newSitesLab(t, timers, NATPortPreserving, NATPortPreserving)
			st, _ := sameLeader(t, l.Control)
			t.Logf("timers %s: leader %s in term %d", timers, st.Leader, st.RaftTerm)

			mark := logMark(t, l.Control)
			watch := watchLeader(t, l.Control)
			windowEnd := time.Now().Add(sitesWindow)
			for _, tc := range []struct {
				on    *Node
				site  *Site
				name  string
				bound time.Duration
			}{{l.Control[1], l.A, "ja", sitesAdmitSite}, {l.Control[2], l.B, "jb", sitesAdmitAcross}} {
				w := tc.site.NewNode(tc.name)
				w.Start(t)
				took, admit := admitAndJoin(t, tc.on, w)
				t.Logf("timers %s: %s behind site %s's NAT admitted on %s and joined in %s (admit %s)", timers, tc.name, tc.site.Name,
					tc.on.NodeName, took.Round(time.Millisecond), admit.Round(time.Millisecond))
				if took >= tc.bound {
					t.Errorf("admitting %s on %s took %s end to end, want < %s", tc.name, tc.on.NodeName, took.Round(time.Millisecond), tc.bound)
				}
			}
			// Failure detection across the sites: wa (site A), then wb (B).
			// The workers are out of the gossip pool (the default): the
			// control nodes' lighthouse verdict fails them, three
			// lighthouse intervals of silence (1 s at fast, whole seconds
			// in Nebula) plus its look and tick, 3.8-3.9 s measured at
			// fast, so the issue's < 2 s on a site and < 3 s across it
			// hold in the pool only (gossip_pool: true); at lan (the
			// default timers) within memberlist's bound as in the pool.
			// Then the verdict's raft write reaches each observer (a
			// follower's apply, a worker's watch stream): 2 s of slack
			// for that on a shared box (3.2-5.0 s measured in CI,
			// 2026-12-08: the second victim's silence begins mid-tick).
			const fastInterval = time.Second // mesh.LighthouseInterval with Fast
			verdict := 3*fastInterval + fastInterval + fastInterval + 2*time.Second
			bound := map[bool]time.Duration{true: verdict, false: verdict}
			alive := l.All()
			for _, victim := range []*Node{l.WA, l.WB} {
				alive = without(alive, victim)
				if timers != "fast" {
					b := l.Net.gossipFailBound(len(alive) + 1)
					bound = map[bool]time.Duration{true: b, false: b}
				}
				seen := seenFailed(t, victim, alive)
				for _, o := range alive {
					same := l.SiteOf(o) == l.SiteOf(victim)
					t.Logf("timers %s: %s (site %s) killed, seen failed by %s (site %s) after %s", timers, victim.NodeName,
						l.SiteOf(victim), o.NodeName, l.SiteOf(o), seen[o].Round(time.Millisecond))
					if seen[o] >= bound[same] {
						t.Errorf("%s saw %s failed after %s, want < %s (same site: %v)", o.NodeName, victim.NodeName,
							seen[o].Round(time.Millisecond), bound[same], same)
					}
				}
			}

			// The window outlasts the admissions and the kills; its end is
			// a deadline the watch has been reading status against all
			// along, not a wait for something to happen.
			if d := time.Until(windowEnd); d > 0 {
				select {
				case <-t.Context().Done():
					return
				case <-time.After(d):
				}
			}
			flaps, report := watch.Stop()
			t.Logf("timers %s: %s", timers, report)
			if flaps > 0 {
				t.Errorf("the leader flapped across the sites with timers %s: %s", timers, report)
			}
			if e := electionsSince(t, mark); len(e) > 0 {
				t.Errorf("%d raft election lines across the sites with timers %s:\n%s", len(e), timers, strings.Join(e, "\n"))
			}
		})
	}
}

// without is nodes less x.
func without(nodes []*Node, x *Node) []*Node {
	var out []*Node
	for _, nd := range nodes {
		if nd != x {
			out = append(out, nd)
		}
	}
	return out
}

// seenFailed kills victim and returns how long each of others took to
// show it failed in `meshctl nodes` (each polled on its own goroutine; a
// node that never does within 20 s fails the test).
func seenFailed(t testing.TB, victim *Node, others []*Node) map[*Node]time.Duration {
	t.Helper()
	victim.Kill()
	start := time.Now()
	var mu sync.Mutex
	seen := map[*Node]time.Duration{}
	var wg sync.WaitGroup
	for _, o := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := waitFor(t.Context(), 20*time.Second, func() error {
				if s := gossipStateOf(t, o, victim.NodeName); s != "failed" {
					return fmt.Errorf("state %q", s)
				}
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			seen[o] = time.Since(start)
			if err != nil {
				t.Errorf("%s never saw %s failed: %v", o.NodeName, victim.NodeName, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return seen
}
