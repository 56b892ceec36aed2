package fetched

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/control"
)

// revocations is the worker's copy of the revocation list.
type revocations struct {
	mu      sync.Mutex
	list    control.Revocations
	fetched time.Time
}

// Revocations is the last list fetched.
func (c *Copies) Revocations() control.Revocations {
	c.revoked.mu.Lock()
	defer c.revoked.mu.Unlock()
	return c.revoked.list
}

// refreshRevocations updates the copy: at once when told the list
// changed, otherwise at most once a second. It reports whether the copy
// changed.
func (c *Copies) refreshRevocations(ctx context.Context, told bool) bool {
	c.revoked.mu.Lock()
	due := told || time.Since(c.revoked.fetched) >= time.Second
	c.revoked.mu.Unlock()
	if !due {
		return false
	}
	var l control.Revocations
	fctx, cancel := context.WithTimeout(ctx, fetchBudget)
	defer cancel()
	if err := c.client.AskSeeds(fctx, c.Seeds(), control.PathRevocations, &l); err != nil {
		c.log.Debug("revocations not refreshed", "err", err)
		return false
	}
	c.revoked.mu.Lock()
	defer c.revoked.mu.Unlock()
	if held := len(c.revoked.list.Fingerprints); len(l.Fingerprints) < held {
		// The list only grows (its length is its version): a shorter one
		// comes from a control node behind the cluster (one cut off, or
		// healed but not yet heard from its leader, answers from its own
		// state). Keep ours, and fetch again on the next pass.
		c.log.Debug("revocations from a control node behind; kept ours", "got", len(l.Fingerprints), "held", held)
		return false
	}
	changed := !slices.Equal(l.Fingerprints, c.revoked.list.Fingerprints) || !slices.Equal(l.Gone, c.revoked.list.Gone)
	c.revoked.list, c.revoked.fetched = l, time.Now()
	return changed
}
