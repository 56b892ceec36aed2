package agent

import (
	"context"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/control"
)

// workerRevocations is a worker's copy, fetched from a control node.
type workerRevocations struct {
	mu      sync.Mutex
	list    control.Revocations
	fetched time.Time
}

// revocations is the current list: from raft on a control node, the last
// fetched copy on a worker.
func (rt *runtime) revocations() control.Revocations {
	if rt.ctl != nil {
		return rt.ctl.Revocations()
	}
	rt.revoked.mu.Lock()
	defer rt.revoked.mu.Unlock()
	return rt.revoked.list
}

// refreshRevocations updates a worker's copy: at once when told the list
// changed, otherwise at most once a second.
func (rt *runtime) refreshRevocations(ctx context.Context, told bool) {
	if rt.ctl != nil {
		return
	}
	rt.revoked.mu.Lock()
	due := told || time.Since(rt.revoked.fetched) >= time.Second
	rt.revoked.mu.Unlock()
	if !due {
		return
	}
	var l control.Revocations
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rt.client.AskSeeds(fctx, rt.seeds(), control.PathRevocations, &l); err != nil {
		rt.log.Debug("revocations not refreshed", "err", err)
		return
	}
	rt.revoked.mu.Lock()
	defer rt.revoked.mu.Unlock()
	if held := len(rt.revoked.list.Fingerprints); len(l.Fingerprints) < held {
		// The list only grows (its length is its version): a shorter one
		// comes from a control node behind the cluster (one cut off, or
		// healed but not yet heard from its leader, answers from its own
		// state). Keep ours, and fetch again on the next pass.
		rt.log.Debug("revocations from a control node behind; kept ours", "got", len(l.Fingerprints), "held", held)
		return
	}
	rt.revoked.list, rt.revoked.fetched = l, time.Now()
}
