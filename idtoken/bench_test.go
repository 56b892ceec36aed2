package idtoken

import (
	"context"
	"testing"
	"time"
)

// BenchmarkVerify measures a join's token check: a good token per key
// type, and the two failures that cost most, a signature no key verifies
// (every key of the jwks_file is tried) and an expired token the issuer
// signed (verified twice, see verifySigned).
func BenchmarkVerify(b *testing.B) {
	f := newFixture(b)
	for _, bc := range []struct {
		name string
		raw  string
		ok   bool
	}{
		{"ES256", sign(b, f.ec, claims(nil)), true},
		{"RS256", sign(b, f.rsa, claims(nil)), true},
		{"ES256/bad-signature", sign(b, f.bad, claims(nil)), false},
		{"ES256/expired", sign(b, f.ec, claims(map[string]any{"exp": t0.Add(-time.Second).Unix()})), false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.v.Verify(ctx, bc.raw); (err == nil) != bc.ok {
					b.Fatal(err)
				}
			}
		})
	}
}
