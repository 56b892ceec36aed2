package fetched

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// logLines is a logger's text output, for counting lines.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// count is how many lines hold every one of parts.
func (l *logLines) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.buf.String(), "\n") {
		all := line != ""
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// refusal is a control node's NotMember as the client returns it
// (control.Client prefixes the address).
func refusal(addr string) error {
	return codes.Wrap(codes.NotMember, fmt.Errorf("%s: node w1 (id-w1) is removed", addr))
}

// TestStandingJudgement: only an authoritative refusal by every control
// node in one run, or its own record former, judges a node removed; a
// connection error, another answer, or an acceptance starts the run over;
// a joining record is no removal; an acceptance restores a removed node.
// Exactly one error is logged per removal.
func TestStandingJudgement(t *testing.T) {
	unreachable := fmt.Errorf("%w: b: connection refused", control.ErrUnreachable)
	noLeader := codes.Wrap(codes.NoLeader, errors.New("b: no leader"))
	seeds := []string{"a", "b"}
	type answer struct {
		addr string
		err  error
	}
	tests := []struct {
		name    string
		answers []answer
		former  string // a state of its own record, applied after the answers
		leaving bool   // the node leaves on its own (meshctl leave) before the answers
		want    bool
	}{
		{"removed/every control node refuses", []answer{{"a", refusal("a")}, {"b", refusal("b")}}, "", false, true},
		{"removed/own record removed", nil, "removed", false, true},
		{"removed/own record left", nil, "left", false, true},
		{"removed/refusals across rounds with nothing between", []answer{{"b", unreachable}, {"a", refusal("a")}, {"b", refusal("b")}}, "", false, true},
		{"known/one control node refuses", []answer{{"a", refusal("a")}, {"a", refusal("a")}}, "", false, false},
		{"known/unreachable between refusals", []answer{{"a", refusal("a")}, {"b", unreachable}, {"b", refusal("b")}}, "", false, false},
		{"known/another answer between refusals", []answer{{"a", refusal("a")}, {"b", noLeader}, {"b", refusal("b")}}, "", false, false},
		{"known/accepted between refusals", []answer{{"a", refusal("a")}, {"b", nil}, {"b", refusal("b")}}, "", false, false},
		{"known/joining record", nil, "joining", false, false},
		{"known/restored by an acceptance", []answer{{"a", refusal("a")}, {"b", refusal("b")}, {"a", nil}}, "", false, false},
		{"known/leaving on its own", []answer{{"a", refusal("a")}, {"b", refusal("b")}}, "left", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs logLines
			st := NewStanding((&fakeClock{t: pkitest.Now}).now, slog.New(slog.NewTextHandler(&logs, nil)))
			var told []bool
			st.OnChange(func(removed bool) { told = append(told, removed) })
			if tt.leaving {
				st.Leaving()
			}
			for _, a := range tt.answers {
				st.Answer(a.addr, seeds, a.err)
			}
			c := &Copies{nodeID: "id-w1", standing: st}
			if tt.former != "" {
				c.judgeOwn(control.NodeRecord{Node: apitype.Node{ID: "id-w1", State: tt.former}}, true)
			}
			if st.Removed() != tt.want {
				t.Fatalf("removed %t, want %t (told %v)", st.Removed(), tt.want, told)
			}
			if got := codes.Of(st.Err()); tt.want && got != codes.RemovedByCluster || !tt.want && st.Err() != nil {
				t.Fatalf("err %v", st.Err())
			}
			errs := logs.count("level=ERROR")
			if want := len(told) - len(told)/2; errs != want || errs != logs.count("level=ERROR", string(codes.RemovedByCluster)) {
				t.Fatalf("%d error lines for %d removals (told %v):\n%s", errs, want, told, logs.buf.String())
			}
			select {
			case <-st.Known():
				if tt.want {
					t.Fatal("Known is closed while removed")
				}
			default:
				if !tt.want {
					t.Fatal("Known is open while known")
				}
			}
		})
	}
}

// fakeControlNode is a control node's GET /v1/watch, over mTLS with a
// control leaf of the worker's CA: it refuses the caller NotMember, or
// accepts it (one change with the caller's record active; a stream stays
// open after it), and counts the calls.
type fakeControlNode struct {
	addr   string
	fp     string // its TLS leaf's fingerprint
	accept atomic.Bool
	calls  atomic.Int32
	change atomic.Pointer[[]byte] // the change it answers with when it accepts
}

// answerWith makes every fake answer, when it accepts, one whole table:
// each fake an active control node with its address and leaf, and the
// worker w1 active.
func answerWith(t *testing.T, fakes ...*fakeControlNode) {
	t.Helper()
	recs := map[string]string{"id-w1": `{"name":"w1","state":"active","ip":"10.42.0.3"}`}
	for i, f := range fakes {
		recs[fmt.Sprintf("id-c%d", i+1)] = fmt.Sprintf(`{"name":"c%d","role":"control","state":"active","ea":%q,"tls":%q}`, i+1, f.addr, f.fp)
	}
	line, err := json.Marshal(nodesChange(9, true, recs))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fakes {
		f.change.Store(&line)
	}
}

func startFakeControlNode(t *testing.T, ca *pki.CA, name string) *fakeControlNode {
	t.Helper()
	keys, err := pki.NewKeys(name)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.SignTLS(pki.LeafRequest{CSR: keys.CSR, Name: name, NodeID: "id-" + name, Role: pki.RoleControl,
		IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	conf, err := pki.ServerTLSConfig(&pki.Identity{CACert: ca.CertPEM(), Cert: leaf, Key: keys.TLSKeyPEM}, pki.RoleWorker, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertPEM(leaf)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeControlNode{fp: pki.FingerprintOf(cert).String()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+control.PathWatch, func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		if !f.accept.Load() {
			apitype.WriteJSON(w, http.StatusForbidden, control.ErrorBody{Error: *apitype.NewError(codes.NotMember, errors.New("node w1 (id-w1) is removed"))})
			return
		}
		_, _ = w.Write(append(*f.change.Load(), '\n'))
		if r.URL.Query().Has("strict") {
			return
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, TLSConfig: conf, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	f.addr = ln.Addr().String()
	return f
}

// TestRemovedWorkerAsksOnceAMinute: a worker both of whose control nodes
// refuse it NotMember (it was removed while its stream was cut) is judged
// removed from its watch stream's answers, logs exactly one error with
// codes.RemovedByCluster, and from then on asks nothing, told or not,
// until a minute has passed on its clock; then one round (each control
// node once), and nothing again for another minute. A control node that
// accepts it at a later round restores it and the stream opens again.
// On main the refusals were logged at debug and asked again every 5 s
// forever (the stream) and every second (strict reads).
func TestRemovedWorkerAsksOnceAMinute(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	c1, c2 := startFakeControlNode(t, ca, "c1"), startFakeControlNode(t, ca, "c2")
	answerWith(t, c1, c2)
	keys, err := pki.NewKeys("w1")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.SignTLS(pki.LeafRequest{CSR: keys.CSR, Name: "w1", NodeID: "id-w1", Role: pki.RoleWorker}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := control.NewClient(&pki.Identity{CACert: ca.CertPEM(), Cert: leaf, Key: keys.TLSKeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdle)
	clock := &fakeClock{t: time.Now()}
	var logs logLines
	st := NewStanding(clock.now, slog.New(slog.NewTextHandler(&logs, nil)))
	changed := make(chan bool, 4)
	st.OnChange(func(removed bool) { changed <- removed })
	c := New(cl, "id-w1", []string{c1.addr, c2.addr}, "", t.TempDir(), st, slog.New(slog.NewTextHandler(&logs, nil)))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Follow(ctx, nil) }()
	defer func() { cancel(); <-done }()
	await := func(want bool) {
		t.Helper()
		select {
		case got := <-changed:
			if got != want {
				t.Fatalf("standing told removed=%t, want %t", got, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("standing not told removed=%t within 20s:\n%s", want, logs.buf.String())
		}
	}
	await(true)
	calls := func() int { return int(c1.calls.Load() + c2.calls.Load()) }
	if n := logs.count("level=ERROR", string(codes.RemovedByCluster)); n != 1 || logs.count("level=ERROR") != 1 {
		t.Fatalf("%d error lines with the code, want exactly 1:\n%s", n, logs.buf.String())
	}
	if _, err := c.Refresh(ctx, true); codes.Of(err) != codes.RemovedByCluster {
		t.Fatalf("refresh while removed: %v, want %s", err, codes.RemovedByCluster)
	}
	before := calls()
	for range 50 { // told of a change over and over: a forged gossip notice must not make it ask
		_, _ = c.Refresh(ctx, true)
		_, _ = c.GossipKeys(ctx, true)
		_, _ = c.CABundle(ctx, true)
	}
	if _, err := c.OwnTLSCert(ctx); codes.Of(err) != codes.RemovedByCluster {
		t.Fatalf("own TLS leaf while removed: %v", err)
	}
	clock.advance(RemovedRetry - time.Second)
	_, _ = c.Refresh(ctx, false)
	if got := calls(); got != before {
		t.Fatalf("%d calls within a minute of the removal, want none", got-before)
	}
	clock.advance(time.Second)
	for range 5 {
		_, _ = c.Refresh(ctx, false)
	}
	if got := calls(); got != before+2 {
		t.Fatalf("%d calls a minute after the removal, want one round (2: each control node once)", got-before)
	}
	if s, ok := st.State(); !ok || s.Asks != 1 || !s.NextAsk.Equal(clock.now().Add(RemovedRetry)) {
		t.Fatalf("state %+v", s)
	}
	if n := logs.count("level=ERROR"); n != 1 {
		t.Fatalf("%d error lines after a second round, want still 1:\n%s", n, logs.buf.String())
	}
	// The removal was undone: c2 accepts it at the next round.
	c2.accept.Store(true)
	clock.advance(RemovedRetry / 2)
	_, _ = c.Refresh(ctx, false)
	if c.standing.Removed() == false {
		t.Fatal("restored before the next round was due")
	}
	clock.advance(RemovedRetry / 2)
	if _, err := c.Refresh(ctx, false); err != nil {
		t.Fatalf("the round c2 accepts: %v", err)
	}
	await(false)
	select {
	case <-st.Known():
	default:
		t.Fatal("Known still open after the restore")
	}
	deadline := time.Now().Add(20 * time.Second)
	for c.Stats().Streams == 0 { // the stream opens again (on c2; c1 still refuses)
		if time.Now().After(deadline) {
			t.Fatalf("no stream opened after the restore: %+v", c.Stats())
		}
		time.Sleep(10 * time.Millisecond) // polling a counter, bounded by the deadline
	}
}
