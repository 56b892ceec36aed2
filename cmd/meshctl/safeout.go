package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Everything meshctl prints for a person goes through a printer, and this
// file is the only one that calls fmt's print functions (TestOnePrintPath).
// The format strings are meshctl's own; every argument is treated as
// remote, because most are: node names, versions, addresses, states, steps,
// and the causes and details of errors come from meshd or from another
// node through it. A member that puts "\x1b[2J" or "\n" in its version must
// not be able to clear the operator's screen or forge a table row.

// placeholder stands where a stripped character was, so the operator sees
// that something was there.
const placeholder = '\uFFFD'

// unsafeRune reports whether r must not reach a terminal as it is: C0 and
// C1 controls and DEL (ESC, CR, LF, TAB, BEL...), format characters
// (bidi overrides and isolates U+202A–U+202E, U+2066–U+2069, marks
// U+200E/U+200F, zero-width characters, the BOM), the line and paragraph
// separators U+2028/U+2029, and bytes that are not UTF-8.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) || r == utf8.RuneError
}

// safe returns s with every unsafe rune (and every byte that is not UTF-8)
// replaced by the placeholder.
func safe(s string) string {
	i := strings.IndexFunc(s, unsafeRune)
	if i < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range s { // an invalid byte arrives as utf8.RuneError
		if unsafeRune(r) {
			r = placeholder
		}
		b.WriteRune(r)
	}
	return b.String()
}

// safeArg makes one Printf argument safe: strings, Stringers and errors are
// cleaned; numbers and booleans pass; anything else is formatted with %v
// and cleaned.
func safeArg(v any) any {
	switch x := v.(type) {
	case nil:
		return v
	case string:
		return safe(x)
	case error:
		return safe(x.Error())
	case fmt.Stringer:
		return safe(x.String())
	case bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, uintptr, float32, float64:
		return v
	}
	return safe(fmt.Sprint(v))
}

// printer writes human (table and text) output.
type printer struct{ w io.Writer }

// Printf formats like fmt.Fprintf; the format must be meshctl's own, every
// argument is cleaned with safe.
func (p printer) Printf(format string, args ...any) {
	for i := range args {
		args[i] = safeArg(args[i])
	}
	fmt.Fprintf(p.w, format, args...)
}

// Println is Printf with the arguments separated by spaces and a newline.
func (p printer) Println(args ...any) {
	for i := range args {
		args[i] = safeArg(args[i])
	}
	fmt.Fprintln(p.w, args...)
}

// escapeJSON rewrites the runes that encoding/json leaves raw but a
// terminal would act on (DEL, C1 controls, bidi and other format
// characters) as \uXXXX escapes. encoding/json has already escaped C0
// controls, and in its output these runes can only stand inside string
// literals, so the document decodes to the same values.
func escapeJSON(b []byte) []byte {
	if bytes.IndexFunc(b, unsafeInJSON) < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+32)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n == 1:
			// Not produced by encoding/json, which writes valid UTF-8; keep it visible.
			out = append(out, `\ufffd`...)
		case unsafeInJSON(r) && r != utf8.RuneError:
			if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError { // outside the BMP: a surrogate pair
				out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
			} else {
				out = fmt.Appendf(out, `\u%04x`, r)
			}
		default:
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}

// unsafeInJSON is unsafeRune less ASCII below DEL: encoding/json escapes C0
// controls inside strings, and outside them the newlines and spaces of the
// indentation are its own.
func unsafeInJSON(r rune) bool { return r >= 0x7f && unsafeRune(r) }
