package desired

import (
	"net/netip"
	"slices"

	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// Record is an active node as raft records it (control nodes only read
// these; workers have none).
type Record struct {
	ID, Name string
	Role     pki.Role
	Overlay  netip.Addr
	Underlay netip.AddrPort // its Nebula UDP endpoint; invalid when unknown
}

// Lighthouse is one the join response named.
type Lighthouse struct {
	Overlay  netip.Addr
	Underlay netip.AddrPort
}

// Member is a gossip member as its tags describe it.
type Member struct {
	ID, Name string
	Role     pki.Role
	Overlay  netip.Addr
	Underlay netip.AddrPort // gossip address with the Nebula port from its tags
	Status   gossip.Status
}

// Inputs are what a node knows about the others.
type Inputs struct {
	SelfName    string
	SelfOverlay netip.Addr
	Records     []Record // active records from raft, on control nodes
	Lighthouses []Lighthouse
	Members     []Member
	Gone        []string // ids of nodes that left or were removed
	Blocklist   []string // revoked certificate fingerprints
}

// Overlay is the part of the Nebula config that depends on the others.
type Overlay struct {
	Lighthouses []mesh.Lighthouse // sorted by overlay IP
	StaticHosts map[netip.Addr][]netip.AddrPort
	Blocklist   []string
}

// Peer is another node as the overlay sees it.
type Peer struct {
	Name     string
	Role     pki.Role
	Overlay  netip.Addr
	Underlay netip.AddrPort
	Gossip   gossip.Status // "" when gossip has not seen it
}

// Peers merges the sources, each peer keyed by name: raft records first,
// then the join response's lighthouses that raft does not already list by
// overlay IP, then gossip members (not gone) whose tags parse, which
// replace what the other sources said about the same node (today gossip
// tags win over records: see docs/security.md for what that trusts).
func Peers(in Inputs) map[string]Peer {
	out := map[string]Peer{}
	for _, r := range in.Records {
		if r.Name == in.SelfName {
			continue
		}
		out[r.Name] = Peer{Name: r.Name, Role: r.Role, Overlay: r.Overlay, Underlay: r.Underlay}
	}
	for _, l := range in.Lighthouses {
		if l.Overlay == in.SelfOverlay || !l.Underlay.IsValid() {
			continue
		}
		if _, known := byOverlay(out, l.Overlay); !known {
			out["lighthouse "+l.Overlay.String()] = Peer{Name: l.Overlay.String(), Role: pki.RoleControl,
				Overlay: l.Overlay, Underlay: l.Underlay}
		}
	}
	gone := map[string]bool{}
	for _, id := range in.Gone {
		gone[id] = true
	}
	for _, m := range in.Members {
		if m.Name == in.SelfName || gone[m.ID] || !m.Overlay.IsValid() || !m.Underlay.IsValid() {
			continue
		}
		if key, ok := byOverlay(out, m.Overlay); ok && key != m.Name {
			delete(out, key)
		}
		out[m.Name] = Peer{Name: m.Name, Role: m.Role, Overlay: m.Overlay, Underlay: m.Underlay, Gossip: m.Status}
	}
	return out
}

func byOverlay(ps map[string]Peer, ip netip.Addr) (string, bool) {
	for k, p := range ps {
		if p.Overlay == ip {
			return k, true
		}
	}
	return "", false
}

// Compute is the desired overlay: control nodes are lighthouses unless
// they left gossip; other nodes go into the static host map unless gossip
// says they left or failed (withdrawn until they are back); revoked
// certificates are blocked.
func Compute(in Inputs) Overlay {
	o := Overlay{StaticHosts: map[netip.Addr][]netip.AddrPort{}, Blocklist: slices.Clone(in.Blocklist)}
	for _, p := range Peers(in) {
		if !p.Overlay.IsValid() || !p.Underlay.IsValid() || p.Gossip == gossip.StatusLeft {
			continue
		}
		if p.Role == pki.RoleControl {
			o.Lighthouses = append(o.Lighthouses, mesh.Lighthouse{OverlayIP: p.Overlay, Underlay: []netip.AddrPort{p.Underlay}})
			continue
		}
		if p.Gossip == gossip.StatusFailed {
			continue
		}
		o.StaticHosts[p.Overlay] = []netip.AddrPort{p.Underlay}
	}
	slices.SortFunc(o.Lighthouses, func(a, b mesh.Lighthouse) int { return a.OverlayIP.Compare(b.OverlayIP) })
	return o
}

// AliveLighthouse is a control node gossip sees alive, if any: what a
// joining node waits for before it expects a tunnel.
func AliveLighthouse(peers map[string]Peer) (netip.Addr, bool) {
	var best netip.Addr
	for _, p := range peers {
		if p.Role == pki.RoleControl && p.Gossip == gossip.StatusAlive && (!best.IsValid() || p.Overlay.Less(best)) {
			best = p.Overlay
		}
	}
	return best, best.IsValid()
}
