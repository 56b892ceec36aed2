package config

// meshd patch 5 (PATCHES.md, "Apply a membership change without a
// reload"): the embedder applies a few keys itself and keeps Settings in
// step, so that the next reload compares the new config with what runs.

// Edit runs f with the reload lock held: f may change Settings in place,
// and no reload runs meanwhile. f must not reload.
func (c *C) Edit(f func()) {
	c.reloadLock.Lock()
	defer c.reloadLock.Unlock()
	f()
}
