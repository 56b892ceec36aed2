package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
)

// TestExplainForms: explain takes a code whole, without its mnemonic or X,
// or as its mnemonic, in any case; text naming several codes or none is
// refused with its code. Goldens: testdata/explain_*.golden.
func TestExplainForms(t *testing.T) {
	tests := []struct {
		name string
		args []string
		exit int
		code codes.Code // for a failure
	}{
		{"explain/full", []string{"explain", "X401004TKNCNS"}, exitOK, ""},
		{"explain/mnemonic", []string{"explain", "TKNCNS"}, exitOK, ""},
		{"explain/mnemonic-lower", []string{"explain", "tkncns"}, exitOK, ""},
		{"explain/number", []string{"explain", "X401004"}, exitOK, ""},
		{"explain/number-no-x", []string{"explain", " 401004 "}, exitOK, ""},
		{"explain/json", []string{"explain", "x503302", "-o", "json"}, exitOK, ""},
		{"explain/ambiguous", []string{"explain", "TKN"}, exitFailure, codes.AmbiguousCode},
		{"explain/ambiguous-number", []string{"explain", "X40300"}, exitFailure, codes.AmbiguousCode},
		{"explain/unknown", []string{"explain", "NOPENO"}, exitFailure, codes.UnknownCode},
		{"explain/too-short", []string{"explain", "X4"}, exitFailure, codes.UnknownCode},
		{"explain/list-and-code", []string{"explain", "--list", "TKNCNS"}, exitUsage, ""},
		{"explain/nothing", []string{"explain"}, exitUsage, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := meshctl(t, append([]string{"--socket", nowhere(t)}, tt.args...)...)
			if tt.code != "" {
				checkFailure(t, r, tt.exit, tt.code)
			} else if r.exit != tt.exit {
				t.Fatalf("exit %d, want %d\n%s%s", r.exit, tt.exit, r.stdout, r.stderr)
			}
			checkGolden(t, tt.name, r)
		})
	}
}

// TestExplainList: --list prints every code of the table once, as a table
// or as a JSON array of code, status, cause and remedy.
func TestExplainList(t *testing.T) {
	all := codes.All()
	r := meshctl(t, "--socket", nowhere(t), "explain", "--list")
	if r.exit != exitOK || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.exit, r.stderr)
	}
	l := lines(r.stdout)
	if len(l) != len(all)+2 || !strings.HasPrefix(l[0], "CODE") || !strings.Contains(l[len(l)-1], "/usr/share/doc/meshd/errors.md") {
		t.Fatalf("%d lines, want a header, %d codes and a footer:\n%s", len(l), len(all), r.stdout)
	}
	for i, c := range all {
		if f := strings.Fields(l[i+1]); len(f) < 3 || f[0] != string(c) || !strings.HasSuffix(l[i+1], c.Cause()) {
			t.Errorf("line %d = %q, want %s with its status and cause", i+1, l[i+1], c)
		}
	}
	r = meshctl(t, "explain", "--list", "-o", "json")
	var got []struct {
		Code          codes.Code
		Status        int
		Cause, Remedy string
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.exit != exitOK {
		t.Fatalf("exit %d, %v:\n%s", r.exit, err, r.stdout)
	}
	if len(got) != len(all) {
		t.Fatalf("%d codes in JSON, want %d", len(got), len(all))
	}
	for i, c := range all {
		if got[i].Code != c || got[i].Status != c.Status() || got[i].Cause != c.Cause() || got[i].Remedy != c.Remedy() {
			t.Errorf("entry %d = %+v, want %s", i, got[i], c)
		}
	}
}
