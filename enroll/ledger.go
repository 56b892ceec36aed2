package enroll

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"time"

	"github.com/meshd/meshd/pki"
)

// TokenHash is the SHA-256 of a token secret: the only form in which the
// cluster stores a token.
type TokenHash [sha256.Size]byte

// String is the lowercase hex form. A hash is safe to log and list.
func (h TokenHash) String() string { return hex.EncodeToString(h[:]) }

// MarshalText and UnmarshalText let TokenHash be a JSON map key.
func (h TokenHash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

func (h *TokenHash) UnmarshalText(b []byte) error {
	// Check the length first: hex.Decode writes len(b)/2 bytes.
	if len(b) != 2*len(h) {
		return errors.New("token hash: want 64 hex characters")
	}
	if _, err := hex.Decode(h[:], b); err != nil {
		return errors.New("token hash: want 64 hex characters")
	}
	return nil
}

// TokenRecord is the ledger's record of a minted token.
type TokenRecord struct {
	Hash       TokenHash `json:"hash"`
	Name       string    `json:"name"`           // the one node name it admits
	Role       pki.Role  `json:"role"`           // the role it admits; the joiner's claim is never used
	Addr       string    `json:"addr,omitempty"` // source IP the join must come from; "" means any
	Created    time.Time `json:"created"`
	Expires    time.Time `json:"expires"`
	MintedBy   string    `json:"minted_by"` // node id of the control node that minted it
	ConsumedAt time.Time `json:"consumed_at,omitzero"`
	ConsumedBy string    `json:"consumed_by,omitempty"` // node id it admitted
	RevokedAt  time.Time `json:"revoked_at,omitzero"`   // zero unless revoked (`meshctl tokens revoke`)
	RevokedBy  string    `json:"revoked_by,omitempty"`  // the actor who revoked it
}

// Consumed reports whether the token has been used.
func (r TokenRecord) Consumed() bool { return !r.ConsumedAt.IsZero() }

// Revoked reports whether the token was revoked before it was used.
func (r TokenRecord) Revoked() bool { return !r.RevokedAt.IsZero() }

// Admission is what the enroll server asks the ledger to record: ONE raft
// entry that consumes the token and records the node and its overlay IP,
// compare-and-set against the current state.
type Admission struct {
	Token      TokenHash
	NodeID     string
	Name       string
	Role       pki.Role
	Underlay   string       // the joiner's underlay IP as it advertises it
	SourceAddr string       // the joiner's source IP as the control node saw it
	OverlayIP  netip.Prefix // address plus the cluster prefix length
	TLSCert    []byte       // PEM, as signed
	NebulaCert []byte       // PEM, as signed
	NebulaPub  []byte       // PEM
	Version    string       // joiner's agent version
	Ports      Ports        // where the joiner listens
	At         time.Time    // the admitting node's clock; expiry is judged at this instant
}

// ErrIPTaken is returned by Ledger.Admit when the overlay IP was allocated
// by a concurrent admission; the server picks another and tries again.
var ErrIPTaken = errors.New("overlay IP already allocated")

// JoinFacts are the cluster facts a join response carries.
type JoinFacts struct {
	ClusterID    string
	ClusterName  string
	CACert       []byte // PEM
	NebulaCACert []byte // PEM
	Overlay      netip.Prefix
	GossipKeys   [][]byte // primary first
	Seeds        []string // enroll endpoints (host:port) of every control node
	SerfPeers    []string // gossip endpoints (host:port) of known members
	Lighthouses  []Lighthouse
	RaftPeers    []RaftPeer
}

// Lighthouse is a Nebula lighthouse: a control node's overlay IP and its
// underlay UDP endpoint.
type Lighthouse struct {
	OverlayIP netip.Addr `json:"overlay_ip"`
	Underlay  string     `json:"underlay"` // host:port
}

// RaftPeer is a raft server as the join response announces it.
type RaftPeer struct {
	ID      string `json:"id"`
	Address string `json:"address"`
}

// Ledger is the cluster state as the enroll server needs it; the agent
// implements it over raft. Errors carry codes where the user-facing meaning
// is known (codes.NoLeader, codes.TokenConsumed, ...).
type Ledger interface {
	// Token returns the record for h; ok is false if there is none.
	Token(ctx context.Context, h TokenHash) (rec TokenRecord, ok bool, err error)
	// NameTaken reports whether a node other than a removed one has name.
	NameTaken(ctx context.Context, name string) (bool, error)
	// FreeOverlayIP proposes an unallocated overlay address (with the
	// cluster prefix length). It reserves nothing: Admit is the CAS.
	FreeOverlayIP(ctx context.Context) (netip.Prefix, error)
	// Admit applies the admission as ONE raft entry (consume token, record
	// node and IP), or fails with nothing changed. ErrIPTaken means retry.
	Admit(ctx context.Context, a Admission) error
	// JoinFacts returns what a joiner of role r needs to know.
	JoinFacts(ctx context.Context, r pki.Role) (JoinFacts, error)
}

// Signer signs certificates for a joiner: pki.CA on the CA holder, an mTLS
// forwarder to it on other control nodes.
type Signer interface {
	SignTLS(ctx context.Context, req pki.LeafRequest) (certPEM []byte, err error)
	SignNebula(ctx context.Context, req pki.NebulaRequest) (certPEM []byte, err error)
}
