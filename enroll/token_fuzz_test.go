package enroll

import (
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// FuzzParseToken checks that ParseToken never panics, that whatever it
// accepts is canonical (Encode gives the input back, less surrounding
// whitespace), and that a one-character edit of an accepted token is never
// accepted.
func FuzzParseToken(f *testing.F) {
	seeds := []Token{testToken()}
	ctl := testToken()
	ctl.Role, ctl.Name, ctl.Seeds = pki.RoleControl, "c", []string{"10.1.2.3:7300"}
	seeds = append(seeds, ctl)
	for _, tok := range seeds {
		s := mustEncode(f, tok)
		f.Add(s, uint16(0), byte('A'), false)
		f.Add(s, uint16(len(s)-1), byte('B'), true)
		f.Add(s, uint16(len(s)/2), byte('_'), false)
		f.Add(" "+s+"\n", uint16(3), byte('2'), false)
		f.Add(s[:len(s)-1], uint16(10), byte('-'), true)
	}
	f.Add("mesh2_AAAA", uint16(0), byte(0), false)
	f.Add("", uint16(0), byte(0), false)

	f.Fuzz(func(t *testing.T, in string, pos uint16, c byte, del bool) {
		tok, err := ParseToken(in)
		if err != nil {
			if code := codes.Of(err); code != codes.TokenCorrupt && code != codes.TokenVersion {
				t.Fatalf("ParseToken(%q): code %q, want TokenCorrupt or TokenVersion", in, code)
			}
			return
		}
		out, err := tok.Encode()
		if err != nil {
			t.Fatalf("Encode of parsed %q: %v", in, err)
		}
		trimmed := strings.TrimSpace(in)
		if out != trimmed {
			t.Fatalf("not canonical:\n in %q\nout %q", trimmed, out)
		}

		i := int(pos) % len(trimmed)
		var edited string
		switch {
		case del:
			edited = trimmed[:i] + trimmed[i+1:]
		case c == trimmed[i]:
			return // not an edit
		default:
			edited = trimmed[:i] + string(c) + trimmed[i+1:]
		}
		if _, err := ParseToken(edited); err == nil {
			t.Fatalf("one-character edit at %d of %q parsed OK: %q", i, trimmed, edited)
		}
	})
}
