package member

import (
	"cmp"
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/fetched"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
)

// recordLiveness is a worker's liveness read from its node list (issue 54
// item 3, step iii; liveness.go): the control nodes decide whether a
// worker is heard and the watch stream brings their verdict in each
// record (Unheard). A worker is alive while its record is active and
// Unheard is zero, failed since Unheard otherwise; a record that departed
// (left, removed, failed join) shows its member left, as serf shows a
// member that left until it is reaped; a record the list no longer holds
// is gone, as a reaped member. This node is alive. A control node's
// liveness comes from the gossip pool (pool), which the control nodes stay
// in; while the workers are still in the pool too, what a member
// advertises beyond its record (version, NAT, keyring and CA reports) is
// read from its pool entry, found by the record's id and overlay address.
//
// Cost: it follows the node list's change log (fetched.RecordsSince), so
// a change costs the records it changed; only the first list, or one
// that fell behind the log, is read whole. No timer: it reads the log
// when the watch stream applied a change (recordsChanged) and when a
// reader asks. Members and Statuses copy every member, as gossip's do:
// their readers read on a change (Changes).
type recordLiveness struct {
	list interface {
		RecordsSince(since uint64) fetched.RecordDelta
	}
	pool   livenessSource // gossip: the control nodes' liveness; nil without one
	selfID string
	now    func() time.Time
	bell   bell // Changes
	// poolWake is the pool's Changes taken at construction: a change of
	// the pool before run starts still rings.
	poolWake <-chan struct{}

	mu     sync.Mutex
	ver    uint64 // the list's version read
	byID   map[string]heardMember
	byName map[string]string            // name -> id, of the members listed
	order  []nameID                     // the members by name (then id): Members' order, kept per change
	bulk   bool                         // a whole list is being read: order is built after it
	tags   map[string]map[string]string // by id: the tags its record gives (shared by Members' answers: read only)
	// cache is Members' answer until a record's member or the pool
	// changes (poolSeen, the pool's Changes when it was built, closed):
	// readers that look again without a change copy a slice, not every
	// member's tags.
	cache    []gossip.Member
	cacheOK  bool
	poolSeen <-chan struct{}

	converted atomic.Uint64 // records read from the list (the test's count)
	copies    atomic.Uint64 // Members and Statuses calls
}

// heardMember is one member as its record describes it.
type heardMember struct {
	name    string
	role    pki.Role
	overlay netip.Addr
	port    uint16 // its gossip port (the record's SerfAddr)
	nport   int
	nat     NAT // the NAT its record reports (a worker out of the pool: poolfacts.go); "" unknown
	status  gossip.Status
	since   time.Time // when it stopped being alive: Unheard, or when this node saw its record depart
}

func newRecordLiveness(list interface {
	RecordsSince(uint64) fetched.RecordDelta
}, pool livenessSource, selfID string, now func() time.Time) *recordLiveness {
	l := &recordLiveness{list: list, pool: pool, selfID: selfID, now: now,
		byID: map[string]heardMember{}, byName: map[string]string{}, tags: map[string]map[string]string{}}
	if pool != nil {
		l.poolWake = pool.Changes()
	}
	return l
}

// run rings Changes at each change of the pool (a control node's status,
// or while workers are still in the pool, a tag they advertise) until ctx
// ends.
func (l *recordLiveness) run(ctx context.Context) {
	if l.pool == nil {
		return
	}
	changed := l.poolWake
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		changed = l.pool.Changes() // before ringing: a change while the woken read is not lost
		l.bell.ring()
	}
}

// sync reads the node list's changes since the version last read, and
// rings Changes when a member's liveness or what it advertises changed.
func (l *recordLiveness) sync() {
	l.mu.Lock()
	changed := l.syncLocked()
	if changed {
		l.cacheOK = false
	}
	l.mu.Unlock()
	if changed {
		l.bell.ring()
	}
}

func (l *recordLiveness) syncLocked() bool {
	d := l.list.RecordsSince(l.ver)
	if d.Version == l.ver && !d.Whole {
		return false
	}
	l.ver = d.Version
	changed := false
	if d.Whole { // the order is sorted once at the end, not kept per record
		l.bulk = true
		keep := make(map[string]bool, len(d.All))
		for _, r := range d.All {
			keep[r.ID] = true
			changed = l.put(r) || changed
		}
		for id := range l.byID {
			if !keep[id] {
				l.del(id)
				changed = true
			}
		}
		l.bulk = false
		l.order = l.order[:0]
		for id, h := range l.byID {
			l.order = append(l.order, nameID{h.name, id})
		}
		slices.SortFunc(l.order, nameID.cmp)
		return changed
	}
	for _, r := range d.Put {
		changed = l.put(r) || changed
	}
	for _, id := range d.Del {
		changed = l.del(id) || changed
	}
	return changed
}

// put brings the member of record r up to date; true when it changed.
func (l *recordLiveness) put(r control.NodeRecord) bool {
	l.converted.Add(1)
	old, had := l.byID[r.ID]
	var h heardMember
	switch st := r.StateOf(); {
	case r.Active():
		h = heardMember{name: r.Name, role: r.RoleOf(), status: gossip.StatusAlive, since: r.Unheard, nport: r.NebulaPort, nat: NAT(r.NAT)}
		h.overlay, _ = netip.ParseAddr(r.OverlayIP)
		if i := strings.LastIndexByte(r.SerfAddr, ':'); i >= 0 {
			p, _ := strconv.ParseUint(r.SerfAddr[i+1:], 10, 16)
			h.port = uint16(p)
		}
		if !r.Unheard.IsZero() && r.ID != l.selfID {
			h.status = gossip.StatusFailed
		}
	case st.Former() && had: // a departed record carries its state alone: the rest is what it was
		h = old
		if h.status != gossip.StatusLeft {
			h.status, h.since = gossip.StatusLeft, l.now()
		}
	default: // joining, or departed before this node knew it: not a member
		return l.del(r.ID)
	}
	if had && old == h {
		return false
	}
	if had && old.name != h.name {
		delete(l.byName, old.name)
		l.unlist(nameID{old.name, r.ID})
	}
	if (!had || old.name != h.name) && !l.bulk {
		k := nameID{h.name, r.ID}
		i, _ := slices.BinarySearchFunc(l.order, k, nameID.cmp)
		l.order = slices.Insert(l.order, i, k)
	}
	l.byID[r.ID], l.byName[h.name] = h, r.ID
	tags := map[string]string{tagID: r.ID, tagRole: string(h.role), tagOverlay: h.overlay.String()}
	if h.nport != 0 {
		tags[tagNebulaPort] = strconv.Itoa(h.nport)
	}
	if h.nat != "" {
		tags[tagNAT] = string(h.nat)
	}
	l.tags[r.ID] = tags
	return true
}

// del forgets the member with id (its record is no longer listed).
func (l *recordLiveness) del(id string) bool {
	h, ok := l.byID[id]
	if !ok {
		return false
	}
	delete(l.byID, id)
	delete(l.tags, id)
	l.unlist(nameID{h.name, id})
	if l.byName[h.name] == id {
		delete(l.byName, h.name)
	}
	return true
}

// nameID orders the members as gossip does, by name (then id: a name
// on two records keeps both).
type nameID struct{ name, id string }

func (a nameID) cmp(b nameID) int {
	return cmp.Or(strings.Compare(a.name, b.name), strings.Compare(a.id, b.id))
}

// unlist takes k out of the order: O(log members) to find, a move of the
// rest.
func (l *recordLiveness) unlist(k nameID) {
	if l.bulk {
		return
	}
	if i, ok := slices.BinarySearchFunc(l.order, k, nameID.cmp); ok {
		l.order = slices.Delete(l.order, i, i+1)
	}
}

// Changes is closed at the next change of a record's liveness, or of the
// pool.
func (l *recordLiveness) Changes() <-chan struct{} { return l.bell.wait() }

// Members are the members on record, sorted by name: workers with the
// status their record gives, control nodes with the pool's (absent while
// the pool does not list them; their record's without a pool: a worker
// out of it, outofpool.go), each with its pool entry's tags beside its
// record's.
func (l *recordLiveness) Members() []gossip.Member {
	l.copies.Add(1)
	l.sync()
	l.mu.Lock()
	if l.cacheOK && (l.poolSeen == nil || !closed(l.poolSeen)) {
		defer l.mu.Unlock()
		return slices.Clone(l.cache)
	}
	l.mu.Unlock()
	var seen <-chan struct{}
	if l.pool != nil {
		seen = l.pool.Changes() // before reading the pool: a change while reading makes the cache stale
	}
	pool := l.poolByID()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]gossip.Member, 0, len(l.byID))
	for _, k := range l.order {
		id, h := k.id, l.byID[k.id]
		m := gossip.Member{Name: h.name, Addr: netip.AddrPortFrom(h.overlay, h.port), Status: h.status, Tags: l.tags[id]}
		p, inPool := pool[id]
		if inPool = inPool && p.Addr.Addr().Unmap() == h.overlay; inPool { // what it advertises besides: its pool entry's tags, the record's winning
			m.Tags = make(map[string]string, len(p.Tags)+len(l.tags[id]))
			for k, v := range p.Tags {
				m.Tags[k] = v
			}
			for k, v := range l.tags[id] {
				m.Tags[k] = v
			}
		}
		if h.role == pki.RoleControl && id != l.selfID && h.status != gossip.StatusLeft && l.pool != nil {
			if !inPool {
				continue // a control node's liveness is the pool's
			}
			m.Status = p.Status
		}
		out = append(out, m)
	}
	l.cache, l.cacheOK, l.poolSeen = out, true, seen
	return slices.Clone(out)
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// poolByID is the pool's members by their id tag.
func (l *recordLiveness) poolByID() map[string]gossip.Member {
	if l.pool == nil {
		return nil
	}
	ms := l.pool.Members()
	out := make(map[string]gossip.Member, len(ms))
	for _, m := range ms {
		out[m.Tags[tagID]] = m
	}
	return out
}

// Statuses are the members' statuses by overlay address: a control
// node's the pool's (its record's without a pool) (a member this node's probes suspect shows suspect),
// every other member's its record's, or suspect while its record is heard
// and this node's own probes (the pool's, while workers are in it)
// suspect it: the hint that moves a relayed tunnel off a relay early
// (relaydown.go), which the control nodes' verdict, seconds later, would
// not give.
func (l *recordLiveness) Statuses() map[netip.Addr]gossip.Status {
	l.copies.Add(1)
	l.sync()
	var pool map[netip.Addr]gossip.Status
	if l.pool != nil {
		pool = l.pool.Statuses()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[netip.Addr]gossip.Status, len(l.byID))
	for id, h := range l.byID {
		st := h.status
		if h.role == pki.RoleControl && id != l.selfID && st != gossip.StatusLeft && l.pool != nil {
			var ok bool
			if st, ok = pool[h.overlay]; !ok {
				continue
			}
		} else if st == gossip.StatusAlive && id != l.selfID && pool[h.overlay] == gossip.StatusSuspect {
			st = gossip.StatusSuspect
		}
		out[h.overlay] = st
	}
	return out
}

// LastSeen is when member name stopped being alive: the control nodes'
// Unheard, or when this node saw its record depart; a control node's is
// the pool's.
func (l *recordLiveness) LastSeen(name string) (time.Time, bool) {
	l.sync()
	l.mu.Lock()
	h, ok := l.byID[l.byName[name]]
	l.mu.Unlock()
	switch {
	case !ok:
		return time.Time{}, false
	case h.role == pki.RoleControl && h.status != gossip.StatusLeft:
		if l.pool == nil {
			return time.Time{}, false
		}
		return l.pool.LastSeen(name)
	case h.status == gossip.StatusAlive:
		return time.Time{}, false
	}
	return h.since, true
}
