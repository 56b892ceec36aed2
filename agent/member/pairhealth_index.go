package member

import (
	"net/netip"
	"sync"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
)

// Pair health's targets between changes (issue 54). A round probes
// PerRound members (16), but finding them read the whole node list three
// times and built every member's gossip view (desired.View) every 10 s:
// at 10,000 members the largest periodic work an idle worker did. The
// targets depend on three things only, and each says cheaply whether it
// changed:
//   - the node list: both cluster facts hand the same shared, read-only
//     slice until a record changes (fetched.Copies replaces it on each
//     change, control.Plane's recordList keeps it until the FSM's view
//     changes), so its identity tells;
//   - gossip: gossip.Changes is closed at the next member event or new
//     suspicion;
//   - evidence about the members gossip doubts: evidence.results counts
//     the probes whose result changed (a member gossip shows down is a
//     target while its probe has not failed, as the view shows it).
//
// So the targets are built (O(members), the old round's work) when one of
// those changed since the last build, and a round at rest asks for the
// node list once (O(1): the slice) and walks from a cursor.

// pairIndex holds the targets built last and what they were built from.
type pairIndex struct {
	mu      sync.Mutex
	built   bool
	records []control.NodeRecord // the node list they were built from (its identity)
	gossip  <-chan struct{}      // closed at the first gossip change after the build
	results uint64               // evidence.results at the build
	targets []pairTarget         // sorted by name; shared, read-only
	builds  uint64               // how many builds (tests)
}

// current reports whether the targets built still stand for records and
// results; idx.mu is held.
func (idx *pairIndex) current(records []control.NodeRecord, results uint64) bool {
	if !idx.built || idx.results != results || !sameRecords(idx.records, records) {
		return false
	}
	select {
	case <-idx.gossip:
		return false
	default:
		return true
	}
}

// sameRecords reports whether a and b are the same shared node list. The
// index holds a, so its array is not reused while it is compared.
func sameRecords(a, b []control.NodeRecord) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}

// pairTargets are the members this node probes, sorted by name: every
// active record but its own (out of the gossip pool, the control nodes'
// only: pairProbes) that its gossip view shows alive or suspect
// (one the view shows down is visible as such already), at its gossip
// address on the overlay. The same slice until the node list, gossip or
// the evidence about doubted members changes.
func (rt *Runtime) pairTargets() []pairTarget {
	records, ok := rt.cluster.Records()
	src := rt.peers()
	if !ok || src == nil || rt.removed() { // removed: its overlay is cut off (standing.go)
		return nil
	}
	idx := &rt.pairIdx
	idx.mu.Lock()
	defer idx.mu.Unlock()
	results := rt.members.evidence.changes()
	if idx.current(records, results) {
		return idx.targets
	}
	wake := src.Changes() // before reading gossip: a change while building is seen next round
	idx.built, idx.records, idx.gossip, idx.results = true, records, wake, results
	idx.targets = rt.buildPairTargets(records)
	idx.builds++
	return idx.targets
}

// buildPairTargets reads every record and the whole gossip view:
// O(members), once per change.
func (rt *Runtime) buildPairTargets(records []control.NodeRecord) []pairTarget {
	view := rt.members.gossipView()
	var out []pairTarget
	for _, r := range records {
		if r.ID == rt.facts.NodeID || !r.Active() || !rt.pairProbes(r) {
			continue
		}
		if st := view[r.Name]; st != gossip.StatusAlive && st != gossip.StatusSuspect {
			continue
		}
		ap, err := netip.ParseAddrPort(r.GossipPeer())
		if err != nil {
			continue
		}
		out = append(out, pairTarget{name: r.Name, addr: ap, control: r.RoleOf() == pki.RoleControl})
	}
	sortTargets(out) // the node list is in name order already (then id); a name twice keeps both
	return out
}
