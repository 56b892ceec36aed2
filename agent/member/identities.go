package member

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/idtoken"
	"github.com/meshd/meshd/pki"
)

// identities is the enroll server's IdentityVerifier on a control node
// whose meshd.yaml trusts JWT issuers (jwt.issuers): the idtoken room's
// verifier, its Identity put in the enroll room's words. When the
// issuers' keys could not be loaded at start (a JWKS file missing or
// bad), every join by JWT is refused with codes.JWTIssuerUnknown saying
// why, and meshd runs on: one typo must not take a control node down.
type identities struct {
	mu  sync.Mutex // guards v and err: a reload may load them while joins verify
	v   *idtoken.Verifier
	err error // why v is nil
}

// newIdentities is the verifier of issuers, nil when there are none (the
// enroll server then refuses every join by JWT).
func newIdentities(issuers []idtoken.Issuer, now func() time.Time) *identities {
	if len(issuers) == 0 {
		return nil
	}
	v, err := idtoken.New(context.Background(), issuers, idtoken.Deps{Now: now, ValidName: enroll.ValidName})
	return &identities{v: v, err: err}
}

// Verify verifies raw and maps what it admits.
func (i *identities) Verify(ctx context.Context, raw string) (enroll.Identity, error) {
	i.mu.Lock()
	v, loadErr := i.v, i.err
	i.mu.Unlock()
	if v == nil {
		return enroll.Identity{}, codes.Wrap(codes.JWTIssuerUnknown, fmt.Errorf("the trusted issuers' keys could not be loaded: %v", loadErr))
	}
	id, err := v.Verify(ctx, raw)
	if err != nil {
		return enroll.Identity{}, err
	}
	role, err := pki.ParseRole(id.Role)
	if err != nil {
		return enroll.Identity{}, codes.Wrap(codes.JWTNoRule, fmt.Errorf("rule %d of %s gives role %q", id.Rule, id.Issuer, id.Role))
	}
	return enroll.Identity{Issuer: id.Issuer, Subject: id.Subject, JTI: id.JTI, Expires: id.Expires, Role: role,
		Groups: id.Groups, Name: id.Name, Prefix: id.NamePrefix, Ephemeral: id.Ephemeral, Rule: id.Rule}, nil
}

// reload re-reads the issuers' JWKS files (a key rotation); with none
// loaded at start it tries to load them now.
func (i *identities) reload(ctx context.Context, issuers []idtoken.Issuer, now func() time.Time) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.v == nil {
		v, err := idtoken.New(ctx, issuers, idtoken.Deps{Now: now, ValidName: enroll.ValidName})
		if err != nil {
			i.err = err
			return err
		}
		i.v, i.err = v, nil
		return nil
	}
	return i.v.Reload(ctx)
}

// ReloadIdentities re-reads the JWKS files of the JWT issuers this
// control node trusts (`meshctl reload` after an issuer rotated its
// keys). ok is false on a node that trusts none.
func (rt *Runtime) ReloadIdentities(ctx context.Context) (ok bool, err error) {
	if rt.ids == nil {
		return false, nil
	}
	return true, rt.ids.reload(ctx, rt.cfg.JWT.Issuers, rt.now)
}
