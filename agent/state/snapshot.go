package state

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// Snapshot format: the magic line, one version byte, then the JSON of a
// Snapshot. A new format gets a new version byte and a reader of its own;
// testdata/snapshot-v1.bin is frozen and must keep decoding.
const (
	snapshotMagic   = "meshd-snapshot\n"
	SnapshotVersion = 1 // the version WriteSnapshot writes and ReadSnapshot reads
)

// Snapshot is the whole cluster state, as the FSM holds it and as a raft
// snapshot stores it.
type Snapshot struct {
	Cluster     *Cluster                                `json:"cluster,omitempty"`  // nil before Bootstrap
	Nodes       map[string]Node                         `json:"nodes"`              // by node id
	Tokens      map[enroll.TokenHash]enroll.TokenRecord `json:"tokens"`             // by secret hash
	IPAM        map[netip.Addr]string                   `json:"ipam"`               // overlay IP -> node id
	Revocations []Revocation                            `json:"revocations"`        // oldest first
	Audit       []AuditEvent                            `json:"audit"`              // oldest first, at most AuditSize
	Requests    []RequestResult                         `json:"requests,omitempty"` // oldest first, at most RequestsKept
	// RevocationAcks are the removals' acknowledgement rounds, by removed node id.
	RevocationAcks map[string]RevocationAck `json:"revocation_acks,omitempty"`
	// JTIs are the JWTs joins by identity used (issue 31), by replay key
	// (enroll.Identity.JTI): each admits once. PruneTokens drops them once
	// expired, when no JWT could use them again.
	JTIs  map[string]JTIUse `json:"jtis,omitempty"`
	Index uint64            `json:"index,omitempty"` // raft index of the last command applied
}

// WriteSnapshot writes s in the current format.
func WriteSnapshot(w io.Writer, s *Snapshot) error {
	if s == nil {
		return errors.New("write snapshot: nil")
	}
	bw := bufio.NewWriter(w)
	bw.WriteString(snapshotMagic)
	bw.WriteByte(SnapshotVersion)
	if err := json.NewEncoder(bw).Encode(s); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	return nil
}

// ReadSnapshot reads a snapshot WriteSnapshot wrote. An unknown version is
// codes.SnapshotVersion; anything else unreadable is an error carrying
// codes.Internal.
func ReadSnapshot(r io.Reader) (*Snapshot, error) {
	head := make([]byte, len(snapshotMagic)+1)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, codes.Wrap(codes.Internal, fmt.Errorf("read snapshot header: %w", err))
	}
	if !bytes.Equal(head[:len(snapshotMagic)], []byte(snapshotMagic)) {
		return nil, codes.Wrap(codes.Internal, errors.New("read snapshot: not a meshd snapshot"))
	}
	if v := head[len(snapshotMagic)]; v != SnapshotVersion {
		return nil, codes.Wrap(codes.SnapshotVersion, fmt.Errorf("read snapshot: format version %d, this meshd reads %d", v, SnapshotVersion))
	}
	dec := json.NewDecoder(r)
	var s Snapshot
	if err := dec.Decode(&s); err != nil {
		return nil, codes.Wrap(codes.Internal, fmt.Errorf("read snapshot: %w", err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, codes.Wrap(codes.Internal, errors.New("read snapshot: trailing data"))
	}
	if err := s.check(); err != nil {
		return nil, codes.Wrap(codes.Internal, fmt.Errorf("read snapshot: %w", err))
	}
	s.normalise()
	return &s, nil
}

// check verifies that the map keys agree with the records they index.
func (s *Snapshot) check() error {
	for id, n := range s.Nodes {
		if id != n.ID {
			return fmt.Errorf("node %q filed under %q", n.ID, id)
		}
	}
	for h, r := range s.Tokens {
		if h != r.Hash {
			return fmt.Errorf("token %s filed under %s", r.Hash, h)
		}
	}
	for id, a := range s.RevocationAcks {
		if id != a.NodeID {
			return fmt.Errorf("revocation acknowledgements of %q filed under %q", a.NodeID, id)
		}
	}
	for ip, id := range s.IPAM {
		if !ip.IsValid() || ip != ip.Unmap() {
			return fmt.Errorf("bad overlay IP %v in the allocations", ip)
		}
		if _, ok := s.Nodes[id]; !ok {
			return fmt.Errorf("overlay IP %v allocated to unknown node %q", ip, id)
		}
	}
	return nil
}

// normalise gives s empty maps instead of nil ones, nil slices instead of
// empty ones, and an audit ring of at most AuditSize, so that equal states
// compare equal.
func (s *Snapshot) normalise() {
	if s.Nodes == nil {
		s.Nodes = map[string]Node{}
	}
	if s.Tokens == nil {
		s.Tokens = map[enroll.TokenHash]enroll.TokenRecord{}
	}
	if s.IPAM == nil {
		s.IPAM = map[netip.Addr]string{}
	}
	if len(s.Revocations) == 0 {
		s.Revocations = nil
	}
	if len(s.Audit) > AuditSize {
		s.Audit = slices.Clone(s.Audit[len(s.Audit)-AuditSize:])
	}
	if len(s.Audit) == 0 {
		s.Audit = nil
	}
	if len(s.Requests) > RequestsKept {
		s.Requests = slices.Clone(s.Requests[len(s.Requests)-RequestsKept:])
	}
	if len(s.Requests) == 0 {
		s.Requests = nil
	}
	if len(s.RevocationAcks) == 0 {
		s.RevocationAcks = nil
	}
	if len(s.JTIs) == 0 {
		s.JTIs = nil
	}
}

// clone returns a deep copy of s.
func (s *Snapshot) clone() *Snapshot {
	c := &Snapshot{
		Nodes:       make(map[string]Node, len(s.Nodes)),
		Tokens:      maps.Clone(s.Tokens),
		IPAM:        maps.Clone(s.IPAM),
		Revocations: slices.Clone(s.Revocations),
		Audit:       slices.Clone(s.Audit),
		Requests:    slices.Clone(s.Requests),
		JTIs:        maps.Clone(s.JTIs),
		Index:       s.Index,
	}
	if s.Cluster != nil {
		cl := s.Cluster.clone()
		c.Cluster = &cl
	}
	for id, n := range s.Nodes {
		c.Nodes[id] = n.clone()
	}
	if s.RevocationAcks != nil {
		c.RevocationAcks = make(map[string]RevocationAck, len(s.RevocationAcks))
		for id, a := range s.RevocationAcks {
			a.Acked, a.Pending = slices.Clone(a.Acked), slices.Clone(a.Pending)
			c.RevocationAcks[id] = a
		}
	}
	c.normalise()
	return c
}
