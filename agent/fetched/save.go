package fetched

import (
	"encoding/json"
	"path/filepath"
	"time"

	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// The node list on disk (statedir.NodesFile): what a restarted worker
// follows until its first stream brings the whole table.

// markDirty notes the node list changed since it was saved; controls: a
// control node's record changed (saved at the next chance).
func (c *Copies) markDirty(controls bool) {
	c.follow.mu.Lock()
	c.follow.dirty = true
	c.follow.dirtyCtl = c.follow.dirtyCtl || controls
	c.follow.mu.Unlock()
}

// saveIfOwed saves the node list (0600) when it changed and the last
// save is saveEvery old or a control node's record changed, or now when
// told.
func (c *Copies) saveIfOwed(now bool) {
	f := &c.follow
	f.mu.Lock()
	if !f.dirty || (!now && !f.dirtyCtl && time.Since(f.saved) < saveEvery) {
		f.mu.Unlock()
		return
	}
	f.dirty, f.dirtyCtl, f.saved = false, false, time.Now()
	f.mu.Unlock()
	list, _ := c.Records()
	b, err := json.Marshal(list) // not indented: a quarter of a save's CPU at 10,000

	if err == nil {
		err = pki.WriteFileAtomic(filepath.Join(c.stateDir, statedir.NodesFile), b, 0o600)
	}
	if err != nil {
		c.log.Warn("could not save the node list", "code", codes.StateDir, "err", err)
	}
}
