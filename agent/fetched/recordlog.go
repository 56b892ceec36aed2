package fetched

import (
	"cmp"
	"slices"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/pki"
)

// A worker's node list as its consumers read it per change (issue 54 item
// 2): the records by id, a version that each change of the list bumps, and
// a log of which ids each recent version changed. A consumer that keeps
// the version it last read (the overlay loop, the DNS zone) asks
// RecordsSince and gets only the records that changed since, O(changes);
// only one that fell behind the log (or a whole table that replaced the
// list) reads every record. The list in order (Records) is built only
// when someone asks for it, from the last one built and the records
// changed since: copying 10,000 records for every watch line (5 MB) was
// most of a worker's CPU per change at 10,000 members
// (member.BenchmarkWorkerSim).

// logMostIDs bounds the ids the change log holds: a consumer more than
// this many changed records behind reads the whole list.
const logMostIDs = 4096

// changeLog is the versions of the node list and the ids each changed.
type changeLog struct {
	ver     uint64     // the list's version: 0 before the first list
	floor   uint64     // the oldest version the log answers from (a whole list's, or the one before its oldest entry)
	entries []logEntry // oldest first
	ids     int        // ids held in entries
}

type logEntry struct {
	ver uint64
	ids []string
}

// whole notes a list replaced whole: the log starts again from it.
func (l *changeLog) whole() {
	l.ver++
	l.floor, l.entries, l.ids = l.ver, nil, 0
}

// add notes a change of ids; the oldest entries go once the log holds
// more than logMostIDs ids.
func (l *changeLog) add(ids []string) {
	l.ver++
	l.entries = append(l.entries, logEntry{ver: l.ver, ids: ids})
	l.ids += len(ids)
	for l.ids > logMostIDs && len(l.entries) > 1 {
		l.ids -= len(l.entries[0].ids)
		l.floor = l.entries[0].ver
		l.entries = slices.Delete(l.entries, 0, 1)
	}
}

// since is the ids changed after version v (repeats possible); ok is
// false when the log no longer holds them all.
func (l *changeLog) since(v uint64) (ids []string, ok bool) {
	if v < l.floor || v > l.ver {
		return nil, false
	}
	i, _ := slices.BinarySearchFunc(l.entries, v+1, func(e logEntry, v uint64) int { return cmp.Compare(e.ver, v) })
	for _, e := range l.entries[i:] {
		ids = append(ids, e.ids...)
	}
	return ids, true
}

// RecordDelta is what changed in the node list since a version a
// consumer holds (RecordsSince).
type RecordDelta struct {
	Version uint64 // the list's version now: ask from it next time
	Known   bool   // a list is held (false on a worker before its first)
	// Whole: the changes since are not held (or a whole list replaced
	// the list); All is then every record, in the list's order, and Put
	// and Del are empty.
	Whole bool
	All   []control.NodeRecord
	Put   []control.NodeRecord // the records added or changed since, as they are now (each once)
	Del   []string             // the ids no longer listed
}

// Empty reports whether nothing changed.
func (d RecordDelta) Empty() bool { return !d.Whole && len(d.Put) == 0 && len(d.Del) == 0 }

// RecordsSince is what changed in the node list after version since (0:
// none held yet, so the whole list): O(records changed), unless the log
// no longer holds them.
func (c *Copies) RecordsSince(since uint64) RecordDelta {
	n := &c.nodes
	n.mu.Lock()
	defer n.mu.Unlock()
	d := RecordDelta{Version: n.log.ver, Known: n.have}
	if since == n.log.ver && since != 0 {
		return d
	}
	ids, ok := n.log.since(since)
	if !ok || since == 0 {
		d.Whole, d.All = true, n.built()
		return d
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if r, ok := n.recs[id]; ok {
			d.Put = append(d.Put, r)
		} else {
			d.Del = append(d.Del, id)
		}
	}
	return d
}

// Record is the record with id, if listed: O(1).
func (c *Copies) Record(id string) (control.NodeRecord, bool) {
	c.nodes.mu.Lock()
	defer c.nodes.mu.Unlock()
	r, ok := c.nodes.recs[id]
	return r, ok
}

// setWhole makes recs the whole list (n.mu held): a whole table, a saved
// list, a legacy fetch. O(records).
func (n *nodeList) setWhole(recs map[string]control.NodeRecord) {
	n.recs, n.have, n.stale = recs, true, nil
	n.list = sortedRecords(recs)
	n.builds++
	n.log.whole()
	n.controls, n.gone = nil, nil
	for _, r := range n.list {
		if r.RoleOf() == pki.RoleControl {
			n.controls = append(n.controls, r)
		}
		if r.StateOf().Former() {
			n.gone = append(n.gone, r.ID)
		}
	}
	slices.Sort(n.gone)
}

// apply puts and deletes records (n.mu held), O(changed records), and
// reports whether a control node's record was among them. The list in
// order is built again only when asked (built).
func (n *nodeList) apply(put []control.NodeRecord, del []string) (controls bool) {
	if n.recs == nil {
		n.recs = map[string]control.NodeRecord{}
	}
	ids := make([]string, 0, len(put)+len(del))
	goneMoved := false
	note := func(id string) (old control.NodeRecord, had bool) {
		old, had = n.recs[id]
		if n.stale == nil {
			n.stale = map[string]*control.NodeRecord{}
		}
		if _, ok := n.stale[id]; !ok {
			var was *control.NodeRecord // what the built list holds for id
			if had {
				was = &old
			}
			n.stale[id] = was
		}
		ids = append(ids, id)
		if had && old.RoleOf() == pki.RoleControl {
			controls = true
		}
		return old, had
	}
	for _, r := range put {
		old, had := note(r.ID)
		n.recs[r.ID] = r
		controls = controls || r.RoleOf() == pki.RoleControl
		goneMoved = goneMoved || (had && old.StateOf().Former()) != r.StateOf().Former()
	}
	for _, id := range del {
		if _, ok := n.recs[id]; !ok {
			continue
		}
		old, _ := note(id)
		delete(n.recs, id)
		goneMoved = goneMoved || old.StateOf().Former()
	}
	n.have = true
	n.log.add(ids)
	if goneMoved {
		n.gone = n.goneIDs(ids) // a new slice: the last one was handed out
	}
	if controls {
		n.controls = n.controlRecords()
	}
	return controls
}

// goneIDs is n.gone with the ids changed brought up to date: O(gone).
func (n *nodeList) goneIDs(changed []string) []string {
	out := slices.Clone(n.gone)
	for _, id := range changed {
		i, found := slices.BinarySearch(out, id)
		r, ok := n.recs[id]
		former := ok && r.StateOf().Former()
		switch {
		case former && !found:
			out = slices.Insert(out, i, id)
		case !former && found:
			out = slices.Delete(out, i, i+1)
		}
	}
	return out
}

// controlRecords are the control nodes' records in the list's order:
// O(records), only when a control node's record changed.
func (n *nodeList) controlRecords() []control.NodeRecord {
	var out []control.NodeRecord
	for _, r := range n.recs {
		if r.RoleOf() == pki.RoleControl {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, recordOrder)
	return out
}

// built is the list in recordOrder (n.mu held), built from the last one
// and the records changed since when any did: one copy of the list,
// only when asked.
func (n *nodeList) built() []control.NodeRecord {
	if len(n.stale) == 0 {
		return n.list
	}
	var gone, in []control.NodeRecord
	for id, was := range n.stale {
		if was != nil {
			gone = append(gone, *was)
		}
		if r, ok := n.recs[id]; ok {
			in = append(in, r)
		}
	}
	n.list, n.stale = resorted(n.list, gone, in), nil
	n.builds++
	return n.list
}
