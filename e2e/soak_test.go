//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// The soak (issue 12 item 9): `make soak DURATION=20m`, not part of `make
// test`. TestSoak runs 10 nodes (3 control, 7 workers at the start) under
// seeded random churn for MESHD_SOAK_DURATION and checks invariants every
// second, recording each violation instead of stopping at the first.

// Resource bounds per meshd process, checked every round. Chosen from a
// 4-minute first run (seed 1581442523726516994, 63 churn actions, 19
// hosts): the most seen on any node was 53 open fds (a control node; 21 on
// a worker), 97 goroutines (a worker; 90 on a control node) and 30.9 MB
// resident. The bounds are about 2.5 times that: ordinary variation (more
// members, a burst of connections while a node restarts) stays under them,
// while a leak that grows with churn crosses them within a 20-minute run.
const (
	soakMaxFDs        = 128
	soakMaxGoroutines = 250
	soakMaxRSSMB      = 80
)

// soakReachWithin is how long after the last churn event that touched
// either end a pair of alive active nodes must ping over the overlay.
const soakReachWithin = 5 * time.Second

// soakRemoveWithin bounds `meshctl remove` of a worker, the gossip key
// rotation it ends with included: 0.2-0.3 s in a calm cluster
// (docs/architecture.md, "Leave and remove"); the bound leaves room for a
// leader change just before (the churn's previous action may have killed
// the leader). Open (see docs/reliability.md, "Soak"): under churn a
// removal's gossip key rotation waits about 5 s per step for members
// whose serf SetTags of the previous step has not returned, so removes
// take 5-12 s and this bound is violated.
const soakRemoveWithin = 4 * time.Second

// soakWithdrawWithin: every member stops reaching a removed worker over
// the overlay this long after a control node lists it removed (the
// promise of e2e.TestLeaveAndRemoveWithdraw, 2 s after remove returns,
// when remove returns in 0.2-0.3 s).
const soakWithdrawWithin = 2 * time.Second

// soakNode is one meshd the soak drives. Fields other than nd are guarded
// by soak.mu: the churn goroutine writes them, the checker reads them.
type soakNode struct {
	nd      *Node
	control bool
	member  bool // joined and not left or removed: the cluster must list it active
	running bool
	cut     bool
	pid     int
	touched time.Time // the last churn event on this node (started, healed, joined)
	token   string    // the id of the token it joined with
}

type soakViolation struct {
	at           time.Duration
	kind, detail string
}

type soakStats struct{ fds, goroutines, rssMB map[string]float64 } // max by role

type soak struct {
	t     *testing.T
	n     *Net
	rng   *rand.Rand // the churn's: a seed replays the same actions on the same targets
	crng  *rand.Rand // the checker's (its own goroutine)
	start time.Time

	mu         sync.Mutex
	nodes      []*soakNode
	probe      *Node // an unjoined meshd that tries consumed tokens
	violations []soakViolation
	actions    map[string]map[string]int // action → result → count
	rounds     int                       // invariant rounds run
	checks     map[string]int            // invariant → checks made
	max        soakStats
	noLedger   time.Time // since when no control node has answered (zero: one did)
	seq        int
	joins      map[string]int // name → join runs that could have used a token
}

func (s *soak) violate(kind, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := soakViolation{time.Since(s.start), kind, fmt.Sprintf(format, args...)}
	s.violations = append(s.violations, v)
	s.t.Logf("VIOLATION %s %s: %s", v.at.Round(time.Millisecond), kind, v.detail)
}

func (s *soak) result(action, res string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.actions[action] == nil {
		s.actions[action] = map[string]int{}
	}
	s.actions[action][res]++
	s.t.Logf("%s churn %s: %s", time.Since(s.start).Round(time.Millisecond), action, res)
}

func (s *soak) checked(inv string, k int) {
	s.mu.Lock()
	s.checks[inv] += k
	s.mu.Unlock()
}

// TestSoak: see the top of this file. MESHD_SOAK_SEED replays a run's
// churn (the order of actions and their targets; timing still varies).
func TestSoak(t *testing.T) {
	durEnv := os.Getenv("MESHD_SOAK_DURATION")
	if durEnv == "" {
		t.Skip("the soak runs with `make soak DURATION=20m` (MESHD_SOAK_DURATION)")
	}
	dur, err := time.ParseDuration(durEnv)
	if err != nil {
		t.Fatalf("MESHD_SOAK_DURATION=%q: %v", durEnv, err)
	}
	seed := rand.Uint64()
	if e := os.Getenv("MESHD_SOAK_SEED"); e != "" {
		if seed, err = strconv.ParseUint(e, 10, 64); err != nil {
			t.Fatalf("MESHD_SOAK_SEED=%q: %v", e, err)
		}
	}
	t.Logf("soak: duration %s, seed %d (MESHD_SOAK_SEED=%d to replay)", dur, seed, seed)

	n := NewNet(t)
	n.ExtraConfig = "metrics_addr: 127.0.0.1:9464\n" // each namespace has its own loopback
	s := &soak{t: t, n: n, rng: rand.New(rand.NewPCG(seed, seed)), crng: rand.New(rand.NewPCG(seed, seed+1)),
		actions: map[string]map[string]int{}, checks: map[string]int{}, joins: map[string]int{}, max: soakStats{map[string]float64{}, map[string]float64{}, map[string]float64{}}}
	nodes := controlCluster(t, n, "w1", "w2", "w3", "w4", "w5", "w6", "w7")
	allPairsPing(t, nodes, 20*time.Second)
	for i, nd := range nodes {
		s.joins[nd.NodeName] = 1
		s.nodes = append(s.nodes, &soakNode{nd: nd, control: i < 3, member: true, running: true, pid: nd.cmd.Process.Pid})
	}
	s.probe = n.NewNode("probe")
	s.probe.Start(t)
	s.nodes = append(s.nodes, &soakNode{nd: s.probe, running: true, pid: s.probe.cmd.Process.Pid})

	s.start = time.Now()
	ctx, cancel := context.WithCancel(t.Context())
	checkerDone := make(chan struct{})
	go func() {
		defer close(checkerDone)
		s.checker(ctx)
	}()
	defer func() { // also on a t.Fatal in the churn
		cancel()
		<-checkerDone
		s.summary(dur, seed)
	}()

	for time.Since(s.start) < dur {
		s.churnOnce()
		pause := time.Duration(1000+s.rng.IntN(2000)) * time.Millisecond
		time.Sleep(pause) // the gap between churn events, not a wait for an outcome
	}
	// Let the last event settle, then one more round sees everything.
	time.Sleep(soakReachWithin + time.Second)
}

// pick is a random node matching f (nil if none), chosen under s.mu.
func (s *soak) pick(f func(x *soakNode) bool) *soakNode {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c []*soakNode
	for _, x := range s.nodes {
		if f(x) {
			c = append(c, x)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[s.rng.IntN(len(c))]
}

func (s *soak) memberCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := 0
	for _, x := range s.nodes {
		if x.member {
			k++
		}
	}
	return k
}

func up(x *soakNode) bool { return x.member && x.running && !x.cut }

// churnOnce runs one random churn action to its end: at most one node is
// down or cut at any time, so no control node fault costs quorum.
func (s *soak) churnOnce() {
	k := s.memberCount()
	type act struct {
		name string
		w    int
		run  func()
	}
	acts := []act{
		{"join", 2, s.churnJoin},
		{"leave", 1, s.churnLeave},
		{"remove", 1, s.churnRemove},
		{"kill9-restart", 2, s.churnKill},
		{"restart", 1, s.churnRestart},
		{"partition-heal", 2, s.churnPartition},
	}
	switch {
	case k <= 9:
		acts[0].w, acts[1].w, acts[2].w = 4, 0, 0
	case k >= 11:
		acts[0].w = 0
	}
	total := 0
	for _, a := range acts {
		total += a.w
	}
	r := s.rng.IntN(total)
	for _, a := range acts {
		if r < a.w {
			a.run()
			return
		}
		r -= a.w
	}
}

// ctl runs meshctl with a deadline and returns the code of a failure
// ("" on success) with the output.
func (s *soak) ctl(nd *Node, d time.Duration, args ...string) (codes.Code, string, string) {
	ctx, cancel := context.WithTimeout(s.t.Context(), d)
	defer cancel()
	out, errs, exit := nd.Ctl(ctx, args...)
	return codeOf(exit, errs), out, errs
}

func res(c codes.Code) string {
	if c == "" {
		return "ok"
	}
	return string(c)
}

// controlUp is a random control node that runs and is not cut.
func (s *soak) controlUp() *Node {
	x := s.pick(func(x *soakNode) bool { return up(x) && x.control })
	if x == nil { // never while churn keeps to one fault at a time
		x = s.pick(func(x *soakNode) bool { return x.control })
	}
	return x.nd
}

// waitLeaderSeen waits (bounded) until a running control node sees a
// leader: a control node fault starts only on a cluster that has one.
func (s *soak) waitLeaderSeen() {
	_, _ = waitFor(s.t.Context(), 20*time.Second, func() error {
		if leaderOf(s.t, s.controlUp()) == "" {
			return fmt.Errorf("no leader")
		}
		return nil
	})
}

func (s *soak) churnJoin() {
	// Half the time the name of a member that left, on its own meshd
	// (running unjoined since its leave): a rejoin; otherwise a new host.
	x := s.pick(func(x *soakNode) bool { return !x.member && x.running && x.nd != s.probe })
	action := "join"
	if x != nil && s.rng.IntN(2) == 0 {
		action = "rejoin"
	} else {
		s.mu.Lock()
		s.seq++
		name := fmt.Sprintf("j%d", s.seq)
		s.mu.Unlock()
		nd := s.n.NewNode(name)
		nd.Start(s.t)
		x = &soakNode{nd: nd, running: true, pid: nd.cmd.Process.Pid, touched: time.Now()}
		s.mu.Lock()
		s.nodes = append(s.nodes, x)
		s.mu.Unlock()
	}
	var adm apitype.AdmitResponse
	var c codes.Code
	for range 3 {
		var out string
		if c, out, _ = s.ctl(s.controlUp(), 20*time.Second, "admit", x.nd.NodeName, "-o", "json"); c == "" {
			if err := jsonDecode(out, &adm); err != nil {
				s.violate("api", "admit %s: %v", x.nd.NodeName, err)
			}
			break
		}
	}
	if c != "" {
		s.result(action, "admit "+res(c))
		return
	}
	s.mu.Lock()
	s.joins[x.nd.NodeName]++
	s.mu.Unlock()
	for range 3 {
		if c, _, _ = s.ctl(x.nd, 60*time.Second, "join", adm.Token); c == "" || c == codes.TokenConsumed || c == codes.TokenRevoked {
			break
		}
	}
	s.result(action, res(c))
	if c != "" {
		return // the node stays unjoined (a later rejoin may take it)
	}
	s.mu.Lock()
	x.member, x.touched, x.token = true, time.Now(), adm.ID
	s.mu.Unlock()
	// The token just used, tried again from another machine.
	s.refusesConsumed(adm.Token, x.nd.NodeName)
}

// refusesConsumed tries a used token on the probe, which must be refused
// with TokenConsumed.
func (s *soak) refusesConsumed(token, by string) {
	c, _, errs := s.ctl(s.probe, 60*time.Second, "join", token)
	s.checked("consumed token refused", 1)
	if c != codes.TokenConsumed {
		s.violate("single-use token", "%s's token tried again on the probe: %q, want %s (%s)", by, res(c), codes.TokenConsumed, firstLine(errs))
		if c == "" {
			s.t.Fatalf("the probe joined with a used token; the soak cannot go on")
		}
	}
}

func (s *soak) churnLeave() {
	x := s.pick(func(x *soakNode) bool { return up(x) && !x.control })
	if x == nil {
		return
	}
	s.setMember(x, false) // from the call on, the cluster may list it left
	c, _, _ := s.ctl(x.nd, 60*time.Second, "leave")
	s.result("leave", res(c))
	if c != "" {
		s.setMember(x, true)
		return
	}
	s.mu.Lock()
	idle := 0
	for _, y := range s.nodes {
		if !y.member && y.running && y.nd != s.probe {
			idle++
		}
	}
	s.mu.Unlock()
	if idle > 2 { // keep at most two left meshd running for rejoins
		s.stop(x, false)
	}
}

func (s *soak) churnRemove() {
	x := s.pick(func(x *soakNode) bool { return up(x) && !x.control })
	if x == nil {
		return
	}
	ctl := s.controlUp()
	row, _ := nodeRowErr(ctl, x.nd.NodeName)
	var others []*Node
	s.mu.Lock()
	for _, y := range s.nodes {
		if y != x && up(y) {
			others = append(others, y.nd)
		}
	}
	s.mu.Unlock()
	s.setMember(x, false)
	start := time.Now()
	type answer struct {
		c    codes.Code
		took time.Duration
	}
	done := make(chan answer, 1)
	go func() {
		c, _, _ := s.ctl(ctl, 60*time.Second, "remove", x.nd.NodeName)
		done <- answer{c, time.Since(start)}
	}()
	// Once the removal is recorded, every member drops the removed node's
	// tunnels within soakWithdrawWithin (its meshd still runs meanwhile).
	_, _ = waitFor(s.t.Context(), 30*time.Second, func() error {
		if r, _ := nodeRowErr(ctl, x.nd.NodeName); r.State != "removed" {
			return fmt.Errorf("%s is %q", x.nd.NodeName, r.State)
		}
		return nil
	})
	var reach []string
	if r, _ := nodeRowErr(ctl, x.nd.NodeName); r.State == "removed" && row.OverlayIP != "" {
		time.Sleep(soakWithdrawWithin) // to the bound, from the record seen
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, o := range others {
			wg.Go(func() {
				if o.Ping(s.t.Context(), row.OverlayIP) == nil {
					mu.Lock()
					reach = append(reach, o.NodeName)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		s.checked("removed node withdrawn", 1)
	}
	a := <-done
	s.result("remove", fmt.Sprintf("%s (%s)", res(a.c), durClass(a.took)))
	if len(reach) > 0 {
		slices.Sort(reach)
		s.violate("withdrawal", "%s (%s) still answers pings from %v %s after its removal was listed",
			x.nd.NodeName, row.OverlayIP, reach, soakWithdrawWithin)
	}
	if a.c != "" {
		s.setMember(x, true)
		return
	}
	s.checked("remove within bound", 1)
	if a.took > soakRemoveWithin {
		s.violate("remove latency", "remove %s took %s, bound %s", x.nd.NodeName, a.took.Round(time.Millisecond), soakRemoveWithin)
	}
	s.stop(x, true)
}

// setMember marks x a member (again, touched now) or not.
func (s *soak) setMember(x *soakNode, m bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x.member = m
	if m {
		x.touched = time.Now()
	}
}

// durClass buckets how long a call took, for the summary.
func durClass(d time.Duration) string {
	switch {
	case d < time.Second:
		return "<1s"
	case d < 5*time.Second:
		return "1-5s"
	}
	return ">=5s"
}

// stop ends x's meshd (SIGKILL if kill, else SIGTERM) and marks it down
// first, so the checker stops expecting it.
func (s *soak) stop(x *soakNode, kill bool) {
	s.mu.Lock()
	x.running, x.pid = false, 0
	s.mu.Unlock()
	if kill {
		x.nd.Kill()
	} else {
		x.nd.Stop(s.t)
	}
}

func (s *soak) startAgain(x *soakNode) {
	x.nd.Start(s.t)
	s.mu.Lock()
	x.running, x.pid, x.touched = true, x.nd.cmd.Process.Pid, time.Now()
	s.mu.Unlock()
}

// faultTarget is a random member to kill, stop or cut: any, control nodes
// included, once a leader is seen (the other two control nodes then hold
// quorum while it is down).
func (s *soak) faultTarget() *soakNode {
	x := s.pick(up)
	if x != nil && x.control {
		s.waitLeaderSeen()
	}
	return x
}

func (s *soak) churnKill() {
	x := s.faultTarget()
	if x == nil {
		return
	}
	s.stop(x, true)
	time.Sleep(time.Duration(200+s.rng.IntN(2800)) * time.Millisecond) // how long it stays dead
	s.startAgain(x)
	s.result("kill9-restart", "ok "+roleOf(x))
}

func (s *soak) churnRestart() {
	x := s.faultTarget()
	if x == nil {
		return
	}
	s.stop(x, false)
	s.startAgain(x)
	s.result("restart", "ok "+roleOf(x))
}

func (s *soak) churnPartition() {
	x := s.faultTarget()
	if x == nil {
		return
	}
	s.mu.Lock()
	x.cut = true
	s.mu.Unlock()
	x.nd.Cut()
	time.Sleep(time.Duration(1000+s.rng.IntN(5000)) * time.Millisecond) // how long it stays cut
	x.nd.Heal()
	s.mu.Lock()
	x.cut, x.touched = false, time.Now()
	s.mu.Unlock()
	s.result("partition-heal", "ok "+roleOf(x))
}

func roleOf(x *soakNode) string {
	switch {
	case x.control:
		return "control"
	case x.member:
		return "worker"
	}
	return "unjoined"
}

// checker runs an invariant round every second until ctx ends.
func (s *soak) checker(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.round(ctx)
	}
}

// snap is a copy of a soakNode's fields at the start of a round.
type snap struct {
	x                     *soakNode
	control, member, runs bool
	cut                   bool
	pid                   int
	touched               time.Time
	token                 string
}

func (s *soak) round(ctx context.Context) {
	s.mu.Lock()
	var ss []snap
	for _, x := range s.nodes {
		ss = append(ss, snap{x, x.control, x.member, x.running, x.cut, x.pid, x.touched, x.token})
	}
	s.rounds++
	s.mu.Unlock()
	now := time.Now()

	// The ledger, as a running control node that is not cut lists it.
	var ns []apitype.Node
	var toks []apitype.Token
	got := false
	for _, i := range s.crng.Perm(len(ss)) {
		c := ss[i]
		if !c.control || !c.runs || c.cut {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := c.x.nd.CtlJSON(cctx, &ns, "nodes")
		if err == nil {
			err = c.x.nd.CtlJSON(cctx, &toks, "tokens")
		}
		cancel()
		if err == nil {
			got = true
			break
		}
	}
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	if got {
		s.noLedger = time.Time{}
	} else if s.noLedger.IsZero() {
		s.noLedger = now
	}
	since := s.noLedger
	s.mu.Unlock()
	if !got {
		if !since.IsZero() && now.Sub(since) > 10*time.Second {
			s.violate("control plane", "no running, uncut control node has answered `nodes` and `tokens` for %s", now.Sub(since).Round(time.Second))
		}
	} else {
		s.checkLedger(ss, ns, toks, now)
		s.checkReach(ctx, ss, ns, now)
	}
	s.checkResources(ctx, ss)
}

// checkLedger: names unique among records, overlay IPs unique among the
// records of current members, each used token consumed by one node and by
// the node the soak joined with it, each member active.
func (s *soak) checkLedger(ss []snap, ns []apitype.Node, toks []apitype.Token, now time.Time) {
	names, ips := map[string]bool{}, map[string]string{}
	rows := map[string]apitype.Node{}
	for _, x := range ns {
		rows[x.Name] = x
		if names[x.Name] {
			s.violate("unique names", "the name %s is listed twice", x.Name)
		}
		names[x.Name] = true
		if x.State == "left" || x.State == "removed" || x.State == "failed" {
			continue
		}
		if o, dup := ips[x.OverlayIP]; dup {
			s.violate("unique IPs", "overlay IP %s is listed for %s and %s", x.OverlayIP, o, x.Name)
		}
		ips[x.OverlayIP] = x.Name
	}
	s.checked("unique names and IPs", 1)
	byID, used := map[string]apitype.Token{}, map[string][]string{}
	for _, tk := range toks {
		byID[tk.ID] = tk
		if tk.State != apitype.TokenUsed {
			continue
		}
		if tk.ConsumedBy != tk.Name {
			s.violate("single-use token", "token %s minted for %s is listed as consumed by %q", tk.ID, tk.Name, tk.ConsumedBy)
		}
		used[tk.ConsumedBy] = append(used[tk.ConsumedBy], tk.ID)
	}
	s.mu.Lock()
	joins := maps.Clone(s.joins)
	s.mu.Unlock()
	for name, ids := range used { // one token per join the soak ran under that name, never more
		if len(ids) > joins[name] {
			s.violate("single-use token", "%s is listed as consuming %d tokens %v in %d join runs", name, len(ids), ids, joins[name])
		}
	}
	for _, x := range ss {
		if !x.member {
			continue
		}
		name := x.x.nd.NodeName
		if x.token != "" {
			tk, ok := byID[x.token]
			if !ok || tk.State != apitype.TokenUsed || tk.ConsumedBy != name {
				s.violate("single-use token", "the token %s %s joined with is %q, consumed by %q", x.token, name, tk.State, tk.ConsumedBy)
			}
		}
		if now.Sub(x.touched) > soakReachWithin {
			if r, ok := rows[name]; !ok || r.State != "active" {
				s.violate("active", "%s joined (last churn %s ago) but is listed %q", name, now.Sub(x.touched).Round(time.Millisecond), r.State)
			}
		}
	}
	s.checked("tokens consumed once", 1)
}

// checkReach: every alive active member pings up to soakPeers others over
// the overlay, among those whose last churn event is over soakReachWithin
// ago; a pair counts as unreachable after three pings without an answer.
const soakPeers = 3

func (s *soak) checkReach(ctx context.Context, ss []snap, ns []apitype.Node, now time.Time) {
	ip := map[string]string{}
	for _, x := range ns {
		if x.State == "active" {
			ip[x.Name] = x.OverlayIP
		}
	}
	var live []snap
	for _, x := range ss {
		if x.member && x.runs && !x.cut && now.Sub(x.touched) > soakReachWithin && ip[x.x.nd.NodeName] != "" {
			live = append(live, x)
		}
	}
	var wg sync.WaitGroup
	for i, a := range live {
		peers := slices.Delete(slices.Clone(live), i, i+1)
		s.crng.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
		peers = peers[:min(soakPeers, len(peers))]
		wg.Go(func() {
			for _, b := range peers {
				var err error
				for range 3 {
					if err = a.x.nd.Ping(ctx, ip[b.x.nd.NodeName]); err == nil {
						break
					}
				}
				if ctx.Err() != nil {
					return
				}
				s.checked("overlay pings", 1)
				if err != nil && s.stillSettled(a.x, b.x) {
					s.violate("reachability", "%s does not reach %s (%s) over the overlay: %v", a.x.nd.NodeName, b.x.nd.NodeName, ip[b.x.nd.NodeName], err)
				}
			}
		})
	}
	wg.Wait()
}

// stillSettled: neither end was touched by churn since the round began
// (a ping that failed because the node was killed meanwhile is no fault).
func (s *soak) stillSettled(a, b *soakNode) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range []*soakNode{a, b} {
		if !x.member || !x.running || x.cut || time.Since(x.touched) <= soakReachWithin {
			return false
		}
	}
	return true
}

// checkResources reads each running meshd's open fds, RSS and goroutines.
func (s *soak) checkResources(ctx context.Context, ss []snap) {
	for _, x := range ss {
		if !x.runs || x.pid == 0 {
			continue
		}
		role := "worker"
		switch {
		case x.control:
			role = "control"
		case !x.member:
			role = "unjoined"
		}
		name := x.x.nd.NodeName
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", x.pid))
		if err != nil {
			continue // it was stopped meanwhile
		}
		rss := procStatusMB(x.pid, "VmRSS:")
		g := goroutines(ctx, x.x.nd)
		s.mu.Lock()
		still := x.x.pid == x.pid
		if still {
			s.max.fds[role] = max(s.max.fds[role], float64(len(fds)))
			s.max.rssMB[role] = max(s.max.rssMB[role], rss)
			s.max.goroutines[role] = max(s.max.goroutines[role], float64(g))
		}
		s.mu.Unlock()
		if !still {
			continue
		}
		s.checked("resources", 1)
		if len(fds) > soakMaxFDs {
			s.violate("fds", "%s (%s) has %d open files, bound %d", name, role, len(fds), soakMaxFDs)
		}
		if rss > soakMaxRSSMB {
			s.violate("rss", "%s (%s) has %.1f MB resident, bound %d MB", name, role, rss, soakMaxRSSMB)
		}
		if g > soakMaxGoroutines {
			s.violate("goroutines", "%s (%s) runs %d goroutines, bound %d", name, role, g, soakMaxGoroutines)
		}
	}
}

func procStatusMB(pid int, field string) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// goroutines is go_goroutines from the node's metrics_addr (read from
// inside its namespace), or -1 when it does not answer.
func goroutines(ctx context.Context, nd *Node) int {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out, err := nd.Exec(ctx, "curl", "-s", "--max-time", "2", "http://127.0.0.1:9464/metrics").Output()
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			g, _ := strconv.ParseFloat(v, 64)
			return int(g)
		}
	}
	return -1
}

// summary prints what the soak did and found, and fails the test on any
// violation.
func (s *soak) summary(dur time.Duration, seed uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "SOAK SUMMARY\n  duration %s (asked %s), seed %d\n  churn actions:\n", time.Since(s.start).Round(time.Second), dur, seed)
	for _, a := range slices.Sorted(maps.Keys(s.actions)) {
		total := 0
		var parts []string
		for _, r := range slices.Sorted(maps.Keys(s.actions[a])) {
			total += s.actions[a][r]
			parts = append(parts, fmt.Sprintf("%s %d", r, s.actions[a][r]))
		}
		fmt.Fprintf(&b, "    %-15s %4d: %s\n", a, total, strings.Join(parts, ", "))
	}
	members := 0
	for _, x := range s.nodes {
		if x.member {
			members++
		}
	}
	fmt.Fprintf(&b, "  members at the end %d; meshd processes started on %d hosts\n", members, len(s.nodes))
	fmt.Fprintf(&b, "  invariant rounds %d; checks:", s.rounds)
	for _, k := range slices.Sorted(maps.Keys(s.checks)) {
		fmt.Fprintf(&b, " %s %d;", k, s.checks[k])
	}
	fmt.Fprintf(&b, "\n  max per role (bounds: fds %d, goroutines %d, RSS %d MB):\n", soakMaxFDs, soakMaxGoroutines, soakMaxRSSMB)
	for _, r := range slices.Sorted(maps.Keys(s.max.fds)) {
		fmt.Fprintf(&b, "    %-9s fds %3.0f  goroutines %4.0f  RSS %5.1f MB\n", r, s.max.fds[r], s.max.goroutines[r], s.max.rssMB[r])
	}
	byKind := map[string]int{}
	for _, v := range s.violations {
		byKind[v.kind]++
	}
	fmt.Fprintf(&b, "  violations %d", len(s.violations))
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		fmt.Fprintf(&b, "; %s %d", k, byKind[k])
	}
	b.WriteString("\n")
	for i, v := range s.violations {
		if i == 200 {
			fmt.Fprintf(&b, "    ... %d more\n", len(s.violations)-200)
			break
		}
		fmt.Fprintf(&b, "    %10s %s: %s\n", v.at.Round(time.Millisecond), v.kind, v.detail)
	}
	fmt.Print(b.String())
	if len(s.violations) > 0 {
		s.t.Errorf("%d invariant violations (summary above)", len(s.violations))
	}
}
