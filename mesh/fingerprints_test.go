package mesh

import (
	"testing"

	"github.com/slackhq/nebula/cert"
)

// TestFingerprintsCached: the cache answers each certificate's own
// fingerprint (Nebula's, as a tunnel reports it), two certificates never
// share one, and it empties itself past four entries per known peer.
func TestFingerprintsCached(t *testing.T) {
	ca := testCA(t)
	var certs []cert.Certificate
	for i := range 6 {
		pemBytes, _ := hostCert(t, ca, "h", byte(i+2))
		c, _, err := cert.UnmarshalCertificateFromPEM(pemBytes)
		if err != nil {
			t.Fatal(err)
		}
		if want, got := fingerprint(t, pemBytes), mustFingerprint(t, c); got != want {
			t.Fatalf("Nebula's fingerprint %s, the helper's %s", got, want)
		}
		certs = append(certs, c)
	}
	var f fingerprints
	for round := range 2 { // the second round answers from the cache
		seen := map[string]bool{}
		for _, c := range certs {
			fp := f.of(c, 10)
			if fp != mustFingerprint(t, c) || seen[fp] {
				t.Fatalf("round %d: %s for %s (or given twice)", round, fp, c.Name())
			}
			seen[fp] = true
		}
	}
	if len(f.bys) != len(certs) {
		t.Fatalf("the cache holds %d entries after %d certificates twice", len(f.bys), len(certs))
	}
	// One known peer: more than 4+16 entries empty the cache first.
	f.bys = map[string]string{}
	for i := range 21 {
		f.bys[string(rune('a'+i))] = "x"
	}
	if fp := f.of(certs[0], 1); fp != mustFingerprint(t, certs[0]) || len(f.bys) != 1 {
		t.Fatalf("past its bound the cache holds %d entries (want it emptied, then 1)", len(f.bys))
	}
}

func mustFingerprint(t *testing.T, c cert.Certificate) string {
	t.Helper()
	fp, err := c.Fingerprint()
	if err != nil {
		t.Fatal(err)
	}
	return fp
}
