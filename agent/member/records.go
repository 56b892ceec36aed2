package member

import (
	"net/netip"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/agent/fetched"
)

// records are the other nodes' active records for desired.Compute (the
// cluster's facts: raft on a control node, the node list on a worker).
// A record whose gossip address is not its overlay IP was made by a
// release that gossiped on the underlay: that address is its
// LegacyGossip.
// ok is false on a worker before its first list.
func (nd *node) records() ([]desired.Record, bool) {
	list, ok := nd.cluster.Records()
	return nd.recordList(list), ok
}

// recordsOf is records from a whole list RecordsSince handed.
func (nd *node) recordsOf(d fetched.RecordDelta) []desired.Record { return nd.recordList(d.All) }

// recordList is records from list.
func (nd *node) recordList(list []control.NodeRecord) []desired.Record {
	out := make([]desired.Record, 0, len(list)) // grown by append, it cost a third of a pass at 10,000 (BenchmarkOverlayInputs)
	for _, n := range list {
		if n.ID == nd.facts.NodeID || !n.Active() {
			continue
		}
		out = append(out, asRecord(n))
	}
	return out
}

// asRecord is n as desired reads it.
func asRecord(n control.NodeRecord) desired.Record {
	ovl, _ := netip.ParseAddr(n.OverlayIP)
	r := desired.Record{ID: n.ID, Name: n.Name, Role: n.RoleOf(), Overlay: ovl, Relay: n.Relay, Routes: recordRoutes(n.Routes)}
	if n.OverlayIP6 != "" { // absent: invalid (parsing "" allocates its error, once per record and pass)
		r.Overlay6, _ = netip.ParseAddr(n.OverlayIP6)
	}
	if ip, err := netip.ParseAddr(n.Underlay); err == nil && n.NebulaPort > 0 && n.NebulaPort <= 65535 {
		r.Underlay = netip.AddrPortFrom(ip, uint16(n.NebulaPort))
	}
	r.LegacyGossip = control.LegacyGossip(ovl, n.SerfAddr) // admitted by a release that gossiped on the underlay
	return r
}

// changedRecords are a delta's records as desired reads them: the
// active records of others added or changed (put), and the ids no
// longer among them (del: deleted, or no longer active).
func (nd *node) changedRecords(d fetched.RecordDelta) (put []desired.Record, del []string) {
	for _, n := range d.Put {
		if n.ID == nd.facts.NodeID || !n.Active() {
			del = append(del, n.ID)
			continue
		}
		put = append(put, asRecord(n))
	}
	return put, append(del, d.Del...)
}

// seeds are the control nodes this node asks, in the order it asks them.
func (nd *node) seeds() []string { return nd.cluster.Seeds() }
