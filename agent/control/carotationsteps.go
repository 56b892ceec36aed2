package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

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
