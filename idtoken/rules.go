package idtoken

import (
	"fmt"
	"slices"
	"time"

	"github.com/meshd/meshd/codes"
)

// Identity is what a verified token admits: who issued it to whom, the
// replay key the caller records, and what the matching rule gives.
type Identity struct {
	Issuer, Subject string
	// JTI is the hex SHA-256 of the issuer, a zero byte and the token's
	// jti: the caller records it (in raft) to refuse the token's replay.
	// Hashing keeps jti values of different issuers apart and keeps the
	// token's own identifier out of the records.
	JTI               string
	IssuedAt, Expires time.Time
	// Role is "worker" or "control".
	Role   string
	Groups []string
	// Name is the node name from the rule's NameClaim, or "" when the
	// rule gives NamePrefix instead.
	Name       string
	NamePrefix string
	Ephemeral  bool
	// Rule is the index of the rule that matched, for the audit log.
	Rule int
}

// admit applies the first of rules whose claims the token's claims
// match, filling the rule's part of an Identity. A rule that matches but
// whose name claim is missing or not a valid name refuses the token; the
// rules after it are not tried, so which rule admits a token never
// depends on the name it carries.
func admit(rules []Rule, claims map[string]any, validName func(string) error) (Identity, error) {
	for i, r := range rules {
		if !matches(r.Claims, claims) {
			continue
		}
		id := Identity{
			Role:       r.Role,
			Groups:     slices.Clone(r.Groups),
			NamePrefix: r.NamePrefix,
			Ephemeral:  r.Ephemeral,
			Rule:       i,
		}
		if id.Role == "" {
			id.Role = roleWorker
		}
		if r.NameClaim != "" {
			name, ok := claims[r.NameClaim].(string)
			if !ok {
				return Identity{}, codes.Wrap(codes.JWTNoRule,
					fmt.Errorf("rule %d matches, but the token has no string claim %q to name the node", i, r.NameClaim))
			}
			if err := validName(name); err != nil {
				return Identity{}, codes.Wrap(codes.JWTNoRule,
					fmt.Errorf("rule %d matches, but claim %q is not a valid node name: %w", i, r.NameClaim, err))
			}
			id.Name = name
		}
		return id, nil
	}
	return Identity{}, codes.Wrap(codes.JWTNoRule, fmt.Errorf("none of the issuer's %d rules matches the token's claims", len(rules)))
}

// matches reports whether every wanted claim is in claims: a string equal
// to the wanted value, or an array of strings holding it. Any other type
// (a number, a boolean, an object, an array with a non-string in it)
// never matches, so a rule cannot be met by a look-alike value.
func matches(want map[string]string, claims map[string]any) bool {
	for k, w := range want {
		switch v := claims[k].(type) {
		case string:
			if v != w {
				return false
			}
		case []any:
			found := false
			for _, e := range v {
				s, ok := e.(string)
				if !ok {
					return false
				}
				found = found || s == w
			}
			if !found {
				return false
			}
		default:
			return false
		}
	}
	return true
}
