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
	Warnings       []Warning `json:"warnings,omitempty"`
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

// Tunnel is one established Nebula tunnel.
type Tunnel struct {
	OverlayIP string `json:"overlay_ip"`
	Remote    string `json:"remote"`
	Name      string `json:"name"`
	Relayed   bool   `json:"relayed,omitempty"` // through a Nebula relay, not a direct path
}

// TunnelMap answers GET /v0/tunnels on a control node: which node reaches
// which, over which underlay path, from every node's own report.
type TunnelMap struct {
	Edges []TunnelEdge `json:"edges"`
	Nodes []TunnelNode `json:"nodes"` // every active node, with why it has no report
	// Broken are the pairs of active nodes one end (or both) reports it
	// cannot reach the other over the overlay by its own probes; absent
	// when none (and from nodes that do not report it yet).
	Broken []TunnelBreak `json:"broken,omitempty"`
}

// TunnelBreak is a broken pair: A and B (A < B) are both active and not
// down in gossip, and From (A, B or both) report the other end
// unreachable over the overlay.
type TunnelBreak struct {
	A    string   `json:"a"`
	B    string   `json:"b"`
	From []string `json:"from"`
}

// TunnelEdge is a tunnel between nodes A and B (A < B), as seen from one
// or both ends.
type TunnelEdge struct {
	A        string       `json:"a"`
	B        string       `json:"b"`
	SeenFrom []string     `json:"seen_from"` // A, B or both
	Paths    []TunnelPath `json:"paths"`
}

// TunnelPath is the underlay address one end of a tunnel sends to.
type TunnelPath struct {
	From    string `json:"from"`
	Remote  string `json:"remote"`
	Relayed bool   `json:"relayed,omitempty"`
}

// TunnelNode is one active node in the view: its report, or why none.
type TunnelNode struct {
	Name       string    `json:"name"`
	Role       string    `json:"role"`
	Reported   bool      `json:"reported"`
	ReportedAt time.Time `json:"reported_at,omitzero"`
	Tunnels    int       `json:"tunnels"`           // its tunnels in Edges (none to a dead node)
	Problem    string    `json:"problem,omitempty"` // e.g. "no answer: ..."
	// Unreachable are the active members it reports it cannot reach
	// over the overlay (its own probes; Broken has the pairs).
	Unreachable []string `json:"unreachable,omitempty"`
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

// Token is one row of GET /v0/tokens: never the secret, only its hash prefix.
type Token struct {
	ID         string    `json:"id"` // first 12 hex characters of the secret's hash
	Name       string    `json:"name"`
	Role       string    `json:"role"`
	Addr       string    `json:"addr,omitempty"`
	Created    time.Time `json:"created"`
	Expires    time.Time `json:"expires"`
	MintedBy   string    `json:"minted_by"`
	State      string    `json:"state"` // unused, used, expired, revoked
	ConsumedBy string    `json:"consumed_by,omitempty"`
	RevokedAt  time.Time `json:"revoked_at,omitzero"`
	// Approval is set for a token minted with --approve (approval.go).
	Approval *TokenApproval `json:"approval,omitempty"`
	// Key is set for a reusable enrolment key (issue 31).
	Key       *TokenKey `json:"key,omitempty"`
	Ephemeral bool      `json:"ephemeral,omitempty"`
}

// TokenKey is what a Token row of a reusable enrolment key adds: its
// uses, how many are left, and how it names its joiners.
type TokenKey struct {
	Uses         int       `json:"uses"`
	Used         int       `json:"used"`
	Left         int       `json:"left"`
	NamePrefix   string    `json:"name_prefix"`
	NameFromHost bool      `json:"name_from_host,omitempty"`
	LastUsed     time.Time `json:"last_used,omitzero"`
}

// The states of a Token row.
const (
	TokenUnused  = "unused"
	TokenUsed    = "used"
	TokenExpired = "expired"
	TokenRevoked = "revoked"
	// TokenExhausted: a key that has admitted as many machines as its
	// uses allow.
	TokenExhausted = "exhausted"
)

// AuditEvent is one row of GET /v0/audit: who did what, and when.
type AuditEvent struct {
	At    time.Time  `json:"at"`
	Code  codes.Code `json:"code"`
	Event string     `json:"event"` // a short name of Code: init, admit, join, confirm, leave, remove, ...
	// Actor is who did it: "uid=U@NODE" (an operator on NODE's local
	// socket), "node:NODE" (NODE by itself), either followed by
	// " via NODE2" when a control node relayed it.
	Actor   string `json:"actor"`
	Subject string `json:"subject,omitempty"` // the node, token name or key step it concerns
	Detail  string `json:"detail,omitempty"`
}

// KeyRotation answers POST /v0/keys/rotate.
type KeyRotation struct {
	Keys       int           `json:"keys"`        // keys installed cluster-wide afterwards (1)
	PrimaryKey string        `json:"primary_key"` // the new primary's short id, never the key
	Members    int           `json:"members"`     // live members that reported the last step
	Took       time.Duration `json:"took"`
}

// RevokeResponse answers POST /v0/tokens/{id}/revoke.
type RevokeResponse struct {
	Token Token `json:"token"` // the token's row, now revoked
	// AlreadyRevoked says the token was revoked before this call; the
	// first revocation stands and nothing changed.
	AlreadyRevoked bool `json:"already_revoked,omitempty"`
}

// InitRequest is POST /v0/init.
type InitRequest struct {
	Cluster        string `json:"cluster"`
	Name           string `json:"name,omitempty"` // this node's name; default: hostname
	AdvertiseAddr  string `json:"advertise_addr,omitempty"`
	AdvertiseIface string `json:"advertise_iface,omitempty"`
	Force          bool   `json:"force,omitempty"`
	// OverlayCIDR is the IPv4 overlay; default: overlay_cidr in
	// meshd.yaml (10.42.0.0/16).
	OverlayCIDR string `json:"overlay_cidr,omitempty"`
	// OverlayCIDR6 is the IPv6 overlay: a prefix (a /64 in fd00::/8
	// unless Overlay6Global), "none" for an IPv4-only cluster with v1
	// certificates, or empty for a ULA /64 generated for the cluster
	// (RFC 4193).
	OverlayCIDR6   string `json:"overlay_cidr6,omitempty"`
	Overlay6Global bool   `json:"overlay6_global,omitempty"`
}

// InitResponse answers POST /v0/init.
type InitResponse struct {
	ClusterID     string `json:"cluster_id"`
	Cluster       string `json:"cluster"`
	Node          string `json:"node"`
	CAFingerprint string `json:"ca_fingerprint"`
	OverlayIP     string `json:"overlay_ip"`
	OverlayIP6    string `json:"overlay_ip6,omitempty"` // absent in an IPv4-only cluster
	Underlay      string `json:"underlay_addr"`
	// UnderlayWhy says how the underlay address was chosen (the pin, the
	// default route, or the fallback and its reason).
	UnderlayWhy string    `json:"underlay_why,omitempty"`
	Warnings    []Warning `json:"warnings,omitempty"`
}

// AdmitRequest is POST /v0/admit.
type AdmitRequest struct {
	Name string        `json:"name"`
	Role string        `json:"role"`
	TTL  time.Duration `json:"ttl"`
	Addr string        `json:"addr,omitempty"`
	// Approve: the join waits until an operator approves it with the code
	// the joiner shows (`meshctl approve NAME CODE`).
	Approve bool `json:"approve,omitempty"`
	// Groups are node groups the node's Nebula certificate carries after
	// its role (`--group G`, repeatable; pki.CheckNodeGroups), for
	// firewall rules.
	Groups []string `json:"groups,omitempty"`
	// Reusable: mint an enrolment key (issue 31), not a one-time token:
	// it admits up to Uses workers until TTL (at most 30 days), naming
	// each NamePrefix + a number, or its hostname when NameFromHost and
	// the hostname is a valid, free name. Name is then empty.
	Reusable     bool   `json:"reusable,omitempty"`
	Uses         int    `json:"uses,omitempty"`
	NamePrefix   string `json:"name_prefix,omitempty"`
	NameFromHost bool   `json:"name_from_host,omitempty"`
	// Ephemeral: every node the token or key admits is ephemeral: the
	// cluster removes it once it has been down for the ephemeral window.
	Ephemeral bool `json:"ephemeral,omitempty"`
	// NebulaOnly: the token admits a stock Nebula member (issue 35): a
	// device that runs the nebula binary, not meshd, and spends the
	// token with `meshctl nebula-bundle`. Renew makes it a renewal token
	// for the active member Name (a new certificate for the key it
	// holds); CertLifetime is how long the certificate lives (zero: the
	// cluster's default, 30 days).
	NebulaOnly   bool          `json:"nebula_only,omitempty"`
	Renew        bool          `json:"renew,omitempty"`
	CertLifetime time.Duration `json:"cert_lifetime,omitempty"`
}

// AdmitResponse answers POST /v0/admit.
type AdmitResponse struct {
	Token   string    `json:"token"`
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Role    string    `json:"role"`
	Expires time.Time `json:"expires"`
	Command string    `json:"command"`
	// Reuses says, when the name belonged to a node that left, was
	// removed or failed, that the join reuses its record (node id and
	// overlay IP); empty otherwise.
	Reuses string `json:"reuses,omitempty"`
	// Approve says the join needs an operator's approval.
	Approve bool `json:"approve,omitempty"`
	// Groups are the node groups the token admits the node into.
	Groups []string `json:"groups,omitempty"`
	// Reusable, Uses, NamePrefix and NameFromHost describe an enrolment
	// key (AdmitRequest.Reusable); Ephemeral, a token or key whose nodes
	// are ephemeral.
	Reusable     bool   `json:"reusable,omitempty"`
	Uses         int    `json:"uses,omitempty"`
	NamePrefix   string `json:"name_prefix,omitempty"`
	NameFromHost bool   `json:"name_from_host,omitempty"`
	Ephemeral    bool   `json:"ephemeral,omitempty"`
	// Seeds are the enroll endpoints the token names, in the order a
	// joiner tries them (each token starts at a control node its hash
	// picks).
	Seeds []string `json:"seeds,omitempty"`
	// NebulaOnly, Renew and CertLifetime describe a stock Nebula
	// member's token (AdmitRequest.NebulaOnly).
	NebulaOnly   bool          `json:"nebula_only,omitempty"`
	Renew        bool          `json:"renew,omitempty"`
	CertLifetime time.Duration `json:"cert_lifetime,omitempty"`
}

// JoinRequest is POST /v0/join. The token travels only over the local socket.
type JoinRequest struct {
	Token          string `json:"token"`
	AdvertiseAddr  string `json:"advertise_addr,omitempty"`
	AdvertiseIface string `json:"advertise_iface,omitempty"`
	Force          bool   `json:"force,omitempty"`
	// Ephemeral: join as an ephemeral node (`meshctl join --ephemeral`):
	// the cluster removes it once it has been down for its window.
	Ephemeral bool `json:"ephemeral,omitempty"`
	// JWT, Seed and CASHA256: a join by identity (`meshctl join
	// --jwt-file F --seed ADDR --ca-sha256 H`) instead of Token: the
	// seed's trusted issuers verify the JWT; the CA pin is required.
	JWT      string `json:"jwt,omitempty"`
	Seed     string `json:"seed,omitempty"`
	CASHA256 string `json:"ca_sha256,omitempty"`
}

// JoinLine is one line of the streamed POST /v0/join response: a step, and
// finally either Result or Error.
type JoinLine struct {
	Step    string   `json:"step,omitempty"`
	Warning *Warning `json:"warning,omitempty"`
	// Approval: the join waits for an operator to approve this code.
	Approval *JoinApproval `json:"approval,omitempty"`
	Result   *JoinResult   `json:"result,omitempty"`
	Error    *Error        `json:"error,omitempty"`
}

// JoinResult ends a successful join.
type JoinResult struct {
	Cluster   string `json:"cluster"`
	ClusterID string `json:"cluster_id"`
	Node      string `json:"node"`
	NodeID    string `json:"node_id"`
	Role      string `json:"role"`
	OverlayIP string `json:"overlay_ip"`
}
