package state

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// An admission takes three entries: Admit records the node as joining
// (token consumed, overlay IP picked here, its public keys recorded), the
// CA holder signs what that record says, RecordCerts records the
// certificates and makes the node active; AbortAdmission undoes an Admit
// whose signing failed.

// RecordCerts records the certificates the CA holder signed for a joining
// node: a compare-and-set that only a joining node with no certificates
// passes. With Joining set (every writer since issue 11) the node stays
// joining until ConfirmJoin; an entry without it (written before) makes
// the node active, as it did then, so old logs replay to the same state. The writer has parsed both certificates
// and checked that they certify the node's recorded keys; the fingerprints
// and expiry are what it read from them.
type RecordCerts struct {
	NodeID            string    `json:"node_id"`
	TLSCert           []byte    `json:"tls_cert"` // PEM
	TLSFingerprint    string    `json:"tls_fingerprint"`
	TLSExpires        time.Time `json:"tls_expires"`
	NebulaCert        []byte    `json:"nebula_cert"` // PEM
	NebulaFingerprint string    `json:"nebula_fingerprint"`
	NebulaExpires     time.Time `json:"nebula_expires"`
	At                time.Time `json:"at"`
	Actor             string    `json:"actor,omitempty"`
	Joining           bool      `json:"joining,omitempty"`
}

// AbortAdmission undoes the Admit of a node that is still joining and
// has no certificates recorded: its record is deleted and its overlay IP
// freed (a reused record goes back to its former state instead, keeping
// its IP), and the token it consumed is unused again. Any other node is
// refused.
type AbortAdmission struct {
	NodeID string    `json:"node_id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor,omitempty"`
}

func (RecordCerts) commandType() cmdType    { return typeRecordCerts }
func (AbortAdmission) commandType() cmdType { return typeAbortAdmission }

// checkJoining checks an admission that records a joining node: both
// public keys present, no certificate yet. It fills the node's TLS key
// from the admission when the node carries none. A stock Nebula member
// (role nebula) has a Nebula key and no TLS key (checkNebulaJoining).
func checkJoining(name string, role pki.Role, a enroll.Admission, n *Node) error {
	if role == pki.RoleNebula {
		return checkNebulaJoining(name, a, n)
	}
	if n.TLSPublicKey == nil {
		n.TLSPublicKey = bytes.Clone(a.TLSPublicKey)
	}
	if len(n.TLSPublicKey) == 0 || (len(a.TLSPublicKey) > 0 && !bytes.Equal(a.TLSPublicKey, n.TLSPublicKey)) {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("admit %s: want one TLS public key", name))
	}
	if len(a.NebulaPub) == 0 && len(n.NebulaPublicKey) == 0 {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("admit %s: no Nebula public key", name))
	}
	if len(n.TLSCert) > 0 || len(n.NebulaCert) > 0 || n.State != "" && n.State != NodeJoining {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("admit %s: a joining node has no certificates and no other state", name))
	}
	return nil
}

// admitIP is the overlay IP an admission gets. With none named it is the
// lowest free host address of the overlay, picked here so that concurrent
// admissions never collide. A named one (always, in a v1 entry) must be a
// host address of the overlay with its prefix length, and free, else
// enroll.ErrIPTaken.
func (s *Snapshot) admitIP(name string, a enroll.Admission, n Node, v1 bool) (netip.Addr, error) {
	if !a.OverlayIP.IsValid() && !v1 {
		if n.OverlayIP.IsValid() {
			return netip.Addr{}, codes.Wrap(codes.BadRequest, fmt.Errorf("admit %s: node names overlay %v, the admission none", name, n.OverlayIP))
		}
		return s.freeIP()
	}
	ip := a.OverlayIP.Addr().Unmap()
	if err := checkHost(s.Cluster.Overlay, ip); err != nil {
		return netip.Addr{}, err
	}
	if a.OverlayIP.Bits() != s.Cluster.Overlay.Bits() || (n.OverlayIP.IsValid() && n.OverlayIP.Unmap() != ip) {
		return netip.Addr{}, codes.Wrap(codes.BadRequest, fmt.Errorf("admit %s: overlay %v does not match node %v in cluster %v", name, a.OverlayIP, n.OverlayIP, s.Cluster.Overlay))
	}
	if holder, taken := s.IPAM[ip]; taken {
		return netip.Addr{}, fmt.Errorf("admit %s: %v held by node %s: %w", name, ip, holder, enroll.ErrIPTaken)
	}
	return ip, nil
}

// freeIP is the lowest unallocated host address of the cluster overlay.
func (s *Snapshot) freeIP() (netip.Addr, error) {
	if s.Cluster == nil {
		return netip.Addr{}, codes.Wrap(codes.NotInCluster, errors.New("no cluster yet"))
	}
	p := s.Cluster.Overlay
	first, end, ok := hostRange(p)
	for a := first; ok && a.Less(end); a = a.Next() {
		if _, taken := s.IPAM[a]; !taken {
			return a, nil
		}
	}
	return netip.Addr{}, codes.Wrap(codes.Internal, fmt.Errorf("overlay %v has no free address", p))
}

func (c RecordCerts) applyTo(s *Snapshot) error {
	n, ok := s.Nodes[c.NodeID]
	if !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("record certificates: no node with id %q", c.NodeID))
	}
	if n.State != NodeJoining || n.TLSFingerprint != "" || n.NebulaFingerprint != "" || len(n.TLSCert) > 0 || len(n.NebulaCert) > 0 {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("record certificates: node %s is %s with certificates %v; only a joining node without any takes them",
			n.Name, n.State, n.TLSFingerprint != "" || n.NebulaFingerprint != ""))
	}
	nebulaOnly := n.Role == pki.RoleNebula
	if nebulaOnly && (len(c.TLSCert) > 0 || c.TLSFingerprint != "") {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("record certificates of %s: a stock Nebula member has no TLS leaf", n.Name))
	}
	if (!nebulaOnly && (len(c.TLSCert) == 0 || c.TLSFingerprint == "" || c.TLSExpires.IsZero())) ||
		len(c.NebulaCert) == 0 || c.NebulaFingerprint == "" || c.NebulaExpires.IsZero() {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("record certificates of %s: want both certificates with fingerprints and expiry", n.Name))
	}
	n.TLSCert, n.TLSFingerprint, n.TLSExpires = bytes.Clone(c.TLSCert), c.TLSFingerprint, c.TLSExpires
	n.NebulaCert, n.NebulaFingerprint, n.NebulaExpires = bytes.Clone(c.NebulaCert), c.NebulaFingerprint, c.NebulaExpires
	n.NebulaIssued = c.At
	n.Updated = c.At
	event := codes.EventCertsRecorded
	if !c.Joining || nebulaOnly {
		// A stock Nebula member has no meshd to confirm its join: its
		// certificate recorded, it is active.
		n.State, n.Prior, event = NodeActive, "", codes.EventNodeActive
	}
	s.Nodes[n.ID] = n
	s.audit(AuditEvent{Code: event, At: c.At, Actor: c.Actor, Subject: n.Name,
		Detail: fmt.Sprintf("node %s certified: TLS %s, Nebula %s", n.ID, c.TLSFingerprint, c.NebulaFingerprint)})
	return nil
}

func (c AbortAdmission) applyTo(s *Snapshot) error {
	n, ok := s.Nodes[c.NodeID]
	if !ok {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("abort admission: no node with id %q", c.NodeID))
	}
	if n.State != NodeJoining {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("abort admission: node %s is %s, not joining", n.Name, n.State))
	}
	if n.TLSFingerprint != "" || n.NebulaFingerprint != "" {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("abort admission: node %s has certificates recorded", n.Name))
	}
	// Its token is unused again, a key's use and a JWT's jti given back:
	// the same token or JWT may be used again while it is valid (nothing
	// was certified).
	s.giveBack(n)
	if n.Prior != "" {
		// A reused record: back to the former node it was, without keys
		// (the certificates it held were revoked when it was reused).
		n.State, n.Prior, n.Token, n.Updated = n.Prior, "", enroll.TokenHash{}, c.At
		n.TLSPublicKey, n.NebulaPublicKey = nil, nil
		s.Nodes[n.ID] = n
	} else {
		if s.IPAM[n.OverlayIP] == n.ID {
			delete(s.IPAM, n.OverlayIP)
		}
		delete(s.Nodes, n.ID)
	}
	s.audit(AuditEvent{Code: codes.EventAdmissionAborted, At: c.At, Actor: c.Actor, Subject: n.Name,
		Detail: fmt.Sprintf("node %s at %s undone; its token is unused again", n.ID, n.OverlayIP)})
	return nil
}
