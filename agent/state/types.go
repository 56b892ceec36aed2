package state

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// AuditSize is how many events the audit ring keeps; older ones are dropped.
const AuditSize = 256

// Cluster holds the facts every node of the cluster shares.
type Cluster struct {
	ID            string       `json:"id"`
	Name          string       `json:"name"`
	Created       time.Time    `json:"created"`
	CACert        []byte       `json:"ca_cert"`        // PEM
	NebulaCACert  []byte       `json:"nebula_ca_cert"` // PEM
	CAFingerprint string       `json:"ca_fingerprint"` // hex SHA-256 of the CA cert
	Overlay       netip.Prefix `json:"overlay"`
	// Overlay6 is the IPv6 overlay prefix of a dual-stack cluster (its
	// Nebula CA a v2 CA holding both prefixes); zero for an IPv4-only
	// cluster, which a v2 move (CA rotation with NextOverlay6) makes
	// dual-stack. overlay6.go.
	Overlay6   netip.Prefix `json:"overlay6,omitzero"`
	GossipKeys [][]byte     `json:"gossip_keys"` // primary first
	CAHolder   string       `json:"ca_holder"`   // node id of the node holding the CA keys
	// GossipKeysRotated is when the last gossip key rotation finished
	// (its drop step); zero if the keys were never rotated.
	GossipKeysRotated time.Time `json:"gossip_keys_rotated,omitzero"`
	// KeysOwed are the nodes that left, failed their join or were removed
	// while holding the current gossip keys: a key rotation is owed for
	// them (keysowed.go). KeysPaying are those the rotation in progress
	// (its install step is applied) pays for; its drop step clears them.
	KeysOwed   []string `json:"keys_owed,omitempty"`
	KeysPaying []string `json:"keys_paying,omitempty"`
	// CABackedUp is when the last sealed CA backup was taken (RecordCABackup);
	// zero if never.
	CABackedUp time.Time `json:"ca_backed_up,omitzero"`
	// Rotation is the CA rotation in progress (carotation.go); nil when
	// none is.
	Rotation *CARotation `json:"ca_rotation,omitempty"`
	// CARotated is when the last CA rotation finished; zero if never.
	CARotated time.Time `json:"ca_rotated,omitzero"`
}

// NodeState is where a node is in its life in the cluster.
type NodeState string

// The node states.
const (
	NodeJoining NodeState = "joining" // admitted; active once the joiner confirms (ConfirmJoin)
	NodeActive  NodeState = "active"
	NodeLeft    NodeState = "left"
	NodeRemoved NodeState = "removed"
	// NodeFailed is a join that did not confirm within the bound: its
	// certificates are revoked and its token stays consumed.
	NodeFailed NodeState = "failed"
)

// Valid reports whether s is one of the five node states.
func (s NodeState) Valid() bool {
	switch s {
	case NodeJoining, NodeActive, NodeLeft, NodeRemoved, NodeFailed:
		return true
	}
	return false
}

// Former reports whether a node in state s is gone: left, removed or
// failed. A former node holds no name: the next admission of its name
// reuses its record (node id and overlay IP).
func (s NodeState) Former() bool {
	return s == NodeLeft || s == NodeRemoved || s == NodeFailed
}

// Node is the cluster's record of one machine.
type Node struct {
	ID       string    `json:"id"`
	Name     string    `json:"name"`
	Role     pki.Role  `json:"role"`
	State    NodeState `json:"state"`
	Underlay string    `json:"underlay"` // IP, as the node advertised it
	// SeenFrom is the source IP of the node's join as the admitting
	// control node saw it: behind a NAT, the NAT's public address, where
	// Underlay is the private one (DESIGN §11: a record keeps both). Empty
	// in a record admitted before the field existed, and for the origin.
	SeenFrom string `json:"seen_from,omitempty"`
	// Relay: the node offers itself as a Nebula relay (`relay: true` in
	// its meshd.yaml), from its join request and then from its own report
	// when it restarts with another setting (SetRelay). Control nodes
	// relay whatever it says.
	Relay      bool       `json:"relay,omitempty"`
	EnrollAddr string     `json:"enroll_addr,omitempty"` // host:port, control nodes
	RaftAddr   string     `json:"raft_addr,omitempty"`   // host:port, control nodes
	SerfAddr   string     `json:"serf_addr,omitempty"`   // host:port
	NebulaPort int        `json:"nebula_port,omitempty"`
	OverlayIP  netip.Addr `json:"overlay_ip"`
	// OverlayIP6 is the node's IPv6 overlay address in a dual-stack
	// cluster (Overlay6For of OverlayIP); zero otherwise.
	OverlayIP6        netip.Addr `json:"overlay_ip6,omitzero"`
	TLSFingerprint    string     `json:"tls_fingerprint,omitempty"`
	TLSExpires        time.Time  `json:"tls_expires,omitzero"`
	NebulaFingerprint string     `json:"nebula_fingerprint,omitempty"`
	NebulaExpires     time.Time  `json:"nebula_expires,omitzero"`
	NebulaPublicKey   []byte     `json:"nebula_public_key,omitempty"` // PEM
	TLSCert           []byte     `json:"tls_cert,omitempty"`          // PEM, the leaf issued at admission
	NebulaCert        []byte     `json:"nebula_cert,omitempty"`       // PEM, the current host certificate
	NebulaIssued      time.Time  `json:"nebula_issued,omitzero"`      // when the current one was signed
	Version           string     `json:"version,omitempty"`
	// TLSPublicKey is the PKIX DER of the key the node's TLS leaves
	// certify, recorded at admission: renewals sign only this key.
	TLSPublicKey []byte `json:"tls_public_key,omitempty"`
	// PrevTLSFingerprint is the leaf the last renewal replaced; it is
	// still accepted while the node switches to the new one.
	PrevTLSFingerprint string `json:"prev_tls_fingerprint,omitempty"`
	// Retired lists every earlier TLS and Nebula fingerprint the node
	// held; all are revoked with it on removal.
	Retired []string `json:"retired,omitempty"`
	// Cause says why a failed join failed.
	Cause string `json:"cause,omitempty"`
	// Token is the token whose admission made this record joining: an
	// AbortAdmission frees exactly that one. Zero in records admitted
	// before the field existed.
	Token enroll.TokenHash `json:"token,omitzero"`
	// Prior is the state a reused record was in before the admission that
	// reused it (left, removed or failed); an abort puts it back. Empty
	// for a record admitted fresh.
	Prior NodeState `json:"prior,omitempty"`
	// KeptToken is, for a control node that left to join again (`join
	// --force`), the unused token its new join uses: the token names the
	// node as a seed, and the seed sweep that revokes every token naming a
	// departed control node leaves that one alone (SetNodeState.Keep).
	KeptToken enroll.TokenHash `json:"kept_token,omitzero"`
	// Groups are the node groups from the token that admitted it: its
	// Nebula certificates carry its role, then these (pki.NebulaGroups).
	Groups []string `json:"groups,omitempty"`
	// Ephemeral: the cluster removes the node (and then forgets its
	// record, freeing its name and overlay IP) once gossip has seen it
	// failed or left for the ephemeral window (an enrolment key minted
	// with --ephemeral, or `meshctl join --ephemeral`; issue 31).
	Ephemeral bool `json:"ephemeral,omitempty"`
	// Routes are the prefixes the node asks to carry, sorted, with their
	// approval and whether it carries each now (routes.go, issue 33).
	Routes []Route `json:"routes,omitempty"`
	// NebulaRoutes are the unsafe networks the current Nebula certificate
	// holds (RenewNebula records them), so the CA holder sees a
	// certificate that no longer matches Routes without parsing it.
	NebulaRoutes []netip.Prefix `json:"nebula_routes,omitempty"`
	// NebulaRouted are the fingerprints of the node's Nebula certificates
	// that held a prefix: when a renewal drops one (an approval withdrawn
	// or a request narrowed), they are all revoked, so no certificate
	// the node still has lets it carry what it may no longer.
	NebulaRouted []string `json:"nebula_routed,omitempty"`
	// Unheard is when the control nodes found the node silent on every
	// one of them that answered the raft leader (no Nebula host update
	// for three lighthouse intervals: SetUnheard, agent/control/
	// verdict.go); zero while it is heard.
	Unheard time.Time `json:"unheard,omitzero"`
	// RunsVersion is the meshd version the node last reported running,
	// CAReport what it last reported of its CA trust and certificates
	// (agent/control.CAReport) and CAReportSig its signature of that
	// (SetFacts, agent/control/facts.go); empty until it reports. Version
	// above is what it joined with.
	RunsVersion string `json:"runs_version,omitempty"`
	CAReport    string `json:"ca_report,omitempty"`
	CAReportSig []byte `json:"ca_report_sig,omitempty"`
	// NAT is the NAT the node's own path check last found it behind
	// (agent/member's NAT words: "open", "pp", "ei", "sym"; empty until it
	// reports), OutOfPool that it runs no gossip (`gossip_pool: false`),
	// and RevokedApplied the revocation list version its Nebula last
	// blocked all of: what a worker out of the pool says by its facts
	// instead of gossip's tags and queries (SetFacts).
	NAT            string    `json:"nat,omitempty"`
	OutOfPool      bool      `json:"out_of_pool,omitempty"`
	RevokedApplied int       `json:"revoked_applied,omitempty"`
	Created        time.Time `json:"created"`
	Updated        time.Time `json:"updated"`
}

// JTIUse is the use of a JWT by a join (Snapshot.JTIs): which node it
// admitted, and until when the JWT itself was valid.
type JTIUse struct {
	NodeID  string    `json:"node_id"`
	Expires time.Time `json:"expires"`
	// Undone counts the joins with this JWT that their joiner undid
	// (AbortJoin); such a record with no NodeID is free again.
	Undone int `json:"undone,omitempty"`
}

// Revocation is a certificate every Nebula instance (and every mTLS check)
// must refuse.
type Revocation struct {
	NodeID      string    `json:"node_id"`
	Fingerprint string    `json:"fingerprint"`
	At          time.Time `json:"at"`
}

// AuditEvent is one entry of the audit ring.
type AuditEvent struct {
	Code    codes.Code `json:"code"`
	At      time.Time  `json:"at"`
	Actor   string     `json:"actor,omitempty"`
	Subject string     `json:"subject,omitempty"`
	Detail  string     `json:"detail,omitempty"`
}

func (c Cluster) clone() Cluster {
	c.CACert = bytes.Clone(c.CACert)
	c.NebulaCACert = bytes.Clone(c.NebulaCACert)
	if c.Rotation != nil {
		r := *c.Rotation
		r.NextCACert, r.NextNebulaCACert = bytes.Clone(r.NextCACert), bytes.Clone(r.NextNebulaCACert)
		c.Rotation = &r
	}
	c.KeysOwed, c.KeysPaying = slices.Clone(c.KeysOwed), slices.Clone(c.KeysPaying)
	if c.GossipKeys != nil {
		keys := make([][]byte, len(c.GossipKeys))
		for i, k := range c.GossipKeys {
			keys[i] = bytes.Clone(k)
		}
		c.GossipKeys = keys
	}
	return c
}

func (n Node) clone() Node {
	n.NebulaPublicKey = bytes.Clone(n.NebulaPublicKey)
	n.NebulaCert = bytes.Clone(n.NebulaCert)
	n.TLSCert = bytes.Clone(n.TLSCert)
	n.TLSPublicKey = bytes.Clone(n.TLSPublicKey)
	n.CAReportSig = bytes.Clone(n.CAReportSig)
	n.Retired = slices.Clone(n.Retired)
	n.Routes, n.NebulaRoutes, n.NebulaRouted = slices.Clone(n.Routes), slices.Clone(n.NebulaRoutes), slices.Clone(n.NebulaRouted)
	return n
}

// hostRange returns the usable host addresses of p as the half-open range
// [first, end): the network address and the last (broadcast) address are
// skipped. ok is false when p has no usable host.
func hostRange(p netip.Prefix) (first, end netip.Addr, ok bool) {
	if !p.IsValid() {
		return netip.Addr{}, netip.Addr{}, false
	}
	p = p.Masked()
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	end, _ = netip.AddrFromSlice(b)
	first = p.Addr().Next()
	return first, end, first.IsValid() && first.Less(end)
}

// checkHost fails unless a is a usable host address of p.
func checkHost(p netip.Prefix, a netip.Addr) error {
	first, end, ok := hostRange(p)
	if !ok || !a.IsValid() || a.Zone() != "" || a.Less(first) || !a.Less(end) || a.Is4() != p.Addr().Is4() {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("overlay IP %v is not a host address of %v", a, p))
	}
	return nil
}
