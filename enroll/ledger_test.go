package enroll_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshd/meshd/enroll"
)

// TestTokenHashText: a TokenHash is 64 lowercase hex characters as text and
// as a JSON map key, and reads back only from exactly that many hex digits.
func TestTokenHashText(t *testing.T) {
	h := testSecret().Hash()
	s := h.String()
	if len(s) != 64 || strings.ToLower(s) != s {
		t.Fatalf("String = %q, want 64 lowercase hex characters", s)
	}
	b, err := json.Marshal(map[enroll.TokenHash]int{h: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"` + s + `":1}`; string(b) != want {
		t.Fatalf("as a map key: %s, want %s", b, want)
	}
	var back map[enroll.TokenHash]int
	if err := json.Unmarshal(b, &back); err != nil || back[h] != 1 || len(back) != 1 {
		t.Fatalf("round trip: %v, %v", back, err)
	}
	var upper enroll.TokenHash
	if err := upper.UnmarshalText([]byte(strings.ToUpper(s))); err != nil || upper != h {
		t.Errorf("upper-case hex: %v, %s", err, upper)
	}

	for _, tc := range []struct{ name, in string }{
		{"fail/empty", ""},
		{"fail/short-even", s[:62]},
		{"fail/short-odd", s[:63]},
		{"fail/long", s + "00"},
		{"fail/half", s[:32]},
		{"fail/not-hex", "zz" + s[2:]},
		{"fail/space", " " + s[1:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got enroll.TokenHash
			if err := got.UnmarshalText([]byte(tc.in)); err == nil {
				t.Errorf("UnmarshalText(%q) accepted: %s", tc.in, got)
			}
		})
	}
}
