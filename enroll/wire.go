package enroll

import (
	"net/netip"
	"time"

	"github.com/meshd/meshd/trust"
)

// ProtocolVersion is the enroll protocol version a Request carries.
const ProtocolVersion = 1

// The enroll endpoints on a control node's TLS port (public: a joiner has
// no certificate yet).
const (
	// Path admits a joiner (POST Request → Response).
	Path = "/v1/enroll"
	// TimePath answers the seed's clock (GET → TimeResponse). A joiner asks
	// it over the verified session before it sends the token's secret.
	TimePath = "/v1/enroll/time"
	// CheckPath answers whether a token would be admitted now (POST
	// CheckRequest → CheckResponse): `meshctl join --plan`. It consumes
	// and records nothing, answers only a caller that holds the token's
	// secret, and counts failures against the same throttle as Path.
	CheckPath = "/v1/enroll/check"
)

// CheckRequest asks whether the token whose secret it carries would admit
// Name now. It is Request without the keys: nothing is signed or recorded.
type CheckRequest struct {
	Protocol int       `json:"protocol"`
	Secret   Secret    `json:"secret"`
	Name     string    `json:"name"`
	Clock    time.Time `json:"clock"`
	Expires  time.Time `json:"expires,omitzero"`
}

// CheckResponse says that a join with the token would pass the ledger's
// checks now: the token is known, unused, not revoked, unexpired, bound to
// no other address, and its name is free.
type CheckResponse struct {
	Name       string     `json:"name"`
	Role       trust.Role `json:"role"`
	Expires    time.Time  `json:"expires"` // the ledger's expiry
	ServerTime time.Time  `json:"server_time"`
	// Approve: the join will wait for an operator's approval (the token
	// was minted with --approve).
	Approve bool `json:"approve,omitempty"`
}

// Request is what a joiner sends after it has verified the server. Only
// public keys travel; the private keys stay on the joiner.
type Request struct {
	Protocol     int    `json:"protocol"`
	Secret       Secret `json:"secret"`        // the token secret; hashed on arrival, never stored or logged
	Name         string `json:"name"`          // must equal the token's
	CSR          []byte `json:"csr"`           // DER PKCS#10 for the TLS leaf
	NebulaPublic []byte `json:"nebula_public"` // PEM Nebula X25519 public key
	Underlay     string `json:"underlay"`      // advertised underlay IP
	// Relay: the joiner offers itself as a Nebula relay (`relay: true` in
	// its meshd.yaml); recorded on its node record.
	Relay   bool      `json:"relay,omitempty"`
	Version string    `json:"version"` // joiner's agent version
	Ports   Ports     `json:"ports"`   // where the joiner listens
	Clock   time.Time `json:"clock"`   // joiner's clock, for the skew warning
	// Expires is the expiry the joiner read from its token. The server
	// refuses a request past it before it asks the ledger; a later or
	// missing one decides nothing (the ledger's record does).
	Expires time.Time `json:"expires,omitzero"`
	// Approval says the joiner can show an approval code (a token minted
	// with --approve): it then takes HTTP 202 ApprovalPending for an
	// answer, shows the code of its TLS session and asks again over the
	// same connection. A joiner without it is refused such a token.
	Approval bool `json:"approval,omitempty"`
	// HostName is the joiner's hostname, sent with a reusable key: a key
	// minted with --name-from-host gives it as the node's name when it is
	// a valid, free name. The cluster decides; Name is then empty.
	HostName string `json:"host_name,omitempty"`
	// Ephemeral: the joiner asks to be an ephemeral node (`meshctl join
	// --ephemeral`): removed by the cluster once down for the ephemeral
	// window. A key minted with --ephemeral makes every node it admits
	// ephemeral whatever this says.
	Ephemeral bool `json:"ephemeral,omitempty"`
	// JWT is set for a join by identity (identity.go) instead of Secret
	// and Name: the seed verifies it against the issuers it trusts.
	JWT RawJWT `json:"jwt,omitempty"`
}

// Ports are the ports a node listens on (DESIGN §3), announced at enrollment
// so that the cluster records where to reach it.
type Ports struct {
	Gossip  int `json:"gossip"`
	Nebula  int `json:"nebula"`
	Control int `json:"control,omitempty"` // control nodes
	Raft    int `json:"raft,omitempty"`    // control nodes
}

// Response is what an admitted joiner receives.
type Response struct {
	NodeID       string       `json:"node_id"`
	Name         string       `json:"name"`
	Role         trust.Role   `json:"role"`
	ClusterID    string       `json:"cluster_id"`
	ClusterName  string       `json:"cluster_name"`
	CACert       []byte       `json:"ca_cert"`        // PEM
	TLSCert      []byte       `json:"tls_cert"`       // PEM leaf for the joiner's key
	NebulaCACert []byte       `json:"nebula_ca_cert"` // PEM
	NebulaCert   []byte       `json:"nebula_cert"`    // PEM host cert for the joiner's key
	OverlayIP    netip.Prefix `json:"overlay_ip"`     // address/cluster prefix length
	GossipKeys   [][]byte     `json:"gossip_keys"`    // primary first
	Seeds        []string     `json:"seeds"`
	SerfPeers    []string     `json:"serf_peers"`
	Lighthouses  []Lighthouse `json:"lighthouses"`
	RaftPeers    []RaftPeer   `json:"raft_peers,omitempty"`
	ServerTime   time.Time    `json:"server_time"`
	// Seed is the seed that answered (the joiner's own record: Enroll
	// sets it, it is never sent).
	Seed string `json:"-"`
}

// ErrorBody is the JSON body of a failed enroll call; it mirrors the local
// API's error shape.
type ErrorBody struct {
	Code   string `json:"code"`
	Cause  string `json:"cause"`
	Remedy string `json:"remedy"`
	Detail string `json:"detail,omitempty"`
}
