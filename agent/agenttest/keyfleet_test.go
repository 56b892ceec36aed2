package agenttest_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/bench/benchrec"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// Issue 31's scale check: a fleet of machines joining with one enrolment
// key through three control nodes.
//
// What is real: three meshd agents (agenttest.NewNode: the daemon's own
// code, raft on disk with its mTLS transport, the CA holder signing every
// certificate, serf, userspace Nebula on each, port 7300's limits), the
// key minted through the local API as `meshctl admit --reusable` does,
// and each joiner's side of the protocol: its own TLS and Nebula keys
// (pki.NewKeys), the pinned-TLS enroll call to the token's seeds in the
// token's order (enroll.Enroll, from the machine's own loopback address),
// and the confirmation over mTLS with the leaf it was given
// (control.Client.ConfirmJoin, to the seeds in the order a worker asks
// them: control.HomeFirst), which the FSM's compare-and-set records as
// the node's going active.
//
// What is light: a joiner is a goroutine, not a meshd. It runs no
// gossip, Nebula, DNS or reconcile loop, and skips what a real joiner
// does around the two calls: the path check (STUN), the state dir, and
// step 10's own conditions, alive in gossip and a tunnel to a lighthouse,
// which the joiner checks before it asks to be confirmed. The control
// node's door does not check them (the FSM's compare-and-set does the
// rest: joining, certificates recorded, not failed): the confirm route is
// served to a joining node (servedToJoining in agent/control/member.go),
// so a light joiner confirms through the same door, unchanged. Its
// confirmation leaves from 127.0.0.1 (control.Client has no dialer to
// bind), its enroll call from its own address.

// fleetNet is the /16 the light joiners' addresses are in. They only dial
// out (no listener, nothing bound to a port of theirs), so they need no
// reservation from loopbacktest: nothing else uses 127.83.
const fleetNet = "127.83"

// fleetConfirmTimeout bounds a light joiner's confirmation, as
// agent's joinConfirmTimeout bounds a real one's step 10.
const fleetConfirmTimeout = 30 * time.Second

// fleetInFlight is how many light joiners run at once: a rack of
// machines booting, not all of them in the same millisecond. Each holds
// at most one connection to a control node at a time.
const fleetInFlight = 32

// keyFleet is three control nodes and an enrolment key minted on c1.
type keyFleet struct {
	controls []*agenttest.Node // c1 (init: the CA holder), c2, c3
	key      *apitype.AdmitResponse
	tok      enroll.Token
	metrics  []string // each control node's metrics address
	leader   string   // the raft leader when the key was minted
}

// fleetOptions are what a fleet's control nodes run with.
type fleetOptions struct {
	timers   config.TimerProfile // fast: agenttest's; lan: meshd's defaults (raft's too)
	uses     int                 // the key's uses
	logLevel string              // "" keeps agenttest's debug
	seed     fleetSeed           // which control node the key lists first
}

// fleetSeed is which control node a key lists first. Every joiner with
// the key enrolls there (enroll.Enroll asks the token's seeds in order,
// moving on only when one cannot serve) and confirms there
// (control.HomeFirst puts the seed it enrolled through first), so one key
// puts its whole fleet on one control node; which one, the key's hash
// picks (control's spreadKey). A follower forwards each write, read index
// and signature to the leader and the CA holder; the leader (here also
// the CA holder) does them itself.
type fleetSeed string

const (
	seedLeader   fleetSeed = "leader"
	seedFollower fleetSeed = "follower"
)

// newKeyFleet starts c1, c2 and c3 (c1 inits the cluster, c2 and c3 join
// as control nodes with tokens for them) and mints a key of o.uses with
// name prefix web- that lists o.seed's kind of control node first.
func newKeyFleet(tb testing.TB, o fleetOptions) *keyFleet {
	tb.Helper()
	f := &keyFleet{}
	clock := &agenttest.Clock{}
	for _, name := range []string{"c1", "c2", "c3"} {
		ip := agenttest.TakeIP(tb)
		addr := net.JoinHostPort(ip, "9464")
		f.metrics = append(f.metrics, addr)
		f.controls = append(f.controls, agenttest.NewNodeAt(tb, name, ip, clock, func(c *config.File) {
			c.MetricsAddr = addr
			if o.timers == config.TimersLAN {
				c.Timers, c.Raft = config.TimersLAN, config.Default().Raft
			}
			if o.logLevel != "" {
				c.LogLevel = o.logLevel
			}
		}))
	}
	c1 := f.controls[0]
	c1.Init(tb, "fleet")
	for _, c := range f.controls[1:] {
		if _, err := c.Join(tb, c1.Admit(tb, apitype.AdmitRequest{Name: c.Name, Role: "control"})); err != nil {
			tb.Fatalf("%s joins as a control node: %v", c.Name, err)
		}
	}
	st, err := c1.Client.Status(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	f.leader = st.Leader
	f.key, f.tok = f.mintKey(tb, o.uses, o.seed)
	return f
}

// mintKey mints keys of uses on c1, revoking each (which frees its
// prefix) until one lists seed's kind of control node first, as
// fitness_test's tokenFirstAt does for one-time tokens.
func (f *keyFleet) mintKey(tb testing.TB, uses int, seed fleetSeed) (*apitype.AdmitResponse, enroll.Token) {
	tb.Helper()
	c1 := f.controls[0]
	for range 40 {
		key, err := c1.Client.Admit(tb.Context(), apitype.AdmitRequest{Reusable: true, Uses: uses, NamePrefix: "web-"})
		if err != nil {
			tb.Fatalf("mint a key of %d uses: %v", uses, err)
		}
		tok, err := enroll.ParseToken(key.Token)
		if err != nil || !tok.Key || len(tok.Seeds) != 3 {
			tb.Fatalf("the key parses as %+v (%v); want a key listing 3 seeds", tok, err)
		}
		if (f.controlAt(tok.Seeds[0]) == f.leader) == (seed == seedLeader) {
			return key, tok
		}
		if _, err := c1.Client.RevokeToken(tb.Context(), key.ID); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Fatalf("40 keys minted, none listing a %s first", seed)
	return nil, enroll.Token{}
}

// lightJoin is one machine joining with the key: its outcome and timings.
type lightJoin struct {
	source string // the machine's own loopback address (its underlay)

	name, nodeID, overlayIP, seed string
	seeds                         []string      // the control nodes the join response named
	id                            *pki.Identity // the leaf and key it confirmed with (no Nebula half)
	nebulaFP                      string        // its Nebula certificate's fingerprint: what a removal revokes
	err                           error
	enroll, total                 time.Duration // the enroll call; keys to confirmed
	start, end                    time.Time
}

// fleetSource is the i-th light joiner's address in fleetNet.
func fleetSource(i int) string {
	return fmt.Sprintf("%s.%d.%d", fleetNet, i/250+1, i%250+2)
}

// run generates the machine's keys, enrolls with tok and confirms the
// join with the leaf the enrollment gave.
func (j *lightJoin) run(ctx context.Context, tok enroll.Token) {
	j.start = time.Now()
	defer func() { j.end = time.Now() }()
	keys, err := pki.NewKeys(tok.Name) // as statedir.PendingKeys does: a key's CSR names its prefix
	if err != nil {
		j.err = err
		return
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(j.source)}}
	p := config.Default().Ports
	t0 := time.Now()
	resp, err := enroll.Enroll(ctx, tok, enroll.Request{
		Protocol: enroll.ProtocolVersion, Secret: tok.Secret, CSR: keys.CSR, NebulaPublic: keys.NebulaPublicPEM,
		Underlay: j.source, Version: "keyfleet", Clock: time.Now(),
		Ports: enroll.Ports{Gossip: p.Gossip, Nebula: p.Nebula, Control: p.Control, Raft: p.Raft},
	}, enroll.ClientDeps{Dial: dialer.DialContext})
	j.enroll = time.Since(t0)
	if err != nil {
		j.err = err
		return
	}
	j.name, j.nodeID, j.overlayIP, j.seed, j.seeds = resp.Name, resp.NodeID, resp.OverlayIP.Addr().String(), resp.Seed, resp.Seeds
	j.id = &pki.Identity{CACert: resp.CACert, Cert: resp.TLSCert, Key: keys.TLSKeyPEM}
	j.nebulaFP, _ = pki.NebulaFingerprint(resp.NebulaCert)
	client, err := control.NewClient(j.id)
	if err != nil {
		j.err = err
		return
	}
	defer client.CloseIdle()
	cctx, cancel := context.WithTimeout(ctx, fleetConfirmTimeout)
	defer cancel()
	if err := client.ConfirmJoin(cctx, control.HomeFirst(resp.Seeds, resp.Seed, resp.NodeID), resp.NodeID); err != nil {
		j.err = fmt.Errorf("%s enrolled through %s but did not confirm: %w", resp.Name, resp.Seed, err)
		return
	}
	j.total = time.Since(j.start)
}

// fleetRun is what one run of n+1 light joiners measured.
type fleetRun struct {
	joins          []*lightJoin
	wall           time.Duration // first start to last end
	cpu            time.Duration // the whole test process's user+sys over the run
	signs          int           // signatures the CA holder logged during the run
	leader         string        // the raft leader when the key was minted
	servedBy       map[string]int
	loadAt, loadTo float64
	// Where the control nodes' time went, for the log: each one's
	// overlay reloads (every change of node records reconciles the
	// overlay) and raft's term before and after (a change is an
	// election during the run).
	reloads      map[string]int
	term0, term1 uint64
	// sched is how long goroutines waited to run once runnable, over
	// the run (runtime/metrics /sched/latencies:seconds): every hop of a
	// raft write (leader, replication, follower, commit, apply) waits
	// this long for a CPU.
	sched [3]time.Duration // p50, p90, p99
}

// joinAll runs n light joiners with the key, at most inFlight at once,
// and waits for every one to end.
func (f *keyFleet) joinAll(tb testing.TB, n, inFlight int) *fleetRun {
	tb.Helper()
	r := &fleetRun{leader: f.leader, servedBy: map[string]int{}, loadAt: benchrec.Load()}
	r.joins = make([]*lightJoin, n)
	for i := range r.joins {
		r.joins[i] = &lightJoin{source: fleetSource(i)}
	}
	signs0, reloads0 := f.signed(), f.count(`msg="overlay reloaded"`)
	r.term0 = f.term(tb)
	sched0 := schedLatencies()
	cpu0 := processCPU(tb)
	start := time.Now()
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for _, j := range r.joins {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			j.run(tb.Context(), f.tok)
		})
	}
	wg.Wait()
	r.wall = time.Since(start)
	r.cpu = processCPU(tb) - cpu0
	r.sched = schedLatencies().since(sched0)
	r.signs = f.signed() - signs0
	r.loadTo = benchrec.Load()
	r.term1, r.reloads = f.term(tb), f.count(`msg="overlay reloaded"`)
	for name, k := range reloads0 {
		r.reloads[name] -= k
	}
	for _, j := range r.joins {
		if j.err == nil {
			r.servedBy[f.controlAt(j.seed)]++
		}
	}
	return r
}

// signed is how many signatures the CA holder (c1) has logged.
func (f *keyFleet) signed() int {
	return strings.Count(f.controls[0].Logs(), `msg="signed for an admission"`)
}

// schedHist is the runtime's histogram of goroutine scheduling latencies.
type schedHist struct{ h *metrics.Float64Histogram }

func schedLatencies() schedHist {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedHist{}
	}
	return schedHist{s[0].Value.Float64Histogram()}
}

// since is the p50, p90 and p99 of the latencies recorded after before
// (each a bucket's upper bound).
func (a schedHist) since(before schedHist) [3]time.Duration {
	var out [3]time.Duration
	if a.h == nil || before.h == nil || len(a.h.Counts) != len(before.h.Counts) {
		return out
	}
	counts := make([]uint64, len(a.h.Counts))
	var total uint64
	for i := range counts {
		counts[i] = a.h.Counts[i] - before.h.Counts[i]
		total += counts[i]
	}
	for k, p := range []float64{0.5, 0.9, 0.99} {
		var seen uint64
		for i, c := range counts {
			seen += c
			if float64(seen) >= p*float64(total) {
				out[k] = time.Duration(min(a.h.Buckets[i+1], 3600) * float64(time.Second))
				break
			}
		}
	}
	return out
}

// count is how many lines of each control node's log hold s.
func (f *keyFleet) count(s string) map[string]int {
	out := map[string]int{}
	for _, c := range f.controls {
		out[c.Name] = strings.Count(c.Logs(), s)
	}
	return out
}

// term is raft's term as c1 sees it.
func (f *keyFleet) term(tb testing.TB) uint64 {
	tb.Helper()
	st, err := f.controls[0].Client.Status(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	return st.RaftTerm
}

// controlAt names the control node whose enroll address is seed.
func (f *keyFleet) controlAt(seed string) string {
	for _, c := range f.controls {
		if host, _, _ := net.SplitHostPort(seed); host == c.IP {
			return c.Name
		}
	}
	return seed
}

// processCPU is this process's user+sys CPU time so far: every control
// node and every light joiner run in it.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// check asserts what issue 31 asks of a run of n+1 joiners with a key of
// n uses: n admitted and confirmed, each under its own name web-1..web-n
// and overlay IP, exactly one refused KeyExhausted with nothing written
// for it, the key's row at n used, 0 left, exhausted; and every control
// node records the n active. Then one more machine is refused with the
// node list unchanged.
func (f *keyFleet) check(tb testing.TB, r *fleetRun, n int) {
	tb.Helper()
	var refused *lightJoin
	names, ips := map[string]bool{}, map[string]bool{}
	for _, j := range r.joins {
		switch {
		case codes.Of(j.err) == codes.KeyExhausted:
			if refused != nil {
				tb.Errorf("two joiners refused KeyExhausted: %s and %s", refused.source, j.source)
			}
			refused = j
		case j.err != nil:
			tb.Errorf("joiner at %s: %v", j.source, j.err)
		default:
			num, err := strconv.Atoi(strings.TrimPrefix(j.name, "web-"))
			if !strings.HasPrefix(j.name, "web-") || err != nil || num < 1 || num > n || names[j.name] {
				tb.Errorf("joiner at %s admitted as %q: want web-N, N in 1..%d, each once", j.source, j.name, n)
			}
			if ips[j.overlayIP] {
				tb.Errorf("overlay IP %s given twice (again to %s)", j.overlayIP, j.name)
			}
			names[j.name], ips[j.overlayIP] = true, true
		}
	}
	if len(names) != n || refused == nil {
		tb.Fatalf("%d joiners with a key of %d uses: %d admitted and confirmed, refused KeyExhausted: %v; want %d and one",
			n+1, n, len(names), refused != nil, n)
	}

	// The refused machine's would-be record: the node id a key gives its
	// TLS key. It has none, and no record names its address.
	for _, c := range f.controls {
		agenttest.WaitFor(tb, tb.Context(), 30*time.Second, func() error {
			return fleetRecorded(tb, c, n, names, ips, refused.source)
		})
	}

	toks, err := f.controls[0].Client.Tokens(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	i := slices.IndexFunc(toks, func(t apitype.Token) bool { return t.ID == f.key.ID })
	if i < 0 {
		tb.Fatalf("tokens lists no key %s: %+v", f.key.ID, toks)
	}
	if k := toks[i]; k.Key == nil || k.Key.Used != n || k.Key.Left != 0 || k.State != apitype.TokenExhausted {
		tb.Fatalf("the key's tokens row after the run: %+v (key %+v); want used %d, left 0, %s", k, k.Key, n, apitype.TokenExhausted)
	}

	// One more machine, alone: refused, and the node list is as it was.
	before := fleetDigest(tb, f.controls[0])
	late := &lightJoin{source: fleetSource(n + 1)}
	late.run(tb.Context(), f.tok)
	if codes.Of(late.err) != codes.KeyExhausted {
		tb.Fatalf("a machine after the key's %d uses: %v; want %s", n, late.err, codes.KeyExhausted)
	}
	if after := fleetDigest(tb, f.controls[0]); after != before {
		tb.Fatalf("the refused join changed the node list:\nbefore %s\nafter  %s", before, after)
	}
}

// fleetRecorded is nil once c lists exactly the three control nodes and
// the n key-admitted nodes, each active, under the names and overlay IPs
// the joiners were given, and nothing from the refused joiner's address.
func fleetRecorded(tb testing.TB, c *agenttest.Node, n int, names, ips map[string]bool, refused string) error {
	nodes, err := c.Client.Nodes(tb.Context())
	if err != nil {
		return err
	}
	if len(nodes) != 3+n {
		return fmt.Errorf("%s lists %d nodes, want %d", c.Name, len(nodes), 3+n)
	}
	seen := map[string]bool{}
	for _, nd := range nodes {
		switch {
		case nd.Role == "control":
			continue
		case nd.Underlay == refused:
			return fmt.Errorf("%s has a record %s from the refused joiner's address %s", c.Name, nd.Name, refused)
		case !names[nd.Name] || !ips[nd.OverlayIP] || seen[nd.OverlayIP]:
			return fmt.Errorf("%s lists %s at %s, which no joiner was given (or twice)", c.Name, nd.Name, nd.OverlayIP)
		case nd.State != "active":
			return fmt.Errorf("%s lists %s %s, want active", c.Name, nd.Name, nd.State)
		}
		seen[nd.OverlayIP] = true
	}
	return nil
}

// fleetDigest is c's node list as one string: names, ids, states, IPs.
func fleetDigest(tb testing.TB, c *agenttest.Node) string {
	tb.Helper()
	var rows []string
	for _, nd := range c.Nodes(tb) {
		rows = append(rows, strings.Join([]string{nd.Name, nd.ID, nd.State, nd.OverlayIP, nd.Underlay}, " "))
	}
	slices.Sort(rows)
	return fmt.Sprintf("%d nodes: %s", len(rows), strings.Join(rows, "; "))
}

// TestKeyFleet100 is issue 31's scale check at 100 (make test): three
// real control nodes, a key of 100 uses listing a follower first (the
// forwarded writes, read indexes and remote signing: two keys in three
// do), 101 light joiners (32 at once, each with its own keys and address)
// enrolling through the key's seeds and confirming over mTLS: exactly 100 admitted and confirmed, named
// web-1..web-100 with distinct overlay IPs, active on every control node;
// one refused KeyExhausted with nothing recorded for it; the key used 100,
// 0 left, exhausted; a 102nd machine refused with the node list unchanged.
func TestKeyFleet100(t *testing.T) {
	const n = 100
	f := newKeyFleet(t, fleetOptions{timers: config.TimersFast, uses: n, seed: seedFollower})
	r := f.joinAll(t, n+1, fleetInFlight)
	f.check(t, r, n)
	// The overlay loop coalesces a burst: at most one reload per gap
	// (agent/member's nextGap, never under 250 ms), whatever the number
	// of raft changes (about three per join).
	most := 1 + int(r.wall/fleetReloadGap)
	for name, k := range r.reloads {
		if k > most {
			t.Errorf("%s reloaded its overlay %d times in %s: at most one per %s, %d", name, k, r.wall.Round(time.Millisecond), fleetReloadGap, most)
		}
	}
	t.Logf("%d joins with one key through 3 control nodes (timers: fast): %s\n%s", n, r.summary(n), r.where())
}

// fleetReloadGap is the least gap between two overlay reloads
// (agent/member's reloadGap).
const fleetReloadGap = 250 * time.Millisecond

// Issue 31's target: 1,000 joins with one key within 60 s on a 2-core
// machine. Only a run of that size is judged.
const (
	fleetTargetJoins = 1000
	fleetTarget      = 60 * time.Second
)

// fleetJoinsEnv sets BenchmarkKeyFleet's number of joins (default 1000).
const fleetJoinsEnv = "MESHD_KEYFLEET_JOINS"

// BenchmarkKeyFleet is issue 31's scale check (make bench): 1,000 light
// joiners (MESHD_KEYFLEET_JOINS) with one key of as many uses, plus one
// more, through three real control nodes, with agenttest's fast timers and
// with meshd's defaults (timers: lan, raft's own timing), each with a key
// that lists the raft leader (c1, the CA holder) first and with one that
// lists a follower first, the agents at log level info as operators run
// them. It asserts what TestKeyFleet100
// does and reports joins a second, each join's latency (keys to
// confirmed, and the enroll call alone), the wall time, the CA holder's
// signing rate and the process's CPU. Target: 1,000 joins within 60 s
// (fleetTarget); a run that misses it fails after recording its figures.
func BenchmarkKeyFleet(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv(fleetJoinsEnv)); err == nil && v > 0 {
		n = v
	}
	for _, timers := range []config.TimerProfile{config.TimersFast, config.TimersLAN} {
		for _, seed := range []fleetSeed{seedLeader, seedFollower} {
			b.Run(fmt.Sprintf("timers=%s/seed=%s/joins=%d", timers, seed, n), func(b *testing.B) {
				benchKeyFleet(b, fleetOptions{timers: timers, uses: n, logLevel: "info", seed: seed})
			})
		}
	}
}

// benchKeyFleet is one of BenchmarkKeyFleet's runs.
func benchKeyFleet(b *testing.B, o fleetOptions) {
	n := o.uses
	var (
		f *keyFleet
		r *fleetRun
	)
	for range b.N {
		b.StopTimer()
		f = newKeyFleet(b, o)
		b.StartTimer()
		r = f.joinAll(b, n+1, fleetInFlight)
		b.StopTimer()
		f.check(b, r, n)
	}
	s := r.summary(n)
	b.Logf("%d joins with one key through 3 control nodes (timers: %s, key lists the %s first, %d in flight): %s\n%s\njoins served (port 7300 metrics): %s",
		n, o.timers, o.seed, fleetInFlight, s, r.where(), f.served(b))
	s.report(b, o)
	if n == fleetTargetJoins && s.wall > fleetTarget {
		b.Errorf("%d joins took %s: issue 31's target is %s (recorded; see the profile findings in docs/performance.md)",
			n, s.wall.Round(time.Millisecond), fleetTarget)
	}
}

// where says which control node the joins enrolled through, how often
// each reloaded its overlay, and whether raft held its leader.
func (r *fleetRun) where() string {
	return fmt.Sprintf("raft leader at the start: %s (c1 holds the CA); enrolled through: %v; overlay reloads during the run: %v; "+
		"raft term %d → %d; joins/s by tenth of the joins: %s; goroutine scheduling latency (runnable to running, the whole process) p50 %s, p90 %s, p99 %s",
		r.leader, r.servedBy, r.reloads, r.term0, r.term1, r.tenths(), r.sched[0], r.sched[1], r.sched[2])
}

// tenths is the rate at which each tenth of the confirmed joins ended:
// a rate that falls as the cluster grows is a cost per join that grows
// with the number of nodes.
func (r *fleetRun) tenths() string {
	var ends []time.Time
	start := r.joins[0].start
	for _, j := range r.joins {
		if j.start.Before(start) {
			start = j.start
		}
		if j.err == nil {
			ends = append(ends, j.end)
		}
	}
	slices.SortFunc(ends, time.Time.Compare)
	if len(ends) < 10 {
		return "too few joins"
	}
	var out []string
	prev := start
	for k := 1; k <= 10; k++ {
		at := ends[k*len(ends)/10-1]
		out = append(out, fmt.Sprintf("%.1f", float64(len(ends)/10)/at.Sub(prev).Seconds()))
		prev = at
	}
	return strings.Join(out, " ")
}

// fleetSummary is a run's figures.
type fleetSummary struct {
	joins                       int
	wall, cpu                   time.Duration
	joinP, enrollP              [3]time.Duration // p50, p90, p99
	perSec, signsPerSec, cpuPct float64
	signs                       int
	loadAt, loadTo              float64
	samples                     []float64 // each join, keys to confirmed, in ms
}

// summary is r's figures for the n admitted joins.
func (r *fleetRun) summary(n int) fleetSummary {
	var total, enr []time.Duration
	var ms []float64
	for _, j := range r.joins {
		if j.err == nil {
			total, enr = append(total, j.total), append(enr, j.enroll)
			ms = append(ms, float64(j.total.Microseconds())/1000)
		}
	}
	s := fleetSummary{joins: n, wall: r.wall, cpu: r.cpu, signs: r.signs, loadAt: r.loadAt, loadTo: r.loadTo, samples: ms,
		perSec: float64(len(total)) / r.wall.Seconds(), signsPerSec: float64(r.signs) / r.wall.Seconds(),
		cpuPct: 100 * r.cpu.Seconds() / r.wall.Seconds()}
	for i, p := range []float64{0.5, 0.9, 0.99} {
		s.joinP[i], s.enrollP[i] = percentile(total, p), percentile(enr, p)
	}
	return s
}

func (s fleetSummary) String() string {
	return fmt.Sprintf("all %d joins (and the refusal) in %s, %.1f joins/s; per join, keys to confirmed: p50 %s, p90 %s, p99 %s; "+
		"the enroll call alone: p50 %s, p90 %s, p99 %s; CA holder (c1): %d signatures, %.1f/s over the run; "+
		"CPU of the whole process (3 control nodes and the joiners): %.1f s, %.0f%% of one core; load average %.1f → %.1f",
		s.joins, s.wall.Round(time.Millisecond), s.perSec, s.joinP[0].Round(time.Millisecond), s.joinP[1].Round(time.Millisecond),
		s.joinP[2].Round(time.Millisecond), s.enrollP[0].Round(time.Millisecond), s.enrollP[1].Round(time.Millisecond),
		s.enrollP[2].Round(time.Millisecond), s.signs, s.signsPerSec, s.cpu.Seconds(), s.cpuPct, s.loadAt, s.loadTo)
}

// report gives s to the benchmark output (b.ReportMetric) and to
// MESHD_BENCH_OUT (bench/benchrec), with the timers it ran with.
func (s fleetSummary) report(b *testing.B, o fleetOptions) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	figs := []struct {
		metric, unit, goUnit string
		v                    float64
		samples              []float64
	}{
		{"joins", "/s", "joins/s", s.perSec, nil},
		{"wall", "s", "wall-s", s.wall.Seconds(), nil},
		{"join-p50", "ms", "join-p50-ms", ms(s.joinP[0]), s.samples},
		{"join-p90", "ms", "join-p90-ms", ms(s.joinP[1]), nil},
		{"join-p99", "ms", "join-p99-ms", ms(s.joinP[2]), nil},
		{"enroll-p50", "ms", "enroll-p50-ms", ms(s.enrollP[0]), nil},
		{"enroll-p90", "ms", "enroll-p90-ms", ms(s.enrollP[1]), nil},
		{"enroll-p99", "ms", "enroll-p99-ms", ms(s.enrollP[2]), nil},
		{"signs", "/s", "signs/s", s.signsPerSec, nil},
		{"cpu", "%", "cpu-%", s.cpuPct, nil},
	}
	// What varies between runs; the rest is fixed here: 3 control
	// nodes, fleetInFlight joiners at once, log level info.
	params := map[string]string{"timers": string(o.timers), "seed": string(o.seed), "joins": strconv.Itoa(s.joins)}
	for _, f := range figs {
		b.ReportMetric(f.v, f.goUnit)
		err := benchrec.Add(benchrec.Result{Name: "BenchmarkKeyFleet", Metric: f.metric, Unit: f.unit, Value: f.v,
			Samples: f.samples, Params: params})
		if err != nil {
			b.Errorf("record %s: %v", f.metric, err)
		}
	}
}

// percentile is the p-th of ds by nearest rank (0 when empty).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[max(0, int(math.Ceil(p*float64(len(s))))-1)]
}

// served is, from each control node's /metrics, its joins served by
// outcome (meshd_joins_served_total), the mean time it took to serve a
// successful one (meshd_join_duration_seconds: checks, admission,
// signing) and the mean time of the raft writes it led
// (meshd_raft_apply_duration_seconds: the leader's).
func (f *keyFleet) served(tb testing.TB) string {
	var out []string
	for i, addr := range f.metrics {
		m, err := scrape(tb.Context(), addr)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", f.controls[i].Name, err))
			continue
		}
		var joins []string
		for series, v := range m {
			if code, ok := strings.CutPrefix(series, `meshd_joins_served_total{code="`); ok && v > 0 {
				joins = append(joins, fmt.Sprintf("%s %g", strings.TrimSuffix(code, `"}`), v))
			}
		}
		slices.Sort(joins)
		mean := func(h string) string {
			if n := m[h+"_count"]; n > 0 {
				return fmt.Sprintf("%.1f ms over %g", 1000*m[h+"_sum"]/n, n)
			}
			return "none"
		}
		out = append(out, fmt.Sprintf("%s: joins served %v, serving one %s, raft writes it led %s", f.controls[i].Name,
			joins, mean("meshd_join_duration_seconds"), mean("meshd_raft_apply_duration_seconds")))
	}
	return strings.Join(out, "; ")
}

// scrape is the series at addr's /metrics, by name and labels.
func scrape(ctx context.Context, addr string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		series, value, ok := strings.Cut(sc.Text(), " ")
		if v, err := strconv.ParseFloat(value, 64); ok && err == nil && !strings.HasPrefix(series, "#") {
			out[series] = v
		}
	}
	return out, sc.Err()
}
