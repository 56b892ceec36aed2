package state

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// The admissions that name no node themselves: a reusable key's (the
// cluster names the joiner) and a JWT's (its issuer's rule names it, or
// the cluster does).

// keyName is the name a key gives its next joiner: the joiner's hostname
// when the key was minted with --name-from-host and the name is valid and
// free, else the key's prefix followed by the lowest free number (web-1,
// web-2, ...). A record of any state holds its name here: a removed
// node's record keeps it until it is forgotten or reused by a one-time
// token of that name. Under the one name rule (rule, names.go) a live
// token or another live key holds a name too: a joiner calling itself db1
// while a token for db1 is live gets web-N instead.
func (s *Snapshot) keyName(rec enroll.TokenRecord, host string, rule bool, at time.Time) string {
	held := make(map[string]bool, len(s.Nodes))
	for _, n := range s.Nodes {
		held[n.Name] = true
	}
	free := func(name string) bool {
		if held[name] {
			return false
		}
		if !rule {
			return true
		}
		_, taken := s.nameHolder(name, at, rec.Hash)
		return !taken
	}
	if rec.Key.NameFromHost && host != "" && enroll.ValidName(host) == nil && free(host) {
		return host
	}
	for i := 1; ; i++ {
		if name := enroll.KeyName(rec.Key.NamePrefix, i); free(name) {
			return name
		}
	}
}

// checkKey checks a reusable key's record as MintToken records it: its
// limits, no name of its own, a worker role, no approval, and a prefix no
// live key's overlaps (enroll.PrefixesOverlap), so two keys never race for
// the same names.
func (s *Snapshot) checkKey(r enroll.TokenRecord) error {
	if err := enroll.CheckKeyLimits(r.Key.Uses, r.Expires.Sub(r.Created), r.Key.NamePrefix); err != nil {
		return err
	}
	switch {
	case r.Name != "":
		return codes.Wrap(codes.BadRequest, fmt.Errorf("mint key: a key names no node, this one names %q", r.Name))
	case r.Role != pki.RoleWorker:
		return codes.Wrap(codes.BadRole, fmt.Errorf("mint key: a key admits workers, not %s", r.Role))
	case r.Approve:
		return codes.Wrap(codes.BadRequest, errors.New("mint key: a key cannot wait for approval; mint one-time tokens with --approve"))
	case r.Key.Used != 0 || !r.Key.LastUsed.IsZero():
		return codes.Wrap(codes.BadRequest, errors.New("mint key: record is already used"))
	}
	for _, o := range s.Tokens {
		if o.IsKey() && LiveKey(o, r.Created) && enroll.PrefixesOverlap(o.Key.NamePrefix, r.Key.NamePrefix) {
			return codes.Wrap(codes.KeyPrefixTaken, fmt.Errorf("mint key: prefix %q overlaps %q of live key %s (expires %s)",
				r.Key.NamePrefix, o.Key.NamePrefix, shortHash(o.Hash), o.Expires.UTC().Format(time.RFC3339)))
		}
	}
	return nil
}

// LiveKey reports whether the key r can still admit at at: not revoked,
// not exhausted, not expired.
func LiveKey(r enroll.TokenRecord, at time.Time) bool {
	return r.IsKey() && !r.Revoked() && !r.Exhausted() && at.Before(r.Expires)
}

// identityRecord checks a join by identity (Admission.Identity) and
// returns what it admits as a token record would say it: the role, groups
// and ephemerality the issuer's rule gave, and either the name a claim
// gave or a one-use key of the rule's name prefix (the cluster names the
// node). The JWT must not have admitted anyone before (codes.JWTReplayed)
// and must still be valid at the admission's time.
func (s *Snapshot) identityRecord(a enroll.Admission) (enroll.TokenRecord, error) {
	id := a.Identity
	if err := id.Check(); err != nil {
		return enroll.TokenRecord{}, err
	}
	switch use, seen := s.JTIs[id.JTI]; {
	case a.Token != enroll.TokenHash{}:
		return enroll.TokenRecord{}, codes.Wrap(codes.BadRequest, errors.New("admit: a join by identity carries no token"))
	case seen && use.NodeID != "": // none: the joins it admitted were undone (AbortJoin)
		return enroll.TokenRecord{}, codes.Wrap(codes.JWTReplayed, fmt.Errorf("admit: the JWT of %s for %s admitted node %s already", id.Issuer, id.Subject, use.NodeID))
	case !a.At.Before(id.Expires):
		return enroll.TokenRecord{}, codes.Wrap(codes.JWTExpired, fmt.Errorf("admit: the JWT of %s for %s expired at %s", id.Issuer, id.Subject, id.Expires.UTC().Format(time.RFC3339)))
	}
	r := enroll.TokenRecord{Name: id.Name, Role: id.Role, Groups: id.Groups, Ephemeral: id.Ephemeral, Expires: id.Expires}
	if id.Name == "" {
		r.Key = enroll.KeyLimits{Uses: 1, NamePrefix: id.Prefix}
	}
	return r, nil
}
