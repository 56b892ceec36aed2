package member

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/agent/watch"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/netcheck"
	"github.com/meshd/meshd/pki"
)

// The simulated control node of the scale simulation (scalesim_test.go):
// what one worker needs of its cluster to run its real loops with N
// peers on record, and nothing more.
//
// Real: its Nebula (a userspace lighthouse and relay, mesh.Start, the
// worker's one tunnel), its gossip member on that overlay (gossip.New
// with the config a control node runs, the tags its record matches:
// the worker's gossip pool is the two of them), its STUN responder
// (netcheck), the mTLS of its internal API (a control leaf, the worker's
// own client). Simulated: the internal API. It serves the watch stream
// (nodes, revocations, the gossip keyring and the CA bundle), takes a
// worker's tunnel reports and answers enroll.TimePath's STUN port; any
// other call is answered 404, from a table held in memory: the whole
// table when the worker asks from an index it does not hold, then each
// change as one delta line (what agent/control's handleWatch writes),
// and a heartbeat every 10 s as control's watchHeartbeat. No raft, no
// admission, no other endpoint.

// simHeartbeat is the control node's watch heartbeat (control's
// watchHeartbeat).
const simHeartbeat = 10 * time.Second

// simControl is the simulated control node.
type simControl struct {
	id       *pki.Identity
	facts    *statedir.Facts
	nebula   *mesh.Mesh
	gossip   *gossip.Gossip
	addr     string // its internal API (the watch), 127.0.0.1:port
	lhPort   int    // its Nebula's UDP port
	stunPort int    // its STUN responder's UDP port
	srv      *http.Server

	mu      sync.Mutex
	index   uint64
	nodes   map[string]json.RawMessage // the nodes section, by node id
	revoked map[string]json.RawMessage // the revoked section, by sequence
	keys    json.RawMessage            // the keys section's one item ("ring")
	ca      json.RawMessage            // the ca section's one item ("bundle")
	log     []watch.Change             // every change after the first table, in order
	wake    bell                       // rung at each change
	calls   map[string]int             // the internal API calls it was asked, by method and path
}

// endpoints are where a worker finds it.
func (sc *simControl) endpoints() simEndpoints {
	return simEndpoints{Addr: sc.addr, LHPort: sc.lhPort, STUNPort: sc.stunPort}
}

// callCounts are the internal API calls it was asked so far.
func (sc *simControl) callCounts() map[string]int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return simClone(sc.calls)
}

// simRecord is a node record as the watch table carries it
// (control.watchRecord's wire names).
type simRecord struct {
	Name       string `json:"name,omitempty"`
	Role       string `json:"role,omitempty"`
	State      string `json:"state"`
	OverlayIP  string `json:"ip,omitempty"`
	Underlay   string `json:"ul,omitempty"`
	NebulaPort int    `json:"np,omitempty"`
	EnrollAddr string `json:"ea,omitempty"`
	SerfAddr   string `json:"sa,omitempty"`
	TLSFP      string `json:"tls,omitempty"`
}

func (r simRecord) raw() json.RawMessage {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // a struct of strings and ints always marshals
	}
	return b
}

// startSimControl starts the control node "c1" (10.42.0.1) of a cluster
// whose CA is ca, with the gossip key key.
func startSimControl(tb testing.TB, ca *pki.CA, key []byte, log *slog.Logger) *simControl {
	tb.Helper()
	return startSimControlAs(tb, newSimControlSpec(tb, ca, key), log)
}

// simControlSpec is what the control node takes of the cluster: its
// identity, signed by the cluster's CA, the gossip key and the watch
// table's keys and CA sections. It crosses to a control node run in a
// child process (scalesim_proc_test.go) as JSON: the CA's key stays here.
type simControlSpec struct {
	ID   *pki.Identity   `json:"id"`
	Key  []byte          `json:"key"`
	Keys json.RawMessage `json:"keys"` // the keys section's one item ("ring")
	CA   json.RawMessage `json:"ca"`   // the ca section's one item ("bundle")
}

func newSimControlSpec(tb testing.TB, ca *pki.CA, key []byte) simControlSpec {
	tb.Helper()
	s := simControlSpec{ID: simIdentity(tb, ca, "c1", pki.RoleControl, netip.MustParsePrefix("10.42.0.1/16")), Key: key}
	// The keys and CA sections, as a real table carries them: a worker
	// takes its gossip keyring and CA bundle from its stream and asks for
	// neither.
	nebFP, err := ca.NebulaFingerprint()
	if err != nil {
		tb.Fatal(err)
	}
	s.Keys, _ = json.Marshal(control.GossipKeys{Keys: [][]byte{key}})
	s.CA, _ = json.Marshal(control.CABundle{TLS: ca.CertPEM(), Nebula: ca.NebulaCertPEM(), Phase: state.CAPhaseNone,
		SigningCA: ca.Fingerprint().String(), SigningNebulaCA: nebFP})
	return s
}

// startSimControlAs starts the control node spec describes.
func startSimControlAs(tb testing.TB, spec simControlSpec, log *slog.Logger) *simControl {
	tb.Helper()
	sc := &simControl{nodes: map[string]json.RawMessage{}, revoked: map[string]json.RawMessage{}, calls: map[string]int{}}
	sc.id = spec.ID
	sc.facts = &statedir.Facts{NodeID: "id-c1", Name: "c1", Role: pki.RoleControl, Overlay: netip.MustParsePrefix("10.42.0.1/16"),
		Underlay: netip.MustParseAddr("127.0.0.1"), GossipKeys: [][]byte{spec.Key}}

	cfg := config.Default()
	cfg.StateDir, cfg.BindAddr, cfg.OverlayMode = tb.TempDir(), "127.0.0.1", config.OverlayUserspace
	cfg.Ports.Nebula = simFreeUDPPort(tb)
	mc := cfg.MeshBase(pki.RoleControl, sc.facts.Underlay)
	mc.CACert, mc.Cert, mc.Key = sc.id.NebulaCACert, sc.id.NebulaCert, sc.id.NebulaKey
	m, err := mesh.Start(mc, log.With("node", "c1"))
	if err != nil {
		tb.Fatalf("the simulated control node's Nebula: %v", err)
	}
	sc.nebula, sc.lhPort = m, cfg.Ports.Nebula
	tb.Cleanup(m.Stop)
	gc := gossipConfig(cfg, sc.facts, "sim")
	gc.Network, gc.Log = m, log.With("node", "c1")
	if err := os.MkdirAll(filepath.Dir(gc.SnapshotPath), 0o700); err != nil {
		tb.Fatal(err)
	}
	if sc.gossip, err = gossip.New(gc); err != nil {
		tb.Fatalf("the simulated control node's gossip: %v", err)
	}
	tb.Cleanup(func() { _ = sc.gossip.Shutdown() })

	// Its STUN responder: a worker's NAT check (natpath.go) asks it, and
	// without an answer retries within seconds instead of every 10 min.
	stun, err := netcheck.Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	sc.stunPort = stun.LocalAddr().(*net.UDPAddr).Port
	stunCtx, stopSTUN := context.WithCancel(context.Background())
	tb.Cleanup(stopSTUN)
	go func() { _ = netcheck.NewResponder(stun, netcheck.ResponderLimits{}, log, time.Now).Run(stunCtx) }()

	tlsConf, err := pki.ServerTLSConfig(sc.id, pki.RoleWorker)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tlsConf)
	if err != nil {
		tb.Fatal(err)
	}
	sc.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc(control.PathWatch, sc.serveWatch)
	mux.HandleFunc("POST "+control.PathSelfTunnels, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
	})
	mux.HandleFunc(enroll.TimePath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(enroll.TimeResponse{ServerTime: time.Now(), STUNPort: sc.stunPort})
	})
	sc.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc.mu.Lock()
		sc.calls[r.Method+" "+r.URL.Path]++
		sc.mu.Unlock()
		mux.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = sc.srv.Serve(ln) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = sc.srv.Shutdown(ctx)
		_ = sc.srv.Close()
	})
	leaf, err := sc.id.Leaf()
	if err != nil {
		tb.Fatal(err)
	}
	sc.nodes[sc.facts.NodeID] = simRecord{Name: "c1", Role: string(pki.RoleControl), State: "active", OverlayIP: "10.42.0.1",
		Underlay: "127.0.0.1", NebulaPort: sc.lhPort, EnrollAddr: sc.addr, SerfAddr: "10.42.0.1:" + strconv.Itoa(cfg.Ports.Gossip),
		TLSFP: pki.FingerprintOf(leaf).String()}.raw() // a worker pins a control node's leaf by its record
	sc.keys, sc.ca = spec.Keys, spec.CA
	sc.index = 1
	return sc
}

// put sets node id's record, or with revoke a revocation too, as one
// change; it returns the change's index.
func (sc *simControl) put(id string, rec json.RawMessage, revoke string) uint64 {
	sc.mu.Lock()
	sc.index++
	ch := watch.Change{Index: sc.index, Put: map[string]map[string]json.RawMessage{control.SectionNodes: {id: rec}}}
	sc.nodes[id] = rec
	if revoke != "" {
		seq := watch.Seq(len(sc.revoked))
		raw, _ := json.Marshal(revoke)
		sc.revoked[seq] = raw
		ch.Put[control.SectionRevoked] = map[string]json.RawMessage{seq: raw}
	}
	sc.log = append(sc.log, ch)
	idx := sc.index
	sc.mu.Unlock()
	sc.wake.ring()
	return idx
}

// load puts many records at once, before any worker watches (one index).
func (sc *simControl) load(recs map[string]json.RawMessage) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for id, r := range recs {
		sc.nodes[id] = r
	}
	sc.index++
}

// since is what a stream from index since sends next: the whole table
// when since is not an index of this table's log (0, or before the
// first change), else the changes after it merged into one line; and
// the channel the next change rings.
func (sc *simControl) since(since uint64) (watch.Change, <-chan struct{}) {
	wake := sc.wake.wait()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	first := sc.index - uint64(len(sc.log)) // the index of the table before the first logged change
	if since < first || since > sc.index {
		ch := watch.Change{Index: sc.index, Full: true, Put: map[string]map[string]json.RawMessage{
			control.SectionNodes: simClone(sc.nodes), control.SectionRevoked: simClone(sc.revoked),
			control.SectionKeys: {"ring": sc.keys}, control.SectionCA: {"bundle": sc.ca}}}
		return ch, wake
	}
	ch := watch.Change{Index: sc.index}
	for _, c := range sc.log[since-first:] {
		for s, items := range c.Put {
			if ch.Put == nil {
				ch.Put = map[string]map[string]json.RawMessage{}
			}
			if ch.Put[s] == nil {
				ch.Put[s] = map[string]json.RawMessage{}
			}
			for k, v := range items {
				ch.Put[s][k] = v
			}
		}
	}
	return ch, wake
}

func simClone[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// serveWatch is the watch stream: the whole table or the changes since
// the asked index, then each change, and a heartbeat after 10 s of
// nothing (agent/control's handleWatch, without raft, the leader watch or
// the caller's standing).
func (sc *simControl) serveWatch(w http.ResponseWriter, r *http.Request) {
	since, err := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	if err != nil {
		http.Error(w, "bad index", http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	heartbeat := time.NewTimer(simHeartbeat)
	defer heartbeat.Stop()
	sent, beat := false, false
	for {
		ch, next := sc.since(since)
		if ch.Index > since || ch.Full || !sent || beat {
			line, err := json.Marshal(ch)
			if err != nil {
				return
			}
			if _, err := w.Write(append(line, '\n')); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			since, sent, beat = max(since, ch.Index), true, false
			heartbeat.Reset(simHeartbeat)
		}
		select {
		case <-r.Context().Done():
			return
		case <-next:
		case <-heartbeat.C:
			beat = true
		}
	}
}

// simIdentity is pkitest.NewIdentity issued now, not at pkitest's fixed
// instant: the simulation runs Nebula and TLS on the wall clock.
func simIdentity(tb testing.TB, ca *pki.CA, name string, role pki.Role, overlay netip.Prefix) *pki.Identity {
	tb.Helper()
	keys, err := pki.NewKeys(name)
	if err != nil {
		tb.Fatal(err)
	}
	var ips []netip.Addr
	if role == pki.RoleControl {
		ips = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
	now := time.Now()
	leaf, err := ca.SignTLS(pki.LeafRequest{CSR: keys.CSR, Name: name, NodeID: "id-" + name, Role: role, IPs: ips}, now)
	if err != nil {
		tb.Fatal(err)
	}
	host, err := ca.SignNebula(pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: name, IP: overlay,
		Groups: []string{string(role)}}, now)
	if err != nil {
		tb.Fatal(err)
	}
	return &pki.Identity{CACert: ca.CertPEM(), Cert: leaf, Key: keys.TLSKeyPEM, NebulaCACert: ca.NebulaCertPEM(),
		NebulaCert: host, NebulaKey: keys.NebulaKeyPEM}
}

// simFreeUDPPort is a UDP port free on 127.0.0.1 a moment ago.
func simFreeUDPPort(tb testing.TB) int {
	tb.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// simPeer is the i-th simulated peer (i from 0): its node id, and its
// record with the underlay port port (a move changes the port). Overlay
// addresses from 10.42.1.1 on; underlays in 192.0.2.0/24 (TEST-NET-1:
// nothing answers, and nothing is sent there unless a packet is for the
// peer).
func simPeer(i, port int) (string, json.RawMessage) {
	ip := netip.AddrFrom4([4]byte{10, 42, byte(1 + i/250), byte(1 + i%250)})
	return fmt.Sprintf("id-p%05d", i), simRecord{Name: fmt.Sprintf("p%05d", i), State: "active", OverlayIP: ip.String(),
		Underlay: fmt.Sprintf("192.0.2.%d", 1+i%250), NebulaPort: port}.raw()
}
