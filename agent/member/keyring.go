package member

import (
	"context"
	"encoding/json"
	"maps"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/gossip"
)

// notifyKeys is the gossip notification that the gossip keyring changed:
// members then fetch it over mTLS (control nodes read raft). The keys
// themselves never travel over gossip.
const notifyKeys = "meshd-keys"

// keyState is the gossip keyring this node runs.
type keyState struct {
	mu      sync.Mutex
	id      string    // state.KeyringID of the keys applied
	rotated time.Time // when the cluster last finished a rotation, as last heard
}

// followKeys brings this node's gossip keyring in line with the
// cluster's (clusterFacts.GossipKeys: raft's cluster record on a control
// node; GET /v1/gossip/keys on a worker, at once when told, otherwise at
// most once a second).
func (rt *Runtime) followKeys(ctx context.Context, told bool) {
	if gk, ok := rt.cluster.GossipKeys(ctx, told); ok && len(gk.Keys) > 0 {
		rt.applyKeys(gk.Keys, gk.Rotated)
	}
}

// applyKeys installs keys (primary first) on this node's own gossip
// keyring if they differ from what it runs, saves them in node.json
// (0600) so a restart uses them, and has runKeyReports report the new
// keyring in its tags. Only the reconcile loop calls it.
func (rt *Runtime) applyKeys(keys [][]byte, rotated time.Time) {
	id := state.KeyringID(keys)
	rt.keys.mu.Lock()
	if !rotated.IsZero() {
		rt.keys.rotated = rotated
	}
	same := id == rt.keys.id
	rt.keys.mu.Unlock()
	if same {
		return
	}
	if err := rt.gossip.SetKeys(keys); err != nil {
		rt.log.Warn("gossip keyring not changed", "code", codes.OrInternal(err), "err", err)
		return
	}
	rt.facts.GossipKeys = keys // read only by startGossip, before the loops run
	if err := statedir.Save(rt.stateDir, rt.facts); err != nil {
		rt.log.Warn("gossip keyring changed but not saved; a restart uses the old keys", "code", codes.OrInternal(err), "err", err)
	}
	rt.keys.mu.Lock()
	rt.keys.id = id
	rt.keys.mu.Unlock()
	select {
	case rt.keyReport <- struct{}{}:
	default: // a report is already due; it reads the latest id
	}
	rt.log.Info("gossip keyring changed", "keys", len(keys), "primary", state.KeyID(keys[0]), "keyring", id)
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
func (rt *Runtime) runKeyReports(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-rt.keyReport:
		}
		rt.keys.mu.Lock()
		id := rt.keys.id
		rt.keys.mu.Unlock()
		tags := maps.Clone(rt.gossip.LocalMember().Tags)
		if tags[tagKeyring] == id {
			continue
		}
		tags[tagKeyring] = id
		if err := rt.gossip.SetTags(tags); err != nil {
			rt.log.Warn("gossip keyring not reported, or its broadcast not confirmed", "keyring", id, "err", err)
		}
	}
}

// answerKeyring answers a rotation's keyring query once this node runs
// the asked keyring (applyKeys has installed it), with its node ID; a
// node that does not get there before the query's deadline stays silent.
// Unlike the tag report, the answer goes straight to the asker and waits
// for no broadcast.
func (rt *Runtime) answerKeyring(ctx context.Context, q gossip.Query) {
	var want control.KeyringQuery
	if json.Unmarshal(q.Payload, &want) != nil || want.Keyring == "" {
		return
	}
	ctx, cancel := context.WithDeadline(ctx, q.Deadline)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	rt.wake() // a control node reads the new keyring from raft on its next follow pass
	for {
		rt.keys.mu.Lock()
		id := rt.keys.id
		rt.keys.mu.Unlock()
		if id == want.Keyring {
			b, _ := json.Marshal(control.KeyringQuery{Keyring: id, ID: rt.facts.NodeID})
			if err := q.Respond(b); err != nil {
				rt.log.Debug("keyring answer not sent", "err", err)
			}
			return
		}
		select {
		case <-ctx.Done():
			rt.log.Debug("keyring not reached within the query's deadline", "want", want.Keyring, "have", id)
			return
		case <-tick.C:
		}
	}
}

// keyStatus is the key state `meshctl status` shows: how many keys, the
// primary's short id, and when the cluster last finished a rotation.
func (rt *Runtime) keyStatus() (n int, primary string, rotated time.Time) {
	keys := rt.gossip.Keys()
	rt.keys.mu.Lock()
	defer rt.keys.mu.Unlock()
	return len(keys), state.KeyID(keys[0]), rt.keys.rotated
}
