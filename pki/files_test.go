package pki_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

func TestWriteFileAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "sub")
	path := filepath.Join(dir, "f")
	if err := pki.WriteFileAtomic(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o700 {
		t.Errorf("created parent mode = %o, want 700", got)
	}
	if err := pki.WriteFileAtomic(path, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "two" {
		t.Errorf("content = %q, want %q", got, "two")
	}
	st, err = os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode = %o, want 644", st.Mode().Perm())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temp files left)", len(ents))
	}
}

func TestReadKeyFile(t *testing.T) {
	const secret = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n"
	tests := []struct {
		name     string
		mode     fs.FileMode // 0 means: do not create the file
		wantCode codes.Code
		wantErr  error
	}{
		{name: "ok/0600", mode: 0o600},
		{name: "ok/0400", mode: 0o400},
		{name: "fail/0644", mode: 0o644, wantCode: codes.KeyPermissions},
		{name: "fail/0640", mode: 0o640, wantCode: codes.KeyPermissions},
		{name: "fail/0604", mode: 0o604, wantCode: codes.KeyPermissions},
		{name: "fail/0610", mode: 0o610, wantCode: codes.KeyPermissions},
		{name: "fail/missing", wantErr: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "k.key")
			if tt.mode != 0 {
				if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tt.mode); err != nil {
					t.Fatal(err)
				}
			}
			got, err := pki.ReadKeyFile(path)
			ok := tt.wantCode == "" && tt.wantErr == nil
			if ok {
				if err != nil || string(got) != secret {
					t.Fatalf("ReadKeyFile = %q, %v; want the key", got, err)
				}
				return
			}
			if err == nil {
				t.Fatal("ReadKeyFile succeeded, want an error")
			}
			if got != nil {
				t.Error("ReadKeyFile returned data with an error")
			}
			if tt.wantCode != "" && codes.Of(err) != tt.wantCode {
				t.Errorf("code = %q, want %q (err: %v)", codes.Of(err), tt.wantCode, err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want one wrapping %v", err, tt.wantErr)
			}
			if msg := err.Error(); contains(msg, "c2VjcmV0") || contains(msg, "PRIVATE KEY") {
				t.Errorf("error shows the file's contents: %q", msg)
			}
		})
	}
}

func TestWriteFileAtomicFailureLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	// A directory in the way makes the final rename fail after the
	// temporary file was written.
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteFileAtomic(path, []byte("data"), 0o600); err == nil {
		t.Fatal("WriteFileAtomic over a directory succeeded")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "f" || !ents[0].IsDir() {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %q after a failed write, want only the directory f", names)
	}
}

func TestReadKeyFileSize(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		wantErr bool
	}{
		{name: "ok/one-byte", size: 1},
		{name: "ok/at-limit", size: pki.MaxKeyFile},
		{name: "fail/over-limit", size: pki.MaxKeyFile + 1, wantErr: true},
		{name: "fail/far-over-limit", size: 2 * pki.MaxKeyFile, wantErr: true},
		{name: "fail/empty", size: 0, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "k.key")
			data := bytes.Repeat([]byte{'k'}, tt.size)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := pki.ReadKeyFile(path)
			if tt.wantErr {
				if err == nil || got != nil {
					t.Fatalf("ReadKeyFile = %d bytes, %v; want an error and no data", len(got), err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("ReadKeyFile = %d bytes, %v; want all %d bytes", len(got), err, tt.size)
			}
		})
	}
}

func TestReadKeyFileNotRegular(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "k.key")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if got, err := pki.ReadKeyFile(dir); err == nil || got != nil {
		t.Fatalf("ReadKeyFile(directory) = %q, %v; want an error", got, err)
	}
}
