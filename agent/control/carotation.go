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
		rep, ok := reports[n.Name]
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

// RotateCA is `meshctl ca rotate` on the CA holder. next is the next CA's
// key pair, already saved under ca/next/ (nil to resume a rotation in
// progress, whose key pair AddCA gave). It begins the rotation if none
// is in progress, waits until every active member trusts both CAs, then
// commits reissue; with now (or a rotation begun with --now) it reissues
// every certificate under the next CA at once and waits, within the step
// timeout, for the old CA to be dropped.
func (p *Plane) RotateCA(ctx context.Context, next *pki.CA, now bool, actor string) (apitype.CAStatus, error) {
	if p.heldCA() == nil {
		return apitype.CAStatus{}, codes.Wrap(codes.NotCAHolder, errors.New("this node does not hold the CA keys"))
	}
	p.cas.rot.Lock()
	defer p.cas.rot.Unlock()
	if err := p.SyncRead(ctx); err != nil {
		return apitype.CAStatus{}, err
	}
	c, _ := p.raft.FSM().Cluster()
	if c.Rotation == nil {
		if next == nil {
			return apitype.CAStatus{}, codes.Wrap(codes.Internal, errors.New("no next CA to rotate to"))
		}
		if err := p.beginRotation(ctx, next, now, actor); err != nil {
			return apitype.CAStatus{}, err
		}
		// A forwarded write returns once the leader applied it; this
		// node's FSM catches up by the read index.
		if err := p.SyncRead(ctx); err != nil {
			return apitype.CAStatus{}, err
		}
		c, _ = p.raft.FSM().Cluster()
	}
	r := c.Rotation
	if r == nil {
		return apitype.CAStatus{}, codes.Wrap(codes.Internal, errors.New("the rotation just begun is not in the record"))
	}
	if p.CAByFingerprint(r.NextCAFingerprint) == nil {
		return apitype.CAStatus{}, codes.Wrap(codes.Internal, fmt.Errorf("the next CA %s of the rotation in progress has no key pair on this node", pki.ShortID(r.NextCAFingerprint)))
	}
	p.hooks.Poke()
	if r.Phase == state.CAPhaseTrust {
		if err := p.awaitCA(ctx, "every node trusts both CAs", func() []string {
			c, _ := p.raft.FSM().Cluster()
			return p.caLaggers(c)
		}); err != nil {
			return apitype.CAStatus{}, err
		}
		if err := p.Write(ctx, &state.RotateCA{Step: state.CAReissue, Next: r.NextCAFingerprint, At: p.now(), Actor: actor}); err != nil {
			return apitype.CAStatus{}, err
		}
		p.log.Info("CA rotation: signing with the next CA", "code", codes.EventCARotated, "next", pki.ShortID(r.NextCAFingerprint))
		// reissueAll reads the phase from this node's FSM: on a holder
		// that is not the leader it must have applied the step first.
		if err := p.SyncRead(ctx); err != nil {
			return apitype.CAStatus{}, err
		}
	}
	if now || r.Now {
		p.reissueAll(ctx)
		p.hooks.Poke()
		// Wait for the reissued certificates to be adopted (tokens minted
		// before the rotation are not waited for: they hold the old CA
		// until they are used, revoked or expire), then finish if nothing
		// else holds the old CA; the reconcile loop finishes it otherwise.
		err := p.awaitCA(ctx, "every node runs certificates of the next CA", func() []string {
			c, _ := p.raft.FSM().Cluster()
			if c.Rotation == nil {
				return nil
			}
			return slices.Concat(p.raft.FSM().OldDependents(), p.caLaggers(c))
		})
		if err == nil {
			_, err = p.FinishCARotation(ctx, actor)
		}
		if err != nil && codes.Of(err) != codes.CARotationStalled {
			return apitype.CAStatus{}, err
		}
	}
	_ = p.hooks.NotifyCA()
	return p.CAStatus(ctx)
}

// reissueAll signs, under the next CA, every active node's certificate on
// record that is not under it yet.
func (p *Plane) reissueAll(ctx context.Context) {
	c, _ := p.raft.FSM().Cluster()
	r := c.Rotation
	if r == nil || r.Phase != state.CAPhaseReissue {
		return
	}
	now := p.now()
	for _, n := range p.raft.FSM().Nodes() {
		if n.State != state.NodeActive {
			continue
		}
		if len(n.TLSCert) > 0 && !pki.IssuedBy(r.NextCACert, n.TLSCert) {
			_, expires, _ := LeafValidity(n.TLSCert)
			if err := p.renewTLSFor(ctx, n, now, outlast(p.cfg.tlsLifetime(), now, expires)); err != nil {
				p.log.Warn("TLS leaf not reissued under the next CA", "code", codes.OrInternal(err), "node", n.Name, "err", err)
			}
		}
		if len(n.NebulaPublicKey) > 0 && !pki.NebulaIssuedBy(r.NextNebulaCACert, n.NebulaCert) {
			lifetime := p.cfg.NebulaLifetime
			if lifetime <= 0 {
				lifetime = pki.DefaultNebulaLifetime
			}
			if err := p.renewNebulaFor(ctx, n, c.Overlay.Bits(), now, outlast(lifetime, now, n.NebulaExpires)); err != nil {
				p.log.Warn("Nebula certificate not reissued under the next CA", "code", codes.OrInternal(err), "node", n.Name, "err", err)
			}
		}
	}
}

// FinishCARotation commits the rotation's finish step on the CA holder
// when nothing depends on the old CA any more: no certificate on record,
// no member's report, no usable token minted before the rotation. It
// returns whether the rotation is over. The reconcile loop calls it on
// every pass.
func (p *Plane) FinishCARotation(ctx context.Context, actor string) (bool, error) {
	if p.heldCA() == nil {
		return false, nil
	}
	if c, ok := p.raft.FSM().Cluster(); !ok || c.Rotation == nil {
		return ok, nil
	}
	// Under the custody lock: no handoff or backup reads the keys while
	// the record's CA changes, and the old pair is dropped at once. The
	// checks are made under it too: the reconcile pass and `ca rotate
	// --now` may both get here, and the one that waited must see the
	// other's finish (applied here before it let go), not write a second
	// one (which the FSM refuses, BadRequest).
	p.custody.Lock()
	defer p.custody.Unlock()
	if p.heldCA() == nil {
		return false, nil
	}
	c, ok := p.raft.FSM().Cluster()
	if !ok || c.Rotation == nil {
		return ok, nil
	}
	if c.Rotation.Phase != state.CAPhaseReissue {
		return false, nil
	}
	if len(p.raft.FSM().OldDependents()) > 0 || len(p.caLaggers(c)) > 0 || len(p.oldTokens(c, p.now())) > 0 {
		return false, nil
	}
	if actor == "" {
		actor = p.self()
	}
	if err := p.Write(ctx, &state.RotateCA{Step: state.CAFinish, Next: c.Rotation.NextCAFingerprint, At: p.now(), Actor: actor}); err != nil {
		return false, err
	}
	if err := p.SyncRead(ctx); err == nil {
		cl, _ := p.raft.FSM().Cluster()
		p.settleKeys(cl)
	} // else the next custody pass settles the keys
	p.log.Info("CA rotation finished: the old CA is dropped", "code", codes.EventCARotated, "ca", pki.ShortID(c.Rotation.NextCAFingerprint))
	_ = p.hooks.NotifyCA()
	p.hooks.Poke()
	return true, nil
}

// awaitCA waits until lagging() is empty, notifying the members every
// caRenotify, at most the key step timeout; else CARotationStalled
// naming what lagged.
func (p *Plane) awaitCA(ctx context.Context, what string, lagging func() []string) error {
	timeout := p.cfg.KeyStepTimeout
	if timeout <= 0 {
		timeout = DefaultKeyStepTimeout
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	var lastNotify time.Time
	for {
		if p.heldCA() == nil {
			c, _ := p.raft.FSM().Cluster()
			return codes.Wrap(codes.NotCAHolder, fmt.Errorf("CA custody moved to %s during the rotation; run `meshctl ca rotate` there to resume it", p.nameOf(c.CAHolder)))
		}
		lag := lagging()
		if len(lag) == 0 {
			return nil
		}
		if time.Since(lastNotify) >= caRenotify {
			if err := p.hooks.NotifyCA(); err != nil {
				p.log.Debug("CA notification not sent", "err", err)
			}
			p.hooks.Poke()
			lastNotify = time.Now()
		}
		select {
		case <-ctx.Done():
			return codes.Wrap(codes.CARotationStalled, fmt.Errorf("waiting until %s: %w; still: %s", what, context.Cause(ctx), strings.Join(lag, ", ")))
		case <-deadline.C:
			return codes.Wrap(codes.CARotationStalled, fmt.Errorf("not yet %s after %s; still: %s", what, timeout, strings.Join(lag, ", ")))
		case <-poll.C:
		}
	}
}

// outlast is lifetime, made longer if need be so that a certificate
// signed at now expires after expires (whole seconds): a reissue under the
// next CA right after the last renewal must still expire later, as every
// renewal check requires.
func outlast(lifetime time.Duration, now, expires time.Time) time.Duration {
	if min := expires.Truncate(time.Second).Add(time.Second).Sub(now.Truncate(time.Second)); lifetime < min {
		return min
	}
	return lifetime
}

// beginRotation commits step begin with next (whose key pair is saved
// under ca/next/ already), under the custody lock: a handoff or backup
// on this node sees the record either before the rotation, or after it
// with the next pair loaded.
func (p *Plane) beginRotation(ctx context.Context, next *pki.CA, now bool, actor string) error {
	p.custody.Lock()
	defer p.custody.Unlock()
	if p.heldCA() == nil {
		return codes.Wrap(codes.NotCAHolder, errors.New("CA custody moved away from this node"))
	}
	p.AddCA(next)
	if err := p.Write(ctx, &state.RotateCA{Step: state.CABegin, Next: next.Fingerprint().String(),
		NextCACert: next.CertPEM(), NextNebulaCACert: next.NebulaCertPEM(), Now: now, NextOverlay6: next.Overlay6(),
		At: p.now(), Actor: actor}); err != nil {
		return err
	}
	p.log.Info("CA rotation begun", "code", codes.EventCARotated, "next", pki.ShortID(next.Fingerprint().String()))
	return nil
}
