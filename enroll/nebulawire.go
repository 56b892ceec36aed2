package enroll

import (
	"context"
	"net/netip"
	"time"
)

// A stock Nebula member (issue 35) is a device that runs the nebula
// binary instead of meshd: a phone, a router, a laptop on another OS. It
// spends a token minted with `meshctl admit NAME --nebula-only` at
// NebulaPath, over the same pinned TLS as a join, with the public key it
// made itself, and gets back what its config needs. It never receives a
// TLS leaf, gossip keys or raft peers.

// NebulaPath serves a stock Nebula member's bundle request (POST
// NebulaRequest → NebulaResponse) on a control node's enroll port.
const NebulaPath = "/v1/enroll/nebula"

// NebulaRequest asks for a stock Nebula member's certificate. Only the
// public key travels; the private key stays on the device.
type NebulaRequest struct {
	Protocol int    `json:"protocol"`
	Secret   Secret `json:"secret"` // hashed on arrival, never stored or logged
	Name     string `json:"name"`   // must equal the token's
	// PublicKey is the device's Nebula public key in PEM ("NEBULA X25519
	// PUBLIC KEY", as `nebula-cert keygen` writes it).
	PublicKey []byte `json:"public_key"`
	// Renew spends a renewal token (`admit NAME --nebula-only --renew`):
	// a new certificate for the key the member holds.
	Renew   bool      `json:"renew,omitempty"`
	Clock   time.Time `json:"clock"`
	Expires time.Time `json:"expires,omitzero"` // the token's, as the device read it
}

// NebulaHost is a lighthouse as a bundle names it: its overlay addresses
// and the underlay endpoints ("host:port") its Nebula listens on.
type NebulaHost struct {
	Name     string     `json:"name"`
	Overlay  netip.Addr `json:"overlay"`
	Overlay6 netip.Addr `json:"overlay6,omitzero"`
	Underlay []string   `json:"underlay"`
}

// NebulaResponse is what a stock Nebula member receives: its certificate,
// the CA bundle, and what its config.yml names.
type NebulaResponse struct {
	NodeID      string `json:"node_id"`
	Name        string `json:"name"`
	ClusterID   string `json:"cluster_id"`
	ClusterName string `json:"cluster_name"`
	// CACert is the cluster's X.509 CA bundle: the device checks that it
	// holds the CA its token pins (as a joiner does).
	CACert       []byte       `json:"ca_cert"`
	NebulaCACert []byte       `json:"nebula_ca_cert"` // PEM, two CAs during a CA rotation
	NebulaCert   []byte       `json:"nebula_cert"`    // PEM host certificate for the device's key
	Expires      time.Time    `json:"expires"`        // when NebulaCert expires
	OverlayIP    netip.Prefix `json:"overlay_ip"`
	OverlayIP6   netip.Prefix `json:"overlay_ip6,omitzero"`
	// Groups are the member's Nebula groups after its role ("nebula").
	Groups      []string     `json:"groups,omitempty"`
	Lighthouses []NebulaHost `json:"lighthouses"`
	// Relays are the overlay addresses of the nodes others may relay
	// through to reach the member (every control node, every node that
	// offers to relay).
	Relays     []netip.Addr `json:"relays,omitempty"`
	ServerTime time.Time    `json:"server_time"`
}

// NebulaFacts are the cluster facts a bundle carries besides the member's
// own certificate.
type NebulaFacts struct {
	ClusterID    string
	ClusterName  string
	CACert       []byte // PEM
	NebulaCACert []byte // PEM
	Lighthouses  []NebulaHost
	Relays       []netip.Addr
}

// NebulaMember is a stock Nebula member's record as the ledger holds it.
type NebulaMember struct {
	NodeID     string
	Name       string
	Active     bool
	PublicKey  []byte // PEM
	OverlayIP  netip.Prefix
	OverlayIP6 netip.Prefix // zero in an IPv4-only cluster
	Groups     []string     // after the role
	Cert       []byte       // PEM, the current certificate
	Expires    time.Time
}

// NebulaLedger is what the enroll server needs beyond Ledger to serve
// stock Nebula members; the agent implements it over raft and the CA
// holder.
type NebulaLedger interface {
	// NebulaFacts returns what every bundle carries.
	NebulaFacts(ctx context.Context) (NebulaFacts, error)
	// NebulaKeyHolder returns the name of a node whose record holds the
	// Nebula public key pub (PEM), other than a former node named name
	// (whose record the admission reuses); held is false when there is
	// none.
	NebulaKeyHolder(ctx context.Context, pub []byte, name string) (holder string, held bool, err error)
	// NebulaMember returns the record of the node named name when it is
	// a stock Nebula member (role nebula).
	NebulaMember(ctx context.Context, name string) (NebulaMember, bool, error)
	// RenewNebulaMember has the CA holder sign a new certificate for the
	// key the member nodeID holds and records it, spending the renewal
	// token h in the same raft entry; it returns the new certificate.
	RenewNebulaMember(ctx context.Context, h TokenHash, nodeID string) ([]byte, error)
}
