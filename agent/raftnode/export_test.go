package raftnode

// TakeSnapshot makes raft write a snapshot now (tests only).
func (n *Node) TakeSnapshot() error { return n.r.Snapshot().Error() }
