package agent

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/pki"
)

// revocationList is what every node's overlay must refuse: certificate
// fingerprints of removed nodes, and the ids of nodes that are gone (left
// or removed) so they are withdrawn from the static host map.
type revocationList struct {
	Fingerprints []string `json:"fingerprints"`
	Gone         []string `json:"gone"`
}

// workerRevocations is a worker's copy, fetched from a control node.
type workerRevocations struct {
	mu      sync.Mutex
	list    revocationList
	fetched time.Time
}

// revocations is the current list: from raft on a control node, the last
// fetched copy on a worker.
func (rt *runtime) revocations() revocationList {
	if rt.raft != nil {
		return rt.raftRevocations()
	}
	rt.revoked.mu.Lock()
	defer rt.revoked.mu.Unlock()
	return rt.revoked.list
}

func (rt *runtime) raftRevocations() revocationList {
	var l revocationList
	for _, r := range rt.raft.FSM().Revocations() {
		l.Fingerprints = append(l.Fingerprints, r.Fingerprint)
	}
	for _, n := range rt.raft.FSM().Nodes() {
		if n.State == state.NodeRemoved || n.State == state.NodeLeft {
			l.Gone = append(l.Gone, n.ID)
		}
	}
	return l
}

// refreshRevocations updates a worker's copy: at once when told the list
// changed, otherwise at most once a second.
func (rt *runtime) refreshRevocations(ctx context.Context, told bool) {
	if rt.raft != nil {
		return
	}
	rt.revoked.mu.Lock()
	due := told || time.Since(rt.revoked.fetched) >= time.Second
	rt.revoked.mu.Unlock()
	if !due {
		return
	}
	var l revocationList
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rt.askSeeds(fctx, internalRevocationsPath, &l); err != nil {
		rt.log.Debug("revocations not refreshed", "err", err)
		return
	}
	rt.revoked.mu.Lock()
	rt.revoked.list, rt.revoked.fetched = l, time.Now()
	rt.revoked.mu.Unlock()
}

// handleRevocations serves the list to any member.
func (rt *runtime) handleRevocations(w http.ResponseWriter, r *http.Request) {
	if _, err := requirePeer(r, pki.RoleWorker, pki.RoleControl); err != nil {
		writeInternalError(w, err)
		return
	}
	if err := rt.freshRead(r.Context()); err != nil {
		writeInternalError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rt.raftRevocations())
}
