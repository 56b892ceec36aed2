package control

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// NodeRecord is one row of GET /v1/nodes: the node as `meshctl nodes`
// shows it, plus what a worker needs to follow raft's decisions without
// a raft of its own (its node list): the Nebula port, the control
// address, and the TLS leaves a control node may present. Decoded as an
// apitype.Node, the extra fields are simply dropped.
type NodeRecord struct {
	apitype.Node
	NebulaPort         int    `json:"nebula_port,omitempty"`
	EnrollAddr         string `json:"enroll_addr,omitempty"`
	SerfAddr           string `json:"serf_addr,omitempty"`
	TLSFingerprint     string `json:"tls_fingerprint,omitempty"`
	PrevTLSFingerprint string `json:"prev_tls_fingerprint,omitempty"`
	TLSPublicKey       []byte `json:"tls_public_key,omitempty"` // PKIX DER; renewals certify only this key
	// NebulaRoutes are the prefixes the node's current Nebula certificate
	// holds (issue 33): the node fetches its reissued certificate when
	// they are not its own certificate's.
	NebulaRoutes []string `json:"nebula_routes,omitempty"`
	// NAT is the NAT the node reported by its facts (agent/member's
	// words, NATWords) and OutOfPool that it runs no gossip: what a node
	// reads of a worker out of the pool in place of its gossip tags.
	NAT       string `json:"nat,omitempty"`
	OutOfPool bool   `json:"out_of_pool,omitempty"`
}

// GossipPeer is where the node gossips: its overlay IP at the port of its
// recorded gossip address (NodeRecord.SerfAddr).
func (r NodeRecord) GossipPeer() string {
	ovl, err := netip.ParseAddr(r.OverlayIP)
	if err != nil {
		return ""
	}
	return GossipPeer(ovl, r.SerfAddr)
}

// GossipPeer is where a node with overlay address ovl and recorded gossip
// address serf gossips: ovl at serf's port ("" without one). Gossip rides
// the overlay (DESIGN §11). A record holds ":port" (an admission the FSM
// picked the address for) or "overlay:port"; a record an earlier release
// made holds the underlay address, and that release listened on every
// address, the overlay's too.
func GossipPeer(ovl netip.Addr, serf string) string {
	_, port, err := net.SplitHostPort(serf)
	if err != nil || !ovl.IsValid() || port == "" {
		return ""
	}
	return net.JoinHostPort(ovl.Unmap().String(), port)
}

// LegacyGossip is the underlay address an earlier release recorded as the
// node's gossip address (invalid when the record holds none, or its
// overlay address: this release's records).
func LegacyGossip(ovl netip.Addr, serf string) netip.Addr {
	g, err := netip.ParseAddrPort(serf)
	if err != nil || g.Addr().Unmap() == ovl.Unmap() {
		return netip.Addr{}
	}
	return g.Addr().Unmap()
}

// nodeRecords are the node rows with their records' details and the
// members that cannot reach each node (unreachableFrom, by name; nil:
// not asked), as caller c may read them (recordFor, workerview.go).
func (p *Plane) nodeRecords(c Caller, unreachableFrom map[string][]string) []NodeRecord {
	rows := p.nodeRows()
	out := make([]NodeRecord, 0, len(rows))
	for _, row := range rows {
		rec := NodeRecord{Node: row}
		rec.UnreachableFrom = unreachableFrom[row.Name]
		n, ok := p.raft.FSM().Node(row.ID)
		if !ok {
			continue // forgotten since the rows were read
		}
		rec.NebulaPort, rec.EnrollAddr, rec.SerfAddr = n.NebulaPort, n.EnrollAddr, n.SerfAddr
		rec.TLSFingerprint, rec.PrevTLSFingerprint = n.TLSFingerprint, n.PrevTLSFingerprint
		rec.TLSPublicKey, rec.NAT, rec.OutOfPool = n.TLSPublicKey, n.NAT, n.OutOfPool
		out = append(out, recordFor(c, n, rec))
	}
	return out
}

// ActiveControlLeaves is the ServerCheck a worker applies with the node
// list it holds: the server's leaf must belong (by the node id in it) to
// an active control record of list, and be that record's current or
// previous TLS leaf by fingerprint, or a leaf for the record's TLS public
// key (a renewal the list does not show yet: the CA holder signs renewals
// only for that key). Anything else is codes.PeerRoleDenied.
func ActiveControlLeaves(list []NodeRecord) ServerCheck {
	byID := map[string]NodeRecord{}
	for _, r := range list {
		if r.Active() && r.RoleOf() == pki.RoleControl {
			byID[r.ID] = r
		}
	}
	return func(leaf *x509.Certificate) error {
		r, ok := byID[pki.NodeIDOf(leaf)]
		if !ok {
			return codes.Wrap(codes.PeerRoleDenied, fmt.Errorf("control node %q (%s) is not an active control node in this node's list",
				leaf.Subject.CommonName, pki.NodeIDOf(leaf)))
		}
		fp := pki.FingerprintOf(leaf).String()
		if fp == r.TLSFingerprint || (fp == r.PrevTLSFingerprint && fp != "") ||
			(len(r.TLSPublicKey) > 0 && bytes.Equal(leaf.RawSubjectPublicKeyInfo, r.TLSPublicKey)) {
			return nil
		}
		return codes.Wrap(codes.PeerRoleDenied, fmt.Errorf("control node %s presented a TLS leaf its record does not list", r.Name))
	}
}

// Active reports whether the record is an active node's.
func (r NodeRecord) Active() bool { return r.StateOf() == state.NodeActive }

// RoleOf is the record's role as its type (the wire carries a string).
func (r NodeRecord) RoleOf() pki.Role { return pki.Role(r.Role) }

// StateOf is the record's state as its type (the wire carries a string).
func (r NodeRecord) StateOf() state.NodeState { return state.NodeState(r.State) }

// StrictQuery, added to PathNodes, asks for a strict read (see
// strictRead): what a worker's node-list fetch sends.
const StrictQuery = "?strict=1"

// handleNodes serves the node list to a member: a worker's `meshctl
// nodes` (from this node's state, with the members that cannot reach each
// node: pairhealth.go), and, with StrictQuery, the list a worker takes its
// peers, lighthouses and control nodes from (no tunnel view asked). A
// control node reads every record whole, a worker its own whole and the
// others as its watch stream carries them (workerview.go).
func (p *Plane) handleNodes(w http.ResponseWriter, r *http.Request, c Caller) {
	if err := p.lists.passRequest(r, c); err != nil {
		writeError(w, err)
		return
	}
	if r.URL.Query().Has("strict") {
		if err := p.strictRead(r.Context()); err != nil {
			writeError(w, err)
			return
		}
		apitype.WriteJSON(w, http.StatusOK, p.nodeRecords(c, nil))
		return
	}
	from, err := p.readWithPairs(r.Context(), p.CaughtUp)
	if err != nil {
		writeError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, p.nodeRecords(c, from))
}

// Records are the FSM's node records as a worker's node list carries
// them (NodeRecord), without the views a list served over the API adds
// (gossip, raft role, revocation progress): what the agent's reconcile
// reads on a control node, each pass. The slice is shared and read-only,
// as a worker's copied list is, and built again only once a node changed
// (recordlist.go).
func (p *Plane) Records() []NodeRecord {
	return p.recordList.get(p.raft.FSM().Nodes(), recordsOf)
}

// recordsOf converts the FSM's nodes to NodeRecords.
func recordsOf(nodes []state.Node) []NodeRecord {
	out := make([]NodeRecord, 0, len(nodes))
	for _, n := range nodes {
		r := NodeRecord{Node: apitype.Node{Name: n.Name, ID: n.ID, Role: string(n.Role), State: string(n.State), Underlay: n.Underlay,
			SeenFrom: n.SeenFrom, BehindNAT: apitype.NATBehind(n.Underlay, n.SeenFrom), Relay: n.Relay, Routes: NodeRoutes(n)},
			NebulaPort: n.NebulaPort, EnrollAddr: n.EnrollAddr, SerfAddr: n.SerfAddr, NAT: n.NAT, OutOfPool: n.OutOfPool}
		if len(n.NebulaRoutes) > 0 {
			r.NebulaRoutes = strings.Split(prefixWire(n.NebulaRoutes), ",")
		}
		if n.OverlayIP.IsValid() {
			r.OverlayIP = n.OverlayIP.String()
		}
		if n.OverlayIP6.IsValid() {
			r.OverlayIP6 = n.OverlayIP6.String()
		}
		out = append(out, r)
	}
	return out
}
