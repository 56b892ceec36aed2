package member

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/gossip"
)

// notifyRevoked is the gossip notification that the revocation list
// changed: workers fetch it at once instead of on their next tick.
const notifyRevoked = "meshd-revoked"

// answerQueries answers the gossip queries members ask until ctx ends or
// gossip stops. Each is answered on its own goroutine, within its
// deadline.
func (ms *membership) answerQueries(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case q, ok := <-ms.gossip.Queries():
			if !ok {
				return
			}
			var answer func(context.Context, gossip.Query)
			switch q.Name {
			case control.RevocationQueryName:
				answer = ms.answerRevocation
			case control.KeyringQueryName:
				answer = ms.keys.answerKeyring
			default:
				continue
			}
			ms.wg.Add(1)
			go func() {
				defer ms.wg.Done()
				answer(ctx, q)
			}()
		}
	}
}

// answerRevocation acknowledges a removal's revocation query only once
// this node holds the asked revocation list version (a control node after
// a read index through the leader; a worker after fetching the list at
// once) AND its running Nebula blocks every fingerprint of that list. A
// node that cannot get there before the query's deadline stays silent,
// and the remover lists it as pending.
func (ms *membership) answerRevocation(ctx context.Context, q gossip.Query) {
	var want control.RevocationQuery
	if json.Unmarshal(q.Payload, &want) != nil || want.Version <= 0 {
		return
	}
	ctx, cancel := context.WithDeadline(ctx, q.Deadline)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	fresh := false
	for {
		if !fresh {
			_, _ = ms.cluster.Refresh(ctx, true) // a read index, or a fetch; the list's length is its version
			fresh = len(ms.cluster.Revocations().Fingerprints) >= want.Version
			if fresh {
				ms.poke() // reconcile now with the list just read
			}
		}
		if fresh && ms.ov.blocksAll(ms.cluster.Revocations().Fingerprints) {
			b, _ := json.Marshal(control.RevocationQuery{Version: want.Version})
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
	for _, fp := range fps {
		if !slices.Contains(applied, fp) {
			return false
		}
	}
	return true
}
