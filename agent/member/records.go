package member

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/codes"
)

// records are the other nodes' active records for desired.Compute (the
// cluster's facts: raft on a control node, the node list on a worker).
// ok is false on a worker before its first list.
func (rt *Runtime) records() ([]desired.Record, bool) {
	list, ok := rt.cluster.Records()
	var out []desired.Record
	for _, n := range list {
		if n.ID == rt.facts.NodeID || !n.Active() {
			continue
		}
		ovl, _ := netip.ParseAddr(n.OverlayIP)
		r := desired.Record{ID: n.ID, Name: n.Name, Role: n.RoleOf(), Overlay: ovl}
		if ip, err := netip.ParseAddr(n.Underlay); err == nil && n.NebulaPort > 0 && n.NebulaPort <= 65535 {
			r.Underlay = netip.AddrPortFrom(ip, uint16(n.NebulaPort))
		}
		out = append(out, r)
	}
	return out, ok
}

// seeds are the control nodes this node asks, in the order it asks them.
func (rt *Runtime) seeds() []string { return rt.cluster.Seeds() }

// reportIgnored logs each gossip member desired ignored, once per member
// per change of what it claims, with codes.GossipMemberIgnored.
func (rt *Runtime) reportIgnored(in desired.Inputs) {
	if !in.RecordsKnown {
		return
	}
	now := map[string]string{}
	for _, ig := range desired.Unmatched(in) {
		now[ig.Name] = fmt.Sprintf("%s|%s", ig.ID, ig.Reason)
	}
	rt.ignoredMu.Lock()
	defer rt.ignoredMu.Unlock()
	for name, why := range now {
		if rt.ignored[name] == why {
			continue
		}
		id, reason, _ := strings.Cut(why, "|")
		rt.log.Warn("gossip member ignored: raft decides, gossip only reports liveness", "code", codes.GossipMemberIgnored,
			"member", name, "member_id", id, "reason", reason)
	}
	rt.ignored = now
}
