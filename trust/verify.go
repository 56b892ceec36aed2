package trust

import (
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meshd/meshd/codes"
)

// NodeURIScheme and NodeURIHost make the URI SAN meshd://node/<id> that
// names a leaf's node id.
const (
	NodeURIScheme = "meshd"
	NodeURIHost   = "node"
)

// RoleOf reads the role from a leaf's Subject OrganizationalUnit, which must
// hold exactly one entry naming a valid role (else codes.BadRole).
func RoleOf(c *x509.Certificate) (Role, error) {
	ous := c.Subject.OrganizationalUnit
	if len(ous) != 1 {
		return "", codes.Wrap(codes.BadRole,
			fmt.Errorf("certificate %q carries %d roles, want exactly one", c.Subject.CommonName, len(ous)))
	}
	return ParseRole(ous[0])
}

// NodeIDOf returns the node id from the leaf's meshd://node/<id> URI SAN, or
// "" if it has none.
func NodeIDOf(c *x509.Certificate) string {
	for _, u := range c.URIs {
		if u.Scheme != NodeURIScheme || u.Host != NodeURIHost {
			continue
		}
		if id, ok := strings.CutPrefix(u.Path, "/"); ok && id != "" && !strings.Contains(id, "/") {
			return id
		}
	}
	return ""
}

// VerifyPinned is a joiner's only trust decision. rawCerts is the chain the
// server sent, leaf first; pin is the cluster CA fingerprint from the join
// token. It returns the verified leaf, or:
//
//   - codes.CAMismatch when the pin is zero, when no certificate after the
//     leaf is a CA whose fingerprint equals pin, or when the leaf does not
//     verify against exactly that CA at now;
//   - codes.SeedNotControl when the leaf, though issued by the pinned CA, is
//     not a control node's server certificate (role control with server
//     auth usage). A worker leaf lands here: it chains to the right CA but
//     has no server auth usage.
func VerifyPinned(rawCerts [][]byte, pin Fingerprint, now time.Time) (*x509.Certificate, error) {
	return VerifyPinnedAny(rawCerts, []Fingerprint{pin}, now)
}

// VerifyPinnedAny is VerifyPinned for a token that pins several CAs (one
// minted during a CA rotation pins the current and the next): the chain
// must end at one of them.
func VerifyPinnedAny(rawCerts [][]byte, pins []Fingerprint, now time.Time) (*x509.Certificate, error) {
	pins = slices.DeleteFunc(slices.Clone(pins), Fingerprint.IsZero)
	if len(pins) == 0 {
		return nil, codes.Wrap(codes.CAMismatch, errors.New("no CA fingerprint to pin"))
	}
	if len(rawCerts) == 0 {
		return nil, codes.Wrap(codes.CAMismatch, errors.New("the seed sent no certificate"))
	}
	leaf, err := x509.ParseCertificate(rawCerts[0])
	if err != nil {
		return nil, codes.Wrap(codes.CAMismatch, fmt.Errorf("seed certificate: %w", err))
	}
	var ca *x509.Certificate
	for _, raw := range rawCerts[1:] {
		c, err := x509.ParseCertificate(raw)
		if err != nil {
			continue // an unparsable extra certificate cannot be the pinned CA
		}
		if slices.Contains(pins, FingerprintOf(c)) && c.IsCA && c.BasicConstraintsValid {
			ca = c
			break
		}
	}
	if ca == nil {
		return nil, codes.Wrap(codes.CAMismatch,
			fmt.Errorf("the seed's chain of %d certificate(s) does not contain the CA sha256:%s", len(rawCerts), pins[0]))
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca)
	opts := x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := leaf.Verify(opts); err != nil {
		return nil, codes.Wrap(codes.CAMismatch, fmt.Errorf("seed certificate %q does not verify against the pinned CA: %w", leaf.Subject.CommonName, err))
	}

	role, err := RoleOf(leaf)
	if err != nil || role != RoleControl {
		return nil, codes.Wrap(codes.SeedNotControl,
			fmt.Errorf("seed certificate %q has role %q, want %q", leaf.Subject.CommonName, role, RoleControl))
	}
	opts.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	if _, err := leaf.Verify(opts); err != nil {
		return nil, codes.Wrap(codes.SeedNotControl,
			fmt.Errorf("seed certificate %q is not valid for server authentication: %w", leaf.Subject.CommonName, err))
	}
	return leaf, nil
}
