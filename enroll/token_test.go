package enroll

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// testToken is a fixed, valid token; tests copy and edit it.
func testToken() Token {
	var t Token
	t.ClusterID = "00112233445566778899aabbccddeeff"
	for i := range t.CA {
		t.CA[i] = byte(0xc0 + i)
	}
	for i := range t.Secret {
		t.Secret[i] = byte(0x10 + 3*i)
	}
	t.Seeds = []string{"192.0.2.10:7300", "[2001:db8::1]:7300", "ctl-3.example.net:7300"}
	t.Name = "web-1"
	t.Role = pki.RoleWorker
	t.Expires = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	return t
}

func mustEncode(t testing.TB, tok Token) string {
	t.Helper()
	s, err := tok.Encode()
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return s
}

func TestTokenRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Token)
	}{
		{"worker", func(*Token) {}},
		{"control", func(t *Token) { t.Role = pki.RoleControl }},
		{"one-seed", func(t *Token) { t.Seeds = t.Seeds[:1] }},
		{"max-seeds", func(t *Token) {
			t.Seeds = nil
			for i := range MaxSeeds {
				t.Seeds = append(t.Seeds, fmt.Sprintf("10.0.0.%d:7300", i+1))
			}
		}},
		{"long-name", func(t *Token) { t.Name = strings.Repeat("a", 63) }},
		{"long-seed", func(t *Token) { t.Seeds = []string{strings.Repeat("h", MaxSeedLen-5) + ":7300"} }},
		{"seed-host-alphabet", func(t *Token) { t.Seeds = []string{"a-z.A-Z.0-9:7300", "zZ9.Aa0:1", "0:65535"} }},
		{"name-alphabet", func(t *Token) { t.Name = "a-z0-9" }},
		{"next-ca", func(t *Token) { t.NextCA = pki.Fingerprint{31: 1} }}, // minted during a CA rotation
		{"seed-ids", func(t *Token) { t.SeedIDs = []string{"0123456789abcdef", "id-2", strings.Repeat("f", MaxSeedIDLen)} }},
		{"next-ca-and-seed-ids", func(t *Token) {
			t.NextCA = pki.Fingerprint{31: 1}
			t.SeedIDs = []string{"a", "b", "c"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := testToken()
			tc.edit(&want)
			s := mustEncode(t, want)
			if strings.ContainsAny(s, " \t\r\n") {
				t.Fatalf("token is not one line: %q", s)
			}
			got, err := ParseToken("  " + s + "\n")
			if err != nil {
				t.Fatalf("ParseToken: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, want)
			}
			if again := mustEncode(t, got); again != s {
				t.Fatalf("re-encode differs:\n%s\n%s", again, s)
			}
		})
	}
}

func TestTokenLength(t *testing.T) {
	tok := testToken()
	tok.Seeds = []string{"192.0.2.10:7300"}
	tok.Name = "w1"
	s := mustEncode(t, tok)
	// 89 fixed + 1+2 name + 1+1+15 seed + 4 crc = 113 bytes -> 151 base64 chars.
	if len(s) != len(tokenPrefix)+151 {
		t.Fatalf("len = %d: %s", len(s), s)
	}
	t.Logf("example token (%d chars): %s", len(s), s)
}

// rawToken builds a token string from an arbitrary payload with a correct
// checksum, to reach the field checks behind the checksum.
func rawToken(payload []byte) string {
	b := binary.BigEndian.AppendUint32(append([]byte(nil), payload...), checksum(payload))
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// payloadOf returns the checked payload of a valid token string.
func payloadOf(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, tokenPrefix))
	if err != nil {
		t.Fatal(err)
	}
	return b[:len(b)-crcSize]
}

func TestParseTokenFailures(t *testing.T) {
	good := mustEncode(t, testToken())
	p := payloadOf(t, good)
	roleAt := fixedSize - 1
	nameAt := fixedSize
	edit := func(f func(b []byte) []byte) string {
		return rawToken(f(append([]byte(nil), p...)))
	}
	for _, tc := range []struct {
		name string
		in   string
		want codes.Code
	}{
		{"corrupt/empty", "", codes.TokenCorrupt},
		{"corrupt/whitespace", " \n\t", codes.TokenCorrupt},
		{"corrupt/no-prefix", strings.TrimPrefix(good, tokenPrefix), codes.TokenCorrupt},
		{"corrupt/prefix-no-digits", "mesh_" + good[len(tokenPrefix):], codes.TokenCorrupt},
		{"corrupt/prefix-no-underscore", "mesh1", codes.TokenCorrupt},
		{"corrupt/prefix-upper", "MESH1_" + good[len(tokenPrefix):], codes.TokenCorrupt},
		{"corrupt/other-scheme", "join_" + good[len(tokenPrefix):], codes.TokenCorrupt},
		{"version/zero", "mesh0_" + good[len(tokenPrefix):], codes.TokenVersion},
		{"version/two", "mesh2_" + good[len(tokenPrefix):], codes.TokenVersion},
		{"version/leading-zero", "mesh01_" + good[len(tokenPrefix):], codes.TokenVersion},
		{"version/huge", "mesh99999999999999999999_x", codes.TokenVersion},
		{"corrupt/prefix-only", tokenPrefix, codes.TokenCorrupt},
		{"corrupt/not-base64", tokenPrefix + "!!!!", codes.TokenCorrupt},
		{"corrupt/padded", good + "==", codes.TokenCorrupt},
		{"corrupt/std-alphabet", tokenPrefix + strings.NewReplacer("-", "+", "_", "/").Replace(good[len(tokenPrefix):]) + "+", codes.TokenCorrupt},
		{"corrupt/inner-newline", good[:40] + "\n" + good[40:], codes.TokenCorrupt},
		{"corrupt/inner-space", good[:40] + " " + good[40:], codes.TokenCorrupt},
		{"corrupt/truncated", good[:len(good)-4], codes.TokenCorrupt},
		{"corrupt/truncated-half", good[:len(good)/2], codes.TokenCorrupt},
		{"corrupt/appended", good + "AAAA", codes.TokenCorrupt},
		{"corrupt/checksum", rawToken(p)[:len(good)-2] + "AA", codes.TokenCorrupt},
		{"corrupt/short-payload", rawToken(p[:fixedSize]), codes.TokenCorrupt},
		{"corrupt/trailing-byte", edit(func(b []byte) []byte { return append(b, 0) }), codes.TokenCorrupt},
		{"corrupt/role-zero", edit(func(b []byte) []byte { b[roleAt] = 0; return b }), codes.TokenCorrupt},
		{"corrupt/role-unknown", edit(func(b []byte) []byte { b[roleAt] = 9; return b }), codes.TokenCorrupt},
		{"corrupt/name-overrun", edit(func(b []byte) []byte { b[nameAt] = 200; return b }), codes.TokenCorrupt},
		{"corrupt/name-bad", edit(func(b []byte) []byte { b[nameAt+1] = 'W'; return b }), codes.TokenCorrupt},
		{"corrupt/name-empty", rawToken(append(append(append([]byte(nil), p[:nameAt]...), 0), p[nameAt+1+len("web-1"):]...)), codes.TokenCorrupt},
		{"corrupt/no-seeds", rawToken(append(append([]byte(nil), p[:nameAt+1+len("web-1")]...), 0)), codes.TokenCorrupt},
		{"corrupt/seed-count-missing", rawToken(p[:nameAt+1+len("web-1")]), codes.TokenCorrupt},
		{"corrupt/seed-overrun", edit(func(b []byte) []byte { b[nameAt+1+len("web-1")] = 4; return b }), codes.TokenCorrupt},
		{"corrupt/too-many-seeds", edit(func(b []byte) []byte { b[nameAt+1+len("web-1")] = MaxSeeds + 1; return b }), codes.TokenCorrupt},
		{"corrupt/seed-bad", edit(func(b []byte) []byte { b[nameAt+1+len("web-1")+2] = ' '; return b }), codes.TokenCorrupt},
		{"corrupt/zero-ca", edit(func(b []byte) []byte { clear(b[clusterIDSize : clusterIDSize+32]); return b }), codes.TokenCorrupt},
		{"corrupt/zero-secret", edit(func(b []byte) []byte { clear(b[clusterIDSize+32 : clusterIDSize+64]); return b }), codes.TokenCorrupt},
		{"corrupt/zero-expiry", edit(func(b []byte) []byte { clear(b[clusterIDSize+64 : clusterIDSize+72]); return b }), codes.TokenCorrupt},
		{"corrupt/negative-expiry", edit(func(b []byte) []byte { b[clusterIDSize+64] = 0x80; return b }), codes.TokenCorrupt},
		{"corrupt/seed-ids-fewer", edit(func(b []byte) []byte { return append(b, seedIDsTag, 2, 1, 'a', 1, 'b') }), codes.TokenCorrupt},
		{"corrupt/seed-ids-overrun", edit(func(b []byte) []byte { return append(b, seedIDsTag, 3, 1, 'a', 1, 'b', 9, 'c') }), codes.TokenCorrupt},
		{"corrupt/seed-id-empty", edit(func(b []byte) []byte { return append(b, seedIDsTag, 3, 1, 'a', 1, 'b', 0) }), codes.TokenCorrupt},
		{"corrupt/seed-id-bad", edit(func(b []byte) []byte { return append(b, seedIDsTag, 3, 1, 'a', 1, 'b', 1, '/') }), codes.TokenCorrupt},
		{"corrupt/seed-ids-then-next-ca", edit(func(b []byte) []byte {
			b = append(b, seedIDsTag, 3, 1, 'a', 1, 'b', 1, 'c', nextCATag)
			return append(b, make([]byte, 31)...)
		}), codes.TokenCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := ParseToken(tc.in)
			if got := codes.Of(err); got != tc.want {
				t.Fatalf("ParseToken = %v, %v; code %q, want %q", tok, err, got, tc.want)
			}
		})
	}
}

// TestParseTokenShortPayloads: every payload shorter than the smallest
// valid one is corrupt, even with a correct checksum, and never panics.
func TestParseTokenShortPayloads(t *testing.T) {
	p := payloadOf(t, mustEncode(t, testToken()))
	for n := 0; n <= fixedSize+4; n++ {
		tok, err := ParseToken(rawToken(p[:n]))
		if got := codes.Of(err); got != codes.TokenCorrupt {
			t.Errorf("payload of %d bytes: %v, %v; code %q, want %q", n, tok, err, got, codes.TokenCorrupt)
		}
	}
}

// A version prefix that still reads mesh<digits>_ after an edit.
var versionShape = regexp.MustCompile(`^mesh[0-9]+_`)

// wantForEdit is what ParseToken must say about a one-character edit at i.
func wantForEdit(edited string, i int) []codes.Code {
	if i < len(tokenPrefix) && versionShape.MatchString(strings.TrimSpace(edited)) {
		return []codes.Code{codes.TokenCorrupt, codes.TokenVersion}
	}
	return []codes.Code{codes.TokenCorrupt}
}

func checkEdit(t *testing.T, what, edited string, i int) {
	t.Helper()
	_, err := ParseToken(edited)
	got := codes.Of(err)
	for _, w := range wantForEdit(edited, i) {
		if got == w {
			return
		}
	}
	t.Errorf("%s at %d: %q -> code %q (err %v), want one of %v", what, i, edited, got, err, wantForEdit(edited, i))
}

func TestTokenOneCharacterDeleted(t *testing.T) {
	for _, tok := range []Token{testToken(), func() Token { x := testToken(); x.Seeds = x.Seeds[:1]; x.Name = "a"; return x }()} {
		s := mustEncode(t, tok)
		for i := range s {
			checkEdit(t, "delete", s[:i]+s[i+1:], i)
		}
	}
}

func TestTokenOneCharacterReplaced(t *testing.T) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/= .\n\x00\xff"
	s := mustEncode(t, testToken())
	for i := range s {
		for _, c := range []byte(alphabet) {
			if c == s[i] {
				continue
			}
			checkEdit(t, fmt.Sprintf("replace with %q", c), s[:i]+string(c)+s[i+1:], i)
		}
	}
}

func TestTokenEncodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Token)
		want codes.Code
	}{
		{"zero-ca", func(t *Token) { t.CA = pki.Fingerprint{} }, codes.BadRequest},
		{"zero-secret", func(t *Token) { t.Secret = Secret{} }, codes.BadRequest},
		{"no-seeds", func(t *Token) { t.Seeds = nil }, codes.BadRequest},
		{"too-many-seeds", func(t *Token) { t.Seeds = make([]string, MaxSeeds+1) }, codes.BadRequest},
		{"seed-no-port", func(t *Token) { t.Seeds = []string{"10.0.0.1"} }, codes.BadRequest},
		{"seed-port-zero", func(t *Token) { t.Seeds = []string{"10.0.0.1:0"} }, codes.BadRequest},
		{"seed-too-long", func(t *Token) { t.Seeds = []string{strings.Repeat("h", MaxSeedLen) + ":1"} }, codes.BadRequest},
		{"bad-name", func(t *Token) { t.Name = "Web_1" }, codes.BadNodeName},
		{"empty-name", func(t *Token) { t.Name = "" }, codes.BadNodeName},
		{"bad-role", func(t *Token) { t.Role = "admin" }, codes.BadRole},
		{"no-role", func(t *Token) { t.Role = "" }, codes.BadRole},
		{"seed-host-underscore", func(t *Token) { t.Seeds = []string{"ctl_1.example.net:7300"} }, codes.BadRequest},
		{"bad-cluster-id", func(t *Token) { t.ClusterID = "xyz" }, codes.BadRequest},
		{"upper-cluster-id", func(t *Token) { t.ClusterID = strings.ToUpper(t.ClusterID) }, codes.BadRequest},
		{"no-expiry", func(t *Token) { t.Expires = time.Time{} }, codes.BadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := testToken()
			tc.edit(&tok)
			s, err := tok.Encode()
			if got := codes.Of(err); got != tc.want {
				t.Fatalf("Encode = %q, %v; code %q, want %q", s, err, got, tc.want)
			}
		})
	}
}

// TestValidSeedHost pins the host alphabet of a DNS-name seed at each end
// of every range: a-z, A-Z, 0-9, '-' and '.', and the characters next to
// them are refused.
func TestValidSeedHost(t *testing.T) {
	for _, host := range []string{"a", "z", "A", "Z", "0x", "9x", "a-b.c", "0", "9"} {
		if err := validSeed(host + ":7300"); err != nil {
			t.Errorf("validSeed(%q) = %v", host+":7300", err)
		}
	}
	for _, host := range []string{"`", "{", "@", "[", "^", "_", "/", "a/b", "a_b", "a b", "a,b", "a\x00b", "\xc3\xa9"} {
		if err := validSeed(host + ":7300"); err == nil {
			t.Errorf("validSeed(%q) accepted", host+":7300")
		}
	}
	// ':' (after '9') only reaches the host check inside brackets.
	if err := validSeed("[a:b]:7300"); err == nil {
		t.Error("validSeed accepted host a:b")
	}
}

// TestValidSeedIPv6: a token's seed may be an IPv6 address in brackets,
// "[addr]:port" (issue 34: an IPv6 underlay), as net.JoinHostPort writes
// it; without brackets, or without a port, it is refused, and a token of
// IPv6 seeds round-trips.
func TestValidSeedIPv6(t *testing.T) {
	for _, tc := range []struct {
		seed string
		ok   bool
	}{
		{"[fd99::1]:7300", true},
		{"[2001:db8::1]:1", true},
		{"[::ffff:192.0.2.1]:7300", true},
		{"[::1]:65535", true},
		{"fd99::1:7300", false},
		{"[fd99::1]", false},
		{"fd99::1", false},
		{"[fd99::1]:0", false},
		{"[fd99::1]:65536", false},
		{"[fd99::1]:", false},
	} {
		if err := validSeed(tc.seed); (err == nil) != tc.ok {
			t.Errorf("validSeed(%q) = %v, want ok %t", tc.seed, err, tc.ok)
		}
	}
	tok := testToken()
	tok.Seeds = []string{"[fd99::1]:7300", "[fd99::2]:7300"}
	got, err := ParseToken(mustEncode(t, tok))
	if err != nil || !slices.Equal(got.Seeds, tok.Seeds) {
		t.Fatalf("IPv6 seeds %v round-trip as %v, %v", tok.Seeds, got.Seeds, err)
	}
}

// TestTokenEncodeSaysClusterIDLength: the refusal tells the operator the
// length a cluster id must have.
func TestTokenEncodeSaysClusterIDLength(t *testing.T) {
	tok := testToken()
	tok.ClusterID = "abc"
	_, err := tok.Encode()
	if codes.Of(err) != codes.BadRequest || !strings.Contains(err.Error(), fmt.Sprintf("want %d lowercase hex", 2*clusterIDSize)) {
		t.Fatalf("Encode = %v, want %s naming %d hex characters", err, codes.BadRequest, 2*clusterIDSize)
	}
}

func TestTokenRedacted(t *testing.T) {
	tok := testToken()
	secrets := []string{
		base64.RawURLEncoding.EncodeToString(tok.Secret[:]),
		base64.StdEncoding.EncodeToString(tok.Secret[:]),
		hex.EncodeToString(tok.Secret[:]),
		strings.ToUpper(hex.EncodeToString(tok.Secret[:])),
		mustEncode(t, tok),
		fmt.Sprint(tok.Secret[:]),
	}
	var js bytes.Buffer
	slog.New(slog.NewJSONHandler(&js, nil)).Info("minted", "token", tok, "ptr", &tok)
	var txt bytes.Buffer
	slog.New(slog.NewTextHandler(&txt, nil)).Info("minted", "token", tok)
	outputs := map[string]string{
		"String": tok.String(),
		"%v":     fmt.Sprintf("%v", tok),
		"%+v":    fmt.Sprintf("%+v", tok),
		"%#v":    fmt.Sprintf("%#v", tok),
		"%s":     fmt.Sprintf("%s", tok),
		"%x":     fmt.Sprintf("%x", tok),
		"%d":     fmt.Sprintf("%d", tok),
		"ptr %v": fmt.Sprintf("%v", &tok),
		"slice":  fmt.Sprintf("%+v", []Token{tok}),
		"json":   js.String(),
		"text":   txt.String(),
	}
	for name, out := range outputs {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s output reveals the secret: %s", name, out)
			}
		}
		if !strings.Contains(out, "web-1") && name != "%x" {
			t.Errorf("%s output lacks the node name: %s", name, out)
		}
	}
}

func TestCheckExpiry(t *testing.T) {
	tok := testToken()
	if err := tok.CheckExpiry(tok.Expires.Add(-time.Second)); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	for _, now := range []time.Time{tok.Expires, tok.Expires.Add(time.Hour)} {
		if got := codes.Of(tok.CheckExpiry(now)); got != codes.TokenExpired {
			t.Fatalf("at %s: code %q", now, got)
		}
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a", "z", "0", "9", "a9", "z0", "web-1", "a-b-c", strings.Repeat("z", 63), "1a"} {
		if err := ValidName(ok); err != nil {
			t.Errorf("ValidName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "Z", "a_b", "a.b", "a b", "a/b", "a:b", "a`b", "a{b", strings.Repeat("z", 64), "é", "a\x00"} {
		if got := codes.Of(ValidName(bad)); got != codes.BadNodeName {
			t.Errorf("ValidName(%q) code %q", bad, got)
		}
	}
}

func TestCheckTTL(t *testing.T) {
	for _, d := range []time.Duration{MinTTL, DefaultTTL, MaxTTL} {
		if err := CheckTTL(d); err != nil {
			t.Errorf("CheckTTL(%s) = %v", d, err)
		}
	}
	for _, d := range []time.Duration{0, -time.Minute, MinTTL - 1, MaxTTL + 1, 24 * time.Hour} {
		if got := codes.Of(CheckTTL(d)); got != codes.TokenBadTTL {
			t.Errorf("CheckTTL(%s) code %q", d, got)
		}
	}
}

// TestTokenNextCA: a token minted during a CA rotation pins both CAs; one
// whose trailer is cut, zero, or names the current CA is refused.
func TestTokenNextCA(t *testing.T) {
	tok := testToken()
	if p := tok.Pins(); len(p) != 1 || p[0] != tok.CA {
		t.Fatalf("pins %v, want the CA alone", p)
	}
	tok.NextCA = pki.Fingerprint{0: 9}
	if p := tok.Pins(); len(p) != 2 || p[1] != tok.NextCA {
		t.Fatalf("pins %v, want CA and next", p)
	}
	same := testToken()
	same.NextCA = same.CA
	if _, err := same.Encode(); codes.Of(err) != codes.BadRequest {
		t.Fatalf("Encode with next CA = CA: %v", err)
	}
	// Payloads built by hand: the plain token's, then a trailer.
	plain := testToken()
	body, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(mustEncode(t, plain), tokenPrefix))
	payload := body[:len(body)-crcSize]
	for name, trailer := range map[string][]byte{
		"cut":  append([]byte{nextCATag}, bytes.Repeat([]byte{9}, 31)...),
		"zero": append([]byte{nextCATag}, make([]byte, 32)...),
		"same": append([]byte{nextCATag}, plain.CA[:]...),
		"tag":  append([]byte{0x02}, bytes.Repeat([]byte{9}, 32)...),
	} {
		p := append(append([]byte(nil), payload...), trailer...)
		p = binary.BigEndian.AppendUint32(p, checksum(p))
		if _, err := ParseToken(tokenPrefix + base64.RawURLEncoding.EncodeToString(p)); codes.Of(err) != codes.TokenCorrupt {
			t.Errorf("%s trailer: %v, want TokenCorrupt", name, err)
		}
	}
}

// TestTokenKey: a reusable key's token carries the key trailer and its
// name prefix; it round-trips (with the other trailers too), admits
// workers only, takes a prefix a node name could not be ("web-"), and a
// key trailer with other flags, or cut, is TokenCorrupt.
func TestTokenKey(t *testing.T) {
	key := testToken()
	key.Key, key.Name = true, "web-"
	key.SeedIDs = []string{"a", "b", "c"}
	key.NextCA = pki.Fingerprint{0: 7}
	got, err := ParseToken(mustEncode(t, key))
	if err != nil {
		t.Fatalf("parse a key: %v", err)
	}
	if !got.Key || got.Name != "web-" || !slices.Equal(got.SeedIDs, key.SeedIDs) || got.NextCA != key.NextCA {
		t.Fatalf("parsed key %+v", got)
	}
	if plain, _ := ParseToken(mustEncode(t, testToken())); plain.Key {
		t.Fatal("a one-time token parsed as a key")
	}
	ctl := key
	ctl.Role = pki.RoleControl
	if _, err := ctl.Encode(); codes.Of(err) != codes.BadRole {
		t.Fatalf("a control key: %v, want BadRole", err)
	}
	bad := key
	bad.Name = "-web"
	if _, err := bad.Encode(); codes.Of(err) != codes.KeyBadLimits {
		t.Fatalf("a key with prefix -web: %v, want KeyBadLimits", err)
	}
	plain := testToken()
	body, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(mustEncode(t, plain), tokenPrefix))
	payload := body[:len(body)-crcSize]
	for name, trailer := range map[string][]byte{
		"cut":   {keyTag},
		"flags": {keyTag, 0x03},
		"extra": {keyTag, keyFlagReusable, 0},
	} {
		p := append(append([]byte(nil), payload...), trailer...)
		p = binary.BigEndian.AppendUint32(p, checksum(p))
		if _, err := ParseToken(tokenPrefix + base64.RawURLEncoding.EncodeToString(p)); codes.Of(err) != codes.TokenCorrupt {
			t.Errorf("%s key trailer: %v, want TokenCorrupt", name, err)
		}
	}
}
