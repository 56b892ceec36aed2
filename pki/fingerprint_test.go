package pki_test

import (
	"strings"
	"testing"

	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

func TestParseFingerprint(t *testing.T) {
	fp := pkitest.NewCA(t, "prod").Fingerprint()
	s := fp.String()
	if len(s) != 64 || s != strings.ToLower(s) {
		t.Fatalf("String = %q, want 64 lowercase hex characters", s)
	}
	got, err := pki.ParseFingerprint(s)
	if err != nil || got != fp {
		t.Fatalf("ParseFingerprint(String()) = %v, %v; want %v", got, err, fp)
	}
	if got, err := pki.ParseFingerprint(strings.ToUpper(s)); err != nil || got != fp {
		t.Errorf("ParseFingerprint(upper case) = %v, %v; want %v", got, err, fp)
	}
	for name, bad := range map[string]string{
		"fail/empty":     "",
		"fail/short":     s[:62],
		"fail/long":      s + "00",
		"fail/odd":       s[:63],
		"fail/not-hex":   "zz" + s[2:],
		"fail/truncated": s[:16],
	} {
		t.Run(name, func(t *testing.T) {
			got, err := pki.ParseFingerprint(bad)
			if err == nil {
				t.Fatalf("ParseFingerprint(%q) = %v, want an error", bad, got)
			}
			if !got.IsZero() {
				t.Errorf("ParseFingerprint(%q) returned %v with its error", bad, got)
			}
		})
	}
}
