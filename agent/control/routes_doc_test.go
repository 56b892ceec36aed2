package control

import (
	"os"
	"strings"
	"testing"
)

// TestRoutesDocumented: docs/architecture.md's table of the internal API
// names every route of the table here.
func TestRoutesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Routes() {
		if !strings.Contains(string(doc), r.Path) {
			t.Errorf("docs/architecture.md does not list %s %s", r.Method, r.Path)
		}
	}
}
