package control

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// The harness runs real control planes: real raft (bolt store, TLS
// stream layer) on loopback, the internal API on a real mTLS listener,
// identities signed by a test CA at the real clock (handshakes judge
// validity at time.Now). Only the node's other parts (overlay, gossip)
// are stand-ins: hooks that record what they were told.

// fastRaft is the harness's default raft timing: 100 ms, and under -race
// 300 ms (the e2e suite's): the race detector slows every goroutine
// several times, and on a loaded 2-core box 100 ms heartbeats were missed
// often enough to move leadership mid-test ("not the leader", "no leader
// to confirm a join on": three tests in one CI run, 2026-12-07).
var fastRaft = func() raftnode.Timing {
	if raceEnabled {
		return raftnode.Timing{HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond, LeaderLease: 150 * time.Millisecond}
	}
	return raftnode.Timing{HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, LeaderLease: 50 * time.Millisecond}
}()

// raftDefaults are hashicorp/raft's own timers, meshd's defaults (the
// raft section of meshd.yaml): what BenchmarkWatchScale runs with, where
// fastRaft's 100 ms elections fire under the load of 10,000 writes.
var raftDefaults = raftnode.Timing{HeartbeatTimeout: time.Second, ElectionTimeout: time.Second, LeaderLease: 500 * time.Millisecond}

func timingOr(t *raftnode.Timing) raftnode.Timing {
	if t == nil {
		return fastRaft
	}
	return *t
}

// hooks records what the plane told the rest of the node.
type hooks struct {
	mu        sync.Mutex
	pokes     int
	notified  int
	forceLeft []string
	// observe, if set, is called at each ForceLeave; what it returns is
	// kept in forceSaw (the state the plane was in when it told gossip).
	observe  func() string
	forceSaw []string
	gossip   map[string]string
	versions map[string]string
	keyNotes int                // NotifyKeys calls
	reports  func() []KeyReport // what gossip members report; nil: none
	// sign signs a report's CA report with the TLS key of the node it
	// names, as that node does (a report that has a CASig keeps it).
	sign    func(KeyReport) []byte
	tunnels []apitype.Tunnel // this node's Nebula tunnels
	// unreachable are the members this node's probes cannot reach.
	unreachable []string
	// silent are the overlay addresses that do not answer this node's
	// direct probe (Reach); every other address answers.
	silent map[netip.Addr]bool
	// reached counts the direct probes of each address.
	reached map[netip.Addr]int
	// lastSeen is when this node's gossip learned a member failed or
	// left, by name (gossip.Gossip.LastSeen).
	lastSeen map[string]time.Time
	// ask, if set, answers the plane's gossip queries (AskMembers);
	// errNoGossip otherwise.
	ask func(ctx context.Context, name string, payload []byte, bound time.Duration,
		done func(map[string][]byte) bool) (map[string][]byte, error)
}

func (h *hooks) hooks() Hooks {
	return Hooks{
		Poke: func() { h.mu.Lock(); h.pokes++; h.mu.Unlock() },
		NotifyRevoked: func() error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.notified++
			return errors.New("gossip is a stand-in here")
		},
		ForceLeave: func(name string) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.forceLeft = append(h.forceLeft, name)
			if h.observe != nil {
				h.forceSaw = append(h.forceSaw, h.observe())
			}
			return nil
		},
		Gossip: func() map[string]string {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.gossip
		},
		Versions: func() map[string]string {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.versions
		},
		AskMembers: func(ctx context.Context, name string, payload []byte, bound time.Duration,
			done func(map[string][]byte) bool) (map[string][]byte, error) {
			h.mu.Lock()
			ask := h.ask
			h.mu.Unlock()
			if ask == nil {
				return nil, errNoGossip
			}
			return ask(ctx, name, payload, bound, done)
		},
		LastSeen: func(name string) (time.Time, bool) {
			h.mu.Lock()
			defer h.mu.Unlock()
			at, ok := h.lastSeen[name]
			return at, ok
		},
		NotifyKeys: func() error { h.mu.Lock(); h.keyNotes++; h.mu.Unlock(); return nil },
		Tunnels: func() []apitype.Tunnel {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.tunnels
		},
		Unreachable: func() []string {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.unreachable
		},
		Reach: func(_ context.Context, a netip.Addr) error { // every member answers through the overlay, but the silent
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.reached == nil {
				h.reached = map[netip.Addr]int{}
			}
			h.reached[a]++
			if h.silent[a] {
				return errors.New("i/o timeout")
			}
			return nil
		},
		KeyReports: func() []KeyReport {
			h.mu.Lock()
			f := h.reports
			h.mu.Unlock()
			if f == nil {
				return nil
			}
			out := f()
			for i, r := range out {
				if r.CA != "" && r.CASig == nil {
					out[i].CASig = h.sign(r)
				}
			}
			return out
		},
	}
}

func (h *hooks) counts() (pokes, notified int, forceLeft []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pokes, h.notified, append([]string(nil), h.forceLeft...)
}

// member is one control node of a test cluster.
type member struct {
	name     string
	nodeID   string
	id       *pki.Identity
	live     *pki.LiveIdentity // what its listeners and client present
	keys     *pki.Keys
	p        *Plane
	addr     string // internal API host:port
	raftAddr string
	hooks    *hooks
	logs     *logRecorder
	srv      *http.Server // its internal API's server
}

// testWorkFactor is the scrypt work factor the members seal CA backups
// with: age's default costs seconds under the race detector and starves
// the members' fast raft timers (leadership moves mid-test).
const testWorkFactor = 10

// testCluster is a CA and the control nodes it admitted.
type testCluster struct {
	ca        *pki.CA
	cluster   state.Cluster
	members   []*member
	nextIP    byte
	promote   time.Duration    // every member's PromoteTimeout
	keyStep   time.Duration    // every member's KeyStepTimeout (0: the default)
	joinBound time.Duration    // every member's JoinBound (0: the default)
	ephemeral time.Duration    // every member's EphemeralAfter (0: the default)
	tombs     int              // every member's WatchTombstones (0: the default)
	timing    *raftnode.Timing // every member's raft timers (nil: fastRaft)
	tlsKeys   sync.Map         // node name -> its TLS private key (PEM), to sign what it states (pki.Attest)
	// nows are members' clocks by name (Deps.Now), set before start;
	// time.Now for a member not in it.
	nows map[string]func() time.Time
}

// attest is name's signature, with its TLS key, of statement (kind, nonce).
func (c *testCluster) attest(t testing.TB, name, kind string, nonce, statement []byte) []byte {
	t.Helper()
	k, ok := c.tlsKeys.Load(name)
	if !ok {
		t.Fatalf("no TLS key for %s", name)
	}
	sig, err := (&pki.Identity{Key: k.([]byte)}).Attest(kind, nonce, statement)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// freePort reserves a loopback port number (closed again; the caller
// binds it at once).
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// identity signs a control identity for name at the real clock.
func (c *testCluster) identity(t testing.TB, name string, role pki.Role) (*pki.Identity, *pki.Keys, netip.Prefix) {
	t.Helper()
	keys, err := pki.NewKeys(name)
	if err != nil {
		t.Fatal(err)
	}
	c.tlsKeys.Store(name, keys.TLSKeyPEM)
	c.nextIP++
	ip := pkitest.IP(c.nextIP)
	var ips []netip.Addr
	if role == pki.RoleControl {
		ips = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
	now := time.Now()
	leaf, err := c.ca.SignTLS(pki.LeafRequest{CSR: keys.CSR, Name: name, NodeID: "id-" + name, Role: role, IPs: ips}, now)
	if err != nil {
		t.Fatal(err)
	}
	host, err := c.ca.SignNebula(pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: name, IP: ip,
		Groups: []string{string(role)}}, now)
	if err != nil {
		t.Fatal(err)
	}
	return &pki.Identity{CACert: c.ca.CertPEM(), Cert: leaf, Key: keys.TLSKeyPEM,
		NebulaCACert: c.ca.NebulaCertPEM(), NebulaCert: host, NebulaKey: keys.NebulaKeyPEM}, keys, ip
}

// start opens raft for a control node and serves its internal API.
func (c *testCluster) start(t testing.TB, name string, holdsCA bool) *member {
	t.Helper()
	id, keys, _ := c.identity(t, name, pki.RoleControl)
	live, err := pki.NewLiveIdentity(id)
	if err != nil {
		t.Fatal(err)
	}
	server, err := pki.LiveServerTLSConfig(live, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := pki.LiveClientTLSConfig(live, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := freePort(t)
	adv, _ := net.ResolveTCPAddr("tcp", raftAddr)
	stream, err := raftnode.NewTLSStreamLayer(raftAddr, adv, server, clientTLS)
	if err != nil {
		t.Fatal(err)
	}
	node, err := raftnode.Open(raftnode.Options{Dir: filepath.Join(t.TempDir(), "raft"), NodeID: "id-" + name,
		Timing: timingOr(c.timing), Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	// Every read shares the FSM's records (state/records.go): each
	// caller path these tests run must copy before it changes them.
	node.FSM().TestOnlyGuardShared(func(err error) { t.Errorf("%s: %v", name, err) })
	t.Cleanup(func() {
		if err := node.FSM().TestOnlyCheckShared(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	client, err := NewLiveClient(live)
	if err != nil {
		t.Fatal(err)
	}
	var ca *pki.CA
	caDir := filepath.Join(t.TempDir(), "ca")
	if holdsCA {
		ca = c.ca
		if err := pki.SaveCADir(caDir, ca, ""); err != nil {
			t.Fatal(err)
		}
	}
	h := &hooks{sign: func(r KeyReport) []byte {
		k, ok := c.tlsKeys.Load(r.Name)
		if !ok {
			return nil
		}
		sig, _ := (&pki.Identity{Key: k.([]byte)}).Attest(pki.AttestCA, []byte(r.ID), CAStatement(r.CA))
		return sig
	}}
	logs := &logRecorder{}
	t.Cleanup(func() { // a failed test shows what each control plane logged
		if t.Failed() {
			logs.mu.Lock()
			defer logs.mu.Unlock()
			for _, r := range logs.recs {
				t.Logf("%s %s: %s %v", name, r.level, r.msg, r.attrs)
			}
		}
	})
	p := New(Config{NodeID: "id-" + name, Name: name, PromoteTimeout: c.promote, NebulaLifetime: time.Hour,
		KeyStepTimeout: c.keyStep, JoinBound: c.joinBound, EphemeralAfter: c.ephemeral, WatchTombstones: c.tombs, CADir: caDir, BackupWorkFactor: testWorkFactor},
		node, ca, client, Deps{Log: slog.New(logs), Hooks: h.hooks(), Now: c.nows[name]})
	apiTLS, err := pki.LiveServerTLSConfig(live)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", apiTLS)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p.Handler(http.NotFoundHandler()), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0), ConnState: p.TrackConn}
	go func() { _ = srv.Serve(ln) }()
	m := &member{name: name, nodeID: "id-" + name, id: id, live: live, keys: keys, p: p, addr: ln.Addr().String(),
		raftAddr: raftAddr, hooks: h, logs: logs, srv: srv}
	t.Cleanup(func() {
		_ = srv.Close()
		client.CloseIdle()
		_ = p.Close()
	})
	c.members = append(c.members, m)
	return m
}

// newCluster bootstraps an origin that holds the CA and leads.
func newCluster(t testing.TB) (*testCluster, *member) {
	t.Helper()
	return newClusterWith(t, clusterOpts{})
}

// clusterOpts vary newCluster.
type clusterOpts struct {
	promote   time.Duration // PromoteTimeout of every member; 3 s if zero
	joinBound time.Duration // JoinBound of every member; the default if zero
	// origin, if set, edits the origin's node record before it is
	// bootstrapped (c's CA exists by then).
	origin func(c *testCluster, n *state.Node)
}

func newClusterWith(t testing.TB, o clusterOpts) (*testCluster, *member) {
	t.Helper()
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: cmp.Or(o.promote, 3*time.Second), joinBound: o.joinBound}
	return c, c.bootstrap(t, o.origin)
}

func (c *testCluster) bootstrap(t testing.TB, edit func(c *testCluster, n *state.Node)) *member {
	t.Helper()
	o := c.start(t, "origin", true)
	adv, _ := net.ResolveTCPAddr("tcp", o.raftAddr)
	if err := o.p.Raft().Bootstrap(adv); err != nil {
		t.Fatal(err)
	}
	if err := o.p.Raft().WaitLeader(within(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	c.cluster = state.Cluster{ID: "0123456789abcdef0123456789abcdef", Name: "alpha", Created: time.Now(), CACert: c.ca.CertPEM(),
		NebulaCACert: c.ca.NebulaCertPEM(), CAFingerprint: c.ca.Fingerprint().String(), Overlay: pkitest.Overlay,
		GossipKeys: [][]byte{make([]byte, 32)}, CAHolder: o.nodeID}
	host, _, _ := net.SplitHostPort(o.addr)
	origin := state.Node{ID: o.nodeID, Name: o.name, Role: pki.RoleControl, State: state.NodeActive,
		Underlay: host, EnrollAddr: o.addr, RaftAddr: o.raftAddr, OverlayIP: pkitest.IP(1).Addr(),
		TLSFingerprint: leafFingerprint(t, o.id.Cert), NebulaFingerprint: "neb-origin"}
	origin.TLSPublicKey, _ = pki.PublicKeyDER(o.id.Cert) // what it signs its reports with (pki.Attest)
	if edit != nil {
		edit(c, &origin)
	}
	if err := o.p.Raft().Apply(within(t, 5*time.Second), &state.Bootstrap{Cluster: c.cluster, Origin: origin,
		At: time.Now(), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	return o
}

// admit has via mint a token for name and enrolls name with it through
// a real enroll server over via's ledger and signer: the admission is
// recorded, the CA holder signs what it says, the certificates are
// recorded. It returns the node id.
func (c *testCluster) admit(t testing.TB, via *member, name string, role pki.Role, keys *pki.Keys, ports enroll.Ports) string {
	t.Helper()
	return c.admitLeaf(t, via, name, role, keys, ports, nil)
}

// admitLeaf is admit that, when id is not nil (an identity for keys),
// puts the leaf the CA holder signed at admission into id, so that id is
// the member raft records. The join is then confirmed on the leader
// (ConfirmJoin), so the node is active, as a node is once `meshctl join`
// returns.
func (c *testCluster) admitLeaf(t testing.TB, via *member, name string, role pki.Role, keys *pki.Keys, ports enroll.Ports,
	id *pki.Identity) string {
	t.Helper()
	nodeID := c.enrollLeaf(t, via, name, role, keys, ports, id)
	c.confirm(t, nodeID)
	return nodeID
}

// confirm writes ConfirmJoin for nodeID on the leader.
func (c *testCluster) confirm(t testing.TB, nodeID string) {
	t.Helper()
	for _, m := range c.members {
		if m.p.Raft().IsLeader() {
			if err := m.p.Write(within(t, 5*time.Second), &state.ConfirmJoin{NodeID: nodeID, At: time.Now(), Actor: "test"}); err != nil {
				t.Fatalf("confirm %s: %v", nodeID, err)
			}
			if err := m.p.SyncRead(within(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("no leader to confirm a join on")
}

// enrollLeaf is admitLeaf without the confirmation: the node stays
// joining with its certificates recorded.
func (c *testCluster) enrollLeaf(t testing.TB, via *member, name string, role pki.Role, keys *pki.Keys, ports enroll.Ports,
	id *pki.Identity) string {
	t.Helper()
	ctx := within(t, 10*time.Second)
	h := mintSecret(t, via, name, role)
	if keys == nil {
		var err error
		if keys, err = pki.NewKeys(name); err != nil {
			t.Fatal(err)
		}
	}
	c.tlsKeys.Store(name, keys.TLSKeyPEM)
	nodeID := "id-" + name
	resp, err := enrollServer(via, nodeID).Enroll(ctx, enrollRequest(h, name, keys, ports), netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatalf("admit %s: %v", name, err)
	}
	if id != nil {
		id.Cert = resp.TLSCert
	}
	return nodeID
}

// enrollServer is a real enroll server over m's ledger and signer that
// names the node it admits nodeID.
func enrollServer(m *member, nodeID string) *enroll.Server {
	return enroll.NewServer(enroll.DefaultServerConfig(), m.p.Ledger(), m.p.Signer(),
		enroll.Deps{NewNodeID: func() string { return nodeID }})
}

// enrollRequest is name's join request with secret and keys, from
// 127.0.0.1.
func enrollRequest(secret enroll.Secret, name string, keys *pki.Keys, ports enroll.Ports) enroll.Request {
	return enroll.Request{Protocol: enroll.ProtocolVersion, Secret: secret, Name: name, CSR: keys.CSR,
		NebulaPublic: keys.NebulaPublicPEM, Underlay: "127.0.0.1", Version: "test", Ports: ports}
}

// mintSecret has via mint a token for name and returns its secret.
func mintSecret(t testing.TB, via *member, name string, role pki.Role) enroll.Secret {
	t.Helper()
	resp, err := via.p.Admit(within(t, 5*time.Second), admitReq(name, role), "test")
	if err != nil {
		t.Fatalf("mint for %s: %v", name, err)
	}
	tok, err := enroll.ParseToken(resp.Token)
	if err != nil {
		t.Fatal(err)
	}
	return tok.Secret
}

// freeIP is the lowest free overlay address in m's FSM, with the prefix
// length.
func freeIP(t testing.TB, m *member) netip.Prefix {
	t.Helper()
	ip, err := m.p.Raft().FSM().FreeIP()
	if err != nil {
		t.Fatal(err)
	}
	return netip.PrefixFrom(ip, pkitest.Overlay.Bits())
}

// joinControl starts a control node, records it through via and has it
// join raft the way a joining control node does.
func (c *testCluster) joinControl(t testing.TB, via *member, name string) *member {
	t.Helper()
	m := c.start(t, name, false)
	_, cport, _ := net.SplitHostPort(m.addr)
	_, rport, _ := net.SplitHostPort(m.raftAddr)
	cp, _ := strconv.Atoi(cport)
	rp, _ := strconv.Atoi(rport)
	id := *m.id
	nodeID := c.enrollLeaf(t, via, name, pki.RoleControl, m.keys, enroll.Ports{Control: cp, Raft: rp, Gossip: 7946, Nebula: 4242}, &id)
	if err := m.live.Swap(&id); err != nil {
		t.Fatalf("%s adopts its admitted leaf: %v", name, err)
	}
	m.id = &id
	if err := m.p.JoinRaft(within(t, 15*time.Second), []string{via.addr}, func(string, ...any) {}); err != nil {
		t.Fatalf("%s joins raft: %v", name, err)
	}
	// As the joiner does: confirm through a control node's internal API.
	if err := m.p.client.ConfirmJoin(within(t, 10*time.Second), []string{via.addr}, nodeID); err != nil {
		t.Fatalf("%s confirms its join: %v", name, err)
	}
	waitState(t, m, nodeID, state.NodeActive)
	return m
}

// leafFingerprint is the fingerprint raft records for a PEM leaf.
func leafFingerprint(t testing.TB, certPEM []byte) string {
	t.Helper()
	leaf, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pki.FingerprintOf(leaf).String()
}

func admitReq(name string, role pki.Role) apitype.AdmitRequest {
	return apitype.AdmitRequest{Name: name, Role: string(role)}
}

func within(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond every few milliseconds until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(d)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("not within %s: %s", d, what)
		case <-tick.C:
		}
	}
}

// logRecorder is a plane's logger in tests: it keeps each record's level
// and attributes (never its message), so a test can check that a failure
// was reported with its code, or that nothing went wrong at all.
type logRecorder struct {
	mu   sync.Mutex
	recs []logRecord
}

type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]slog.Value
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	lr := logRecord{level: rec.Level, msg: rec.Message, attrs: map[string]slog.Value{}}
	rec.Attrs(func(a slog.Attr) bool {
		lr.attrs[a.Key] = a.Value.Resolve()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, lr)
	return nil
}

func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// count is how many records have the message msg.
func (r *logRecorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if rec.msg == msg {
			n++
		}
	}
	return n
}

// warnings are the records at warning level or above.
func (r *logRecorder) warnings() []logRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logRecord
	for _, lr := range r.recs {
		if lr.level >= slog.LevelWarn {
			out = append(out, lr)
		}
	}
	return out
}

// withCode are the records that carry code as their "code" attribute.
func (r *logRecorder) withCode(code codes.Code) []logRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logRecord
	for _, lr := range r.recs {
		if v, ok := lr.attrs["code"]; ok && v.String() == string(code) {
			out = append(out, lr)
		}
	}
	return out
}

// fakeControl is a listener presenting a control leaf of the cluster's CA
// that counts the requests to each path and answers them with answer: a
// stand-in for a control node whose behaviour a test dictates.
type fakeControl struct {
	addr string
	mu   sync.Mutex
	hits map[string]int
}

func (c *testCluster) fakeControl(t testing.TB, name string, answer http.HandlerFunc) *fakeControl {
	t.Helper()
	id, _, _ := c.identity(t, name, pki.RoleControl)
	conf, err := pki.ServerTLSConfig(id)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", conf)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeControl{addr: ln.Addr().String(), hits: map[string]int{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.hits[r.URL.Path]++
		f.mu.Unlock()
		answer(w, r)
	}), ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return f
}

func (f *fakeControl) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[path]
}

// mint has via mint a token for name and returns its hash.
func mint(t testing.TB, via *member, name string, role pki.Role) enroll.TokenHash {
	t.Helper()
	return mintSecret(t, via, name, role).Hash()
}
