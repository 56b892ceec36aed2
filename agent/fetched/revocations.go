package fetched

import (
	"sync"

	"github.com/meshd/meshd/agent/control"
)

// revocations is the worker's copy of the revocation list.
type revocations struct {
	mu   sync.Mutex
	list control.Revocations
}

// Revocations is the copy the watch stream keeps (watch.go).
func (c *Copies) Revocations() control.Revocations {
	c.revoked.mu.Lock()
	defer c.revoked.mu.Unlock()
	return c.revoked.list
}
