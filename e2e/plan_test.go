//go:build e2e

package e2e

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// tokenFile writes tok to a 0600 file and returns its path: the token
// never goes on a command line.
func tokenFile(t testing.TB, tok string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "join.token")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runPlan runs `meshctl join --plan --token-file F -o json` on nd and
// returns the result, the exit code and stderr.
func runPlan(t testing.TB, nd *Node, file string) (apitype.PlanResult, int, string) {
	t.Helper()
	out, errs, code := nd.Ctl(t.Context(), "join", "--plan", "--token-file", file, "-o", "json")
	var res apitype.PlanResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%s: join --plan -o json: exit %d, stdout not a plan: %v\n%s%s", nd.NodeName, code, err, out, errs)
	}
	return res, code, errs
}

// planCheck is the check named name of res.
func planCheck(t testing.TB, res apitype.PlanResult, name string) apitype.PlanCheck {
	t.Helper()
	for _, c := range res.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, res.Checks)
	return apitype.PlanCheck{}
}

// wantRed asserts a plan that exits 1 with want first on stderr and the
// check named name failed with want.
func wantRed(t testing.TB, res apitype.PlanResult, exit int, stderr, name string, want codes.Code) {
	t.Helper()
	if c := planCheck(t, res, name); c.Status != apitype.CheckFail || c.Code != want {
		t.Fatalf("check %s = %s %s (%s), want fail %s", name, c.Status, c.Code, c.Detail, want)
	}
	if first, _, _ := strings.Cut(stderr, "\n"); exit != 1 || res.OK || !strings.HasPrefix(first, string(want)+": ") {
		t.Fatalf("plan: exit %d, ok %v, stderr %q; want exit 1 and %s first", exit, res.OK, stderr, want)
	}
}

// reseed is tok with its seeds replaced: what a token of this cluster
// would be if it named other enroll endpoints for its first seeds' nodes
// (the node ids stay: the first seed, the origin, at seeds[0]).
func reseed(t testing.TB, tok string, seeds ...string) string {
	t.Helper()
	parsed, err := enroll.ParseToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	if len(parsed.SeedIDs) < len(seeds) {
		t.Fatalf("the token names %d seeds, want at least %d", len(parsed.SeedIDs), len(seeds))
	}
	parsed.Seeds, parsed.SeedIDs = seeds, parsed.SeedIDs[:len(seeds)]
	s, err := parsed.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// liar is a seed that presents a real control leaf of the cluster (so the
// joiner's pin accepts it) and reports a clock offset from the true time.
// It records every path it is asked.
type liar struct {
	addr  string
	mu    sync.Mutex
	paths []string
}

func (l *liar) asked() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.paths...)
}

// startLiar serves on host's :7300 with id's leaf, lying by offset about
// the time and refusing everything else.
func startLiar(t testing.TB, host *Host, id *pki.Identity, offset time.Duration) *liar {
	t.Helper()
	conf, err := pki.ServerTLSConfig(id)
	if err != nil {
		t.Fatal(err)
	}
	ln := host.ListenTCP(t, "7300")
	l := &liar{addr: ln.Addr().String()}
	srv := &http.Server{TLSConfig: conf, ErrorLog: log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l.mu.Lock()
			l.paths = append(l.paths, r.Method+" "+r.URL.Path)
			l.mu.Unlock()
			if r.Method == http.MethodGet && r.URL.Path == enroll.TimePath {
				_ = json.NewEncoder(w).Encode(enroll.TimeResponse{ServerTime: time.Now().Add(offset)})
				return
			}
			w.WriteHeader(http.StatusInternalServerError)
		})}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(tls.NewListener(ln, conf)) })
	t.Cleanup(func() {
		_ = srv.Close()
		wg.Wait()
	})
	return l
}

// TestJoinPlan: `meshctl join --plan` with real binaries in namespaces.
// Green on a good token (real TUN, real ports); red with the right code
// on a taken port (the real join refuses with it too, before it sends the
// token: issue 52), a seed whose clock is ten minutes off (a seed of this
// cluster that lies about its time: the real join refuses too, before it
// sends the secret), a seed of another cluster (its CA is not the one the
// token pins) and a used token. After every plan the token is unused on
// the control node.
func TestJoinPlan(t *testing.T) {
	n := NewNet(t)
	origin := n.NewNode("origin")
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "alpha")
	w1 := n.NewNode("w1")
	w1.Start(t)
	tok := origin.Admit(t, "w1")
	file := tokenFile(t, tok)
	unused := func(after string) {
		t.Helper()
		if st := tokenState(t, origin, "w1"); st != apitype.TokenUnused {
			t.Fatalf("after %s the token is %q on the control node, want unused", after, st)
		}
	}

	// Green: every check passes, and the token is still unused.
	res, code, errs := runPlan(t, w1, file)
	if code != 0 || !res.OK {
		t.Fatalf("plan on a good token: exit %d\n%+v\n%s", code, res.Checks, errs)
	}
	for _, name := range []string{"token", "identity", "underlay", "port nebula", "tun", "state-dir", // no gossip port: a worker out of the pool
		"seed " + origin.IP + ":7300", "clock", "admission"} {
		if c := planCheck(t, res, name); c.Status != apitype.CheckOK {
			t.Errorf("check %s = %s %s: %s", name, c.Status, c.Code, c.Detail)
		}
	}
	if res.Underlay != w1.IP {
		t.Errorf("plan advertises %s, want %s", res.Underlay, w1.IP)
	}
	unused("a green plan")

	// A taken port: Nebula's.
	var pc net.PacketConn
	if err := inNetns(w1.Name, func() (err error) {
		pc, err = net.ListenPacket("udp", net.JoinHostPort(w1.IP, "4242"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	res, code, errs = runPlan(t, w1, file)
	wantRed(t, res, code, errs, "port nebula", codes.PortInUse)
	unused("a plan with a taken port")
	// The real join makes the same check before it sends the token
	// (issue 52): refused with the same code, the token unused.
	out, errs, code := w1.Ctl(t.Context(), "join", "--token-file", file)
	_ = pc.Close()
	if first, _, _ := strings.Cut(errs, "\n"); code != 1 || !strings.HasPrefix(first, string(codes.PortInUse)+": ") {
		t.Fatalf("join with Nebula's port taken: exit %d\n%s%s", code, out, errs)
	}
	unused("a join with a taken port")

	// A seed of this cluster whose clock is ten minutes ahead.
	lh := n.AddHost("liar")
	l := startLiar(t, lh, nodeIdentity(t, origin), 10*time.Minute)
	liarFile := tokenFile(t, reseed(t, tok, l.addr))
	res, code, errs = runPlan(t, w1, liarFile)
	wantRed(t, res, code, errs, "clock", codes.ClockSkew)
	if c := planCheck(t, res, "clock"); !strings.Contains(c.Detail, "behind by 10m") {
		t.Errorf("clock check %q does not say this clock is 10 minutes behind", c.Detail)
	}
	if c := planCheck(t, res, "admission"); c.Status != apitype.CheckSkip {
		t.Errorf("admission asked of a seed whose clock is off: %+v", c)
	}
	out, errs, code = w1.Ctl(t.Context(), "join", "--token-file", liarFile)
	if first, _, _ := strings.Cut(errs, "\n"); code != 1 || !strings.HasPrefix(first, string(codes.ClockSkew)+": ") {
		t.Fatalf("join through the lying seed: exit %d\n%s%s", code, out, errs)
	}
	for _, p := range l.asked() {
		if p != "GET "+enroll.TimePath {
			t.Fatalf("the lying seed was sent %s: the secret left before the clocks were compared (asked %v)", p, l.asked())
		}
	}
	unused("a plan and a join through a seed with a skewed clock")

	// A seed of another cluster: its CA is not the one the token pins.
	other := n.NewNode("other")
	other.Start(t)
	other.MustCtl(t, "init", "--cluster", "beta")
	res, code, errs = runPlan(t, w1, tokenFile(t, reseed(t, tok, net.JoinHostPort(other.IP, "7300"))))
	wantRed(t, res, code, errs, "seed "+other.IP+":7300", codes.CAMismatch)
	if c := planCheck(t, res, "admission"); c.Status != apitype.CheckSkip {
		t.Errorf("admission asked of a seed of another CA: %+v", c)
	}
	unused("a plan through a seed of another cluster")

	// A used token: w1 joins with it, w2's plan finds it used.
	w1.MustCtl(t, "join", "--token-file", file)
	w2 := n.NewNode("w2")
	w2.Start(t)
	res, code, errs = runPlan(t, w2, file)
	wantRed(t, res, code, errs, "admission", codes.TokenConsumed)
	if st := tokenState(t, origin, "w1"); st != apitype.TokenUsed {
		t.Fatalf("token %q after the join, want used", st)
	}
}

// TestJoinPlanRoutedAddress: a host with a docker0-like bridge carrying a
// private address on an interface that comes before the one that reaches
// the cluster (the old choice, first private address by interface index,
// would take 172.17.0.1) advertises the source address of its route to
// the seed, says so in its plan, and is recorded with it.
func TestJoinPlanRoutedAddress(t *testing.T) {
	n := NewNet(t)
	origin := n.NewNode("origin")
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "alpha")
	h := n.AddHostWith("w3", func(h *Host) {
		n.in(h.Name, "ip", "link", "add", "docker0", "type", "bridge")
		n.in(h.Name, "ip", "addr", "add", "172.17.0.1/16", "dev", "docker0")
		n.in(h.Name, "ip", "link", "set", "docker0", "up")
	})
	if d, e := ifindex(t, h, "docker0"), ifindex(t, h, "eth0"); d >= e {
		t.Fatalf("docker0 has index %d, eth0 %d: the bridge must come first for this test to tell the choices apart", d, e)
	}
	w3 := n.NewNodeOn(h, "w3")
	unpin(t, w3)
	w3.Start(t)
	tok := origin.Admit(t, "w3")
	file := tokenFile(t, tok)

	res, code, errs := runPlan(t, w3, file)
	if code != 0 || !res.OK {
		t.Fatalf("plan: exit %d\n%+v\n%s", code, res.Checks, errs)
	}
	wantRoute := origin.IP + " dev eth0 src " + h.IP
	if res.Underlay != h.IP || res.Route != wantRoute || !strings.Contains(res.UnderlayWhy, "route to seed "+origin.IP) {
		t.Fatalf("plan chose %s (%s; route %q), want %s by the route %q", res.Underlay, res.UnderlayWhy, res.Route, h.IP, wantRoute)
	}
	out := w3.MustCtl(t, "join", "--token-file", file)
	if !strings.Contains(out, "underlay address "+h.IP) {
		t.Errorf("join did not say which address it advertises:\n%s", out)
	}
	for _, nd := range origin.Nodes(t) {
		if nd.Name == "w3" && nd.Underlay != h.IP {
			t.Fatalf("the cluster recorded w3 at %s, want %s", nd.Underlay, h.IP)
		}
	}

	// --advertise-iface pins, and fails closed when the interface is not
	// on this machine.
	w4 := n.NewNode("w4")
	unpin(t, w4)
	w4.Start(t)
	tok4 := tokenFile(t, origin.Admit(t, "w4"))
	out, errs, code = w4.Ctl(t.Context(), "join", "--plan", "--token-file", tok4, "--advertise-iface", "nosuch0")
	if first, _, _ := strings.Cut(errs, "\n"); code != 1 || !strings.HasPrefix(first, string(codes.AdvertiseAddr)+": ") {
		t.Fatalf("plan with a missing interface: exit %d\n%s%s", code, out, errs)
	}
	if st := tokenState(t, origin, "w4"); st != apitype.TokenUnused {
		t.Fatalf("token %q after a plan", st)
	}
}

// ifindex is the index of link name inside h's namespace.
func ifindex(t testing.TB, h *Host, name string) int {
	t.Helper()
	out, err := h.Exec(t.Context(), "cat", "/sys/class/net/"+name+"/ifindex").Output()
	if err != nil {
		t.Fatalf("ifindex of %s in %s: %v", name, h.Name, err)
	}
	i, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// unpin drops advertise_addr from nd's config: meshd chooses the address.
func unpin(t testing.TB, nd *Node) {
	t.Helper()
	b, err := os.ReadFile(nd.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "advertise_addr: "+nd.IP+"\n", "", 1)
	if cfg == string(b) {
		t.Fatalf("no advertise_addr in %s", nd.Config)
	}
	if err := os.WriteFile(nd.Config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}
