package pki

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCAKeysWithNext: SaveCAKeys writes the next CA under dir/next/ in the
// same rename and LoadCAKeys reads both back (a dir whose own pair does
// not load falls back to next/); a sealed backup carries the next CA and
// opens with it, and one whose next CA does not match its recorded
// fingerprint is refused at sealing.
func TestCAKeysWithNext(t *testing.T) {
	cur, next := testCA(t, "c"), testCA(t, "c")
	dir := filepath.Join(t.TempDir(), "ca")
	if err := SaveCAKeys(dir, cur, next, "node-a"); err != nil {
		t.Fatal(err)
	}
	c, n, err := LoadCAKeys(dir)
	if err != nil || c.Fingerprint() != cur.Fingerprint() || n == nil || n.Fingerprint() != next.Fingerprint() {
		t.Fatalf("load: %v", err)
	}
	if ReadCAMarker(dir) != "node-a" {
		t.Fatal("marker lost")
	}
	if err := SaveCADir(dir, cur, ""); err != nil { // a copy without a rotation replaces it whole
		t.Fatal(err)
	}
	if _, n, err := LoadCAKeys(dir); err != nil || n != nil {
		t.Fatalf("after SaveCADir: next %v, err %v", n != nil, err)
	}
	if err := SaveCAKeys(dir, cur, next, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, caKeyFile)); err != nil {
		t.Fatal(err)
	}
	if c, n, err := LoadCAKeys(dir); err != nil || c.Fingerprint() != next.Fingerprint() || n != nil {
		t.Fatalf("fallback to next/: %v", err)
	}

	cb, _ := cur.Bundle()
	nb, _ := next.Bundle()
	b := CABackup{ClusterID: "cl-1", ClusterName: "e2e", CAFingerprint: cur.Fingerprint().String(), Created: time.Now(),
		CA: cb, NextCAFingerprint: next.Fingerprint().String(), Next: &nb}
	pass := []byte("correct horse battery staple")
	file, err := SealCABackup(b, pass, testWorkFactor)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := OpenCABackup(file, pass)
	if err != nil {
		t.Fatal(err)
	}
	if gn, err := got.NextCA(); err != nil || gn == nil || gn.Fingerprint() != next.Fingerprint() {
		t.Fatalf("the backup's next CA: %v", err)
	}
	b.NextCAFingerprint = cur.Fingerprint().String()
	if _, err := SealCABackup(b, pass, testWorkFactor); err == nil {
		t.Fatal("sealed a next CA that does not match its fingerprint")
	}
}
