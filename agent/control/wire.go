package control

import (
	"net/netip"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// The internal API's bodies. Every request and answer on the wire has a
// named type here.

// ApplyRequest is a write a follower forwards to the leader.
type ApplyRequest struct {
	Tracked state.Tracked `json:"tracked"`
	// Operator is the audit actor the forwarding node claims (an Actor's
	// text: "uid=U@NODE", "node:NODE", "... via NODE"): the leader
	// records it only if it names the forwarding node's own operator or
	// the forwarding node, or a worker whose leave it relays
	// (forwardedActor); otherwise it records the forwarding node.
	Operator string `json:"operator,omitempty"`
}

// ApplyResponse is the leader's answer to a forwarded write (PathApply):
// the entry's log index, so that the follower can wait for its own FSM
// to apply it. An older leader answers without one (0).
type ApplyResponse struct {
	Index uint64 `json:"index,omitempty"`
}

// LeftRequest is a member's POST /v1/self/left: Actor is who on the
// member asked (an Actor's text); the control node records it only if
// it names the caller (relayedActor).
type LeftRequest struct {
	NodeID string `json:"node_id"`
	Actor  string `json:"actor,omitempty"`
	// Keep is the hash of the unused token a control node that leaves to
	// join again (`join --force`) joins with: it names the node as a seed,
	// and the seed sweep leaves it alone (state.Node.KeptToken).
	Keep enroll.TokenHash `json:"keep,omitzero"`
}

// IndexResponse is the leader's FSM index, for a follower's read index.
type IndexResponse struct {
	Index uint64 `json:"index"`
}

// NodeRef names one node.
type NodeRef struct {
	NodeID string `json:"node_id"`
}

// RaftRemoveRequest asks the leader to drop a server from raft: the
// caller itself, a node no longer active, or one being removed by Actor
// (an Actor's text; the leader records the removal: Plane.raftRemove).
type RaftRemoveRequest struct {
	NodeID string `json:"node_id"`
	Actor  string `json:"actor,omitempty"`
}

// RaftJoinResult answers a control node's request to become a voter.
type RaftJoinResult struct {
	Index  uint64        `json:"index"`  // the leader's commit index the node had reached
	Waited time.Duration `json:"waited"` // from AddNonvoter to AddVoter
}

// RaftStats is how far a node's raft has come, read by the leader before
// it promotes the node.
type RaftStats struct {
	LastLogIndex  uint64        `json:"last_log_index"`
	AppliedIndex  uint64        `json:"applied_index"`
	LastContact   time.Duration `json:"last_contact"` // since the last contact with a leader; -1 never
	Configuration uint64        `json:"configuration_index"`
}

// SignRequest asks the CA holder for a certificate for an admission: it
// names the joining node; the path says what to sign (PathSignTLS: a TLS
// leaf for the key in CSR, which must be the key raft recorded;
// PathSignNebula: a Nebula host cert for the recorded Nebula key). Name,
// Role and OverlayIP are what the requester expects: a record that says
// otherwise is refused (codes.SignRefused); they never go into a
// certificate, which carries only what raft records.
type SignRequest struct {
	NodeID    string       `json:"node_id"`
	Name      string       `json:"name,omitempty"`
	Role      pki.Role     `json:"role,omitempty"`
	OverlayIP netip.Prefix `json:"overlay_ip,omitzero"`
	CSR       []byte       `json:"csr,omitempty"`
	// Renewal: a stock Nebula member's renewal (enroll.SignRequest).
	Renewal enroll.TokenHash `json:"renewal,omitzero"`
}

// SignedCert is a certificate the CA holder signed.
type SignedCert struct {
	Cert []byte `json:"cert"`
}

// NebulaCertResponse is the caller's current Nebula host certificate.
type NebulaCertResponse struct {
	Cert []byte `json:"cert"`
}

// Revocations is what every node's overlay must refuse: certificate
// fingerprints of removed nodes, and the ids of nodes that are gone (left
// or removed) so they are withdrawn from the static host map.
type Revocations struct {
	Fingerprints []string `json:"fingerprints"`
	Gone         []string `json:"gone"`
	// Version is the length of the revocation list on record, which a
	// revocation query names. A worker's copy (the watch stream) carries
	// only the fingerprints a Nebula can block, not the removed nodes' TLS
	// leaves (control nodes refuse those themselves), so its Fingerprints
	// may be shorter; zero from a control node of an earlier release.
	Version int `json:"version,omitempty"`
}

// Len is the list's version: Version, or the length of Fingerprints when
// that is longer (a list from an earlier release carries no Version).
func (r Revocations) Len() int { return max(r.Version, len(r.Fingerprints)) }

// Empty is the answer of a call that only succeeds or fails.
type Empty struct{}

// ErrorBody is the body of a failed internal call: the local API's error
// shape plus the sentinels the program branches on.
type ErrorBody struct {
	apitype.Error
	IPTaken bool `json:"ip_taken,omitempty"`
}
