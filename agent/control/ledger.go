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

func (l *Ledger) FreeOverlayIP(ctx context.Context) (netip.Prefix, error) {
	if err := l.p.SyncRead(ctx); err != nil {
		return netip.Prefix{}, err
	}
	c, ok := l.p.raft.FSM().Cluster()
	if !ok {
		return netip.Prefix{}, codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	ip, err := l.p.raft.FSM().FreeIP()
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(ip, c.Overlay.Bits()), nil
}

// Admit applies ONE raft entry: consume the token, record the node and its
// overlay IP. The FSM re-checks everything (compare-and-set).
func (l *Ledger) Admit(ctx context.Context, a enroll.Admission) error {
	tlsCert, err := pki.ParseCertPEM(a.TLSCert)
	if err != nil {
		return fmt.Errorf("admitted TLS leaf: %w", err)
	}
	nebFP, nebExp, err := pki.NebulaCertInfo(a.NebulaCert)
	if err != nil {
		return fmt.Errorf("admitted Nebula cert: %w", err)
	}
	n := state.Node{
		ID: a.NodeID, Name: a.Name, Role: a.Role, State: state.NodeActive,
		Underlay: a.Underlay, OverlayIP: a.OverlayIP.Addr(),
		TLSFingerprint: pki.FingerprintOf(tlsCert).String(), TLSExpires: tlsCert.NotAfter,
		NebulaFingerprint: nebFP, NebulaExpires: nebExp, NebulaPublicKey: a.NebulaPub,
		NebulaCert: a.NebulaCert, NebulaIssued: a.At, TLSCert: a.TLSCert,
		Version: a.Version, Created: a.At, Updated: a.At,
	}
	if a.Ports.Gossip > 0 {
		n.SerfAddr = net.JoinHostPort(a.Underlay, strconv.Itoa(a.Ports.Gossip))
	}
	n.NebulaPort = a.Ports.Nebula
	if a.Role == pki.RoleControl && a.Ports.Control > 0 && a.Ports.Raft > 0 {
		n.EnrollAddr = net.JoinHostPort(a.Underlay, strconv.Itoa(a.Ports.Control))
		n.RaftAddr = net.JoinHostPort(a.Underlay, strconv.Itoa(a.Ports.Raft))
	}
	if err := l.p.Write(ctx, &state.Admit{Admission: a, Node: n, Actor: l.p.cfg.NodeID}); err != nil {
		return err
	}
	l.p.hooks.Poke() // the new node's record feeds this node's overlay at once
	return nil
}

func (l *Ledger) JoinFacts(_ context.Context, r pki.Role) (enroll.JoinFacts, error) {
	c, ok := l.p.raft.FSM().Cluster()
	if !ok {
		return enroll.JoinFacts{}, codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	f := enroll.JoinFacts{
		ClusterID: c.ID, ClusterName: c.Name, CACert: c.CACert, NebulaCACert: c.NebulaCACert,
		Overlay: c.Overlay, GossipKeys: c.GossipKeys,
	}
	for _, n := range l.p.raft.FSM().Nodes() {
		if n.Role != pki.RoleControl || n.State != state.NodeActive {
			continue
		}
		if n.EnrollAddr != "" {
			f.Seeds = append(f.Seeds, n.EnrollAddr)
		}
		if n.SerfAddr != "" {
			f.SerfPeers = append(f.SerfPeers, n.SerfAddr)
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
// admitted, so that an enrollment whose response was lost can be resumed.
func (l *Ledger) Admitted(ctx context.Context, nodeID string) (enroll.Admitted, bool, error) {
	if err := l.p.SyncRead(ctx); err != nil {
		return enroll.Admitted{}, false, err
	}
	n, ok := l.p.raft.FSM().Node(nodeID)
	c, cok := l.p.raft.FSM().Cluster()
	if !ok || !cok || n.State == state.NodeRemoved || len(n.TLSCert) == 0 {
		return enroll.Admitted{}, false, nil
	}
	return enroll.Admitted{NodeID: n.ID, Name: n.Name, Role: n.Role, TLSCert: n.TLSCert, NebulaCert: n.NebulaCert,
		NebulaPub: n.NebulaPublicKey, OverlayIP: netip.PrefixFrom(n.OverlayIP, c.Overlay.Bits())}, true, nil
}
