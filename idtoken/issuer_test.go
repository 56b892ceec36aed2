package idtoken

import (
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

func goodIssuers() []Issuer {
	return []Issuer{
		{Issuer: "https://token.actions.example", Discovery: true, Audience: "meshd", Rules: []Rule{
			{Claims: map[string]string{"repository": "meshd/meshd"}, Role: "control", NameClaim: "runner"},
			{Claims: map[string]string{"groups": "b"}, NamePrefix: "ci-", Ephemeral: true},
			{NamePrefix: "other-"},
		}},
		{Issuer: "kubernetes/a", JWKSFile: "/etc/meshd/k8s-a.jwks", Audience: "meshd", Rules: []Rule{{NamePrefix: "pod-"}}},
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(is []Issuer) []Issuer
		ok     bool
	}{
		{name: "ok/good", change: func(is []Issuer) []Issuer { return is }, ok: true},
		{name: "ok/none", change: func([]Issuer) []Issuer { return nil }, ok: true},
		{name: "ok/role-control", change: func(is []Issuer) []Issuer { is[1].Rules[0].Role = "control"; return is }, ok: true},
		{name: "ok/prefix-with-dash-and-digit", change: func(is []Issuer) []Issuer { is[1].Rules[0].NamePrefix = "a1-"; return is }, ok: true},
		{name: "ok/keys-max-age", change: func(is []Issuer) []Issuer {
			is[0].KeysMaxAge = time.Minute
			is[1].KeysMaxAge = MaxKeysMaxAge
			return is
		}, ok: true},
		{name: "fail/keys-max-age-negative", change: func(is []Issuer) []Issuer { is[0].KeysMaxAge = -time.Second; return is }},
		{name: "fail/keys-max-age-long", change: func(is []Issuer) []Issuer { is[1].KeysMaxAge = MaxKeysMaxAge + time.Second; return is }},
		{name: "fail/issuer-empty", change: func(is []Issuer) []Issuer { is[1].Issuer = ""; return is }},
		{name: "fail/duplicate-issuer", change: func(is []Issuer) []Issuer { is[1].Issuer = is[0].Issuer; return is }},
		{name: "fail/jwks-and-discovery", change: func(is []Issuer) []Issuer { is[1].Discovery = true; return is }},
		{name: "fail/neither-jwks-nor-discovery", change: func(is []Issuer) []Issuer { is[1].JWKSFile = ""; return is }},
		{name: "fail/discovery-http", change: func(is []Issuer) []Issuer { is[0].Issuer = "http://token.actions.example"; return is }},
		{name: "fail/discovery-not-url", change: func(is []Issuer) []Issuer { is[0].Issuer = "kubernetes/a"; return is }},
		{name: "fail/discovery-query", change: func(is []Issuer) []Issuer { is[0].Issuer += "?x=1"; return is }},
		{name: "fail/discovery-user", change: func(is []Issuer) []Issuer { is[0].Issuer = "https://u:p@token.actions.example"; return is }},
		{name: "fail/audience-empty", change: func(is []Issuer) []Issuer { is[0].Audience = ""; return is }},
		{name: "fail/no-rules", change: func(is []Issuer) []Issuer { is[1].Rules = nil; return is }},
		{name: "fail/role", change: func(is []Issuer) []Issuer { is[0].Rules[2].Role = "admin"; return is }},
		{name: "fail/role-case", change: func(is []Issuer) []Issuer { is[0].Rules[2].Role = "Worker"; return is }},
		{name: "fail/name-claim-and-prefix", change: func(is []Issuer) []Issuer { is[1].Rules[0].NameClaim = "sub"; return is }},
		{name: "fail/neither-name-claim-nor-prefix", change: func(is []Issuer) []Issuer { is[1].Rules[0].NamePrefix = ""; return is }},
		{name: "fail/prefix-invalid", change: func(is []Issuer) []Issuer { is[1].Rules[0].NamePrefix = "Pod_"; return is }},
		{name: "fail/prefix-leading-dash", change: func(is []Issuer) []Issuer { is[1].Rules[0].NamePrefix = "-pod"; return is }},
		{name: "fail/prefix-too-long", change: func(is []Issuer) []Issuer { is[1].Rules[0].NamePrefix = strings.Repeat("a", 63); return is }},
		{name: "fail/claim-name-empty", change: func(is []Issuer) []Issuer { is[1].Rules[0].Claims = map[string]string{"": "x"}; return is }},
		{name: "fail/claim-value-empty", change: func(is []Issuer) []Issuer { is[1].Rules[0].Claims = map[string]string{"sub": ""}; return is }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.change(goodIssuers()))
			switch {
			case tc.ok && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case !tc.ok && codes.Of(err) != codes.ConfigInvalid:
				t.Fatalf("Validate: code %q (%v), want %s", codes.Of(err), err, codes.ConfigInvalid)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}

// TestValidateNamesWhere: every problem is listed, each naming where it
// is, so an operator fixes the file in one pass. The message is what is
// tested here: it is the contract with the operator reading it.
func TestValidateNamesWhere(t *testing.T) {
	is := goodIssuers()
	is[0].Audience = ""
	is[1].Rules = append(is[1].Rules, Rule{Role: "admin", NamePrefix: "x-"})
	err := Validate(is)
	if codes.Of(err) != codes.ConfigInvalid {
		t.Fatalf("Validate: %v", err)
	}
	for _, want := range []string{"issuers[0] (https://token.actions.example): audience", "issuers[1] (kubernetes/a): rules[1]: role"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate's error does not name %q:\n%v", want, err)
		}
	}
}

func TestValidName(t *testing.T) {
	for name, ok := range map[string]bool{
		"a": true, "ci-7": true, "7ci": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, "a-": false, "A": false, "a_b": false, "a.b": false, strings.Repeat("a", 64): false, "ä": false,
	} {
		if err := validName(name); (err == nil) != ok {
			t.Errorf("validName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}
