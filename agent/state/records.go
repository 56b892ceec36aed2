package state

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
)

// records is the node records as of one applied index, built once after
// a change by the first read that needs it and shared, read-only, by
// every read until the next change (issue 54 item 2): sorted as Nodes
// returns them, with an index by id and one by held name (the record
// of a name that is not former). Each record is a deep copy of the
// FSM's, every slice clipped: an Apply never writes into a view, and a
// reader's append to a record's slice copies instead of writing into it.
//
// Nothing writes into a records once built. Readers get the sorted
// slice itself (Nodes, View) or a record by value (Node, NodeByName):
// the slice, and the byte and string slices of every record, are shared
// with every other reader, and a reader that changes them must copy
// first (slices.Clone). FSM.TestOnlyGuardShared checks, in tests, that
// none does.
type records struct {
	sorted []Node
	byID   map[string]int // index into sorted
	byName map[string]int // index into sorted, of the record holding the name
	// unheard is the ids of the active records whose Unheard is set
	// (unheard.go), sorted.
	unheard []string
}

// buildRecords is the records of nodes (the FSM's map, read under its
// lock).
func buildRecords(nodes map[string]Node) *records {
	out := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		n = n.clone()
		n.NebulaPublicKey, n.NebulaCert, n.TLSCert = slices.Clip(n.NebulaPublicKey), slices.Clip(n.NebulaCert), slices.Clip(n.TLSCert)
		n.TLSPublicKey, n.Retired, n.Groups = slices.Clip(n.TLSPublicKey), slices.Clip(n.Retired), slices.Clip(slices.Clone(n.Groups))
		n.Routes, n.NebulaRoutes, n.NebulaRouted = slices.Clip(n.Routes), slices.Clip(n.NebulaRoutes), slices.Clip(n.NebulaRouted)
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Node) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	r := &records{sorted: slices.Clip(out), byID: make(map[string]int, len(out)), byName: make(map[string]int, len(out)), unheard: unheardOf(out)}
	for i, n := range out {
		r.byID[n.ID] = i
		if _, taken := r.byName[n.Name]; !taken && !n.State.Former() {
			r.byName[n.Name] = i // at most one record holds a name; were there two, the first by id
		}
	}
	return r
}

// node is the record with id.
func (r *records) node(id string) (Node, bool) {
	i, ok := r.byID[id]
	if !ok {
		return Node{}, false
	}
	return r.sorted[i], true
}

// holder is the record that holds name: not former.
func (r *records) holder(name string) (Node, bool) {
	i, ok := r.byName[name]
	if !ok {
		return Node{}, false
	}
	return r.sorted[i], true
}

// recordsLocked is the current records, built if a change dropped them;
// the caller holds f.mu (read or write). Built under the read lock: no
// Apply runs until it is released, so readers racing here build the
// same records and either may store them.
func (f *FSM) recordsLocked() *records {
	if r := f.view.Load(); r != nil {
		return r
	}
	r := buildRecords(f.s.Nodes)
	f.view.Store(r)
	return r
}

// records is the current records: without the lock while they are
// built (an Apply drops them under the write lock, after its change, so
// records loaded without the lock are those of a whole index).
func (f *FSM) records() *records {
	if r := f.view.Load(); r != nil {
		return r
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.recordsLocked()
}

// guardLocked, under TestOnlyGuardShared, checks the shared records
// against the state they were built from before a change touches it: a
// reader that wrote into them is reported. The caller holds f.mu for
// writing.
func (f *FSM) guardLocked() {
	if f.guard == nil {
		return
	}
	if err := f.checkSharedLocked(); err != nil {
		f.guard(err)
	}
}

// checkSharedLocked compares the shared records, if built, with records
// built afresh from the state; the caller holds f.mu. A difference means
// a reader wrote into what Nodes, View, Node or NodeByName shared.
func (f *FSM) checkSharedLocked() error {
	r := f.view.Load()
	if r == nil {
		return nil
	}
	fresh := buildRecords(f.s.Nodes)
	if !reflect.DeepEqual(r.sorted, fresh.sorted) {
		for i := range min(len(r.sorted), len(fresh.sorted)) {
			if !reflect.DeepEqual(r.sorted[i], fresh.sorted[i]) {
				return fmt.Errorf("a reader changed the shared record of %s (%s): %+v, the state holds %+v",
					fresh.sorted[i].Name, fresh.sorted[i].ID, r.sorted[i], fresh.sorted[i])
			}
		}
		return fmt.Errorf("a reader changed the shared list of records: %d records, the state holds %d", len(r.sorted), len(fresh.sorted))
	}
	return nil
}

// TestOnlyGuardShared makes every later Apply and Restore check, before
// it changes the state, that no reader wrote into the records the reads
// shared (Nodes, View, Node, NodeByName): report is told each that one
// did. CheckShared checks the same at once (a test's cleanup).
func (f *FSM) TestOnlyGuardShared(report func(error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.guard = report
}

// TestOnlyCheckShared is the check TestOnlyGuardShared makes, now.
func (f *FSM) TestOnlyCheckShared() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.checkSharedLocked()
}
