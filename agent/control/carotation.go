package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// CA rotation (issue 13 item 4; docs/architecture.md, "CA rotation"). The
// CA holder drives it: RotateCA commits begin and, once every active
// member reports trusting both CAs, reissue; FinishCARotation commits
// finish once nothing depends on the old CA. Every other node follows the
// bundles (CABundle) and reports what it runs in its gossip tag "ca"
// (CAReport).

// PathCABundle is where a member fetches the CA trust bundles.
const PathCABundle = "/v1/ca/bundle"

// caRenotify is how often a waiting rotation repeats its "CA changed"
// notification.
const caRenotify = time.Second

// caSet holds the CA key pairs the CA holder has beyond the one it
// started with (the next CA of a rotation, created or loaded from
// ca/next/): signing picks among them by the fingerprint raft names.
type caSet struct {
	mu    sync.Mutex
	extra []*pki.CA
	rot   sync.Mutex // one CA rotation at a time on this node
}

// AddCA gives the CA holder another key pair (the next CA of a rotation).
func (p *Plane) AddCA(ca *pki.CA) {
	p.cas.mu.Lock()
	defer p.cas.mu.Unlock()
	for _, c := range p.cas.extra {
		if c.Fingerprint() == ca.Fingerprint() {
			return
		}
	}
	p.cas.extra = append(p.cas.extra, ca)
}

// CAByFingerprint is the key pair this node holds for the CA whose
// fingerprint (hex) is fp, or nil.
func (p *Plane) CAByFingerprint(fp string) *pki.CA {
	cur := p.ca.Load()
	if cur == nil {
		return nil
	}
	if cur.Fingerprint().String() == fp {
		return cur
	}
	p.cas.mu.Lock()
	defer p.cas.mu.Unlock()
	for _, c := range p.cas.extra {
		if c.Fingerprint().String() == fp {
			return c
		}
	}
	return nil
}

// signingCA is the key pair to sign with now: the one raft names
// (state.Cluster.SigningCA), while the record names this node the CA
// holder (heldCA). Outside a rotation the CA this node holds signs even if
// the record names another fingerprint (a test cluster's record).
func (p *Plane) signingCA() (*pki.CA, error) {
	held := p.heldCA()
	if held == nil {
		return nil, codes.Wrap(codes.CAHolderDown, errors.New("this node does not hold the CA"))
	}
	cl, _ := p.raft.FSM().Cluster()
	if ca := p.CAByFingerprint(cl.SigningCA()); ca != nil {
		return ca, nil
	}
	p.cas.mu.Lock()
	extra := len(p.cas.extra)
	p.cas.mu.Unlock()
	if cl.Rotation == nil && extra == 0 {
		return held, nil
	}
	return nil, codes.Wrap(codes.Internal, fmt.Errorf("this CA holder has no key for the signing CA %s", pki.ShortID(cl.SigningCA())))
}

// reissueTLS reports whether n's TLS leaf is to be reissued at once: a
// rotation with --now is reissuing and the leaf is not under the next CA.
func reissueTLS(c state.Cluster, n state.Node) bool {
	r := c.Rotation
	return r != nil && r.Phase == state.CAPhaseReissue && r.Now && !pki.IssuedBy(r.NextCACert, n.TLSCert)
}

// reissueNebula is reissueTLS for n's Nebula certificate.
func reissueNebula(c state.Cluster, n state.Node) bool {
	r := c.Rotation
	return r != nil && r.Phase == state.CAPhaseReissue && r.Now && !pki.NebulaIssuedBy(r.NextNebulaCACert, n.NebulaCert)
}

// CAReport is what a node reports in its gossip tag "ca": the id of its
// trust bundles, and the first 8 hex of the CAs that issued its TLS leaf
// and its Nebula certificate ("-" when unknown).
func CAReport(id *pki.Identity) string {
	tlsIssuer, nebIssuer := "-", "-"
	if leaf, err := id.Leaf(); err == nil {
		if ca := pki.IssuerIn(id.CACert, leaf); ca != nil {
			tlsIssuer = pki.ShortID(pki.FingerprintOf(ca).String())
		}
	}
	if is, err := pki.NebulaIssuer(id.NebulaCert); err == nil && is != "" {
		nebIssuer = pki.ShortID(is)
	}
	return pki.BundleID(id.CACert, id.NebulaCACert) + "." + tlsIssuer + "." + nebIssuer
}

// CABundle is the trust a member follows: the bundles (PEM, current CA
// first), the phase, and the CAs the CA holder signs with now (hex
// fingerprints, X.509 and Nebula), so a worker knows its certificates are
// to be reissued.
type CABundle struct {
	TLS             []byte        `json:"tls"`
	Nebula          []byte        `json:"nebula"`
	Phase           state.CAPhase `json:"phase"`
	SigningCA       string        `json:"signing_ca"`
	SigningNebulaCA string        `json:"signing_nebula_ca"`
}

// BundleOf is the CABundle of a cluster record.
func BundleOf(c state.Cluster) CABundle {
	b := CABundle{TLS: c.TrustBundle(), Nebula: c.NebulaTrustBundle(), Phase: c.Phase(), SigningCA: c.SigningCA()}
	_, neb := c.SigningCACerts()
	b.SigningNebulaCA, _ = pki.NebulaFingerprint(neb)
	return b
}

// CABundle is this node's FSM's CABundle; ok is false before Bootstrap.
func (p *Plane) CABundle() (CABundle, bool) {
	c, ok := p.raft.FSM().Cluster()
	if !ok {
		return CABundle{}, false
	}
	return BundleOf(c), true
}

// handleCABundle answers after a read index: a worker asks when told the
// bundles changed, and a follower that has not applied the change yet
// would answer the old ones, which the worker keeps until told again.
func (p *Plane) handleCABundle(w http.ResponseWriter, r *http.Request, _ Caller) {
	if err := p.SyncRead(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	b, ok := p.CABundle()
	if !ok {
		writeError(w, codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet")))
		return
	}
	apitype.WriteJSON(w, http.StatusOK, b)
}

// caLaggers are the active records whose node does not report what the
// phase needs, as "NAME (why)", a report counting only with its signature
// by the node's recorded TLS key (a member that was taken can gossip in
// another node's name: issue 27): in phase trust, the trust bundles want;
// in phase reissue, TLS leaf and Nebula cert issued by the next CA. Every
// active record counts, alive or not: a node that missed the bundle could
// not reach a control node whose leaf was reissued.
func (p *Plane) caLaggers(c state.Cluster) []string {
	reports := map[string]KeyReport{}
	for _, r := range p.hooks.KeyReports() {
		reports[r.Name] = r
	}
	wantBundle := pki.BundleID(c.TrustBundle(), c.NebulaTrustBundle())
	var nextTLS, nextNeb string
	if r := c.Rotation; r != nil {
		nextTLS = pki.ShortID(r.NextCAFingerprint)
		fp, _ := pki.NebulaFingerprint(r.NextNebulaCACert)
		nextNeb = pki.ShortID(fp)
	}
	var out []string
	for _, n := range p.raft.FSM().Nodes() {
		if n.State != state.NodeActive {
			continue
		}
		rep, ok := caReportOf(n, reports) // raft's record first (facts.go), else gossip's
		if !ok || rep.ID != n.ID || rep.CA == "" {
			out = append(out, n.Name+" (no report)")
			continue
		}
		if !rep.Legacy && !attested(n, pki.AttestCA, []byte(n.ID), CAStatement(rep.CA), rep.CASig) {
			out = append(out, n.Name+" (report not signed by its key)")
			continue
		}
		parts := strings.Split(rep.CA, ".")
		if len(parts) != 3 {
			out = append(out, n.Name+" (unreadable report)")
			continue
		}
		switch {
		case parts[0] != wantBundle:
			out = append(out, n.Name+" (trust bundle not adopted)")
		case c.Phase() == state.CAPhaseReissue && parts[1] != nextTLS:
			out = append(out, n.Name+" (runs a TLS leaf of the old CA)")
		case c.Phase() == state.CAPhaseReissue && parts[2] != nextNeb:
			out = append(out, n.Name+" (runs a Nebula cert of the old CA)")
		}
	}
	slices.Sort(out)
	return out
}

// oldTokens are the tokens that pin only the old CA and can still be
// used: minted before the rotation started, unused, unrevoked, unexpired.
// A token's Created is whole seconds, so one minted in the second the
// rotation began counts as old too (the safe side: it only delays finish).
func (p *Plane) oldTokens(c state.Cluster, now time.Time) []string {
	if c.Rotation == nil {
		return nil
	}
	var out []string
	for _, t := range p.raft.FSM().Tokens() {
		if t.Consumed() || t.Revoked() || !now.Before(t.Expires) || !t.Created.Before(c.Rotation.Started) {
			continue
		}
		out = append(out, fmt.Sprintf("token for %s (expires %s)", t.Name, t.Expires.UTC().Format(time.RFC3339)))
	}
	slices.Sort(out)
	return out
}

// CAStatus is the rotation as this node's FSM has it, with what still
// depends on the old CA (on the CA holder, with its members' reports).
func (p *Plane) CAStatus(ctx context.Context) (apitype.CAStatus, error) {
	if err := p.FreshRead(ctx); err != nil {
		return apitype.CAStatus{}, err
	}
	c, ok := p.raft.FSM().Cluster()
	if !ok {
		return apitype.CAStatus{}, codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	st := apitype.CAStatus{Phase: string(c.Phase()), Current: c.CAFingerprint, Signing: c.SigningCA(), Rotated: c.CARotated}
	if h, ok := p.raft.FSM().Node(c.CAHolder); ok {
		st.Holder = h.Name
	}
	if r := c.Rotation; r != nil {
		st.Next, st.Started, st.Now = r.NextCAFingerprint, r.Started, r.Now
		st.Certificates = p.raft.FSM().OldDependents()
		st.Members = p.caLaggers(c)
		st.Tokens = p.oldTokens(c, p.now())
	}
	st.Overlay = c.Overlay.String()
	if v6 := c.IPv6Overlay(); v6.IsValid() {
		st.Overlay6, st.Moving = v6.String(), !c.Overlay6.IsValid()
	}
	for _, n := range p.raft.FSM().Nodes() {
		if n.State == state.NodeActive {
			st.Active++
			if pki.NebulaOverlay6(n.NebulaCert).IsValid() {
				st.DualStack++
			}
		}
	}
	return st, nil
}
