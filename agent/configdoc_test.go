package agent

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// yamlKeys lists the dotted paths of every key t (a config struct) takes,
// nested structs included (ports.gossip); a duration, list or map is one key.
func yamlKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		key := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if key == "" || key == "-" {
			continue
		}
		out = append(out, prefix+key)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) && f.Type != reflect.TypeOf(time.Time{}) {
			out = append(out, yamlKeys(f.Type, prefix+key+".")...)
		}
	}
	return out
}

// TestConfigDocKeys: the commented config the packages install (and from
// which meshd.yaml(5) is generated, cmd/meshctl TestConfigManPage)
// documents every key meshd takes, nested keys under their section, and
// no key meshd does not take.
func TestConfigDocKeys(t *testing.T) {
	raw, err := os.ReadFile("../packaging/config/meshd.yaml")
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
	known := yamlKeys(reflect.TypeOf(FileConfig{}), "")
	if len(known) < 30 {
		t.Fatalf("only %d keys found in FileConfig", len(known))
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
