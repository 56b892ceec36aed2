package member

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/watch"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/fetched"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// fakeControl is a control node's internal API as a worker sees it: a real
// mTLS listener with a control leaf of the worker's CA, serving canned
// answers and counting the calls.
type fakeControl struct {
	addr       string
	nebulaCert atomic.Value                // []byte
	table      atomic.Pointer[watch.Table] // what GET /v1/watch?strict=1 answers from
	leafFP     string                      // its TLS leaf's fingerprint
	calls      atomic.Int32
	fail       atomic.Bool
	// legacy: a control node of the previous release: no GET /v1/watch
	// (404), the strict node list and the revocations instead.
	legacy      bool
	list        atomic.Value // []control.NodeRecord
	revocations atomic.Value // control.Revocations
}

func startFakeControl(t *testing.T, ca *pki.CA) *fakeControl {
	t.Helper()
	return startFakeControlWith(t, ca, false)
}

func startFakeControlWith(t *testing.T, ca *pki.CA, legacy bool) *fakeControl {
	t.Helper()
	id, _ := signedIdentity(t, ca, "c1", pki.RoleControl, time.Now(), time.Hour)
	conf, err := pki.ServerTLSConfig(id, pki.RoleWorker, pki.RoleControl)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeControl{leafFP: pki.FingerprintOf(mustLeaf(t, id.Cert)).String(), legacy: legacy}
	f.list.Store([]control.NodeRecord(nil))
	f.revocations.Store(control.Revocations{})
	f.nebulaCert.Store([]byte(nil))
	f.table.Store(watch.NewTable(0))
	mux := http.NewServeMux()
	answer := func(v func() any) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			f.calls.Add(1)
			if f.fail.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			_ = json.NewEncoder(w).Encode(v())
		}
	}
	mux.HandleFunc("GET "+control.PathNebulaCert, answer(func() any {
		return control.NebulaCertResponse{Cert: f.nebulaCert.Load().([]byte)}
	}))
	if legacy {
		mux.HandleFunc("GET "+control.PathNodes, answer(func() any { return f.list.Load() }))
		mux.HandleFunc("GET "+control.PathRevocations, answer(func() any { return f.revocations.Load() }))
	} else {
		mux.HandleFunc("GET "+control.PathWatch, f.serveWatch)
	}
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

// serveWatch answers GET /v1/watch?strict=1 from f's table (a stream is
// refused: these tests ask only strict changes).
func (f *fakeControl) serveWatch(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	since, err := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	if f.fail.Load() || err != nil || !r.URL.Query().Has("strict") {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	line, _, _ := f.table.Load().Encoded(since)
	_, _ = w.Write(line)
}

// signedIdentity is a node's identity whose Nebula cert was issued at
// issued for lifetime; its TLS leaf is valid now.
func signedIdentity(t *testing.T, ca *pki.CA, name string, role pki.Role, issued time.Time, lifetime time.Duration) (*pki.Identity, []byte) {
	t.Helper()
	keys, err := pki.NewKeys(name)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.SignTLS(pki.LeafRequest{CSR: keys.CSR, Name: name, NodeID: "id-" + name, Role: role,
		IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	host, err := ca.SignNebula(pki.NebulaRequest{PublicKey: keys.NebulaPublicPEM, Name: name, IP: pkitest.IP(5),
		Groups: []string{string(role)}, Lifetime: lifetime}, issued)
	if err != nil {
		t.Fatal(err)
	}
	return &pki.Identity{CACert: ca.CertPEM(), Cert: leaf, Key: keys.TLSKeyPEM, NebulaCACert: ca.NebulaCertPEM(),
		NebulaCert: host, NebulaKey: keys.NebulaKeyPEM}, keys.NebulaPublicPEM
}

// workerRuntime is the part of a worker's runtime that certificate
// adoption and revocation refreshes use: its renewal, over its node.
func workerRuntime(t *testing.T, id *pki.Identity, seeds ...string) *renewal {
	t.Helper()
	client, err := control.NewClient(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdle)
	dir := t.TempDir()
	if err := id.Save(filepath.Join(dir, statedir.IdentityDir)); err != nil {
		t.Fatal(err)
	}
	live, err := pki.NewLiveIdentity(id)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	nd := &node{facts: &statedir.Facts{NodeID: "id-w1", Name: "w1", Role: pki.RoleWorker, Overlay: pkitest.IP(5), Seeds: seeds},
		live: live, client: client, log: log, now: time.Now, stateDir: dir, cluster: fetched.New(client, "id-w1", seeds, "", dir, nil, log)}
	return &renewal{node: nd, ca: &caFollow{node: nd, wake: make(chan struct{}, 1)}}
}

// renewedFor signs a Nebula cert for the public key pub, issued now.
func renewedFor(t *testing.T, ca *pki.CA, pub []byte, ip netip.Prefix, lifetime time.Duration) []byte {
	t.Helper()
	c, err := ca.SignNebula(pki.NebulaRequest{PublicKey: pub, Name: "w1", IP: ip, Groups: []string{"worker"},
		Lifetime: lifetime}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestWorkerAdoptsRenewedCert: a worker asks for its renewed Nebula cert
// only once its own is past 2/3 of its lifetime, adopts it only if it is
// newer and fits its CA, key and overlay IP, and saves it to disk.
func TestWorkerAdoptsRenewedCert(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	fc := startFakeControl(t, ca)
	ctx := context.Background()

	// Not due (issued a minute ago, an hour's lifetime): nobody is asked.
	fresh, freshPub := signedIdentity(t, ca, "w1", pki.RoleWorker, time.Now().Add(-time.Minute), time.Hour)
	rt := workerRuntime(t, fresh, fc.addr)
	fc.nebulaCert.Store(renewedFor(t, ca, freshPub, pkitest.IP(5), 2*time.Hour))
	rt.adoptRenewedCert(ctx)
	if fc.calls.Load() != 0 || !bytes.Equal(rt.identity().NebulaCert, fresh.NebulaCert) {
		t.Fatalf("a cert that is not due: %d calls, changed %v", fc.calls.Load(), !bytes.Equal(rt.identity().NebulaCert, fresh.NebulaCert))
	}

	// Due (issued 50 minutes ago): each refusal keeps the current cert.
	old, oldPub := signedIdentity(t, ca, "w1", pki.RoleWorker, time.Now().Add(-50*time.Minute), time.Hour)
	_, otherPub := signedIdentity(t, ca, "w9", pki.RoleWorker, time.Now(), time.Hour)
	foreign := pkitest.NewCA(t, "other")
	for name, cert := range map[string][]byte{
		"the same cert":            old.NebulaCert,
		"nothing on record":        nil,
		"not a cert":               []byte("junk"),
		"expiring no later":        renewedFor(t, ca, oldPub, pkitest.IP(5), time.Minute),
		"for another key":          renewedFor(t, ca, otherPub, pkitest.IP(5), 2*time.Hour),
		"for another overlay IP":   renewedFor(t, ca, oldPub, pkitest.IP(6), 2*time.Hour),
		"signed by a foreign CA":   renewedFor(t, foreign, oldPub, pkitest.IP(5), 2*time.Hour),
		"the control node is down": nil,
	} {
		rt := workerRuntime(t, old, fc.addr)
		fc.nebulaCert.Store(cert)
		fc.fail.Store(name == "the control node is down")
		before := fc.calls.Load()
		rt.adoptRenewedCert(ctx)
		if fc.calls.Load() == before {
			t.Errorf("%s: a due cert did not ask the control node", name)
		}
		if !bytes.Equal(rt.identity().NebulaCert, old.NebulaCert) {
			t.Errorf("%s: adopted", name)
		}
		onDisk, err := pki.LoadIdentity(filepath.Join(rt.stateDir, statedir.IdentityDir))
		if err != nil || !bytes.Equal(onDisk.NebulaCert, old.NebulaCert) {
			t.Errorf("%s: the cert on disk changed (%v)", name, err)
		}
	}
	fc.fail.Store(false)

	// Due, and the cluster holds a good renewal: adopted and saved.
	good := renewedFor(t, ca, oldPub, pkitest.IP(5), 2*time.Hour)
	fc.nebulaCert.Store(good)
	rt = workerRuntime(t, old, "127.0.0.1:1", fc.addr) // the first seed is down
	rt.adoptRenewedCert(ctx)
	if !bytes.Equal(rt.identity().NebulaCert, good) {
		t.Fatal("a good renewal was not adopted")
	}
	onDisk, err := pki.LoadIdentity(filepath.Join(rt.stateDir, statedir.IdentityDir))
	if err != nil || !bytes.Equal(onDisk.NebulaCert, good) {
		t.Fatalf("the adopted cert is not on disk (%v)", err)
	}
}

func mustLeaf(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	c, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tableWith is a watch table at index holding worker w1's record, the
// fake control node's (active, with its leaf), a removed node's and the
// revoked fingerprints fps.
func (f *fakeControl) tableWith(index uint64, fps ...string) *watch.Table {
	revoked := map[string]json.RawMessage{}
	for i, fp := range fps {
		revoked[watch.Seq(i)], _ = json.Marshal(fp)
	}
	tb := watch.NewTable(0)
	tb.Update(index, map[string]map[string]json.RawMessage{
		control.SectionNodes: {"id-w1": json.RawMessage(`{"name":"w1","role":"worker","state":"active"}`),
			"id-x":  json.RawMessage(`{"name":"x","state":"removed"}`),
			"id-c1": json.RawMessage(`{"name":"c1","role":"control","state":"active","tls":"` + f.leafFP + `"}`)},
		control.SectionRevoked: revoked})
	return tb
}

// TestWorkerStrictChange: a worker with no healthy watch stream asks one
// change after a read index (GET /v1/watch?strict=1) at once when told
// of a change, otherwise at most once a second; it keeps its copy when no
// control node answers, or one behind the index it holds answers.
func TestWorkerStrictChange(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	fc := startFakeControl(t, ca)
	ctx := context.Background()
	id, _ := signedIdentity(t, ca, "w1", pki.RoleWorker, time.Now(), time.Hour)
	rt := workerRuntime(t, id, fc.addr)

	fc.table.Store(fc.tableWith(5, "fp1"))
	_, _ = rt.cluster.Refresh(ctx, false) // never asked, no stream: due
	if got := rt.cluster.Revocations(); len(got.Fingerprints) != 1 || got.Fingerprints[0] != "fp1" || len(got.Gone) != 1 || got.Gone[0] != "id-x" {
		t.Fatalf("after the first change: %+v", got)
	}
	fc.table.Store(fc.tableWith(7, "fp1", "fp2"))
	calls := fc.calls.Load()
	_, _ = rt.cluster.Refresh(ctx, false) // asked a moment ago, not told: not due
	if fc.calls.Load() != calls || len(rt.cluster.Revocations().Fingerprints) != 1 {
		t.Fatalf("asked within a second without being told: %d calls, %+v", fc.calls.Load()-calls, rt.cluster.Revocations())
	}
	_, _ = rt.cluster.Refresh(ctx, true) // told: at once
	if got := rt.cluster.Revocations(); len(got.Fingerprints) != 2 {
		t.Fatalf("told of a change, still %+v", got)
	}
	// A control node behind the cluster (its table at an older index)
	// changes nothing: the worker keeps what it holds (found by
	// e2e.TestSoak, where a healed control node without a leader served
	// stale state).
	fc.table.Store(fc.tableWith(6, "fp1"))
	_, _ = rt.cluster.Refresh(ctx, true)
	if got := rt.cluster.Revocations(); len(got.Fingerprints) != 2 {
		t.Fatalf("a stale control node's list replaced a longer one: %+v", got)
	}
	fc.fail.Store(true)
	_, _ = rt.cluster.Refresh(ctx, true)
	if got := rt.cluster.Revocations(); len(got.Fingerprints) != 2 {
		t.Fatalf("a failed ask changed the list: %+v", got)
	}
}

// TestWorkerWithoutWatch: a worker whose control node serves no watch
// stream (an earlier release: GET /v1/watch is a 404) polls the node list
// and the revocations as that release's workers did: the list adopted
// (its control node then accepted), the revocations taken, at once when
// told, and a shorter revocation list (a control node behind) not taken.
func TestWorkerWithoutWatch(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	fc := startFakeControlWith(t, ca, true)
	id, _ := signedIdentity(t, ca, "w1", pki.RoleWorker, time.Now(), time.Hour)
	rt := workerRuntime(t, id, fc.addr)
	copies := rt.cluster.(*fetched.Copies)
	list := []control.NodeRecord{
		{Node: apitype.Node{Name: "c1", ID: "id-c1", Role: "control", State: "active"}, EnrollAddr: fc.addr, TLSFingerprint: fc.leafFP},
		{Node: apitype.Node{Name: "w1", ID: "id-w1", Role: "worker", State: "active"}},
	}
	fc.list.Store(list)
	fc.revocations.Store(control.Revocations{Fingerprints: []string{"fp1", "fp2"}, Gone: []string{"id-x"}, Version: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); copies.Follow(ctx, nil) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, 10*time.Second, "the worker polling the list", func() bool {
		_, _ = rt.cluster.Refresh(ctx, true)
		got, ok := rt.cluster.Records()
		return ok && len(got) == 2 && len(rt.cluster.Revocations().Fingerprints) == 2
	})
	if st := copies.Stats(); st.Streams != 0 || st.Full != 0 {
		t.Fatalf("watch stats %+v: no stream can have opened", st)
	}
	fc.revocations.Store(control.Revocations{Fingerprints: []string{"fp1"}, Version: 1})
	_, _ = rt.cluster.Refresh(ctx, true)
	if got := rt.cluster.Revocations(); got.Len() != 2 {
		t.Fatalf("a shorter list replaced the longer one: %+v", got)
	}
	// The list it adopted decides which control leaves it accepts: c1's.
	if _, err := rt.cluster.Refresh(ctx, true); err != nil {
		t.Fatalf("asking c1 again: %v", err)
	}
}

// waitUntil checks cond every 20 ms until it holds or d passes.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}
