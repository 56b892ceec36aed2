package control

import (
	"errors"
	"fmt"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// The CA key pairs a node holds, custody and rotation together (issue 13;
// docs/architecture.md, "CA custody and CA rotation together"). A node
// holds at most the cluster's current CA (p.ca) and, during a rotation,
// the next one (p.cas.extra); signing picks among them by the fingerprint
// raft names (signingCA) and only while the record names this node the
// holder (heldCA). Every custody move carries both: a handoff sends both
// and the target proves each with a probe, a backup seals both, a restore
// writes both, and a copy is released only once the holder on record
// proved both.

// setCAs installs cur and next (nil: none) as this node's CA keys.
func (p *Plane) setCAs(cur, next *pki.CA) {
	p.cas.mu.Lock()
	defer p.cas.mu.Unlock()
	p.ca.Store(cur)
	p.cas.extra = nil
	if next != nil && cur != nil && next.Fingerprint() != cur.Fingerprint() {
		p.cas.extra = []*pki.CA{next}
	}
}

// keysOnRecord are this node's key pairs for the CAs the record c names:
// the current one and, during a rotation, the next one. Either missing is
// StateCorrupt: a custody move or backup needs both.
func (p *Plane) keysOnRecord(c state.Cluster) (cur, next *pki.CA, err error) {
	if cur = p.CAByFingerprint(c.CAFingerprint); cur == nil {
		return nil, nil, codes.Wrap(codes.StateCorrupt, fmt.Errorf("%s has no key pair for the cluster's CA %s loaded", p.cfg.Name, pki.ShortID(c.CAFingerprint)))
	}
	if r := c.Rotation; r != nil {
		if next = p.CAByFingerprint(r.NextCAFingerprint); next == nil {
			return nil, nil, codes.Wrap(codes.StateCorrupt, fmt.Errorf("%s has no key pair for the next CA %s of the rotation in progress", p.cfg.Name, pki.ShortID(r.NextCAFingerprint)))
		}
	}
	return cur, next, nil
}

// settleKeys, outside a rotation, keeps only the key pair of the CA the
// record names: after a rotation's finish the former next pair becomes
// this node's current one and the old pair is dropped from memory (its
// files go when tidyCADir moves ca/next/ into ca/). Callers hold p.custody
// (a rotation begins under it too, so a new next pair is never dropped).
func (p *Plane) settleKeys(c state.Cluster) {
	if c.Rotation != nil {
		return
	}
	cur := p.CAByFingerprint(c.CAFingerprint)
	if cur == nil {
		return
	}
	p.cas.mu.Lock()
	defer p.cas.mu.Unlock()
	if p.ca.Load() == cur && len(p.cas.extra) == 0 {
		return
	}
	p.ca.Store(cur)
	p.cas.extra = nil
}

// checkNextCA parses b and checks it is the next CA of the rotation in
// progress in cl (both certificates as raft records them).
func checkNextCA(cl state.Cluster, b pki.CABundle) (*pki.CA, error) {
	r := cl.Rotation
	if r == nil {
		return nil, codes.Wrap(codes.BadRequest, errors.New("no CA rotation is in progress"))
	}
	ca, err := pki.ParseCA(b)
	if err != nil {
		return nil, codes.Wrap(codes.BadRequest, err)
	}
	nfp, _ := ca.NebulaFingerprint()
	want, _, err := pki.NebulaCertInfo(r.NextNebulaCACert)
	if ca.Fingerprint().String() != r.NextCAFingerprint || err != nil || nfp != want {
		return nil, codes.Wrap(codes.CAOtherCluster, errors.New("the next CA keys are not those of the rotation in progress"))
	}
	return ca, nil
}

// signProbes signs nonce with cur and, if not nil, next.
func signProbes(cur, next *pki.CA, nonce []byte) (CAProbeAnswer, error) {
	pr, err := cur.SignProbe(nonce)
	if err != nil {
		return CAProbeAnswer{}, err
	}
	a := CAProbeAnswer{Probe: pr}
	if next != nil {
		np, err := next.SignProbe(nonce)
		if err != nil {
			return CAProbeAnswer{}, err
		}
		a.Next = &np
	}
	return a, nil
}

// verifyProbes checks a probe answer against the CA certificates the
// record c names: the current CA's always, the next CA's during a
// rotation (a holder without working next keys could not finish it).
func verifyProbes(c state.Cluster, nonce []byte, a CAProbeAnswer) error {
	if err := pki.VerifyProbe(c.CACert, c.NebulaCACert, nonce, a.Probe); err != nil {
		return err
	}
	if r := c.Rotation; r != nil {
		if a.Next == nil {
			return errors.New("no probe signed with the next CA of the rotation in progress")
		}
		if err := pki.VerifyProbe(r.NextCACert, r.NextNebulaCACert, nonce, *a.Next); err != nil {
			return fmt.Errorf("next CA: %w", err)
		}
	}
	return nil
}
