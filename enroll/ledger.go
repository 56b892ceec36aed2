package enroll

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"time"

	"github.com/meshd/meshd/trust"
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
	Hash       TokenHash  `json:"hash"`
	Name       string     `json:"name"`           // the one node name it admits
	Role       trust.Role `json:"role"`           // the role it admits; the joiner's claim is never used
	Addr       string     `json:"addr,omitempty"` // source IP the join must come from; "" means any
	Created    time.Time  `json:"created"`
	Expires    time.Time  `json:"expires"`
	MintedBy   string     `json:"minted_by"` // node id of the control node that minted it
	ConsumedAt time.Time  `json:"consumed_at,omitzero"`
	ConsumedBy string     `json:"consumed_by,omitempty"` // node id it admitted
	RevokedAt  time.Time  `json:"revoked_at,omitzero"`   // zero unless revoked (`meshctl tokens revoke`)
	RevokedBy  string     `json:"revoked_by,omitempty"`  // the actor who revoked it
	// Approve: the join waits for an operator's approval (`meshctl admit
	// --approve`, approval.go); Approval is its state.
	Approve  bool     `json:"approve,omitempty"`
	Approval Approval `json:"approval,omitzero"`
	// Groups are node groups the node's Nebula certificate carries after
	// its role (`meshctl admit NAME --group G`); the admission copies them
	// into the node's record.
	Groups []string `json:"groups,omitempty"`
	// SeedIDs are the node ids of the control nodes the token names as
	// its seeds (Token.SeedIDs): removing one of them revokes the token
	// while it is unused.
	SeedIDs []string `json:"seed_ids,omitempty"`
	// Key: a reusable enrolment key (issue 31), not a one-time token:
	// it admits up to Key.Uses machines until Expires, each under a name
	// the cluster gives (Name is then empty). Zero for a one-time token
	// (a value, not a pointer: snapshots copy records by value).
	Key KeyLimits `json:"key,omitzero"`
	// Ephemeral: every node it admits is ephemeral (state.Node.Ephemeral).
	Ephemeral bool `json:"ephemeral,omitempty"`
	// Renew: a renewal token for the stock Nebula member Name (role
	// nebula; Token.Renew), spent by a bundle request that asks a renewal.
	Renew bool `json:"renew,omitempty"`
	// CertLifetime is how long the Nebula certificate of the stock Nebula
	// member it admits or renews lives (`admit --nebula-only
	// --cert-lifetime`); zero: the cluster's default for such members.
	CertLifetime time.Duration `json:"cert_lifetime,omitempty"`
	// Undone counts the joins it admitted that their joiner undid after
	// they failed on its machine (issue 52), each giving the token (or a
	// key's use) back; the cluster gives back a bounded number.
	Undone int `json:"undone,omitempty"`
}

// KeyLimits are what bounds a reusable enrolment key, and how far it has
// been used.
type KeyLimits struct {
	Uses         int       `json:"uses"`           // how many machines it may admit
	Used         int       `json:"used"`           // how many it has admitted (aborted admissions give theirs back)
	NamePrefix   string    `json:"name_prefix"`    // names given are NamePrefix + a number
	NameFromHost bool      `json:"name_from_host"` // the joiner's hostname, when valid and free, before NamePrefix + n
	LastUsed     time.Time `json:"last_used,omitzero"`
}

// IsKey reports whether r is a reusable enrolment key.
func (r TokenRecord) IsKey() bool { return r.Key.Uses > 0 }

// Exhausted reports whether r is a key with no uses left.
func (r TokenRecord) Exhausted() bool { return r.IsKey() && r.Key.Used >= r.Key.Uses }

// Consumed reports whether the token has been used.
func (r TokenRecord) Consumed() bool { return !r.ConsumedAt.IsZero() }

// Revoked reports whether the token was revoked before it was used.
func (r TokenRecord) Revoked() bool { return !r.RevokedAt.IsZero() }

// Admission is what the enroll server asks the ledger to record before
// anything is signed: ONE raft entry that consumes the token and records
// the node as joining, with the public keys it will be certified for and
// an overlay IP the cluster state picks, compare-and-set against the
// current state.
type Admission struct {
	Token      TokenHash
	NodeID     string
	Name       string
	Role       trust.Role
	Underlay   string // the joiner's underlay IP as it advertises it
	SourceAddr string // the joiner's source IP as the control node saw it
	// Relay: the joiner offers itself as a Nebula relay (`relay: true`).
	Relay bool `json:",omitempty"`
	// OverlayIP is zero from the enroll server: the FSM picks the lowest
	// free host address while it applies the entry, so concurrent
	// admissions never collide. A caller that needs a given address (a
	// test, a tool) sets it; it must then be free, else ErrIPTaken.
	OverlayIP    netip.Prefix
	TLSPublicKey []byte    // PKIX DER of the key in the joiner's CSR (signature checked)
	NebulaPub    []byte    // PEM
	Version      string    // joiner's agent version
	Ports        Ports     // where the joiner listens
	At           time.Time // the admitting node's clock; expiry is judged at this instant
	// HostName is the joiner's hostname when the key it joins with was
	// minted with --name-from-host; the FSM gives it as the name when it
	// is valid and free.
	HostName string `json:",omitempty"`
	// Ephemeral: the joiner asked to be ephemeral (Request.Ephemeral).
	Ephemeral bool `json:",omitempty"`
	// Identity is set for a join by a verified JWT (identity.go) in place
	// of a token: Token is then zero, and the FSM records Identity.JTI so
	// the JWT admits once.
	Identity *Identity `json:",omitempty"`
}

// Placement is what the ledger recorded for an admission: the node's name
// (the token's, or the one the cluster gave under a key) and overlay IP
// with the cluster prefix length.
type Placement struct {
	Name      string
	OverlayIP netip.Prefix
}

// ErrIPTaken is returned by Ledger.Admit when an admission named an
// overlay IP that is already allocated. The enroll server never names one
// (the FSM picks), so it never sees this; it stays for admissions that do
// and for raft log entries written before the FSM picked.
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
//
// An admission takes three steps: Admit records the node as joining (the
// token is consumed and the IP allocated), the Signer certifies what that
// record says, and RecordCerts makes the node active with the
// certificates; AbortAdmission undoes Admit when signing fails.
type Ledger interface {
	// Token returns the record for h; ok is false if there is none.
	Token(ctx context.Context, h TokenHash) (rec TokenRecord, ok bool, err error)
	// NameTaken reports whether a node that is not a former one (left,
	// removed, failed) has name.
	NameTaken(ctx context.Context, name string) (bool, error)
	// Admit applies the admission as ONE raft entry (consume the token,
	// record the node as joining with its keys, allocate the overlay IP the
	// FSM picks, and under a key the name it gives) or fails with nothing
	// changed. It returns the name and overlay IP as the record holds them.
	Admit(ctx context.Context, a Admission) (Placement, error)
	// RecordCerts records the certificates signed for the joining node
	// nodeID and makes it active: only a joining node with no certificates
	// yet, and only certificates for the keys its record holds.
	RecordCerts(ctx context.Context, nodeID string, tlsCert, nebulaCert []byte) error
	// AbortAdmission undoes the admission of the joining node nodeID: its
	// record is deleted, its overlay IP freed and its token unused again.
	AbortAdmission(ctx context.Context, nodeID string) error
	// JoinFacts returns what a joiner of role r needs to know.
	JoinFacts(ctx context.Context, r trust.Role) (JoinFacts, error)
}

// SignRequest names the admission a certificate is for: the node id of a
// joining record. The signer certifies only what the cluster recorded for
// that node (name, role, overlay IP, public keys, and the underlay IP of a
// control node) and refuses (codes.SignRefused) a node that is not joining
// or already has certificates. Name, Role and OverlayIP are what the
// requester expects: when set they must equal the record, else
// codes.SignRefused; they never go into a certificate.
type SignRequest struct {
	NodeID    string
	Name      string
	Role      trust.Role
	OverlayIP netip.Prefix
	CSR       []byte // TLS only: DER PKCS#10 whose key must be the recorded TLS key
	// Renewal names the renewal token of a stock Nebula member's renewal
	// (Nebula only): NodeID is then an active member, and the CA holder
	// signs for its recorded key and records the certificate, spending
	// the token, in one raft entry.
	Renewal TokenHash
}

// Signer signs certificates for an admitted joiner: the CA holder checks
// the request against raft and signs locally; other control nodes forward
// the request to it over mTLS.
type Signer interface {
	SignTLS(ctx context.Context, req SignRequest) (certPEM []byte, err error)
	SignNebula(ctx context.Context, req SignRequest) (certPEM []byte, err error)
}
