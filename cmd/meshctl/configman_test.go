package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const packagedConfig = "../../packaging/config/meshd.yaml"

// TestConfigManPage: meshd.yaml(5) is generated from the commented config
// the packages install, and testdata/meshd.yaml.5 holds what it
// renders to (go test ./cmd/meshctl -update rewrites it after an edit of
// packaging/config/meshd.yaml). Every key of the file has its entry with
// its default, and gen-docs writes the page next to the other man pages.
func TestConfigManPage(t *testing.T) {
	raw, err := os.ReadFile(packagedConfig)
	if err != nil {
		t.Fatal(err)
	}
	page, err := configManPage(raw, time.Unix(1764460800, 0).UTC(), "meshd dev")
	if err != nil {
		t.Fatal(err)
	}
	checkGoldenFile(t, "testdata/meshd.yaml.5", string(page)) // man -l cmd/meshctl/testdata/meshd.yaml.5

	_, groups, err := parseConfigDoc(raw)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range groups {
		for _, k := range g.keys {
			if k.value == "" && hasChildren(g.keys, k.path) {
				continue
			}
			n++
			want := ".TP\n\\fB" + roff(k.path) + "\\fR"
			if k.value != "" {
				want += " (default: \\fB" + roff(k.value) + "\\fR)"
			}
			if !strings.Contains(string(page), want+"\n") {
				t.Errorf("the page has no entry %q", want)
			}
		}
	}
	if n < 30 {
		t.Errorf("only %d keys parsed from %s", n, packagedConfig)
	}
	for _, want := range []string{`.TH "MESHD.YAML" "5" "Nov 2025" "meshd dev"`, ".SH NAME\nmeshd.yaml \\-",
		"\\fBports.gossip\\fR (default: \\fB7946\\fR)", "\\fBraft.promote_timeout\\fR (default: \\fB20s\\fR)\nHow long a joining",
		"/usr/share/doc/meshd/"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}

	// gen-docs --config-doc writes it, reproducibly, into the --man directory.
	t.Setenv("SOURCE_DATE_EPOCH", "1764460800")
	dir := t.TempDir()
	if r := meshctl(t, "gen-docs", "--man", dir, "--config-doc", packagedConfig); r.exit != exitOK {
		t.Fatalf("gen-docs: %+v", r)
	}
	got, err := os.ReadFile(filepath.Join(dir, "meshd.yaml.5"))
	if err != nil || string(got) != string(page) {
		t.Fatalf("gen-docs wrote a different meshd.yaml.5 (%v)", err)
	}
	if r := meshctl(t, "gen-docs", "--man", dir, "--config-doc", filepath.Join(dir, "none.yaml")); r.exit != exitUsage {
		t.Errorf("gen-docs with a missing --config-doc: exit %d, want %d", r.exit, exitUsage)
	}
}

// TestParseConfigDoc: the shapes of the commented config file, and the
// lines that are refused rather than dropped from the page.
func TestParseConfigDoc(t *testing.T) {
	src := "# head one\n# head two\n#\n# para two\n\n" +
		"# Prose of a.\n#a: 1\n# Prose of b,\n# on two lines.\n#b: x  # b's note\n\n" +
		"#sect:\n#  inner: 2s\n#  deep:\n#    leaf: y\n\n" +
		"# Lists, e.g.\n#   l:\n#     - 1\n#list:\n#  l:\n#    - {p: 1}\n#    - {p: 2}\n"
	head, groups, err := parseConfigDoc([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(head) != 2 || head[0] != "head one head two" || head[1] != "para two" {
		t.Fatalf("header %q", head)
	}
	var got []string
	for _, g := range groups {
		var ks []string
		for _, k := range g.keys {
			ks = append(ks, k.path+"="+k.value+"/"+k.note)
		}
		got = append(got, strings.Join(g.prose, "|")+": "+strings.Join(ks, ", "))
	}
	want := []string{"Prose of a.: a=1/", "Prose of b, on two lines.: b=x/b's note", ": sect=/, sect.inner=2s/, sect.deep=/, sect.deep.leaf=y/",
		"Lists, e.g.|\x00l:\n  - 1: list=/, list.l=[{p: 1}, {p: 2}]/"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("groups:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for name, bad := range map[string]string{
		"active-key":     "# h\n\nlog_level: info\n",
		"prose-no-key":   "# h\n\n# dangling prose\n\n#a: 1\n",
		"prose-at-end":   "# h\n\n#a: 1\n# trailing\n",
		"indent-no-key":  "# h\n\n#    orphan: 1\n",
		"no-space-prose": "# h\n\n#Prose without a space\n",
	} {
		if _, _, err := parseConfigDoc([]byte(bad)); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}
