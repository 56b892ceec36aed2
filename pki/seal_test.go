package pki

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// testWorkFactor is the scrypt work factor tests seal with: cheap, so
// that a seal does not starve the race detector's scheduler.
const testWorkFactor = 10

func sealed(t *testing.T, ca *CA, pass string) []byte {
	t.Helper()
	b, err := ca.Bundle()
	if err != nil {
		t.Fatal(err)
	}
	out, err := SealCABackup(CABackup{ClusterID: "cl-1", ClusterName: "e2e", CAFingerprint: ca.Fingerprint().String(),
		Created: time.Now(), CA: b}, []byte(pass), testWorkFactor)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSealCABackup: a backup opens with its passphrase and gives back the
// CA and the cluster identity; a wrong passphrase, a truncated or altered
// file and a short passphrase get their codes; the sealed bytes and every
// error hold neither the passphrase nor a key.
func TestSealCABackup(t *testing.T) {
	ca := testCA(t, "c")
	pass := "correct horse battery staple"
	file := sealed(t, ca, pass)
	bundle, _ := ca.Bundle()
	if bytes.Contains(file, []byte(pass)) || bytes.Contains(file, bundle.KeyPEM[30:60]) || bytes.Contains(file, []byte("cl-1")) {
		t.Fatal("the sealed file shows the passphrase, a key or the cluster id")
	}
	b, got, err := OpenCABackup(file, []byte(pass))
	if err != nil {
		t.Fatal(err)
	}
	if got.Fingerprint() != ca.Fingerprint() || b.ClusterID != "cl-1" || b.CAFingerprint != ca.Fingerprint().String() {
		t.Fatalf("opened %v", b)
	}
	cases := []struct {
		name string
		file []byte
		pass string
		want codes.Code
	}{
		{"fail/wrong-passphrase", file, "another passphrase entirely", codes.BackupPassphrase},
		{"fail/truncated-body", file[:len(file)-10], pass, codes.BackupCorrupt},
		{"fail/truncated-header", file[:40], pass, codes.BackupCorrupt},
		{"fail/not-age", []byte("hello, world\n"), pass, codes.BackupCorrupt},
		{"fail/empty", nil, pass, codes.BackupCorrupt},
		{"fail/empty-passphrase", file, "", codes.CAPassphrase},
	}
	flipped := bytes.Clone(file)
	flipped[len(flipped)-5] ^= 1
	cases = append(cases, struct {
		name string
		file []byte
		pass string
		want codes.Code
	}{"fail/altered", flipped, pass, codes.BackupCorrupt})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := OpenCABackup(c.file, []byte(c.pass))
			if codes.Of(err) != c.want {
				t.Fatalf("got %v (%s), want %s", err, codes.Of(err), c.want)
			}
			if c.pass != "" && strings.Contains(err.Error(), c.pass) {
				t.Fatal("the error shows the passphrase")
			}
		})
	}
	// A file that asks for more scrypt work than meshd seals with (its
	// stanza's work factor raised from 10) is refused before any is done.
	costly := bytes.Replace(file, []byte(" 10\n"), []byte(" 19\n"), 1)
	if bytes.Equal(costly, file) {
		t.Fatal("no work factor 10 in the sealed file's header")
	}
	if _, _, err := OpenCABackup(costly, []byte(pass)); codes.Of(err) != codes.BackupCorrupt {
		t.Fatalf("a work factor above %d: %v", maxScryptWorkFactor, err)
	}
	if _, err := SealCABackup(CABackup{CA: bundle}, []byte("short"), testWorkFactor); codes.Of(err) != codes.CAPassphrase {
		t.Fatalf("short passphrase: %v", err)
	}
	for _, f := range []int{-1, maxScryptWorkFactor + 1} {
		if _, err := SealCABackup(CABackup{CA: bundle}, []byte(pass), f); err == nil {
			t.Fatalf("sealed at work factor %d", f)
		}
	}
}
