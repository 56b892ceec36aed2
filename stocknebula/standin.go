package stocknebula

import (
	"embed"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// standIn is one module a Nebula version requires that the Go module
// proxy refuses, and what the build uses in its place: a served version
// of the same module (version), or a small module of meshd's under
// testdata/standin (dir, with require its own go.mod's requirements).
type standIn struct {
	module  string
	version string
	dir     string
	require []string
}

// standIns are the stand-ins each version's build needs, the same as
// third_party/nebula/PATCHES.md lists for meshd's copy (which edits the
// imports instead; a stock build may not touch Nebula's code). A version
// that is not listed needs none (v1.11.0).
var standIns = map[string][]standIn{
	"v1.12.0": {
		// Only overlay/tun_linux.go (and an Android file) imports it;
		// vishvananda/netlink v1.3.1 has every name tun_linux.go uses.
		{module: "github.com/DefinedNet/netlink", dir: "netlink", require: []string{"github.com/vishvananda/netlink v1.3.1"}},
		// Only hostdns.go: the experimental `dns` stanza, macOS and
		// Windows only; the stand-in declines every configuration.
		{module: "github.com/DefinedNet/dnsconfig", dir: "dnsconfig"},
		// gvisor of 2026-10 is refused; the one meshd pins has the
		// pkg/tcpip/checksum.Checksum overlay/checksum calls and the
		// netstack the service package uses.
		{module: "gvisor.dev/gvisor", version: "v0.0.0-20240423190808-9d7a357edefe"},
	},
}

//go:embed testdata/standin
var standInSrc embed.FS

// writeStandIns writes version's stand-in modules under mod/standin and
// returns the replace directives that put them in place.
func writeStandIns(mod, version string) (string, error) {
	var b strings.Builder
	for _, s := range standIns[version] {
		if s.version != "" {
			fmt.Fprintf(&b, "\nreplace %s => %s %s\n", s.module, s.module, s.version)
			continue
		}
		dst := filepath.Join(mod, "standin", s.dir)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return "", err
		}
		gomod := fmt.Sprintf("module %s\n\ngo 1.24\n", s.module)
		for _, r := range s.require {
			gomod += "\nrequire " + r + "\n"
		}
		if err := os.WriteFile(filepath.Join(dst, "go.mod"), []byte(gomod), 0o644); err != nil {
			return "", err
		}
		src := path.Join("testdata/standin", s.dir)
		files, err := standInSrc.ReadDir(src)
		if err != nil {
			return "", fmt.Errorf("stand-in for %s: %w", s.module, err)
		}
		for _, f := range files {
			data, err := standInSrc.ReadFile(path.Join(src, f.Name()))
			if err != nil {
				return "", err
			}
			if err := os.WriteFile(filepath.Join(dst, f.Name()), data, 0o644); err != nil {
				return "", err
			}
		}
		fmt.Fprintf(&b, "\nreplace %s => ./standin/%s\n", s.module, s.dir)
	}
	return b.String(), nil
}
