package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGenDocs(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1764460800")
	gen := func() string {
		dir := t.TempDir()
		r := meshctl(t, "gen-docs", "--man", filepath.Join(dir, "man"), "--completion", filepath.Join(dir, "compl"))
		if r.exit != 0 {
			t.Fatalf("gen-docs: %+v", r)
		}
		return dir
	}
	a, b := gen(), gen()
	for _, f := range []string{"man/meshd.8", "man/meshctl.1", "man/meshctl-reload.1", "man/meshctl-init.1", "man/meshctl-join.1",
		"compl/meshctl.bash", "compl/_meshctl", "compl/meshctl.fish"} {
		x, err := os.ReadFile(filepath.Join(a, f))
		if err != nil || len(x) == 0 {
			t.Fatalf("%s: %v (%d bytes)", f, err, len(x))
		}
		y, _ := os.ReadFile(filepath.Join(b, f))
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs: not reproducible", f)
		}
	}
	man, _ := os.ReadFile(filepath.Join(a, "man/meshd.8"))
	for _, want := range []string{`.TH "MESHD" "8" "Nov 2025"`, "--state-dir", "SIGHUP", "/etc/meshd/meshd.yaml", "LOGGING", "journalctl -u meshd -p warning"} {
		if !strings.Contains(string(man), want) {
			t.Errorf("meshd.8 lacks %q", want)
		}
	}
	// join's page documents --token-file as the safe form.
	join, _ := os.ReadFile(filepath.Join(a, "man/meshctl-join.1"))
	for _, want := range []string{`\fB--token-file\fP`, "visible to every user", "standard input"} {
		if !strings.Contains(string(join), want) {
			t.Errorf("meshctl-join.1 lacks %q", want)
		}
	}
	// Issue 35: admit documents --nebula-only, and nebula-bundle has a
	// page that says only the public key is sent and the token never shown.
	for page, wants := range map[string][]string{
		"man/meshctl-admit.1":         {`\fB--nebula-only\fP`, `\fB--cert-lifetime\fP`, "stock Nebula member"},
		"man/meshctl-nebula-bundle.1": {`\fB--generate\fP`, `\fB--pubkey\fP`, "Only the public key is ever sent", "never printed"},
	} {
		b, err := os.ReadFile(filepath.Join(a, page))
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		for _, want := range wants {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s lacks %q", page, want)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(a, "man/meshctl-gen-docs.1")); err == nil {
		t.Error("the hidden gen-docs command has a man page")
	}
	// gen-docs is hidden from help.
	if r := meshctl(t, "--help"); strings.Contains(r.stdout, "gen-docs") {
		t.Error("gen-docs shows in meshctl --help")
	}
	if r := meshctl(t, "gen-docs"); r.exit != exitUsage {
		t.Errorf("gen-docs without a directory: exit %d, want %d", r.exit, exitUsage)
	}
}
