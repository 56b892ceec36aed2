package idtoken

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// FuzzVerify: whatever a joiner sends, Verify does not panic, and it
// either admits a token of a trusted issuer or fails with a code and an
// empty Identity.
func FuzzVerify(f *testing.F) {
	fx := newFixture(f)
	good := sign(f, fx.ec, claims(nil))
	parts := strings.Split(good, ".")
	for _, seed := range []string{
		good,
		sign(f, fx.rsa, claims(map[string]any{"groups": []string{"a", "b"}, "repository": "x"})),
		sign(f, fx.k8s, claims(map[string]any{"iss": k8sIssuer, "sub": "system:serviceaccount:build:runner"})),
		sign(f, fx.ec, claims(map[string]any{"exp": nil})),
		sign(f, fx.ec, claims(map[string]any{"nbf": t0.Add(time.Hour).Unix()})),
		b64(map[string]string{"alg": "none"}) + "." + parts[1] + ".",
		parts[0] + "." + b64(claims(map[string]any{"runner": "x"})) + "." + parts[2],
		"", "garbage", "a.b.c", "..", "e30.e30.", strings.Repeat("A", MaxTokenBytes+1),
	} {
		f.Add(seed)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, raw string) {
		id, err := fx.v.Verify(ctx, raw)
		if err != nil {
			if codes.Of(err) == "" {
				t.Fatalf("Verify failed without a code: %v", err)
			}
			if !isZero(id) {
				t.Fatalf("Verify failed (%v) but returned %+v", err, id)
			}
			return
		}
		if (id.Issuer != testIssuer && id.Issuer != k8sIssuer) || len(id.JTI) != 64 || (id.Role != "worker" && id.Role != "control") {
			t.Fatalf("Verify admitted %+v", id)
		}
	})
}
