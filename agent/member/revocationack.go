package member

import (
	"context"
	"encoding/json"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
)

// notifyRevoked is the gossip notification that the revocation list
// changed: workers fetch it at once instead of on their next tick.
const notifyRevoked = "meshd-revoked"

// revocationMargin is how far beyond the revocation list it holds a
// node still takes a query's version to be real. The version is the
// list's length; a removal adds the fingerprints of the removed node's
// certificates (a handful), and a node is at most one fetch behind
// (notified at once, otherwise it fetches every second). A version
// further ahead names a list nobody holds: it is refused without a fetch.
const revocationMargin = 256

// revocationRefetch spaces a query's fetches when the first one did not
// bring the asked version (it failed, or reached a control node behind).
const revocationRefetch = time.Second

// answerRevocation acknowledges a removal's revocation query only once
// this node holds the asked revocation list version (a control node after
// a read index through the leader; a worker after fetching the list) AND
// its running Nebula blocks every fingerprint of that list. A node that
// cannot get there before the query's deadline stays silent, and the
// remover lists it as pending. It fetches at once only when the version
// is ahead of its list, at most once a second after that, and refuses a
// version beyond revocationMargin without fetching (queries.go).
func (ms *membership) answerRevocation(ctx context.Context, q gossip.Query) {
	var want control.RevocationQuery
	if json.Unmarshal(q.Payload, &want) != nil || want.Version <= 0 {
		return
	}
	if have := ms.cluster.Revocations().Len(); want.Version > have+revocationMargin {
		ms.log.Debug("revocation query for a version far beyond this node's list; not answered",
			"version", want.Version, "have", have)
		return
	}
	ctx, cancel := context.WithDeadline(ctx, q.Deadline)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var fetched time.Time
	for {
		rev := ms.cluster.Revocations()
		fps := rev.Fingerprints
		fresh := rev.Len() >= want.Version
		if !fresh && time.Since(fetched) >= revocationRefetch {
			fetched = time.Now()
			_, _ = ms.cluster.Refresh(ctx, true) // a read index, or a fetch; the list's length is its version
			if rev = ms.cluster.Revocations(); rev.Len() >= want.Version {
				fps = rev.Fingerprints
				fresh = true
				ms.poke() // reconcile now with the list just read
			}
		}
		if fresh && ms.ov.blocksAll(fps) {
			a := control.RevocationQuery{Version: want.Version}
			if len(want.Nonce) > 0 { // signed: no other member can acknowledge for this one (issue 27)
				a.ID = ms.facts.NodeID
				sig, err := ms.identity().Attest(pki.AttestRevoked, want.Nonce, control.RevokedStatement(a.ID, a.Version))
				if err != nil {
					ms.log.Warn("revocation acknowledgement not signed", "err", err)
					return
				}
				a.Sig = sig
			}
			b, _ := json.Marshal(a)
			if err := q.Respond(b); err != nil {
				ms.log.Debug("revocation acknowledgement not sent", "err", err)
			}
			return
		}
		select {
		case <-ctx.Done():
			ms.log.Debug("revocation not acknowledged within the query's deadline", "version", want.Version, "fresh", fresh)
			return
		case <-tick.C:
		}
	}
}

// blocksAll reports whether the Nebula config last applied blocks every
// fingerprint in fps.
func (ov *overlay) blocksAll(fps []string) bool {
	applied := ov.applied().Blocklist
	blocked := make(map[string]bool, len(applied))
	for _, fp := range applied {
		blocked[fp] = true
	}
	for _, fp := range fps {
		if !blocked[fp] {
			return false
		}
	}
	return true
}
