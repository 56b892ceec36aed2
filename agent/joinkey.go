package agent

import (
	"fmt"
	"strings"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// A reusable enrolment key (issue 31) names no node: the join asks with
// no name, sends the machine's hostname (a key minted with
// --name-from-host gives it when it is a valid, free name) and takes the
// name the cluster gives from the answer.

// joinToken is what the join joins with: the token req carries, or for a
// join by identity (req.JWT) one built from the JWT, the seed and the CA
// fingerprint the operator gave.
func joinToken(req apitype.JoinRequest, now time.Time) (enroll.Token, error) {
	if req.JWT == "" {
		if req.Seed != "" || req.CASHA256 != "" {
			return enroll.Token{}, codes.Wrap(codes.BadRequest, fmt.Errorf("--seed and --ca-sha256 are for a join by JWT (--jwt-file); a token names its seeds and CA"))
		}
		return enroll.ParseToken(req.Token)
	}
	if req.Token != "" {
		return enroll.Token{}, codes.Wrap(codes.BadRequest, fmt.Errorf("join with a token or with a JWT, not both"))
	}
	ca, err := pki.ParseFingerprint(strings.TrimSpace(req.CASHA256))
	if err != nil {
		return enroll.Token{}, codes.Wrap(codes.CAMismatch, fmt.Errorf("--ca-sha256: %w", err))
	}
	return enroll.IdentityToken(enroll.RawJWT(strings.TrimSpace(req.JWT)), req.Seed, ca, now)
}

// checkedStep is the join's first step: what tok admits, where, and for
// how long.
func checkedStep(tok enroll.Token, now time.Time) string {
	switch {
	case tok.JWT != "":
		return fmt.Sprintf("joining by JWT through seed %s, pinning CA %s: the issuer's rules on the seed decide the name and role",
			tok.Seeds[0], tok.CA.String()[:16])
	case tok.Key:
		return fmt.Sprintf("enrolment key checked: admits a machine the cluster names (%sN or its hostname) as %s in cluster %s, expires in %s",
			tok.Name, tok.Role, tok.ClusterID[:8], tok.Expires.Sub(now).Round(time.Second))
	}
	return fmt.Sprintf("token checked: admits %s as %s in cluster %s, expires in %s", tok.Name, tok.Role, tok.ClusterID[:8],
		tok.Expires.Sub(now).Round(time.Second))
}

// requestName is the node name the enroll request names: the token's,
// none for a key.
func requestName(tok enroll.Token) string {
	if tok.Key {
		return ""
	}
	return tok.Name
}

// hostName is the hostname a key's join sends (lowercased, cut at the
// first dot), "" for a one-time token.
func hostName(tok enroll.Token) string {
	if !tok.Key {
		return ""
	}
	return defaultNodeName()
}
