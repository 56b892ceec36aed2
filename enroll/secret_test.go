package enroll_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// testSecret is a fixed secret whose bytes are all distinct.
func testSecret() enroll.Secret {
	var s enroll.Secret
	for i := range s {
		s[i] = byte(0x41 + 5*i) // starts printable, so a raw leak is readable
	}
	return s
}

// secretForms are the spellings of s that must never reach a log or a
// formatted string.
func secretForms(s enroll.Secret) map[string]string {
	b := s[:]
	return map[string]string{
		"raw":          string(b),
		"raw-prefix":   string(b[:8]),
		"hex":          hex.EncodeToString(b),
		"HEX":          strings.ToUpper(hex.EncodeToString(b)),
		"hex-prefix":   hex.EncodeToString(b[:8]),
		"base64-std":   base64.StdEncoding.EncodeToString(b),
		"base64-raw":   base64.RawStdEncoding.EncodeToString(b),
		"base64url":    base64.URLEncoding.EncodeToString(b),
		"base64url-rw": base64.RawURLEncoding.EncodeToString(b),
		"decimal":      fmt.Sprint(b),
		"decimal-arr":  strings.Trim(fmt.Sprint([enroll.SecretSize]byte(s)), "[]"),
		"quoted":       fmt.Sprintf("%q", b),
	}
}

func assertNoSecret(t *testing.T, s enroll.Secret, what, out string) {
	t.Helper()
	for form, v := range secretForms(s) {
		if strings.Contains(out, v) {
			t.Errorf("%s reveals the secret (%s): %q", what, form, out)
		}
	}
	if !strings.Contains(out, "[redacted]") {
		t.Errorf("%s does not say [redacted]: %q", what, out)
	}
}

// TestSecretRedacted checks each of Secret's own printing methods, called
// directly and through fmt and slog, on a bare Secret and on one inside a
// Request: none may show the secret in any encoding.
func TestSecretRedacted(t *testing.T) {
	s := testSecret()
	req := enroll.Request{Protocol: enroll.ProtocolVersion, Secret: s, Name: "w1"}

	t.Run("String", func(t *testing.T) {
		assertNoSecret(t, s, "String()", s.String())
		var st fmt.Stringer = s
		assertNoSecret(t, s, "Stringer", st.String())
	})
	t.Run("GoString", func(t *testing.T) {
		assertNoSecret(t, s, "GoString()", s.GoString())
		var gs fmt.GoStringer = s
		assertNoSecret(t, s, "GoStringer", gs.GoString())
	})
	t.Run("LogValue", func(t *testing.T) {
		v := s.LogValue()
		if v.Kind() != slog.KindString {
			t.Errorf("LogValue kind %s, want a string", v.Kind())
		}
		assertNoSecret(t, s, "LogValue()", v.String())
		assertNoSecret(t, s, "LogValue().Resolve()", slog.AnyValue(s).Resolve().String())
	})
	t.Run("Format", func(t *testing.T) {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10s", "%-40v"} {
			assertNoSecret(t, s, verb, fmt.Sprintf(verb, s))
			assertNoSecret(t, s, verb+" (pointer)", fmt.Sprintf(verb, &s))
		}
		assertNoSecret(t, s, "Sprint", fmt.Sprint(s))
		assertNoSecret(t, s, "Sprintln", fmt.Sprintln(s))
		assertNoSecret(t, s, "slice %v", fmt.Sprintf("%v", []enroll.Secret{s}))
		assertNoSecret(t, s, "map %v", fmt.Sprintf("%v", map[string]enroll.Secret{"k": s}))
		assertNoSecret(t, s, "Request %+v", fmt.Sprintf("%+v", req))
		assertNoSecret(t, s, "Request %#v", fmt.Sprintf("%#v", req))
		assertNoSecret(t, s, "error %v", fmt.Errorf("enroll with %v: %w", s, codes.Wrap(codes.Internal, fmt.Errorf("x"))).Error())
	})
	for _, h := range []struct {
		name string
		new  func(w *bytes.Buffer) slog.Handler
	}{
		{"slog/json", func(w *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(w, nil) }},
		{"slog/text", func(w *bytes.Buffer) slog.Handler { return slog.NewTextHandler(w, nil) }},
	} {
		t.Run(h.name, func(t *testing.T) {
			var out bytes.Buffer
			log := slog.New(h.new(&out))
			log.Info("secret", "secret", s, "ptr", &s)
			log.With("secret", s).Info("with")
			log.Info("group", slog.Group("g", "secret", s))
			log.Info("attr", slog.Any("secret", s))
			assertNoSecret(t, s, h.name, out.String())
			if got := strings.Count(out.String(), "[redacted]"); got < 5 {
				t.Errorf("%s: %d redactions, want one per secret logged:\n%s", h.name, got, &out)
			}
		})
	}
}

// TestSecretJSON: the wire form is unpadded base64url of the 32 bytes and
// is the only form that carries the secret; anything else is refused.
func TestSecretJSON(t *testing.T) {
	s := testSecret()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"` + base64.RawURLEncoding.EncodeToString(s[:]) + `"`; string(b) != want {
		t.Fatalf("MarshalJSON = %s, want %s", b, want)
	}
	var back enroll.Secret
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		t.Fatalf("round trip: %v, %x", err, back[:])
	}

	short := base64.RawURLEncoding.EncodeToString(s[:enroll.SecretSize-1])
	long := base64.RawURLEncoding.EncodeToString(append(s[:], 0))
	for _, tc := range []struct{ name, in string }{
		{"fail/empty", ``},
		{"fail/one-quote", `"`},
		{"fail/number", `12`},
		{"fail/null", `null`},
		{"fail/unquoted", base64.RawURLEncoding.EncodeToString(s[:])},
		{"fail/open-quote-only", `"` + base64.RawURLEncoding.EncodeToString(s[:])},
		{"fail/close-quote-only", base64.RawURLEncoding.EncodeToString(s[:]) + `"`},
		{"fail/padded", `"` + base64.URLEncoding.EncodeToString(s[:]) + `"`},
		{"fail/std-alphabet", `"` + base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, enroll.SecretSize)) + `"`},
		{"fail/short", `"` + short + `"`},
		{"fail/long", `"` + long + `"`},
		{"fail/empty-string", `""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := testSecret()
			got[0] ^= 0xff
			before := got
			if err := got.UnmarshalJSON([]byte(tc.in)); err == nil {
				t.Fatalf("UnmarshalJSON(%q) accepted: %x", tc.in, got[:])
			}
			if got != before {
				t.Errorf("a refused UnmarshalJSON(%q) changed the secret", tc.in)
			}
		})
	}
}

func TestSecretCompare(t *testing.T) {
	s := testSecret()
	o := s
	if !s.Equal(o) || s.IsZero() {
		t.Fatalf("Equal(copy) = %v, IsZero = %v", s.Equal(o), s.IsZero())
	}
	o[enroll.SecretSize-1] ^= 1
	if s.Equal(o) {
		t.Error("secrets differing in the last byte compare equal")
	}
	if s.Hash() == o.Hash() {
		t.Error("different secrets hash alike")
	}
	if !(enroll.Secret{}).IsZero() {
		t.Error("the zero secret is not IsZero")
	}
	a, err := enroll.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, err := enroll.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if a.IsZero() || a.Equal(b) {
		t.Errorf("NewSecret drew a zero or repeated secret")
	}
}
