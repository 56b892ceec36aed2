package agent

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// goldenPrevState is a state dir's files as the previous release
// (e2e/testdata/previous-release, a3da2fc) wrote them, by that release's
// own code (statedir.Save, the pending-keys write, the node-list write,
// Identity.Save, CA.Save): node.json, pending-join.json, nodes.json,
// identity/ and ca/. Never
// regenerate it: a new release adds a directory of its own.
const goldenPrevState = "testdata/state-a3da2fc"

// prevStateDir copies goldenPrevState into a temporary state dir with the
// modes meshd gives its files (git keeps no modes: the key files must be
// 0600, or meshd refuses them).
func prevStateDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	err := filepath.WalkDir(goldenPrevState, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(goldenPrevState, p)
		to := filepath.Join(dir, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPreviousReleaseStateFiles: this build reads every state-dir file
// the previous release wrote and gets the values it wrote.
func TestPreviousReleaseStateFiles(t *testing.T) {
	dir := prevStateDir(t)

	t.Run("node.json", func(t *testing.T) {
		got, err := statedir.Load(dir)
		if err != nil {
			t.Fatalf("the previous release's node.json: %v", err)
		}
		want := &statedir.Facts{Version: statedir.FactsVersion, NodeID: "n-c2", Name: "c2", Role: pki.RoleControl,
			ClusterID: "c-0123", ClusterName: "prod", Overlay: netip.MustParsePrefix("10.42.0.2/16"),
			Underlay: netip.MustParseAddr("192.0.2.2"), Seeds: []string{"192.0.2.1:7300", "192.0.2.3:7300"},
			SerfPeers:   []string{"192.0.2.1:7946"},
			Lighthouses: []enroll.Lighthouse{{OverlayIP: netip.MustParseAddr("10.42.0.1"), Underlay: "192.0.2.1:4242"}},
			RaftPeers:   []enroll.RaftPeer{{ID: "n-origin", Address: "192.0.2.1:7301"}},
			GossipKeys:  [][]byte{[]byte("0123456789abcdef0123456789abcdef")},
			Joined:      pkitest.Now, MachineID: "5f0c3c9e0f2b1a6d"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("node.json reads as\n %+v\nwant\n %+v", got, want)
		}
	})

	t.Run("pending-join.json", func(t *testing.T) {
		// The join that saved the keys, run again with the same token,
		// gets the same keys back (pendingKeys reused them).
		var s enroll.Secret
		s[0] = 9
		a := &Agent{cfg: config.File{StateDir: dir}}
		keys, reused, err := statedir.PendingKeys(a.cfg.StateDir, enroll.Token{Secret: s, Name: "w9", Role: pki.RoleWorker})
		if err != nil || !reused {
			t.Fatalf("pending keys of the previous release: reused %v, %v", reused, err)
		}
		csr, err := x509.ParseCertificateRequest(keys.CSR)
		if err != nil || csr.Subject.CommonName != "w9" || csr.CheckSignature() != nil {
			t.Fatalf("saved CSR: %v", err)
		}
		pub, err := pki.CSRPublicKey(keys.CSR)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(keys.TLSKeyPEM), "PRIVATE KEY") || len(pub) == 0 ||
			!bytes.Contains(keys.NebulaKeyPEM, []byte("PRIVATE KEY")) || !bytes.Contains(keys.NebulaPublicPEM, []byte("PUBLIC KEY")) {
			t.Fatalf("saved keys incomplete: %+v", keys)
		}
	})

	t.Run("nodes.json", func(t *testing.T) {
		// A worker's saved node list, read as loadNodeList reads it.
		b, err := os.ReadFile(filepath.Join(dir, statedir.NodesFile))
		if err != nil {
			t.Fatal(err)
		}
		var got []control.NodeRecord
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("the previous release's nodes.json: %v", err)
		}
		exp := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
		want := []control.NodeRecord{
			{Node: apitype.Node{Name: "origin", ID: "n-origin", Role: "control", State: "active", Gossip: "alive",
				OverlayIP: "10.42.0.1", Underlay: "192.0.2.1", Raft: "leader", CertExpires: exp, Version: "a3da2fc"},
				NebulaPort: 4242, EnrollAddr: "192.0.2.1:7300", SerfAddr: "192.0.2.1:7946", TLSFingerprint: "aa01",
				PrevTLSFingerprint: "aa00", TLSPublicKey: []byte("origin-tls-public-key")},
			{Node: apitype.Node{Name: "w1", ID: "n-w1", Role: "worker", State: "failed", Gossip: "failed",
				OverlayIP: "10.42.0.4", Underlay: "192.0.2.4", Raft: "none", Version: "a3da2fc",
				Cause: "the joiner did not confirm", LastSeen: exp.Add(-time.Hour)}, NebulaPort: 4242},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("nodes.json reads as\n %+v\nwant\n %+v", got, want)
		}
	})

	t.Run("identity", func(t *testing.T) {
		id, err := pki.LoadIdentity(filepath.Join(dir, statedir.IdentityDir))
		if err != nil {
			t.Fatalf("the previous release's identity: %v", err)
		}
		c, err := id.TLSCertificate()
		if err != nil || c.Leaf == nil || c.Leaf.Subject.CommonName != "c2" {
			t.Fatalf("identity TLS leaf: %v", err)
		}
	})

	t.Run("ca", func(t *testing.T) {
		ca, err := pki.LoadCA(filepath.Join(dir, statedir.CADir))
		if err != nil {
			t.Fatalf("the previous release's CA: %v", err)
		}
		id, err := pki.LoadIdentity(filepath.Join(dir, statedir.IdentityDir))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ca.CertPEM(), id.CACert) {
			t.Fatal("CA certificate differs from the one the identity holds")
		}
	})
}
