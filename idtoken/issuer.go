package idtoken

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/meshd/meshd/codes"
)

// The roles a rule may give. An empty Rule.Role means roleWorker.
const (
	roleWorker  = "worker"
	roleControl = "control"
)

// Issuer is one trusted issuer, as meshd.yaml holds it.
type Issuer struct {
	// Issuer must equal the token's iss claim exactly. With Discovery it
	// is an https URL; with JWKSFile it may be any string.
	Issuer string `yaml:"issuer"`
	// JWKSFile is a local JSON Web Key Set holding the issuer's public
	// keys; it is read by New and again by Reload.
	JWKSFile string `yaml:"jwks_file"`
	// Discovery, instead of JWKSFile, fetches Issuer +
	// "/.well-known/openid-configuration" and the jwks_uri it names, at
	// the first Verify of one of the issuer's tokens.
	Discovery bool `yaml:"discovery"`
	// Audience is required: the token's aud must contain it.
	Audience string `yaml:"audience"`
	// KeysMaxAge is how long the issuer's keys are used before they are
	// fetched again (discovery: at the first token after it, or sooner
	// if the key set's Cache-Control max-age is shorter) or the jwks_file
	// is read again: the longest a key the issuer withdrew still admits.
	// 0 means DefaultKeysMaxAge; at most MaxKeysMaxAge.
	KeysMaxAge time.Duration `yaml:"keys_max_age"`
	// Rules map a token's claims to what its join admits. The first rule
	// that matches wins; a token no rule matches is refused with
	// codes.JWTNoRule.
	Rules []Rule `yaml:"rules"`
}

// Rule admits the tokens whose claims match it.
type Rule struct {
	// Claims must all match: a string claim equal to the value, or an
	// array-of-strings claim holding it. A claim of any other type, or
	// missing, never matches. An empty map matches every token of the
	// issuer.
	Claims map[string]string `yaml:"claims"`
	// Role is "worker" (the default when empty) or "control".
	Role string `yaml:"role"`
	// Groups are the node's groups; the caller checks them as it checks
	// any node's groups.
	Groups []string `yaml:"groups"`
	// NameClaim names a claim whose string value is the node's name. A
	// token without it, or whose value is not a valid node name, is
	// refused with codes.JWTNoRule.
	NameClaim string `yaml:"name_claim"`
	// NamePrefix, instead of NameClaim, has the cluster name the node
	// NamePrefix followed by a number.
	NamePrefix string `yaml:"name_prefix"`
	// Ephemeral marks the node for removal once it is gone.
	Ephemeral bool `yaml:"ephemeral"`
}

// Validate checks a list of issuers: each has an issuer, exactly one of
// jwks_file and discovery (discovery with an https issuer URL), an
// audience, a keys_max_age within bounds and at least one rule; each rule
// has a known role, exactly one of name_claim and name_prefix, and no
// empty claim name or value; no issuer is listed twice. It lists every
// problem at once, each naming the issuer's and the rule's index, in one
// error wrapping codes.ConfigInvalid.
func Validate(issuers []Issuer) error {
	var errs []error
	seen := map[string]int{}
	for i, is := range issuers {
		at := fmt.Sprintf("issuers[%d]", i)
		if is.Issuer != "" {
			at = fmt.Sprintf("issuers[%d] (%s)", i, is.Issuer)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf(at+": "+format, args...))
		}
		switch {
		case is.Issuer == "":
			bad("issuer is empty")
		case seen[is.Issuer] > 0:
			bad("issuer is listed already as issuers[%d]", seen[is.Issuer]-1)
		default:
			seen[is.Issuer] = i + 1
		}
		switch {
		case is.JWKSFile != "" && is.Discovery:
			bad("set one of jwks_file and discovery, not both")
		case is.JWKSFile == "" && !is.Discovery:
			bad("set one of jwks_file and discovery")
		case is.Discovery && is.Issuer != "":
			if err := httpsURL(is.Issuer); err != nil {
				bad("discovery needs an https issuer: %v", err)
			}
		}
		if is.Audience == "" {
			bad("audience is empty")
		}
		if is.KeysMaxAge < 0 || is.KeysMaxAge > MaxKeysMaxAge {
			bad("keys_max_age %s: want 0 (the default, %s) up to %s", is.KeysMaxAge, DefaultKeysMaxAge, MaxKeysMaxAge)
		}
		if len(is.Rules) == 0 {
			bad("no rules: a token of this issuer would admit nothing")
		}
		for j, r := range is.Rules {
			if err := r.validate(); err != nil {
				bad("rules[%d]: %v", j, err)
			}
		}
	}
	if len(errs) > 0 {
		return codes.Wrap(codes.ConfigInvalid, errors.Join(errs...))
	}
	return nil
}

// validate checks one rule, returning its first problem.
func (r Rule) validate() error {
	switch r.Role {
	case "", roleWorker, roleControl:
	default:
		return fmt.Errorf("role %q: want %q or %q", r.Role, roleWorker, roleControl)
	}
	switch {
	case r.NameClaim != "" && r.NamePrefix != "":
		return errors.New("set one of name_claim and name_prefix, not both")
	case r.NameClaim == "" && r.NamePrefix == "":
		return errors.New("set one of name_claim and name_prefix")
	case r.NamePrefix != "":
		// The cluster appends a number, so the prefix followed by a
		// digit has to be a valid name.
		if err := validName(r.NamePrefix + "1"); err != nil {
			return fmt.Errorf("name_prefix %q: %v", r.NamePrefix, err)
		}
	}
	for k, v := range r.Claims {
		if k == "" {
			return errors.New("claims: an empty claim name")
		}
		if v == "" {
			return fmt.Errorf("claims: %s has an empty value", k)
		}
	}
	return nil
}

// httpsURL checks that s is an https URL with a host and no query,
// fragment or user info, as OpenID Connect Discovery requires of an issuer
// identifier; a discovered jwks_uri is held to the same.
func httpsURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %v", clip(s), err)
	}
	if u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("%q: want an https URL with a host and no query, fragment or user info", clip(s))
	}
	return nil
}

// validName is the node-name rule of enroll.ValidName, used when
// Deps.ValidName is nil: 1 to 63 of a-z, 0-9 and '-', neither starting
// nor ending with '-'. It is copied rather than imported because idtoken
// may import codes only.
func validName(name string) error {
	const allowed = "abcdefghijklmnopqrstuvwxyz0123456789-"
	ok := len(name) >= 1 && len(name) <= 63 &&
		!strings.HasPrefix(name, "-") && !strings.HasSuffix(name, "-") &&
		strings.Trim(name, allowed) == ""
	if !ok {
		return fmt.Errorf("node name %q: want 1-63 of a-z, 0-9, '-', starting and ending with a letter or digit", clip(name))
	}
	return nil
}

// clip shortens a string taken from a token or a library's error for an
// error message, so a token built to be long cannot fill a log line.
func clip(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
