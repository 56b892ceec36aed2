package config

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestConfigDocKeys: the commented config the packages install (and from
// which meshd.yaml(5) is generated, cmd/meshctl TestConfigManPage)
// documents every key meshd takes, nested keys under their section, and
// no key meshd does not take.
func TestConfigDocKeys(t *testing.T) {
	raw, err := os.ReadFile("../../packaging/config/meshd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	keyLine := regexp.MustCompile(`^#((?:  )*)([a-z][a-z0-9_]*):`)
	var documented, parents []string
	for _, line := range strings.Split(string(raw), "\n") {
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		depth := len(m[1]) / 2
		if depth > len(parents) {
			t.Fatalf("%q is indented under no key", line)
		}
		parents = append(parents[:depth], m[2])
		documented = append(documented, strings.Join(parents, "."))
	}
	known := allKeyPaths() // configcheck.go: the checker's own list
	if len(known) < 30 {
		t.Fatalf("only %d keys found in File", len(known))
	}
	for _, k := range known {
		if !slices.Contains(documented, k) {
			t.Errorf("packaging/config/meshd.yaml does not document %s (add it commented out with its default)", k)
		}
	}
	for _, k := range documented {
		if !slices.Contains(known, k) {
			t.Errorf("packaging/config/meshd.yaml documents %s, which meshd does not take", k)
		}
	}
}
