package member

import (
	"context"
	"encoding/json"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
)

// notifyKeys is the gossip notification that the gossip keyring changed:
// members then fetch it over mTLS (control nodes read raft). The keys
// themselves never travel over gossip.
const notifyKeys = "meshd-keys"

// followKeys brings this node's gossip keyring in line with the
// cluster's (clusterFacts.GossipKeys: raft's cluster record on a control
// node; GET /v1/gossip/keys on a worker, at once when told, otherwise at
// most once a second).
func (kr *keyring) followKeys(ctx context.Context, told bool) {
	if gk, ok := kr.cluster.GossipKeys(ctx, told); ok && len(gk.Keys) > 0 {
		kr.applyKeys(gk.Keys, gk.Rotated)
	}
}

// applyKeys installs keys (primary first) on this node's own gossip
// keyring if they differ from what it runs, saves them in node.json
// (0600) so a restart uses them, and has runKeyReports report the new
// keyring in its tags. Only the reconcile loop calls it.
func (kr *keyring) applyKeys(keys [][]byte, rotated time.Time) {
	id := state.KeyringID(keys)
	kr.mu.Lock()
	if !rotated.IsZero() {
		kr.rotated = rotated
	}
	same := id == kr.id
	kr.mu.Unlock()
	if same {
		return
	}
	if kr.gossip != nil { // out of the pool (outofpool.go) the keys are only kept, for a later start in it
		if err := kr.gossip.SetKeys(keys); err != nil {
			kr.log.Warn("gossip keyring not changed", "code", codes.OrInternal(err), "err", err)
			return
		}
	}
	kr.facts.GossipKeys = keys // read only by startGossip, before the loops run
	if err := statedir.Save(kr.stateDir, kr.facts); err != nil {
		kr.log.Warn("gossip keyring changed but not saved; a restart uses the old keys", "code", codes.OrInternal(err), "err", err)
	}
	kr.mu.Lock()
	kr.id = id
	kr.mu.Unlock()
	select {
	case kr.report <- struct{}{}:
	default: // a report is already due; it reads the latest id
	}
	kr.log.Info("gossip keyring changed", "keys", len(keys), "primary", state.KeyID(keys[0]), "keyring", id)
}

// runKeyReports reports the keyring this node runs in its gossip tags
// each time applyKeys changes it, until ctx ends. It is a goroutine of its
// own because serf's SetTags waits for memberlist to call the tags'
// broadcast finished, and memberlist sometimes never does (the update has
// reached the members, which see it at once, but SetTags still waits out
// serf's 5 s BroadcastTimeout). Done on the reconcile loop, as it was,
// that wait held up the loop's next pass: a rotation step waited 5 s for
// the node's next keyring, and revocations and overlay changes waited with
// it, so `meshctl remove` took 5-12 s in the soak (e2e.TestSoak) instead of
// well under a second.
func (kr *keyring) runKeyReports(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-kr.report:
		}
		kr.mu.Lock()
		id := kr.id
		kr.mu.Unlock()
		if kr.gossip.LocalMember().Tags[tagKeyring] == id {
			continue
		}
		if err := kr.gossip.UpdateTags(map[string]string{tagKeyring: id}); err != nil {
			kr.log.Warn("gossip keyring not reported, or its broadcast not confirmed", "keyring", id, "err", err)
		}
	}
}

// answerKeyring answers a rotation's keyring query once this node runs
// the asked keyring (applyKeys has installed it), with its node ID and
// its signature of both bound to the query's nonce (pki.Attest); a
// node that does not get there before the query's deadline stays silent.
// Unlike the tag report, the answer goes straight to the asker and waits
// for no broadcast.
func (kr *keyring) answerKeyring(ctx context.Context, q gossip.Query) {
	var want control.KeyringQuery
	if json.Unmarshal(q.Payload, &want) != nil || want.Keyring == "" {
		return
	}
	ctx, cancel := context.WithDeadline(ctx, q.Deadline)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	kr.wake() // a control node reads the new keyring from raft on its next follow pass
	for {
		kr.mu.Lock()
		id := kr.id
		kr.mu.Unlock()
		if id == want.Keyring {
			a := control.KeyringQuery{Keyring: id, ID: kr.facts.NodeID}
			if len(want.Nonce) > 0 { // signed, so no other member can answer for this one (issue 27)
				sig, err := kr.identity().Attest(pki.AttestKeyring, want.Nonce, control.KeyringStatement(a.ID, id))
				if err != nil {
					kr.log.Warn("keyring answer not signed", "code", codes.OrInternal(err), "err", err)
					return
				}
				a.Sig = sig
			}
			b, _ := json.Marshal(a)
			if err := q.Respond(b); err != nil {
				kr.log.Debug("keyring answer not sent", "err", err)
			}
			return
		}
		select {
		case <-ctx.Done():
			kr.log.Debug("keyring not reached within the query's deadline", "want", want.Keyring, "have", id)
			return
		case <-tick.C:
		}
	}
}

// keyStatus is the key state `meshctl status` shows: how many keys, the
// primary's short id, and when the cluster last finished a rotation.
func (kr *keyring) keyStatus() (n int, primary string, rotated time.Time) {
	keys := kr.gossip.Keys()
	kr.mu.Lock()
	defer kr.mu.Unlock()
	return len(keys), state.KeyID(keys[0]), kr.rotated
}
