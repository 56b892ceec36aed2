package member

import (
	"bytes"
	"context"
	"path/filepath"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// runTLSRenewal keeps TLS leaves fresh. On the CA holder it signs every
// node's leaf that is past 2/3 of its lifetime (control.RenewTLSCerts); on
// every node it adopts its own renewed leaf once its current one is due,
// and during a CA rotation's reissue its reissued Nebula cert (certs.go).
// It wakes when the next leaf falls due (at the latest every interval),
// so a seconds-long lifetime renews on time without a fast reconcile tick.
func (rn *renewal) runTLSRenewal(ctx context.Context, interval time.Duration) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-rn.ca.wake: // a CA rotation changed phase (carotation.go)
			timer.Stop() // Go 1.23 timers: no stale value after Stop; Reset below
		}
		var next time.Time
		if rn.renewOthers != nil { // a control node
			next = rn.renewOthers(ctx)
		}
		if own := rn.adoptRenewedTLS(ctx); !own.IsZero() && (next.IsZero() || own.Before(next)) {
			next = own
		}
		if rn.ca.reissuePending(true) {
			// A CA rotation reissues this node's Nebula cert too. In the
			// pool the CA holder's notices wake the follow loop until it is
			// adopted; out of the pool (a worker's default) nothing would
			// before the follow loop's tick (interval), so it is looked for
			// here each second, as the TLS leaf is, only while this node's
			// own cert is under the old CA: one fetch a second per pending
			// node, for the seconds the CA holder takes to sign them all.
			rn.adoptRenewedCert(ctx)
			if soon := rn.now().Add(time.Second); next.IsZero() || soon.Before(next) {
				next = soon
			}
		}
		wait := interval
		if !next.IsZero() {
			wait = min(max(next.Sub(rn.now()), 20*time.Millisecond), interval)
		}
		timer.Reset(wait)
	}
}

// adoptRenewedTLS picks up a renewed TLS leaf once this node's current one
// is past 2/3 of its lifetime (clusterFacts.OwnTLSCert: its own raft
// record on a control node, GET /v1/self/tls-cert on a worker). The leaf must certify this node's own key, chain to the cluster
// CA and name this node (pki.CheckRenewedLeaf); it is written atomically
// to the state dir and swapped into the live identity, so the listeners
// on 7300 and 7301 and every client present it from their next handshake
// on, without restarting raft or gossip. It returns when to look again.
func (rn *renewal) adoptRenewedTLS(ctx context.Context) time.Time {
	rn.idMu.Lock()
	defer rn.idMu.Unlock()
	own, leaf := rn.identity(), rn.live.Leaf()
	issued, expires := leaf.NotBefore.Add(pki.LeafBackdate), leaf.NotAfter
	now := rn.now()
	if !control.RenewDue(issued, expires, now, rn.facts.NodeID) && !rn.ca.reissuePending(false) {
		if rn.ca.reissueWatch() {
			return now.Add(time.Second) // a CA rotation: look again soon
		}
		return control.RenewAt(issued, expires, rn.facts.NodeID)
	}
	retry := now.Add(control.RenewRetry(issued, expires))
	if rn.ca.reissueWatch() && retry.After(now.Add(time.Second)) {
		retry = now.Add(time.Second) // a CA rotation reissues: the new leaf is due any moment
	}
	next, err := rn.cluster.OwnTLSCert(ctx)
	if err != nil {
		rn.log.Debug("renewed TLS leaf not fetched", "err", err)
		return retry
	}
	if len(next) == 0 || bytes.Equal(next, own.Cert) {
		return retry // the CA holder has not renewed it yet
	}
	nl, err := pki.CheckRenewedLeaf(own, next, now)
	if err != nil {
		rn.log.Warn("renewed TLS leaf refused; keeping the current one", "code", codes.OrInternal(err), "err", err)
		return retry
	}
	if err := pki.SaveTLSLeaf(filepath.Join(rn.stateDir, statedir.IdentityDir), next); err != nil {
		rn.log.Warn("renewed TLS leaf not saved", "code", codes.StateDir, "err", err)
		return retry
	}
	id := *own
	id.Cert = next
	if err := rn.live.Swap(&id); err != nil {
		rn.log.Warn("renewed TLS leaf not adopted", "code", codes.Internal, "err", err)
		return retry
	}
	rn.ca.saveHeld() // a CA rotation: the leaf under the old CA, for old tokens (carotation.go)
	// Kept-alive connections still present the old leaf (accepted as the
	// previous one); new ones present the new leaf.
	rn.client.CloseIdle()
	rn.log.Info("adopted renewed TLS leaf", "code", codes.EventTLSRenewed, "expires", nl.NotAfter)
	return control.RenewAt(nl.NotBefore.Add(pki.LeafBackdate), nl.NotAfter, rn.facts.NodeID)
}
