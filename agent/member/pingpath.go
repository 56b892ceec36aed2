package member

import (
	"net/netip"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/mesh"
)

// pingPath is the path `meshctl ping` prints for a probe of the node at
// overlay address ovl: the tunnel Nebula's host map holds for it right
// after the probe (the one the probe went through, or the one its
// handshake built), nil when there is none. A relay is named from this
// node's view of the records (raft's on a control node, the node list on
// a worker).
func (rt *Runtime) pingPath(ovl netip.Addr) *apitype.PingPath {
	if rt.mesh == nil {
		return nil
	}
	tn, ok := rt.mesh.TunnelTo(ovl)
	if !ok {
		return nil
	}
	list, _ := rt.cluster.Records()
	return pathOf(tn, list)
}

// pathOf is the path of tunnel tn: relayed through its first relay (the
// one Nebula sends through), named by the record holding that overlay
// address, or direct to its underlay address; nil when it has neither.
func pathOf(tn mesh.Tunnel, records []control.NodeRecord) *apitype.PingPath {
	switch {
	case tn.Relayed && len(tn.Relays) > 0:
		relay := tn.Relays[0]
		return &apitype.PingPath{Relay: nameAt(relay, records), RelayIP: relay.String()}
	case tn.Remote.IsValid():
		return &apitype.PingPath{Direct: tn.Remote.String()}
	}
	return nil
}

// nameAt is the name of the node whose record holds overlay address ip
// (an active record first: a former node's address can be taken again),
// else ip itself.
func nameAt(ip netip.Addr, records []control.NodeRecord) string {
	name := ""
	for _, r := range records {
		if a, err := netip.ParseAddr(r.OverlayIP); err != nil || a != ip {
			continue
		}
		if r.Active() {
			return r.Name
		}
		if name == "" {
			name = r.Name
		}
	}
	if name == "" {
		return ip.String()
	}
	return name
}
