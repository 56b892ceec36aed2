package apitype

import (
	"time"

	"github.com/meshd/meshd/codes"
)

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
