package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// Ledger is enroll.Ledger (and enroll.Resumer) over this control node's
// raft and FSM.
type Ledger struct{ p *Plane }

var _ enroll.Ledger = (*Ledger)(nil)

// Token answers from this node's FSM when it holds the token and does a
// read index (a round trip to the leader) only when it does not: a token
// minted a moment ago on another node may not have reached it yet. Admit's
// compare-and-set judges the current record (enroll.LookupToken).
func (l *Ledger) Token(ctx context.Context, h enroll.TokenHash) (enroll.TokenRecord, bool, error) {
	return enroll.LookupToken(ctx, h, l.p.raft.FSM().Token, l.p.SyncRead)
}

func (l *Ledger) NameTaken(ctx context.Context, name string) (bool, error) {
	if err := l.p.SyncRead(ctx); err != nil {
		return false, err
	}
	_, ok := l.p.raft.FSM().NodeByName(name)
	return ok, nil
}

// FormerNodeID is the id of the former node (left, removed, failed) named
// name, after a read index: its admission reuses that record.
func (l *Ledger) FormerNodeID(ctx context.Context, name string) (string, bool, error) {
	if err := l.p.SyncRead(ctx); err != nil {
		return "", false, err
	}
	n, ok := l.p.raft.FSM().FormerNode(name)
	return n.ID, ok, nil
}

var _ enroll.Former = (*Ledger)(nil)

// Admit applies ONE raft entry: consume the token, record the node as
// joining with its public keys, allocate the overlay IP the FSM picks. The
// FSM re-checks everything (compare-and-set). The IP is read back from
// this node's FSM once it has applied the entry (WriteApplied).
func (l *Ledger) Admit(ctx context.Context, a enroll.Admission) (enroll.Placement, error) {
	n := state.Node{
		ID: a.NodeID, Name: a.Name, Role: a.Role, State: state.NodeJoining,
		Underlay: a.Underlay, TLSPublicKey: a.TLSPublicKey, NebulaPublicKey: a.NebulaPub,
		Version: a.Version, Created: a.At, Updated: a.At,
	}
	if a.OverlayIP.IsValid() {
		n.OverlayIP = a.OverlayIP.Addr()
	}
	if a.Ports.Gossip > 0 {
		// Gossip rides the overlay (DESIGN §11): the node gossips from
		// its overlay address, which the FSM picks when the admission
		// names none; then only the port is recorded (":7946"). Never
		// the underlay: a record's underlay gossip address is what marks
		// a node an earlier release admitted (GossipPeer).
		host := ""
		if a.OverlayIP.IsValid() {
			host = a.OverlayIP.Addr().String()
		}
		n.SerfAddr = net.JoinHostPort(host, strconv.Itoa(a.Ports.Gossip))
	}
	n.NebulaPort = a.Ports.Nebula
	if a.Role == pki.RoleControl && a.Ports.Control > 0 && a.Ports.Raft > 0 {
		n.EnrollAddr = net.JoinHostPort(a.Underlay, strconv.Itoa(a.Ports.Control))
		n.RaftAddr = net.JoinHostPort(a.Underlay, strconv.Itoa(a.Ports.Raft))
	}
	if err := l.p.WriteApplied(ctx, &state.Admit{Admission: a, Node: n, Actor: l.p.self(), Names: true}); err != nil {
		return enroll.Placement{}, err
	}
	rec, ok := l.p.raft.FSM().Node(a.NodeID)
	c, cok := l.p.raft.FSM().Cluster()
	if !ok || !cok || rec.State != state.NodeJoining || !rec.OverlayIP.IsValid() {
		return enroll.Placement{}, codes.Wrap(codes.Internal, fmt.Errorf("admission of %s applied but node %s is not joining here", a.Name, a.NodeID))
	}
	return enroll.Placement{Name: rec.Name, OverlayIP: netip.PrefixFrom(rec.OverlayIP, c.Overlay.Bits())}, nil
}

// RecordCerts parses both certificates, checks that they certify what
// raft records for the joining node (TLS: its recorded key, id and name;
// Nebula: its recorded key, name and overlay IP), and writes RecordCerts,
// a compare-and-set on a joining node without certificates; the node
// stays joining until the joiner confirms (ConfirmJoin).
func (l *Ledger) RecordCerts(ctx context.Context, nodeID string, tlsCert, nebulaCert []byte) error {
	if err := l.p.SyncRead(ctx); err != nil {
		return err
	}
	n, ok := l.p.raft.FSM().Node(nodeID)
	c, cok := l.p.raft.FSM().Cluster()
	if !ok || !cok || n.State != state.NodeJoining {
		return codes.Wrap(codes.NodeUnknown, fmt.Errorf("record certificates: no joining node %s", nodeID))
	}
	rc := &state.RecordCerts{NodeID: nodeID, At: l.p.now(), Actor: l.p.self(), Joining: true}
	if n.Role != pki.RoleNebula || len(tlsCert) > 0 { // a stock Nebula member has no TLS leaf
		leaf, err := pki.ParseCertPEM(tlsCert)
		if err != nil {
			return fmt.Errorf("record certificates of %s: TLS leaf: %w", n.Name, err)
		}
		if err := leafMatches(leaf, n); err != nil {
			return fmt.Errorf("record certificates of %s: %w", n.Name, err)
		}
		rc.TLSCert, rc.TLSFingerprint, rc.TLSExpires = tlsCert, pki.FingerprintOf(leaf).String(), leaf.NotAfter
	}
	nebFP, nebExp, err := pki.NebulaCertInfo(nebulaCert)
	if err != nil {
		return fmt.Errorf("record certificates of %s: Nebula certificate: %w", n.Name, err)
	}
	if err := nebulaMatches(nebulaCert, c, n); err != nil {
		return fmt.Errorf("record certificates of %s: %w", n.Name, err)
	}
	rc.NebulaCert, rc.NebulaFingerprint, rc.NebulaExpires = nebulaCert, nebFP, nebExp
	idx, err := l.p.writeAt(ctx, rc)
	if err != nil {
		return err
	}
	// The joiner's first calls (node list, revocations, confirmation)
	// come to this seed: answered once this node has applied the
	// certificates, they pass its member check at once instead of each
	// costing a read index to the leader (TestSites: 0.43 s of a worker's
	// first node list on the far site). Recorded either way: a wait cut
	// short is not an error.
	if err := l.p.appliedHere(ctx, idx); err != nil {
		l.p.log.Debug("certificates recorded; this node has not applied them yet", "node_id", nodeID, "err", err)
	}
	l.p.hooks.Poke() // the new node's record feeds this node's overlay at once
	return nil
}

// AbortAdmission writes AbortAdmission: the FSM deletes the record only if
// the node is still joining. It then waits (a read index) until this
// node's FSM has applied it, so a retry through this node sees the token
// unused; that wait failing does not undo the write, so it is not an error.
func (l *Ledger) AbortAdmission(ctx context.Context, nodeID string) error {
	if err := l.p.Write(ctx, &state.AbortAdmission{NodeID: nodeID, At: l.p.now(), Actor: l.p.self()}); err != nil {
		return err
	}
	if err := l.p.SyncRead(ctx); err != nil {
		l.p.log.Debug("admission undone; this node has not applied it yet", "node_id", nodeID, "err", err)
	}
	return nil
}

func (l *Ledger) JoinFacts(_ context.Context, r pki.Role) (enroll.JoinFacts, error) {
	c, ok := l.p.raft.FSM().Cluster()
	if !ok {
		return enroll.JoinFacts{}, codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	f := enroll.JoinFacts{
		ClusterID: c.ID, ClusterName: c.Name, CACert: c.TrustBundle(), NebulaCACert: c.NebulaTrustBundle(),
		Overlay: c.Overlay, GossipKeys: c.GossipKeys,
	}
	for _, n := range l.p.raft.FSM().Nodes() {
		if n.Role != pki.RoleControl || n.State != state.NodeActive {
			continue
		}
		if n.EnrollAddr != "" {
			f.Seeds = append(f.Seeds, n.EnrollAddr)
		}
		if g := GossipPeer(n.OverlayIP, n.SerfAddr); g != "" {
			f.SerfPeers = append(f.SerfPeers, g)
		}
		if n.NebulaPort != 0 {
			f.Lighthouses = append(f.Lighthouses, enroll.Lighthouse{OverlayIP: n.OverlayIP,
				Underlay: net.JoinHostPort(n.Underlay, strconv.Itoa(n.NebulaPort))})
		}
		if r == pki.RoleControl && n.RaftAddr != "" {
			f.RaftPeers = append(f.RaftPeers, enroll.RaftPeer{ID: n.ID, Address: n.RaftAddr})
		}
	}
	return f, nil
}

var _ enroll.Resumer = (*Ledger)(nil)

// Admitted returns what the cluster recorded for the node a token
// admitted, so that an enrollment that did not finish can be resumed: an
// active node with its admission leaf, or a node still joining (no
// certificates yet) with its recorded keys.
func (l *Ledger) Admitted(ctx context.Context, nodeID string) (enroll.Admitted, bool, error) {
	if err := l.p.SyncRead(ctx); err != nil {
		return enroll.Admitted{}, false, err
	}
	n, ok := l.p.raft.FSM().Node(nodeID)
	c, cok := l.p.raft.FSM().Cluster()
	if !ok || !cok {
		return enroll.Admitted{}, false, nil
	}
	joining := n.State == state.NodeJoining && len(n.TLSCert) == 0 && len(n.NebulaCert) == 0
	if !joining && (n.State.Former() || len(n.TLSCert) == 0) {
		return enroll.Admitted{}, false, nil
	}
	return enroll.Admitted{NodeID: n.ID, Name: n.Name, Role: n.Role, Joining: joining, TLSPublicKey: n.TLSPublicKey,
		TLSCert: n.TLSCert, NebulaCert: n.NebulaCert, NebulaPub: n.NebulaPublicKey,
		OverlayIP: netip.PrefixFrom(n.OverlayIP, c.Overlay.Bits())}, true, nil
}
