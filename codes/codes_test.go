package codes

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/errors.md from the table")

func TestTableFormat(t *testing.T) {
	seenNum := map[string]Code{}
	seenMnemonic := map[string]Code{}
	for c, i := range table {
		if !Format.MatchString(string(c)) {
			t.Errorf("%s: does not match %s", c, Format)
		}
		if want := fmt.Sprintf("%d", i.Status); string(c[1:4]) != want {
			t.Errorf("%s: status digits %s but Status %d", c, c[1:4], i.Status)
		}
		num, mn := string(c[4:7]), string(c[7:])
		if o, ok := seenNum[num]; ok {
			t.Errorf("%s and %s share number %s", c, o, num)
		}
		if o, ok := seenMnemonic[mn]; ok {
			t.Errorf("%s and %s share mnemonic %s", c, o, mn)
		}
		seenNum[num], seenMnemonic[mn] = c, c
		if i.Cause == "" || i.Remedy == "" || strings.Contains(i.Cause, "\n") || strings.Contains(i.Remedy, "\n") {
			t.Errorf("%s: cause and remedy must be one non-empty line each", c)
		}
	}
}

func TestErrorsDocInStep(t *testing.T) {
	const path = "../docs/errors.md"
	want := Markdown()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v (run go test ./codes -update)", path, err)
	}
	if string(got) != want {
		t.Fatalf("%s is out of step with the code table; run go test ./codes -update", path)
	}
	for _, c := range All() {
		if !strings.Contains(string(got), string(c)) {
			t.Errorf("%s missing from %s", c, path)
		}
	}
}

func TestWrapAndOf(t *testing.T) {
	base := errors.New("boom")
	err := fmt.Errorf("outer: %w", Wrap(TokenExpired, base))
	if got := Of(err); got != TokenExpired {
		t.Fatalf("Of = %q, want %q", got, TokenExpired)
	}
	if !errors.Is(err, base) {
		t.Fatal("wrapped error lost its cause")
	}
	if got := Of(errors.New("plain")); got != "" {
		t.Fatalf("Of(plain) = %q, want empty", got)
	}
	if got := OrInternal(errors.New("plain")); got != Internal {
		t.Fatalf("OrInternal(plain) = %q", got)
	}
	if Wrap(NoLeader, nil).Error() != NoLeader.Cause() {
		t.Fatal("nil-wrapped error should read as its cause")
	}
}

func TestLookup(t *testing.T) {
	if _, _, ok := Lookup("X401004TKNCNS"); !ok {
		t.Fatal("known code not found")
	}
	if _, _, ok := Lookup("X999999NOPENO"); ok {
		t.Fatal("unknown code found")
	}
	if Code("X999999NOPENO").Status() != 500 {
		t.Fatal("unknown code should map to 500")
	}
}
