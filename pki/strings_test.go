package pki_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// logJSON logs v under the key "v" and returns what the JSON handler wrote
// for it.
func logJSON(t *testing.T, v any) any {
	t.Helper()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "v", v)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec["v"]
}

// TestStringsShowWhatIsThere checks the other half of TestNoKeysInOutput:
// the redacted forms still name what they stand for, and an empty value
// prints without panicking.
func TestStringsShowWhatIsThere(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleControl, pkitest.IP(5))
	keys, err := pki.NewKeys("n1")
	if err != nil {
		t.Fatal(err)
	}
	fp := ca.Fingerprint().String()
	leaf, err := id.Leaf()
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		got     string
		want    []string
		notWant []string
	}{
		{name: "CA", got: ca.String(), want: []string{"meshd CA prod", "sha256:" + fp}},
		{name: "nil-CA", got: (*pki.CA)(nil).String(), want: []string{"pki.CA{}"}},
		{name: "empty-CA", got: new(pki.CA).String(), want: []string{"pki.CA{}"}},
		{name: "Keys", got: keys.String(), want: []string{"tls_key:[redacted]", "nebula_key:[redacted]"}, notWant: []string{"[none]"}},
		{name: "empty-Keys", got: pki.Keys{}.String(), want: []string{"tls_key:[none]", "csr:0 bytes", "nebula_key:[none]"}, notWant: []string{"[redacted]"}},
		{name: "Identity", got: id.String(), want: []string{"n1", "role=control", "node=id-n1", "key:[redacted]", "nebula_key:[redacted]"}},
		{name: "Identity-without-leaf", got: pki.Identity{Key: id.Key}.String(), want: []string{"key:[redacted]", "nebula_key:[none]"}, notWant: []string{"role="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, w := range tt.want {
				if !strings.Contains(tt.got, w) {
					t.Errorf("%s = %q, want it to contain %q", tt.name, tt.got, w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(tt.got, w) {
					t.Errorf("%s = %q, want it without %q", tt.name, tt.got, w)
				}
			}
		})
	}

	logTests := []struct {
		name string
		v    any
		want any
	}{
		{name: "CA", v: ca, want: map[string]any{
			"subject": "meshd CA prod", "sha256": fp, "not_after": ca.Cert().NotAfter.Format("2006-01-02T15:04:05Z07:00"),
		}},
		{name: "nil-CA", v: (*pki.CA)(nil), want: "pki.CA{}"},
		{name: "empty-CA", v: new(pki.CA), want: "pki.CA{}"},
		{name: "Keys", v: keys, want: map[string]any{"tls_key": "[redacted]", "csr_bytes": float64(len(keys.CSR)), "nebula_key": "[redacted]"}},
		{name: "Identity", v: id, want: map[string]any{
			"name": "n1", "role": "control", "node_id": "id-n1", "not_after": leaf.NotAfter.Format("2006-01-02T15:04:05Z07:00"),
		}},
		{name: "Identity-without-leaf", v: pki.Identity{}, want: "pki.Identity{}"},
	}
	for _, tt := range logTests {
		t.Run("log/"+tt.name, func(t *testing.T) {
			got, _ := json.Marshal(logJSON(t, tt.v))
			want, _ := json.Marshal(tt.want)
			if !bytes.Equal(got, want) {
				t.Errorf("logged %s, want %s", got, want)
			}
		})
	}
}
