package pki_test

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

func TestIdentitySaveLoad(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleWorker, pkitest.IP(5))
	dir := t.TempDir()
	if pki.HasIdentity(dir) {
		t.Fatal("HasIdentity on an empty dir")
	}
	if _, err := pki.LoadIdentity(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadIdentity of an empty dir = %v, want fs.ErrNotExist", err)
	}
	if err := id.Save(dir); err != nil {
		t.Fatal(err)
	}
	modes := map[string]os.FileMode{
		"tls/ca.crt": 0o644, "tls/node.crt": 0o644, "tls/node.key": 0o600,
		"nebula/ca.crt": 0o644, "nebula/host.crt": 0o644, "nebula/host.key": 0o600,
	}
	for name, want := range modes {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s mode = %o, want %o", name, st.Mode().Perm(), want)
		}
	}
	if !pki.HasIdentity(dir) {
		t.Fatal("HasIdentity = false after Save")
	}
	got, err := pki.LoadIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%q", [][]byte{got.CACert, got.Cert, got.Key, got.NebulaCACert, got.NebulaCert, got.NebulaKey}) !=
		fmt.Sprintf("%q", [][]byte{id.CACert, id.Cert, id.Key, id.NebulaCACert, id.NebulaCert, id.NebulaKey}) {
		t.Error("loaded identity differs from the saved one")
	}
	fp, err := got.CAFingerprint()
	if err != nil || fp != ca.Fingerprint() {
		t.Errorf("CAFingerprint = %v, %v; want %v", fp, err, ca.Fingerprint())
	}
	leaf, err := got.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := got.CAPool()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: pkitest.Now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("leaf does not verify against CAPool: %v", err)
	}

	if err := pki.RemoveIdentity(dir); err != nil {
		t.Fatal(err)
	}
	if pki.HasIdentity(dir) {
		t.Error("HasIdentity after RemoveIdentity")
	}
	if _, err := os.Stat(filepath.Join(dir, "tls")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("tls dir still there after RemoveIdentity: %v", err)
	}
	if err := pki.RemoveIdentity(dir); err != nil {
		t.Errorf("RemoveIdentity of an absent identity: %v", err)
	}
}

func TestLoadIdentityFailures(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleWorker, pkitest.IP(5))
	other := pkitest.NewIdentity(t, ca, "n2", pki.RoleWorker, pkitest.IP(6))
	tests := []struct {
		name     string
		breakIt  func(dir string) error
		wantCode codes.Code
		wantErr  error
	}{
		{name: "fail/no-marker", breakIt: func(dir string) error { return os.Remove(filepath.Join(dir, "identity.ok")) }, wantErr: fs.ErrNotExist},
		{name: "fail/open-tls-key", breakIt: func(dir string) error { return os.Chmod(filepath.Join(dir, "tls/node.key"), 0o644) }, wantCode: codes.KeyPermissions},
		{name: "fail/open-nebula-key", breakIt: func(dir string) error { return os.Chmod(filepath.Join(dir, "nebula/host.key"), 0o640) }, wantCode: codes.KeyPermissions},
		{name: "fail/missing-cert", breakIt: func(dir string) error { return os.Remove(filepath.Join(dir, "tls/node.crt")) }, wantErr: fs.ErrNotExist},
		{name: "fail/key-of-other-node", breakIt: func(dir string) error {
			return pki.WriteFileAtomic(filepath.Join(dir, "tls/node.key"), other.Key, 0o600)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := id.Save(dir); err != nil {
				t.Fatal(err)
			}
			if err := tt.breakIt(dir); err != nil {
				t.Fatal(err)
			}
			_, err := pki.LoadIdentity(dir)
			if err == nil {
				t.Fatal("LoadIdentity succeeded")
			}
			if tt.wantCode != "" && codes.Of(err) != tt.wantCode {
				t.Errorf("code = %q, want %s (%v)", codes.Of(err), tt.wantCode, err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want one wrapping %v", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Errorf("error shows key material: %v", err)
			}
		})
	}
}

func TestNoKeysInOutput(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	keys, err := pki.NewKeys("n1")
	if err != nil {
		t.Fatal(err)
	}
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleControl, pkitest.IP(5))
	tests := []struct {
		name string
		v    any
		keys [][]byte
	}{
		{name: "Keys", v: *keys, keys: [][]byte{keys.TLSKeyPEM, keys.NebulaKeyPEM}},
		{name: "*Keys", v: keys, keys: [][]byte{keys.TLSKeyPEM, keys.NebulaKeyPEM}},
		{name: "Identity", v: *id, keys: [][]byte{id.Key, id.NebulaKey}},
		{name: "*Identity", v: id, keys: [][]byte{id.Key, id.NebulaKey}},
		{name: "*CA", v: ca},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
				fmt.Fprintf(&out, verb+"\n", tt.v)
			}
			fmt.Fprintln(&out, tt.v)
			slog.New(slog.NewJSONHandler(&out, nil)).Info("x", "v", tt.v)
			slog.New(slog.NewTextHandler(&out, nil)).Info("x", "v", tt.v)
			s := out.String()
			if strings.Contains(s, "PRIVATE KEY") {
				t.Errorf("output shows a private key:\n%s", s)
			}
			for _, k := range tt.keys {
				body := strings.Split(string(k), "\n")[1] // first base64 line of the PEM
				if strings.Contains(s, body) {
					t.Errorf("output shows key material:\n%s", s)
				}
			}
		})
	}
}

func TestIdentitySaveOverExisting(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	old := pkitest.NewIdentity(t, ca, "n1", pki.RoleWorker, pkitest.IP(5))
	renewed := pkitest.NewIdentity(t, ca, "n1", pki.RoleControl, pkitest.IP(5))
	dir := t.TempDir()
	if err := old.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := renewed.Save(dir); err != nil {
		t.Fatalf("saving over an existing identity: %v", err)
	}
	got, err := pki.LoadIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Cert, renewed.Cert) || !bytes.Equal(got.Key, renewed.Key) || !bytes.Equal(got.NebulaCert, renewed.NebulaCert) {
		t.Error("loaded identity is not the one saved last")
	}
}

func TestIdentitySaveRefusesEmptyPart(t *testing.T) {
	id := *pkitest.NewIdentity(t, pkitest.NewCA(t, "prod"), "n1", pki.RoleWorker, pkitest.IP(5))
	id.NebulaCert = nil
	dir := t.TempDir()
	if err := id.Save(dir); err == nil {
		t.Fatal("Save of an identity without a Nebula certificate succeeded")
	}
	if pki.HasIdentity(dir) {
		t.Error("HasIdentity after a failed Save")
	}
}
