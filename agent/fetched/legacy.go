package fetched

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/meshd/meshd/agent/control"
)

// A control node of an earlier release serves no watch stream (GET
// /v1/watch answers 404: control.ErrNotServed). A worker joining such a
// cluster, or one whose control nodes are upgraded after it, follows the
// cluster as workers of that release did: the whole node list after a
// read index (GET /v1/nodes?strict=1) and the revocation list, at once
// when told of a change, otherwise at most once a second
// (e2e.TestNetcheckOlderCluster: a new worker joins a cluster of the
// previous release). It asks for a stream again every legacyRetry, and
// the first one that opens ends the polling.

// legacyRetry spaces the stream attempts while every control node asked
// served none.
const legacyRetry = time.Minute

// legacy reports whether the worker polls: every control node it asked
// since the last stream that opened served no watch.
func (c *Copies) legacy() bool {
	c.follow.mu.Lock()
	defer c.follow.mu.Unlock()
	return c.follow.notServed > 0 && c.follow.notServed >= len(c.Seeds())
}

// notServedBy counts a control node that served no watch (err is
// control.ErrNotServed) or, on any other outcome, starts the count over.
// It returns how long to wait before the next stream attempt, or 0 for
// the caller's own backoff.
func (c *Copies) notServedBy(err error, opened bool) time.Duration {
	c.follow.mu.Lock()
	defer c.follow.mu.Unlock()
	switch {
	case opened:
		c.follow.notServed = 0
	case errors.Is(err, control.ErrNotServed):
		c.follow.notServed++
	}
	if c.follow.notServed > 0 && c.follow.notServed >= len(c.Seeds()) {
		return legacyRetry
	}
	return 0
}

// legacyRefresh fetches the node list and the revocations as a worker of
// the earlier release did, paced as strictChange is.
func (c *Copies) legacyRefresh(ctx context.Context, told bool) (changed bool, err error) {
	f := &c.follow
	f.strictMu.Lock()
	defer f.strictMu.Unlock()
	if !f.strictDue(told) {
		return false, c.NodeListErr()
	}
	fctx, cancel := context.WithTimeout(ctx, fetchBudget)
	defer cancel()
	var list []control.NodeRecord
	err = c.client.AskSeeds(fctx, c.Seeds(), control.PathNodes+control.StrictQuery, &list)
	if err == nil && !slices.ContainsFunc(list, func(r control.NodeRecord) bool { return r.ID == c.nodeID }) {
		err = errors.New("a node list without this node (from a control node behind the leader); not adopted")
	}
	c.setListErr(err)
	if err != nil {
		c.log.Debug("node list not refreshed (a cluster without the watch)", "err", err)
		return false, err
	}
	f.strictAt = time.Now()
	slices.SortFunc(list, recordOrder) // as the list is kept: a control node's order must not read as a change
	old, _ := c.Records()
	if changed = !slices.EqualFunc(list, old, sameRecord); changed {
		c.adoptList(list)
		c.markDirty(true)
		c.saveIfOwed(true)
	}
	var rev control.Revocations
	if err := c.client.AskSeeds(fctx, c.Seeds(), control.PathRevocations, &rev); err != nil {
		c.log.Debug("revocations not refreshed (a cluster without the watch)", "err", err)
		return changed, nil
	}
	c.revoked.mu.Lock()
	defer c.revoked.mu.Unlock()
	if rev.Len() < c.revoked.list.Len() {
		return changed, nil // from a control node behind the cluster: the list only grows
	}
	if !slices.Equal(rev.Fingerprints, c.revoked.list.Fingerprints) || !slices.Equal(rev.Gone, c.revoked.list.Gone) {
		c.revoked.list, changed = rev, true
	}
	return changed, nil
}

func sameRecord(a, b control.NodeRecord) bool {
	j1, _ := json.Marshal(a)
	j2, _ := json.Marshal(b)
	return string(j1) == string(j2)
}
