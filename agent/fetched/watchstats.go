package fetched

// WatchStats are what the follower has received: for status, metrics and
// the scale harness.
type WatchStats struct {
	Index   uint64 // the last change applied
	From    string // the control node streaming ("" while none)
	Streams int    // streams opened
	Full    int    // full tables received (first contact, or behind a floor)
	Deltas  int    // changes received that carried something
	Lines   int    // every line, heartbeats included
	Bytes   int64  // the lines' bytes
	Strict  int    // strict changes asked (no healthy stream)
	// ListBuilds are the times the node list in order was built whole
	// or copied again (recordlog.go): a whole table, or a read of the
	// whole list after changes; a change alone builds none.
	ListBuilds int
}

// Stats are the follower's counters.
func (c *Copies) Stats() WatchStats {
	c.follow.mu.Lock()
	st := c.follow.stats
	c.follow.mu.Unlock()
	c.nodes.mu.Lock()
	st.ListBuilds = c.nodes.builds
	c.nodes.mu.Unlock()
	return st
}
