package meshd_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// importRule is the sentence a package's doc.go states its imports with,
// made from allowed (deps_test.go), so the two cannot drift apart.
func importRule(pkg string) string {
	deps := slices.Clone(allowed[pkg])
	slices.Sort(deps)
	switch len(deps) {
	case 0:
		return "Import rule (deps_test.go): may import no meshd package."
	case 1:
		return "Import rule (deps_test.go): may import " + deps[0] + "; nothing else of meshd."
	}
	return "Import rule (deps_test.go): may import " + strings.Join(deps[:len(deps)-1], ", ") + " and " + deps[len(deps)-1] +
		"; nothing else of meshd."
}

var commentPrefix = regexp.MustCompile(`(?m)^//\s?`)

// TestDocImportRules: every package with a doc.go states its import rule
// in the words importRule makes from deps_test.go's allowed map, and no
// other sentence there lists what it imports.
func TestDocImportRules(t *testing.T) {
	for pkg := range allowed {
		path := filepath.Join(pkg, "doc.go")
		raw, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		if i := strings.Index(text, "\npackage "); i >= 0 {
			text = text[:i]
		}
		text = strings.Join(strings.Fields(commentPrefix.ReplaceAllString(text, "")), " ")
		want := importRule(pkg)
		if !strings.Contains(text, want) {
			t.Errorf("%s: want the sentence\n\t%s", path, want)
		}
		if n := strings.Count(text, "Import rule") + strings.Count(text, "Imports:"); n != 1 {
			t.Errorf("%s states its imports %d times; want once, in importRule's words", path, n)
		}
	}
}
