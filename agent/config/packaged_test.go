package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestPackagedConfig: the default /etc/meshd/meshd.yaml that the packages
// ship loads and validates, and it documents every top-level key meshd
// knows (each appears, commented out with its default).
func TestPackagedConfig(t *testing.T) {
	const path = "../../packaging/config/meshd.yaml"
	cfg, err := Load(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("packaged config does not validate: %v", err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ft := reflect.TypeOf(File{})
	for i := range ft.NumField() {
		key := strings.Split(ft.Field(i).Tag.Get("yaml"), ",")[0]
		if !strings.Contains(string(raw), "#"+key+":") {
			t.Errorf("packaged config does not document %q", key)
		}
	}
}
