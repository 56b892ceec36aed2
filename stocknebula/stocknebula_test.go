package stocknebula

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionIsMeshds: Version is the Nebula version meshd's go.mod
// requires (the replace puts the patched copy in its place, but the
// required version is the one it was patched from).
func TestVersionIsMeshds(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", Module).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", Module, err)
	}
	if got := strings.TrimSpace(string(out)); got != Version {
		t.Fatalf("go.mod requires %s %s; stocknebula.Version is %s", Module, got, Version)
	}
}

// TestBinaryIsStock: the binary BinaryAt returns, for the version meshd
// embeds and for the release before it (v1.11.0, which needs no
// stand-ins), is upstream's cmd/nebula at that version, unreplaced, and
// says so itself; Check refuses another version, a missing file and
// another Go program.
func TestBinaryIsStock(t *testing.T) {
	for _, version := range []string{Version, "v1.11.0"} {
		t.Run(version, func(t *testing.T) {
			bin := BinaryAt(t, version)
			if err := Check(bin, version); err != nil {
				t.Fatal(err)
			}
			if err := Check(bin, "v1.0.0"); err == nil {
				t.Fatalf("Check of %s as v1.0.0 passed", bin)
			}
			out, err := exec.Command(bin, "-version").CombinedOutput()
			if err != nil {
				t.Fatalf("%s -version: %v\n%s", bin, err, out)
			}
			if want := "Version: " + strings.TrimPrefix(version, "v"); strings.TrimSpace(string(out)) != want {
				t.Fatalf("%s -version = %q, want %q", bin, out, want)
			}
		})
	}
	if err := Check(filepath.Join(t.TempDir(), "absent"), Version); err == nil {
		t.Fatal("Check of a missing file passed")
	}
	self, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go on PATH")
	}
	if err := Check(self, Version); err == nil {
		t.Fatalf("Check passed the go command %s", self)
	}
}
