package apitype

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/meshd/meshd/codes"
)

// Routes of the local API.
const (
	PathStatus = "/v0/status"
	PathNodes  = "/v0/nodes"
	PathTokens = "/v0/tokens"
	PathInit   = "/v0/init"
	PathAdmit  = "/v0/admit"
	PathJoin   = "/v0/join"
	PathLeave  = "/v0/leave"
	PathReload = "/v0/reload"
	// PathRemove is POST /v0/nodes/{name}/remove.
	PathRemove = "/v0/nodes/{name}/remove"
	// PathRevokeToken is POST /v0/tokens/{id}/revoke: id is the token's
	// id as GET /v0/tokens shows it, or a unique prefix of at least 8 hex
	// characters of its hash.
	PathRevokeToken = "/v0/tokens/{id}/revoke"
	// PathKeysRotate is POST /v0/keys/rotate: replace the cluster's gossip
	// key (control node).
	PathKeysRotate = "/v0/keys/rotate"
	// PathAudit is GET /v0/audit[?since=DURATION]: the audit trail
	// (control node), oldest first.
	PathAudit = "/v0/audit"
	// PathTunnels is GET /v0/tunnels: the cluster-wide tunnel view
	// (TunnelMap; control node).
	PathTunnels = "/v0/tunnels"
)

// Host is the Host header every local API request must carry; anything
// else (a browser tricked into calling the socket through a proxy) is refused.
const Host = "meshd.sock"

// VersionHeader carries the sender's version both ways.
const VersionHeader = "Meshd-Version"

// Error is the body of every failed local API call, and the error type
// localclient returns.
type Error struct {
	ErrCode codes.Code `json:"code"`
	Cause   string     `json:"cause"`
	Remedy  string     `json:"remedy"`
	Detail  string     `json:"detail,omitempty"`
	// Details are the lines of an error that has several, such as every
	// problem of a refused config (a Lines() []string method).
	Details []string `json:"details,omitempty"`
}

// NewError builds the wire error for code c with detail from err.
func NewError(c codes.Code, err error) *Error {
	e := &Error{ErrCode: c, Cause: c.Cause(), Remedy: c.Remedy()}
	if err != nil && err.Error() != c.Cause() {
		e.Detail = err.Error()
	}
	if l, ok := errors.AsType[interface {
		error
		Lines() []string
	}](err); ok {
		e.Details = l.Lines()
	}
	return e
}

// Code returns the stable code.
func (e *Error) Code() codes.Code { return e.ErrCode }

func (e *Error) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s: %s (%s)", e.ErrCode, e.Cause, e.Detail)
	}
	return fmt.Sprintf("%s: %s", e.ErrCode, e.Cause)
}

// Unwrap exposes the code to codes.Of.
func (e *Error) Unwrap() error { return codes.Wrap(e.ErrCode, nil) }

// Warning rides in a 2xx body.
type Warning struct {
	Code   codes.Code `json:"code"`
	Detail string     `json:"detail"`
}

// Status is GET /v0/status.
// WatchStatus is a worker's watch stream: the control node streaming ("" while
// none is), the raft index of the last change applied, how many streams it
// opened, how many whole tables and changes it received, and the strict
// one-shot changes it asked while no stream was healthy.
type WatchStatus struct {
	From    string `json:"from,omitempty"`
	Index   uint64 `json:"index"`
	Streams int    `json:"streams"`
	Full    int    `json:"full"`
	Deltas  int    `json:"deltas"`
	Strict  int    `json:"strict"`
}

type Status struct {
	State     string `json:"state"` // "starting", "unjoined", "running", "refused", "stopping", "removed" (StateRemoved)
	Version   string `json:"version"`
	Cluster   string `json:"cluster,omitempty"`
	ClusterID string `json:"cluster_id,omitempty"`
	Node      string `json:"node,omitempty"`
	NodeID    string `json:"node_id,omitempty"`
	Role      string `json:"role,omitempty"`
	CAHolder  bool   `json:"ca_holder,omitempty"`
	OverlayIP string `json:"overlay_ip,omitempty"`
	// OverlayIP6 is the node's IPv6 overlay address: its Nebula
	// certificate's, absent in an IPv4-only cluster.
	OverlayIP6 string `json:"overlay_ip6,omitempty"`
	Underlay   string `json:"underlay_addr,omitempty"`
	Raft       string `json:"raft,omitempty"` // leader, voter, nonvoter, none
	Leader     string `json:"leader,omitempty"`
	RaftTerm   uint64 `json:"raft_term,omitempty"` // changes with every election
	// RaftApplied is the raft index this control node's state is at: the
	// index a worker's watch names (docs/architecture.md, "How changes
	// reach workers").
	RaftApplied uint64 `json:"raft_applied,omitempty"`
	// Watch is, on a worker, where its copy of the cluster's records
	// comes from: the watch stream (issue 32).
	Watch *WatchStatus `json:"watch,omitempty"`
	// CertExpires is the earlier of the TLS leaf's and the Nebula host
	// certificate's expiry; CertExpiresOf says which ("tls" or "nebula").
	CertExpires    time.Time `json:"cert_expires,omitzero"`
	CertExpiresOf  string    `json:"cert_expires_of,omitempty"`
	TLSCertExpires time.Time `json:"tls_cert_expires,omitzero"`
	Overlay        *Overlay  `json:"overlay,omitempty"`
	Gossip         *Gossip   `json:"gossip,omitempty"`
	// OutOfPool: this worker runs no gossip (meshd.yaml gossip_pool,
	// false by default on a worker): Gossip is absent and it reads the
	// others' liveness from its node list (issue 54).
	OutOfPool bool      `json:"out_of_pool,omitempty"`
	Warnings  []Warning `json:"warnings,omitempty"`
	// Approvals are the joins that wait for an operator's approval
	// (control nodes; approval.go).
	Approvals []WaitingJoin `json:"approvals,omitempty"`
	// Error is why the node in the state dir does not run (state
	// "refused": a cloned state dir, codes.ClonedIdentity), or why it no
	// longer runs as a member (StateRemoved: codes.RemovedByCluster).
	Error *Error `json:"error,omitempty"`
	// Removed is when the cluster was found to no longer know this node
	// and when it asks again (StateRemoved only).
	Removed *Removed `json:"removed,omitempty"`
	// CAHolderNode names the CA holder on record (control nodes);
	// CABackedUp is when its last sealed backup was taken (zero: never).
	CAHolderNode string    `json:"ca_holder_node,omitempty"`
	CABackedUp   time.Time `json:"ca_backed_up,omitzero"`
	// Quorum is raft's quorum as this node sees it (raft voters only;
	// quorum.go).
	Quorum *Quorum `json:"quorum,omitempty"`
	// DNS is this node's DNS server (issue 30); absent with dns.enabled
	// false.
	DNS *DNS `json:"dns,omitempty"`
}

// DNS is this node's DNS (the cluster's names) in GET /v0/status.
type DNS struct {
	// Domain is the zone answered: a member is NAME.Domain.
	Domain string `json:"domain"`
	// Names is how many active members the zone answers for.
	Names int `json:"names"`
	// Listening are the addresses answered on, UDP and TCP: the overlay
	// address and the loopback one.
	Listening []string `json:"listening"`
	// Loopback is dns.loopback with its port: where a host's resolver
	// points without systemd-resolved.
	Loopback string `json:"loopback"`
	// NotServed are the addresses that could not be bound, with why.
	NotServed []string `json:"not_served,omitempty"`
	// Resolved is systemd-resolved's routing of the domain: "configured"
	// (Link names the overlay's link), "off" (dns.resolved false or
	// userspace mode), or why not ("not running: ...").
	Resolved string `json:"resolved"`
	Link     string `json:"link,omitempty"`
	// Hint says how to point a resolver at this node's names when
	// resolved does not route them.
	Hint string `json:"hint,omitempty"`
}

// Overlay is this node's Nebula state in GET /v0/status.
type Overlay struct {
	Mode        string   `json:"mode"` // kernel or userspace
	Device      string   `json:"device,omitempty"`
	Lighthouse  bool     `json:"lighthouse"`
	Lighthouses []string `json:"lighthouses"` // overlay IPs
	// AmRelay: this node relays for others (a control node, or `relay:
	// true`). Relays are the overlay IPs of the relays it tells others
	// to reach it through (Nebula's relay.relays; none on a relay).
	AmRelay     bool     `json:"am_relay,omitempty"`
	Relays      []string `json:"relays,omitempty"`
	StaticHosts int      `json:"static_hosts"` // peers in the static host map (not lighthouses), each counted once
	Blocklist   int      `json:"blocklist"`    // revoked certificates this overlay refuses
	// CertFingerprint and CertExpires describe the Nebula host certificate
	// the overlay runs with.
	CertFingerprint string    `json:"cert_fingerprint"`
	CertExpires     time.Time `json:"cert_expires"`
	Tunnels         []Tunnel  `json:"tunnels"`
	Error           *Error    `json:"error,omitempty"` // the last refused reload, if any
	// Offloads are the Nebula offloads in use (tso, uso, gro, gso; issue
	// 53), empty when overlay_offloads is off; OffloadsRefused those
	// asked for that the kernel or device refused (absent when none).
	Offloads        []string `json:"offloads"`
	OffloadsRefused []string `json:"offloads_refused,omitempty"`
	// Unreachable are the members this node cannot reach over the
	// overlay by its own probes (pair health: several in a row failed),
	// though gossip may show them alive; sorted, absent when none.
	Unreachable []string `json:"unreachable,omitempty"`
	// On a lighthouse (a control node): Heard is how many members send it
	// host updates, Silent those unheard for three lighthouse intervals,
	// longest silent first (Nebula patch 9; issue 54), SilentMore that
	// there were more than it lists. Gossip, not this, decides liveness.
	Heard      int            `json:"heard,omitempty"`
	Silent     []SilentMember `json:"silent,omitempty"`
	SilentMore bool           `json:"silent_more,omitempty"`
}

// SilentMember is a member a lighthouse stopped hearing host updates from.
type SilentMember struct {
	Name          string `json:"name"`
	OverlayIP     string `json:"overlay_ip"`
	SilentSeconds int    `json:"silent_seconds"`
}

// Gossip is this node's membership view in GET /v0/status.
type Gossip struct {
	Members   int    `json:"members"`
	Alive     int    `json:"alive"`
	KeyErrors uint64 `json:"key_errors"`
	// Keys is how many gossip keys this node has installed (2 during a
	// rotation), PrimaryKey the primary's short id (first 8 hex of its
	// SHA-256; never the key), KeysRotated when the cluster last finished
	// a rotation (zero: never).
	Keys        int       `json:"keys"`
	PrimaryKey  string    `json:"primary_key"`
	KeysRotated time.Time `json:"keys_rotated,omitzero"`
}

// Node is one row of GET /v0/nodes; DESIGN §8 names the fields.
type Node struct {
	Name      string `json:"name"`
	ID        string `json:"id"`
	Role      string `json:"role"`
	State     string `json:"state"`
	Gossip    string `json:"gossip"` // alive, suspect, failed, left, or unknown before gossip runs
	OverlayIP string `json:"overlay_ip"`
	// OverlayIP6 is the node's IPv6 overlay address in a dual-stack
	// cluster; absent in an IPv4-only one.
	OverlayIP6 string `json:"overlay_ip6,omitempty"`
	Underlay   string `json:"underlay_addr"` // the underlay IP the node advertised
	// SeenFrom is the IP its join came from as the admitting control node
	// saw it (DESIGN §11); empty in records made before it was recorded.
	SeenFrom string `json:"seen_from,omitempty"`
	// BehindNAT: SeenFrom is another IP than the one the node advertised,
	// so a NAT (or a proxy) stands between it and the control nodes.
	BehindNAT bool `json:"behind_nat,omitempty"`
	// Relay: the node offers itself as a Nebula relay (`relay: true`);
	// control nodes relay whatever it says (their role shows it).
	Relay bool `json:"relay,omitempty"`
	// Ephemeral: the cluster removes the node, and then forgets its
	// record, once gossip has seen it failed or left for the control
	// nodes' ephemeral_after (issue 31).
	Ephemeral   bool      `json:"ephemeral,omitempty"`
	Raft        string    `json:"raft"`         // leader, voter, nonvoter, none
	CertExpires time.Time `json:"cert_expires"` // the earlier of the TLS leaf's and the Nebula cert's
	Version     string    `json:"version"`
	// Revocation is, for a removed node, whether every live member
	// confirmed it blocks the node: "acknowledged" or "pending: a, b".
	Revocation string `json:"revocation,omitempty"`
	// Cause is, for a failed node, why its join failed.
	Cause string `json:"cause,omitempty"`
	// Departed is, for a former node (left, removed, failed), when it
	// departed: `meshctl nodes` hides it FormerRetention later.
	Departed time.Time `json:"departed,omitzero"`
	// Self marks the node that answered (the one meshctl asked).
	Self bool `json:"self,omitempty"`
	// LastSeen is, for a node not alive in gossip, when the answering
	// control node saw it fail or leave; zero when it never saw that.
	LastSeen time.Time `json:"last_seen,omitzero"`
	// Groups are the node groups it was admitted with (`admit --group`).
	Groups []string `json:"groups,omitempty"`
	// Routes are the prefixes it asks to carry and what the cluster made
	// of each (issue 33): approved, carried now.
	Routes []NodeRoute `json:"routes,omitempty"`
	// UnreachableFrom are the members that report they cannot reach this
	// node over the overlay by their own probes (pair health; a control
	// node's tunnel view), though gossip may show it alive; absent when
	// none or unknown.
	UnreachableFrom []string `json:"unreachable_from,omitempty"`
	// Unheard is when the control nodes found the node silent on every
	// one of them (the raft leader's liveness verdict); absent while it is
	// heard.
	Unheard time.Time `json:"unheard,omitzero"`
	// Tunnel is the answering node's Nebula tunnel to this node, when it
	// has one: direct to an underlay address, or relayed via a relay.
	Tunnel *PingPath `json:"tunnel,omitempty"`
	// DNSName is the node's name in the asking node's DNS
	// (NAME.CLUSTER.DOMAIN), for an active node while names are served.
	DNSName string `json:"dns_name,omitempty"`
}

// NATBehind reports whether seenFrom, the address a node's join came
// from, is another IP than underlay, the one it advertised: a NAT (or a
// proxy) stands between it and the control node that admitted it. False
// when either is unknown.
func NATBehind(underlay, seenFrom string) bool {
	u, err1 := netip.ParseAddr(underlay)
	s, err2 := netip.ParseAddr(seenFrom)
	return err1 == nil && err2 == nil && u.Unmap() != s.Unmap()
}

// RemoveRequest is POST /v0/nodes/{name}/remove's optional body.
type RemoveRequest struct {
	// Wait bounds how long the removal waits for members to acknowledge
	// the revocation; zero means the daemon's revocation_ack_timeout.
	Wait time.Duration `json:"wait,omitempty"`
}

// RemoveResponse is what a removal answers: the removal is recorded;
// Acked are the active members that confirmed they block the removed
// node (they hold revocation list Version and applied it to their
// overlay), Pending those that did not within Bound.
type RemoveResponse struct {
	Name     string        `json:"name"`
	Version  int           `json:"revocation_version"`
	Acked    []string      `json:"acknowledged"`
	Pending  []string      `json:"pending"`
	LastAck  time.Duration `json:"last_ack_ns"` // from the query to the last acknowledgement
	Bound    time.Duration `json:"bound_ns"`
	Warnings []Warning     `json:"warnings,omitempty"`
}
