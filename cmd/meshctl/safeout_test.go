package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// hostile is what a member could put in its version, name or an error
// detail: clear the screen and home the cursor, a carriage return and a
// newline that start a forged row, a right-to-left override, bidi isolates
// and marks, a C1 CSI, a bell, a tab, NUL and DEL.
const hostile = "v1\x1b[2J\x1b[H\r\nw9  control  active  FORGED\u202eevil\u2066x\u2069\u200e\u200f\u009b31m\x07\t\x00\x7f"

// rawControls lists what a terminal would act on in s, other than the
// newlines that end lines: C0 and C1 controls, DEL, bidi and format
// characters, line separators, bytes that are not UTF-8. The list is written
// out here, independent of the code under test.
func rawControls(s string) []string {
	var bad []string
	if !utf8.ValidString(s) {
		bad = append(bad, "invalid UTF-8")
	}
	for _, r := range s {
		switch {
		case r == '\n':
		case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f,
			r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
			r == 0x2028, r == 0x2029, r == 0xfeff:
			bad = append(bad, fmt.Sprintf("%U", r))
		}
	}
	return bad
}

// checkTerminalSafe fails if out holds anything a terminal would act on.
func checkTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if bad := rawControls(out); len(bad) > 0 {
		t.Errorf("%s holds raw %q:\n%q", what, bad, out)
	}
}

func TestSafe(t *testing.T) {
	const p = "\uFFFD"
	tests := []struct{ name, in, want string }{
		{"ok/plain", "w1 10.42.0.2 1.0.0", "w1 10.42.0.2 1.0.0"},
		{"ok/letters-beyond-ascii", "nœud-ünï 東京", "nœud-ünï 東京"},
		{"ok/empty", "", ""},
		{"strip/esc-sequence", "v1\x1b[2J", "v1" + p + "[2J"},
		{"strip/cr-lf", "a\r\nb", "a" + p + p + "b"},
		{"strip/tab", "a\tb", "a" + p + "b"},
		{"strip/nul-bel-del", "\x00\x07\x7f", p + p + p},
		{"strip/c1-csi", "\u009b31m", p + "31m"},
		{"strip/rtl-override", "abc\u202etxt.exe", "abc" + p + "txt.exe"},
		{"strip/bidi-isolates", "\u2066\u2067\u2068\u2069", p + p + p + p},
		{"strip/bidi-marks", "\u200e\u200f\u061c", p + p + p},
		{"strip/line-separators", "a\u2028b\u2029", "a" + p + "b" + p},
		{"strip/zero-width-and-bom", "a\u200bb\ufeff", "a" + p + "b" + p},
		{"strip/invalid-utf8", "a\xffb\xc2", "a" + p + "b" + p},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := safe(tt.in); got != tt.want {
				t.Errorf("safe(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestEscapeJSON(t *testing.T) {
	in := map[string]string{"v": hostile + "\U000E0001\u00e9\uFFFD"}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(in); err != nil {
		t.Fatal(err)
	}
	out := escapeJSON(b.Bytes())
	checkTerminalSafe(t, "escaped JSON", string(out))
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("escaped JSON does not decode: %v\n%q", err, out)
	}
	if back["v"] != in["v"] {
		t.Errorf("round trip: %q, want %q", back["v"], in["v"])
	}
	if !bytes.Contains(out, []byte("\u00e9")) || !bytes.Contains(out, []byte("\uFFFD")) {
		t.Errorf("printable non-ASCII was escaped too:\n%q", out)
	}
}

// TestHostileStrings: whatever a member puts in the strings meshd relays,
// the table and text output carry none of it raw and keep one line per
// row; -o json keeps the raw value and is terminal-safe as well.
func TestHostileStrings(t *testing.T) {
	expires := time.Date(2031, 2, 3, 12, 0, 0, 0, time.UTC)
	node := func(name, s string) apitype.Node {
		return apitype.Node{Name: name, ID: "n-" + s, Role: "worker" + s, State: "active" + s, Gossip: "alive" + s,
			OverlayIP: "10.42.0.2" + s, Underlay: "192.0.2.7" + s, Raft: "none" + s, CertExpires: expires, Version: s}
	}
	serveJSON := func(v any) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, v) }
	}

	t.Run("ok/nodes-table", func(t *testing.T) {
		nodes := []apitype.Node{node("w1", hostile), node("w2\x1b[31m\n", hostile), node("w3", "1.0.0")}
		r := meshctl(t, "--socket", localclienttest.Serve(t, &fakeMeshd{nodes: serveJSON(nodes)}), "nodes")
		if r.exit != exitOK {
			t.Fatalf("exit %d\nstderr:\n%q", r.exit, r.stderr)
		}
		checkTerminalSafe(t, "nodes table", r.stdout)
		l := lines(r.stdout)
		if len(l) != 1+len(nodes) {
			t.Fatalf("%d lines, want a header and one row for each of %d nodes:\n%q", len(l), len(nodes), r.stdout)
		}
		for i, want := range []string{"w1", "w2\uFFFD[31m\uFFFD", "w3"} {
			if f := strings.Fields(l[i+1]); len(f) == 0 || f[0] != want {
				t.Errorf("row %d starts %q, want %q:\n%q", i, f, want, r.stdout)
			}
		}
		if !strings.Contains(r.stdout, "\uFFFD") {
			t.Errorf("no placeholder shows where characters were stripped:\n%q", r.stdout)
		}
	})

	t.Run("ok/nodes-json", func(t *testing.T) {
		nodes := []apitype.Node{node("w1", hostile)}
		r := meshctl(t, "--socket", localclienttest.Serve(t, &fakeMeshd{nodes: serveJSON(nodes)}), "nodes", "-o", "json")
		if r.exit != exitOK {
			t.Fatalf("exit %d\nstderr:\n%q", r.exit, r.stderr)
		}
		if strings.ContainsAny(r.stdout, "\x1b\r") {
			t.Errorf("JSON holds a raw ESC or CR:\n%q", r.stdout)
		}
		checkTerminalSafe(t, "nodes -o json", r.stdout)
		var back []apitype.Node
		if err := json.Unmarshal([]byte(r.stdout), &back); err != nil || len(back) != 1 {
			t.Fatalf("stdout is not the JSON array (%v):\n%q", err, r.stdout)
		}
		if back[0].Version != hostile || back[0].Role != "worker"+hostile {
			t.Errorf("JSON does not round-trip the raw values: version %q", back[0].Version)
		}
	})

	status := func(s string) apitype.Status {
		return apitype.Status{State: "running" + s, Version: s, Cluster: "alpha" + s, ClusterID: "c-" + s, Node: "w1" + s,
			NodeID: "n-1" + s, Role: "worker" + s, OverlayIP: "10.42.0.2" + s, Underlay: "192.0.2.7" + s, Raft: "none" + s,
			Leader: "c1" + s, CertExpires: expires, Gossip: &apitype.Gossip{Members: 3, Alive: 3},
			Overlay: &apitype.Overlay{Mode: "userspace" + s, Device: "nebula1" + s, Lighthouses: []string{"10.42.0.1" + s, s},
				Tunnels: []apitype.Tunnel{{OverlayIP: "10.42.0.1" + s, Remote: "192.0.2.1" + s, Name: "c1" + s}, {Name: s}},
				Error:   &apitype.Error{ErrCode: codes.OverlayApply, Cause: "cause" + s, Remedy: s, Detail: "detail" + s}},
			Warnings: []apitype.Warning{{Code: codes.Code("X200009CLKSKW" + s), Detail: "skew" + s}}}
	}
	t.Run("ok/status-text", func(t *testing.T) {
		plain := meshctl(t, "--socket", localclienttest.Serve(t, &fakeMeshd{status: serveJSON(status("x"))}), "status")
		r := meshctl(t, "--socket", localclienttest.Serve(t, &fakeMeshd{status: serveJSON(status(hostile))}), "status")
		if plain.exit != exitOK || r.exit != exitOK {
			t.Fatalf("exit %d and %d\nstderr:\n%q", plain.exit, r.exit, r.stderr)
		}
		checkTerminalSafe(t, "status", r.stdout)
		checkTerminalSafe(t, "status warnings", r.stderr)
		if got, want := len(lines(r.stdout)), len(lines(plain.stdout)); got != want {
			t.Errorf("%d lines, want %d as with plain strings:\n%q", got, want, r.stdout)
		}
		if got := len(lines(r.stderr)); got != 1 {
			t.Errorf("%d warning lines, want 1:\n%q", got, r.stderr)
		}
	})
	t.Run("ok/status-unjoined", func(t *testing.T) {
		st := apitype.Status{State: "unjoined", Version: hostile}
		r := meshctl(t, "--socket", localclienttest.Serve(t, &fakeMeshd{status: serveJSON(st)}), "status")
		if r.exit != exitOK {
			t.Fatalf("exit %d\nstderr:\n%q", r.exit, r.stderr)
		}
		checkTerminalSafe(t, "status", r.stdout)
		if l := lines(r.stdout); len(l) != 2 || !strings.HasPrefix(l[0], "meshd v1\uFFFD[2J") {
			t.Errorf("want 2 lines, the first with the version cleaned:\n%q", r.stdout)
		}
	})
	t.Run("ok/tokens-table", func(t *testing.T) {
		toks := []apitype.Token{{ID: "0123456789ab", Name: "w1" + hostile, Role: "worker", State: "used",
			Expires: expires, ConsumedBy: hostile}}
		r := meshctl(t, "--socket", localclienttest.Serve(t, &fakeMeshd{tokens: serveJSON(toks)}), "tokens")
		if r.exit != exitOK {
			t.Fatalf("exit %d\nstderr:\n%q", r.exit, r.stderr)
		}
		checkTerminalSafe(t, "tokens table", r.stdout)
		if l := lines(r.stdout); len(l) != 2 {
			t.Errorf("%d lines, want a header and 1 row:\n%q", len(l), r.stdout)
		}
	})
	t.Run("ok/join-steps", func(t *testing.T) {
		sock := localclienttest.Serve(t, &fakeMeshd{join: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			enc := json.NewEncoder(w)
			_ = enc.Encode(apitype.JoinLine{Step: "seed verified" + hostile})
			_ = enc.Encode(apitype.JoinLine{Warning: &apitype.Warning{Code: codes.ClockSkew, Detail: hostile}})
			_ = enc.Encode(apitype.JoinLine{Result: &apitype.JoinResult{Cluster: "alpha" + hostile, Node: "w1" + hostile,
				Role: "worker", OverlayIP: "10.42.0.2"}})
		}})
		r := meshctl(t, "--socket", sock, "join", "mesh1_token")
		if r.exit != exitOK {
			t.Fatalf("exit %d\nstderr:\n%q", r.exit, r.stderr)
		}
		checkTerminalSafe(t, "join stdout", r.stdout)
		checkTerminalSafe(t, "join stderr", r.stderr)
		if len(lines(r.stdout)) != 2 || len(lines(r.stderr)) != 1 {
			t.Errorf("want a step line and a result line, and one warning line:\nstdout:\n%q\nstderr:\n%q", r.stdout, r.stderr)
		}
	})

	t.Run("fail/error-detail", func(t *testing.T) {
		sock := localclienttest.Serve(t, &fakeMeshd{nodes: func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, codes.NotInCluster.Status(), &apitype.Error{ErrCode: codes.NotInCluster,
				Cause: "not in a cluster\x1b]0;owned\x07", Remedy: "run init\r\nremedy: forged", Detail: hostile})
		}})
		for _, o := range []string{"table", "json"} {
			r := meshctl(t, "--socket", sock, "nodes", "-o", o)
			checkFailure(t, r, exitFailure, codes.NotInCluster)
			checkTerminalSafe(t, "stderr", r.stderr)
			if l := lines(r.stderr); len(l) != 3 || !strings.HasPrefix(l[2], "detail: v1\uFFFD[2J") {
				t.Errorf("-o %s: want the code, remedy and detail lines, the detail cleaned:\n%q", o, r.stderr)
			}
		}
	})
}

// TestOnePrintPath: only safeout.go calls fmt's print functions, so every
// human-readable line meshctl writes goes through printer and its cleaning.
// A new command that prints with fmt.Fprintf fails here.
func TestOnePrintPath(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	printFuncs := map[string]bool{"Print": true, "Printf": true, "Println": true,
		"Fprint": true, "Fprintf": true, "Fprintln": true}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "safeout.go" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && (pkg.Name == "fmt" && printFuncs[sel.Sel.Name] ||
				pkg.Name == "io" && sel.Sel.Name == "WriteString" || pkg.Name == "os" && (sel.Sel.Name == "Stdout" || sel.Sel.Name == "Stderr") && f != "main.go") {
				t.Errorf("%s: %s.%s bypasses printer: print through a.out or a.errOut", fset.Position(sel.Pos()), pkg.Name, sel.Sel.Name)
			}
			return true
		})
	}
	if checked < 5 {
		t.Fatalf("checked %d files; run from the package directory", checked)
	}
}
