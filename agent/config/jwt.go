package config

import "github.com/meshd/meshd/idtoken"

// JWT is the joins by identity a control node admits (issue 31, package
// idtoken): the issuers whose short-lived JWTs (a CI job's OIDC token, a
// Kubernetes projected service-account token) it trusts, each with its
// audience and the claim rules that map a token to a role, groups and a
// name. None by default: no join by JWT is admitted. A change of issuers
// needs a restart; `meshctl reload` re-reads their JWKS files (a key
// rotation). Set the same on every control node: a joiner asks one seed.
type JWT struct {
	Issuers []idtoken.Issuer `yaml:"issuers"`
}

// validJWT is Validate's check of jwt.issuers.
func (c File) validJWT(bad func(field, value string, err error)) {
	if len(c.JWT.Issuers) == 0 {
		return
	}
	if err := idtoken.Validate(c.JWT.Issuers); err != nil {
		bad("jwt.issuers", "", err)
	}
}
