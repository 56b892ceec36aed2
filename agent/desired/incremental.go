package desired

import (
	"net/netip"
	"slices"

	"github.com/meshd/meshd/mesh"
)

// Tracker keeps Compute's overlay for a node's inputs up to date one
// change at a time (issue 54 item 2): Update finds the records that
// changed since the last call and gives the mesh.Change they make to the
// static hosts, lighthouses, relays, roaming peers and blocklist, for
// mesh.Apply, instead of Compute over every record and a comparison of
// the whole config. Gossip members take no part: Compute reads none of
// their fields (raft decides the overlay, gossip reports liveness).
//
// Reset starts it from a whole set of inputs; Update then follows inputs
// that differ from the last ones in records, gone ids and blocklist.
// Anything else (this node's name, addresses or NAT, no node list yet,
// two records with one id, name or overlay address, which Compute
// resolves by the order of a map) makes Update say no: the caller takes
// the whole-config path and calls Reset again. Overlay is what Compute
// gives for the last inputs (TestTrackerMatchesCompute holds the two
// equal over random sequences of changes).
//
// Cost per Update: one comparison per record, in order with the last
// inputs' records (walk; a record unchanged since the last call shares
// its strings with the last copy, so comparing it is a few pointer
// checks), a map lookup for a record out of that order, plus the work of
// the records that changed; a lighthouse, relay or roaming list is copied
// only when it changed. Not safe for concurrent use.
type Tracker struct {
	ok   bool
	self trackedSelf
	gen  uint64              // the Update pass, stamped on the records it saw
	recs map[string]*tracked // by id: the last inputs' records
	prev []Record            // the last inputs' Records, as handed over (walk)
	gone map[string]bool     // the last inputs' Gone
	last struct{ gone, block []string }
	host map[netip.Addr][]netip.AddrPort // the static host map
	// owner is the record id that each overlay address a counted record
	// contributes belongs to, names the id that holds each name: a second
	// owner is a tangle Update does not unpick.
	owner       map[netip.Addr]string
	names       map[string]string
	lighthouses []mesh.Lighthouse   // sorted by overlay IP
	relays      []netip.Addr        // sorted; kept when SelfNoNAT (Overlay drops them then)
	roaming     []netip.Addr        // sorted
	paths       []netip.Addr        // the IPv4 underlay of every lighthouse and static host, sorted, with repeats
	carriers    map[string]*tracked // the records with routes (Routes)
}

// trackedSelf are the inputs about this node that change every record's
// contribution: when one differs, Update says no.
type trackedSelf struct {
	name    string
	overlay netip.Addr
	ov6     netip.Prefix
	noNAT   bool
}

func selfOf(in Inputs) trackedSelf {
	return trackedSelf{name: in.SelfName, overlay: in.SelfOverlay, ov6: in.SelfOverlay6, noNAT: in.SelfNoNAT}
}

// tracked is one record as last seen, with what it contributes.
type tracked struct {
	rec     Record
	index   int    // its place in the inputs' Records (0 after UpdateChanged); -1 once gone
	seen    uint64 // the pass that looked it up by id (walk)
	touched uint64 // the pass that put it among the changed
	part    part   // what it contributes now
}

// Reset starts the tracker from in; false (and Update says no until the
// next Reset) when Update cannot follow in: no node list yet, or a
// tangle (see Tracker). O(records).
func (t *Tracker) Reset(in Inputs) bool {
	n := len(in.Records)
	*t = Tracker{self: selfOf(in), recs: make(map[string]*tracked, n), gone: make(map[string]bool, len(in.Gone)),
		host: make(map[netip.Addr][]netip.AddrPort, n), owner: make(map[netip.Addr]string, n), names: make(map[string]string, n),
		carriers: map[string]*tracked{}}
	if !in.RecordsKnown {
		return false
	}
	for _, id := range in.Gone {
		t.gone[id] = true
	}
	t.last.gone, t.last.block = slices.Clone(in.Gone), slices.Clone(in.Blocklist)
	t.prev = in.Records
	var ch change
	for i, r := range in.Records {
		if t.recs[r.ID] != nil {
			return false
		}
		e := &tracked{rec: r, index: i}
		t.recs[r.ID] = e
		t.carry(e)
		if !t.put(e, t.contribution(r, t.counts(r)), &ch) {
			return false
		}
	}
	t.ok = true
	return true
}

// Update brings the tracker to in and returns the change from the last
// inputs; ok is false when it cannot (see Tracker: the caller computes
// the whole overlay and calls Reset). Empty(change) means nothing of the
// overlay changed. It keeps in.Records until the next call (walk), so the
// caller hands a slice it no longer changes: the agent reads a fresh copy
// per pass. Reset keeps its records likewise.
func (t *Tracker) Update(in Inputs) (mesh.Change, bool) {
	if !t.ok || !in.RecordsKnown || selfOf(in) != t.self {
		t.ok = false
		return mesh.Change{}, false
	}
	dirty, was := t.goneChanged(in) // records whose contribution may change, and what each contributed
	touch := func(e *tracked) {
		if e.touched != t.gen {
			e.touched = t.gen
			dirty, was = append(dirty, e), append(was, e.part)
		}
	}
	if !t.walk(in.Records, touch) {
		t.ok = false // an id twice
		return mesh.Change{}, false
	}
	return t.finish(in, dirty, was)
}

// UpdateChanged is Update for a caller that knows which records changed
// since the last call (issue 54 item 2: a worker's node list keeps a log
// of them): put are the records added or changed (each id once), del the
// ids no longer on record; in.Records is not read, the other inputs are
// as Update reads them. O(records changed) (and O(gone) when the gone
// ids changed), where Update compares every record. The next Update
// looks every record up by id (the tracker no longer holds a list in the
// source's order to walk).
func (t *Tracker) UpdateChanged(in Inputs, put []Record, del []string) (mesh.Change, bool) {
	if !t.ok || !in.RecordsKnown || selfOf(in) != t.self {
		t.ok = false
		return mesh.Change{}, false
	}
	dirty, was := t.goneChanged(in)
	touch := func(e *tracked) {
		if e.touched != t.gen {
			e.touched = t.gen
			dirty, was = append(dirty, e), append(was, e.part)
		}
	}
	for i := range put {
		r := &put[i]
		e := t.recs[r.ID]
		switch {
		case e == nil:
			e = &tracked{rec: *r}
			t.recs[r.ID] = e
			touch(e)
		case e.index < 0 || !sameRecord(&e.rec, r):
			touch(e)
			e.rec = *r
		}
		e.index = 0
		t.carry(e)
	}
	for _, id := range del {
		if e := t.recs[id]; e != nil {
			touch(e)
			delete(t.recs, id)
			e.index = -1
			t.carry(e)
		}
	}
	t.prev = nil
	return t.finish(in, dirty, was)
}

// goneChanged starts an Update pass: the records whose gone mark
// changed are the first dirty ones, with what each contributed.
func (t *Tracker) goneChanged(in Inputs) (dirty []*tracked, was []part) {
	t.gen++
	touch := func(e *tracked) {
		if e.touched != t.gen {
			e.touched = t.gen
			dirty, was = append(dirty, e), append(was, e.part)
		}
	}
	if !slices.Equal(in.Gone, t.last.gone) {
		now := make(map[string]bool, len(in.Gone))
		for _, id := range in.Gone {
			now[id] = true
		}
		for id := range now {
			if e := t.recs[id]; e != nil && !t.gone[id] {
				touch(e)
			}
		}
		for id := range t.gone {
			if e := t.recs[id]; e != nil && !now[id] {
				touch(e)
			}
		}
		t.gone, t.last.gone = now, slices.Clone(in.Gone)
	}
	return dirty, was
}

// finish ends an Update pass: the dirty records' contributions moved,
// the change they make, the blocklist's.
func (t *Tracker) finish(in Inputs, dirty []*tracked, was []part) (mesh.Change, bool) {
	var ch change
	next := make([]part, len(dirty))
	for i, e := range dirty { // every old contribution out first: two records may swap an address
		t.carry(e)
		next[i] = t.contribution(e.rec, e.index >= 0 && t.counts(e.rec))
		if !next[i].equal(was[i]) {
			t.drop(e.rec.ID, was[i], &ch)
			e.part = part{}
		}
	}
	for i, e := range dirty {
		if !next[i].equal(was[i]) && !t.put(e, next[i], &ch) {
			t.ok = false
			return mesh.Change{}, false
		}
	}
	out := ch.mesh(t)
	if !slices.Equal(in.Blocklist, t.last.block) {
		out.Block, out.Unblock = setDiff(in.Blocklist, t.last.block), setDiff(t.last.block, in.Blocklist)
		t.last.block = slices.Clone(in.Blocklist)
	}
	return out, true
}

// Record is the record on record with id that is not gone, as the last
// inputs hold it: what a Matcher finds (UnmatchedBy), in O(1).
func (t *Tracker) Record(id string) (*Record, bool) {
	e := t.recs[id]
	if e == nil || e.index < 0 || t.gone[id] {
		return nil, false
	}
	return &e.rec, true
}

// Empty reports whether ch changes nothing.
func Empty(ch mesh.Change) bool {
	return len(ch.StaticHosts) == 0 && ch.Lighthouses == nil && ch.Relays == nil && ch.Roaming == nil &&
		len(ch.Block) == 0 && len(ch.Unblock) == 0
}

// counts reports whether r contributes to the overlay: not this node's
// name (Peers), not gone.
func (t *Tracker) counts(r Record) bool { return r.Name != t.self.name && !t.gone[r.ID] }

// carry keeps e among the carriers while it is on record with routes.
func (t *Tracker) carry(e *tracked) {
	if e.index >= 0 && len(e.rec.Routes) > 0 {
		t.carriers[e.rec.ID] = e
	} else {
		delete(t.carriers, e.rec.ID)
	}
}

// sameRecord reports whether a and b are the same record, routes too (by pointer: a Record is 184 bytes, and walk compares every one).
func sameRecord(a, b *Record) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Role == b.Role && a.Overlay == b.Overlay && a.Overlay6 == b.Overlay6 &&
		a.Underlay == b.Underlay && a.LegacyGossip == b.LegacyGossip && a.Relay == b.Relay && slices.Equal(a.Routes, b.Routes)
}

// setDiff is what of a b lacks.
func setDiff(a, b []string) []string {
	have := make(map[string]bool, len(b))
	for _, s := range b {
		have[s] = true
	}
	var out []string
	for _, s := range a {
		if !have[s] {
			out = append(out, s)
		}
	}
	return out
}

// Overlay is Compute's overlay for the last inputs Reset or Update took,
// copied: O(peers), for tests and checks.
func (t *Tracker) Overlay() Overlay {
	o := Overlay{StaticHosts: make(map[netip.Addr][]netip.AddrPort, len(t.host)), Blocklist: slices.Clone(t.last.block)}
	for ip, a := range t.host {
		o.StaticHosts[ip] = a
	}
	o.Lighthouses, o.Relays, o.Roaming = computeList(t.lighthouses), t.relayList(), computeList(t.roaming)
	return o
}

// Routes is Routes(in, t.Overlay()) for the inputs Update just took, at
// the cost of the records that carry routes.
func (t *Tracker) Routes(in Inputs) Routed {
	var carriers []*tracked
	for _, e := range t.carriers {
		if !t.gone[e.rec.ID] {
			carriers = append(carriers, e)
		}
	}
	slices.SortFunc(carriers, func(a, b *tracked) int { return carrierOrder(a.rec, b.rec) })
	return routesOf(in, func(yield func(Record) bool) {
		for _, e := range carriers {
			if !yield(e.rec) {
				return
			}
		}
	}, t.paths)
}
