package meshd_test

import (
	"os"
	"os/exec"
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

// TestArchitectureListsAgentPackages: every package under agent/ has a
// row of its own in docs/architecture.md's package table.
func TestArchitectureListsAgentPackages(t *testing.T) {
	raw, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		if cells := strings.Split(l, "|"); len(cells) > 2 && strings.HasPrefix(l, "| ") {
			for _, name := range strings.Split(cells[1], ",") {
				rows[strings.TrimSpace(name)] = true
			}
		}
	}
	for pkg := range allowed {
		if (pkg == "agent" || strings.HasPrefix(pkg, "agent/")) && !rows[pkg] {
			t.Errorf("docs/architecture.md's package table has no row for %s", pkg)
		}
	}
}

// TestDocsNameRealTests: every test, benchmark or fuzz target the docs
// name as pkg.TestName exists, in a package whose name is pkg, so a
// promise never points at a test that moved or was deleted.
func TestDocsNameRealTests(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "*_test.go").Output()
	if err != nil {
		t.Skipf("git ls-files: %v", err)
	}
	defined := map[string]bool{} // "pkg.TestName"
	fn := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)\w+)\(`)
	for _, p := range strings.Fields(string(out)) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		pkg := filepath.Base(filepath.Dir(p))
		if filepath.Dir(p) == "." {
			pkg = "meshd"
		}
		for _, m := range fn.FindAllSubmatch(b, -1) {
			defined[pkg+"."+string(m[1])] = true
		}
	}
	ref := regexp.MustCompile(`\b([a-z]+)\.((?:Test|Benchmark|Fuzz)[A-Z]\w*)`)
	docs, _ := filepath.Glob("docs/*.md")
	for _, d := range append(docs, "README.md") {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ref.FindAllStringSubmatch(string(b), -1) {
			if !defined[m[1]+"."+m[2]] {
				t.Errorf("%s names %s.%s, which no package %s defines", d, m[1], m[2], m[1])
			}
		}
	}
}
