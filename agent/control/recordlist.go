package control

import (
	"sync"

	"github.com/meshd/meshd/agent/state"
)

// recordList keeps the NodeRecords built from the FSM's shared node view
// until that view changes: Records was called on timers and on every
// reconcile (pair health's targets, the rejoin check, the DNS zone) and
// converted every record each time, O(N) a call with nothing changed
// (issue 54). The FSM hands the same sorted slice until a node changes,
// so the slice's identity says whether the records are still current.
type recordList struct {
	mu   sync.Mutex
	from []state.Node // the FSM's view the list was built from
	list []NodeRecord // shared and read-only, as a worker's copied list is
}

// get returns the records for nodes, built by build when nodes is not the
// view the list was built from.
func (l *recordList) get(nodes []state.Node, build func([]state.Node) []NodeRecord) []NodeRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.list != nil && sameView(l.from, nodes) {
		return l.list
	}
	l.from, l.list = nodes, build(nodes)
	return l.list
}

// sameView reports whether a and b are the same shared slice.
func sameView(a, b []state.Node) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}
