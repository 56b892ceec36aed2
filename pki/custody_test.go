package pki

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func testCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, netip.MustParsePrefix("10.77.0.0/16"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func nonce(t *testing.T) []byte {
	n := make([]byte, 32)
	if _, err := rand.Read(n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCABundleRoundTrip: a bundle parses back into the same CA, and its
// printed forms never show a key.
func TestCABundleRoundTrip(t *testing.T) {
	ca := testCA(t, "c")
	b, err := ca.Bundle()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseCA(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Fingerprint() != ca.Fingerprint() {
		t.Fatal("fingerprint changed")
	}
	for _, s := range []string{fmt.Sprint(b), fmt.Sprintf("%#v", b), fmt.Sprintf("%+v", b)} {
		if bytes.Contains([]byte(s), []byte("PRIVATE KEY")) || bytes.Contains([]byte(s), b.KeyPEM[30:60]) {
			t.Fatalf("bundle printed a key: %s", s)
		}
	}
	other := testCA(t, "d")
	ob, _ := other.Bundle()
	mixed := b
	mixed.KeyPEM = ob.KeyPEM
	if _, err := ParseCA(mixed); err == nil {
		t.Fatal("a bundle whose key is another CA's parsed")
	}
	mixed = b
	mixed.NebulaKeyPEM = ob.NebulaKeyPEM
	if _, err := ParseCA(mixed); err == nil {
		t.Fatal("a bundle whose Nebula key is another CA's parsed")
	}
}

// TestProbe: a probe signed with a CA's keys verifies against its
// certificates, and not against another CA's or for another nonce.
func TestProbe(t *testing.T) {
	ca, other := testCA(t, "c"), testCA(t, "d")
	n := nonce(t)
	p, err := ca.SignProbe(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyProbe(ca.CertPEM(), ca.NebulaCertPEM(), n, p); err != nil {
		t.Fatalf("good probe: %v", err)
	}
	if err := VerifyProbe(ca.CertPEM(), ca.NebulaCertPEM(), nonce(t), p); err == nil {
		t.Fatal("probe verified for another nonce")
	}
	if err := VerifyProbe(other.CertPEM(), ca.NebulaCertPEM(), n, p); err == nil {
		t.Fatal("probe verified against another X.509 CA")
	}
	if err := VerifyProbe(ca.CertPEM(), other.NebulaCertPEM(), n, p); err == nil {
		t.Fatal("probe verified against another Nebula CA")
	}
	// Only a nonce of exactly ProbeNonceSize bytes is signed: the asker
	// never chooses more than that of what the CA keys sign, and only
	// through a hash.
	for _, bad := range [][]byte{nil, n[:16], append(bytes.Clone(n), 'x'), make([]byte, 200)} {
		if _, err := ca.SignProbe(bad); err == nil {
			t.Fatalf("signed a %d-byte nonce", len(bad))
		}
	}
	op, _ := other.SignProbe(n)
	if err := VerifyProbe(ca.CertPEM(), ca.NebulaCertPEM(), n, Probe{X509: p.X509, Nebula: op.Nebula}); err == nil {
		t.Fatal("probe with a foreign Nebula signature verified")
	}
}

// TestSaveCADir: the directory is replaced whole, keys 0600, marker kept
// or cleared, and LoadCA reads it back.
func TestSaveCADir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca := testCA(t, "c")
	if err := SaveCADir(dir, ca, "node-a"); err != nil {
		t.Fatal(err)
	}
	if m := ReadCAMarker(dir); m != "node-a" {
		t.Fatalf("marker %q", m)
	}
	if err := SaveCADir(dir, ca, "node-b"); err != nil { // over an existing copy
		t.Fatal(err)
	}
	if m := ReadCAMarker(dir); m != "node-b" {
		t.Fatalf("marker %q after a second save", m)
	}
	got, err := LoadCA(dir)
	if err != nil || got.Fingerprint() != ca.Fingerprint() {
		t.Fatalf("load: %v", err)
	}
	for _, f := range []string{caKeyFile, nebulaCAKeyFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, st.Mode(), err)
		}
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v", st.Mode())
	}
	ents, _ := os.ReadDir(filepath.Dir(dir))
	if len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
	// What a SaveCADir killed half way leaves beside the dir (keys
	// included) goes with RemoveCADirLeftovers and with RemoveCADir.
	left := filepath.Join(filepath.Dir(dir), ".ca.new-123")
	if err := ca.Save(left); err != nil {
		t.Fatal(err)
	}
	if err := RemoveCADirLeftovers(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) || !dirExists(dir) {
		t.Fatalf("leftover still there (%v) or the CA dir gone", err)
	}
	if err := ca.Save(left + ".old"); err != nil {
		t.Fatal(err)
	}
	if err := ClearCAMarker(dir); err != nil || ReadCAMarker(dir) != "" {
		t.Fatalf("clear marker: %v", err)
	}
	if err := RemoveCADir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatal("dir still there")
	}
	if ents, _ := os.ReadDir(filepath.Dir(dir)); len(ents) != 0 {
		t.Fatalf("left behind after RemoveCADir: %v", ents)
	}
}

func dirExists(d string) bool {
	_, err := os.Stat(d)
	return err == nil
}

// TestRemoveCADirAllOrNothing: a reader racing RemoveCADir sees the
// directory whole or not at all, never with some keys gone (a restart
// after a crash mid-delete would find half a CA; an e2e check once read
// the directory between two unlinks).
func TestRemoveCADirAllOrNothing(t *testing.T) {
	ca, err := NewCA("test", netip.MustParsePrefix("10.77.0.0/16"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		dir := filepath.Join(t.TempDir(), "ca")
		if err := SaveCADir(dir, ca, "n1"); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- RemoveCADir(dir) }()
		for running := true; running; {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				running = false
			default:
			}
			if !dirExists(dir) {
				continue
			}
			if _, _, err := LoadCAKeys(dir); err != nil && dirExists(dir) {
				t.Fatalf("round %d: the directory is there but its keys do not load: %v", i, err)
			}
		}
	}
}
