package codes

import "strings"

// Find returns the codes that text names, as `meshctl explain` takes them:
// the whole code, the code without its mnemonic (X401004) or without its
// X (401004TKNCNS, 401004), the mnemonic alone (TKNCNS), or the start of any
// of these; case and surrounding space do not matter. One result is a match;
// none is an unknown code; several are ambiguous (all are returned, sorted).
// Text shorter than three characters matches nothing.
func Find(text string) []Code {
	s := strings.ToUpper(strings.TrimSpace(text))
	if c := Code(s); table[c] != (Info{}) {
		return []Code{c}
	}
	if len(s) > 1 && s[0] == 'X' && s[1] >= '0' && s[1] <= '9' {
		s = s[1:]
	}
	if len(s) < 3 {
		return nil
	}
	var exact, prefix []Code
	for _, c := range All() {
		body, mnemonic := string(c[1:]), string(c[7:])
		switch {
		case mnemonic == s || body[:6] == s:
			exact = append(exact, c)
		case strings.HasPrefix(body, s) || strings.HasPrefix(mnemonic, s):
			prefix = append(prefix, c)
		}
	}
	if len(exact) > 0 {
		return exact
	}
	return prefix
}
