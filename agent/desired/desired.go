package desired

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// Record is an active node as raft records it: read from the FSM on a
// control node, from the node list fetched over mTLS on a worker.
type Record struct {
	ID, Name string
	Role     pki.Role
	Overlay  netip.Addr
	// Overlay6 is its IPv6 overlay address in a dual-stack cluster;
	// invalid otherwise.
	Overlay6 netip.Addr
	Underlay netip.AddrPort // its Nebula UDP endpoint; invalid when unknown
	// LegacyGossip is the underlay address raft recorded as the node's
	// gossip address when a release before gossip moved onto the overlay
	// admitted it (invalid otherwise): such a node, while it still runs
	// that release, gossips from there. See Member.
	LegacyGossip netip.Addr
	// Relay: the node offers itself as a Nebula relay (`relay: true`,
	// recorded in raft).
	Relay bool
	// Routes are the prefixes it is approved to carry (routes.go).
	Routes []RecordRoute
}

// Lighthouse is one the join response named.
type Lighthouse struct {
	Overlay  netip.Addr
	Underlay netip.AddrPort
}

// Member is a gossip member as its tags describe it. It counts (its
// Status and version are used) only when ID, Name, Role and Overlay all
// match an active record AND it gossips from that record's overlay
// address (Addr): gossip rides the overlay, so Nebula has authenticated
// every packet from that address with the certificate of the node the
// record names, and a key holder elsewhere cannot speak for it. A node
// admitted by an earlier release counts from its recorded underlay gossip
// address too (Record.LegacyGossip), for a rolling upgrade.
type Member struct {
	ID, Name string
	Role     pki.Role
	Overlay  netip.Addr
	Addr     netip.Addr // the address it gossips from (memberlist's, as it advertises it)
	Status   gossip.Status
}

// Inputs are what a node knows about the others.
type Inputs struct {
	SelfName    string
	SelfOverlay netip.Addr
	// SelfOverlay6 is the IPv6 overlay network of this node's own
	// certificate (invalid for a v1 certificate): peers' IPv6 addresses
	// inside it go into the static host map too (Compute).
	SelfOverlay6 netip.Prefix
	// Records are the other nodes' active records. RecordsKnown is false
	// only on a worker that has not received its first node list: then,
	// and only then, Lighthouses (from the join response) stand in.
	Records      []Record
	RecordsKnown bool
	Lighthouses  []Lighthouse
	Members      []Member
	Gone         []string // ids of nodes that left or were removed (a stale list's records are dropped too)
	Blocklist    []string // revoked certificate fingerprints
	// SelfNoNAT: this node's path check found no NAT in front of it
	// (every control node saw its own address). Then it offers no relays:
	// any peer reaches it directly (a peer behind a NAT sends first, and
	// Nebula's punch answers one this node sends first), and Nebula asks
	// every relay a target offers at each handshake attempt, so that 50
	// joins at once over relays every node offered made 100,000 relay
	// requests on one worker in two minutes (docs/performance.md).
	SelfNoNAT bool
	// SelfRoutes are the prefixes this node is approved to carry (it
	// forwards them), SelfAsked those it asks for (it is never routed
	// them through the tunnel, approved or not),
	// SelfUnderlay its underlay address, Exit the name of the exit node
	// it uses ("" for none) and Seeds the underlay addresses of the
	// control nodes it asks (routes.go).
	SelfRoutes   []netip.Prefix
	SelfAsked    []netip.Prefix // every prefix this node asks to carry, approved or not
	SelfUnderlay netip.Addr
	Exit         string
	Seeds        []netip.Addr
	// Probes are this node's direct probes of the members Doubted lists,
	// by name: what View shows of gossip's bad news about them.
	Probes map[string]Probe
}

// Overlay is the part of the Nebula config that depends on the others.
type Overlay struct {
	Lighthouses []mesh.Lighthouse // sorted by overlay IP
	StaticHosts map[netip.Addr][]netip.AddrPort
	// Relays are the nodes others may relay through to reach this one:
	// every control node (each is a lighthouse every node reaches) and
	// every node whose record offers it as a relay, sorted; none when
	// this node has no NAT in front of it (Inputs.SelfNoNAT).
	Relays    []netip.Addr
	Blocklist []string
	// Roaming are the overlay addresses (both families) of the peers with
	// no underlay on record, stock Nebula members (issue 35): no static
	// host entry, but tracked (mesh.Config.Roaming) so that revoking one
	// closes its tunnels.
	Roaming []netip.Addr
}

// Peer is another node as the overlay sees it.
type Peer struct {
	Name     string
	Role     pki.Role
	Overlay  netip.Addr
	Overlay6 netip.Addr // invalid in an IPv4-only cluster
	Underlay netip.AddrPort
	Gossip   gossip.Status // "" when gossip has not vouched for it
	Relay    bool          // its record offers it as a relay
}

// Ignored is a gossip member that contributed nothing, and why.
type Ignored struct {
	Name, ID string
	Reason   string
}

// Peers are the other nodes: raft decides who they are, their role,
// overlay IP and underlay; gossip adds only a member's liveness, and only
// for a member that matches an active record by id and name with the same
// role and overlay IP in its tags, gossiping from that overlay IP (see
// Member). A member without such a record contributes nothing (see
// Unmatched). Before a worker's first node list
// the join response's lighthouses stand in for the records.
func Peers(in Inputs) map[string]Peer {
	out := map[string]Peer{}
	gone := map[string]bool{}
	for _, id := range in.Gone {
		gone[id] = true
	}
	for _, r := range in.Records {
		if r.Name == in.SelfName || gone[r.ID] {
			continue
		}
		out[r.Name] = Peer{Name: r.Name, Role: r.Role, Overlay: r.Overlay, Overlay6: r.Overlay6, Underlay: r.Underlay, Relay: r.Relay}
	}
	if !in.RecordsKnown {
		for _, l := range in.Lighthouses {
			if l.Overlay == in.SelfOverlay || !l.Underlay.IsValid() {
				continue
			}
			out["lighthouse "+l.Overlay.String()] = Peer{Name: l.Overlay.String(), Role: pki.RoleControl,
				Overlay: l.Overlay, Underlay: l.Underlay}
		}
	}
	mt := newMatch(in)
	for _, m := range in.Members {
		if m.Name == in.SelfName {
			continue
		}
		p, ok := out[m.Name]
		if !ok || mt.mismatch(m) != "" {
			continue
		}
		p.Gossip = m.Status
		out[m.Name] = p
	}
	return out
}

// Unmatched lists the gossip members Peers ignored (this node aside),
// sorted by name: no active record, or tags that disagree with it.
func Unmatched(in Inputs) []Ignored { return unmatched(in, newMatch(in)) }

// UnmatchedBy is Unmatched with the records found by find (a Tracker's
// Record: O(1) each), not read from in.Records: O(members).
func UnmatchedBy(in Inputs, find func(id string) (*Record, bool)) []Ignored {
	return unmatched(in, match{in: in, find: find})
}

func unmatched(in Inputs, mt match) []Ignored {
	var out []Ignored
	for _, m := range in.Members {
		if m.Name == in.SelfName {
			continue
		}
		if why := mt.mismatch(m); why != "" {
			out = append(out, Ignored{Name: m.Name, ID: m.ID, Reason: why})
		}
	}
	slices.SortFunc(out, func(a, b Ignored) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
	return out
}

// Compute is the desired overlay: the active records' control nodes are
// lighthouses and relays, the other nodes go into the static host map
// (those whose record offers them as a relay are relays too), revoked
// certificates are blocked. A node with no NAT in front of it
// (Inputs.SelfNoNAT) offers no relays. Only raft withdraws a peer (a
// node that left, was removed or failed its join has no active record,
// or is Gone): what
// gossip says of a member never does, so no gossip message, forged or
// late, takes a live node out of the overlay (issue 27), and a peer gossip
// lost stays reachable for gossip to find again. On a node whose own
// certificate is dual-stack, every peer's IPv6 overlay address goes into
// the static host map as well, lighthouses' too: Nebula finds a peer by
// the address a packet is for, and a tunnel made while either end still
// held a v1 certificate (a cluster moving to v2) knows the peer by its
// IPv4 address only, so without the entry a packet to a lighthouse's IPv6
// address would wait for a handshake nothing could start.
func Compute(in Inputs) Overlay {
	o := Overlay{StaticHosts: map[netip.Addr][]netip.AddrPort{}, Blocklist: slices.Clone(in.Blocklist)}
	for _, p := range Peers(in) {
		if p.Overlay.IsValid() && !p.Underlay.IsValid() && p.Role == pki.RoleNebula {
			o.Roaming = append(o.Roaming, p.Overlay)
			if p.Overlay6.IsValid() {
				o.Roaming = append(o.Roaming, p.Overlay6)
			}
		}
		if !p.Overlay.IsValid() || !p.Underlay.IsValid() {
			continue
		}
		if in.SelfOverlay6.Contains(p.Overlay6) {
			o.StaticHosts[p.Overlay6] = []netip.AddrPort{p.Underlay}
		}
		if p.Role == pki.RoleControl {
			o.Lighthouses = append(o.Lighthouses, mesh.Lighthouse{OverlayIP: p.Overlay, Underlay: []netip.AddrPort{p.Underlay}})
			o.Relays = append(o.Relays, p.Overlay)
			continue
		}
		o.StaticHosts[p.Overlay] = []netip.AddrPort{p.Underlay}
		if p.Relay { // a volunteer (`relay: true`): one more relay, reached like any peer
			o.Relays = append(o.Relays, p.Overlay)
		}
	}
	slices.SortFunc(o.Lighthouses, func(a, b mesh.Lighthouse) int { return a.OverlayIP.Compare(b.OverlayIP) })
	slices.SortFunc(o.Relays, netip.Addr.Compare)
	slices.SortFunc(o.Roaming, netip.Addr.Compare)
	if in.SelfNoNAT {
		o.Relays = nil
	}
	return o
}

// AliveLighthouse is the lowest of AliveLighthouses, if any.
func AliveLighthouse(peers map[string]Peer) (netip.Addr, bool) {
	all := AliveLighthouses(peers)
	if len(all) == 0 {
		return netip.Addr{}, false
	}
	return all[0], true
}

// AliveLighthouses are the control nodes this node's liveness source
// shows alive, lowest overlay address first: what a joining node waits
// for before it expects a tunnel to one of them. Out of the gossip pool
// a control node is alive by its record, so one that is down but not
// removed is among them (member.ConfirmJoin waits for any). A handful at
// any size: control nodes only.
func AliveLighthouses(peers map[string]Peer) []netip.Addr {
	var out []netip.Addr
	for _, p := range peers {
		if p.Role == pki.RoleControl && p.Gossip == gossip.StatusAlive {
			out = append(out, p.Overlay)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
