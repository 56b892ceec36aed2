package control

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// A member is a node whose raft record is active (joining, with its
// certificates recorded, passes too, but only the routes its join needs
// serve it: servedToJoining) and whose TLS leaf, as
// presented at the handshake, is one raft issued to it: the one the record
// lists (TLSFingerprint, or PrevTLSFingerprint while a renewal is adopted),
// or an earlier one it retired (a renewal certifies the same key, so only
// the node itself holds any of them; a raft connection opened before two
// renewals keeps its leaf and must not be cut for it), in the role the
// record gives it (which must be the leaf's role). Every door of ports
// 7300 and 7301 asks this of its peer, and open connections are asked
// again whenever node records change.

// errNoRecord marks a leaf whose node this FSM has no record of (yet: a
// follower may lag behind the new node's admission).
var errNoRecord = errors.New("no record of this node")

// judgeLeaf checks leaf against fsm's records and returns the member's
// record. A node fsm has never heard of is errNoRecord (wrapped in
// codes.NotMember); anything else that fails is codes.NotMember.
func judgeLeaf(fsm *state.FSM, leaf *x509.Certificate) (state.Node, error) {
	role, err := pki.RoleOf(leaf)
	id := pki.NodeIDOf(leaf)
	if err != nil || id == "" {
		return state.Node{}, codes.Wrap(codes.NotMember, fmt.Errorf("leaf %q names no node id and role", leaf.Subject.CommonName))
	}
	n, ok := fsm.Node(id)
	if !ok {
		return state.Node{}, codes.Wrap(codes.NotMember, fmt.Errorf("node %s: %w", id, errNoRecord))
	}
	if n.State != state.NodeActive && n.State != state.NodeJoining {
		return state.Node{}, codes.Wrap(codes.NotMember, fmt.Errorf("node %s (%s) is %s", n.Name, id, n.State))
	}
	fp := pki.FingerprintOf(leaf).String()
	if !holdsLeaf(n, fp) {
		return state.Node{}, codes.Wrap(codes.NotMember, fmt.Errorf("node %s presented a leaf that is not the one raft records for it", n.Name))
	}
	if n.Role != role {
		return state.Node{}, codes.Wrap(codes.NotMember, fmt.Errorf("node %s: leaf role %s, recorded role %s", n.Name, role, n.Role))
	}
	return n, nil
}

// member is the guard's membership check for a request to rt, after
// callerOf accepted the leaf's chain and role. A refusal that may come
// from this node lagging the leader (mayLag) gets one read index
// (SyncRead) and a second look before it stands. While
// this node has no cluster record at all (a control node joining, whose
// FSM the leader has not filled yet), only servedWhileJoining routes are
// served, to control leaves of the CA (checked at the handshake and by
// callerOf).
func (p *Plane) member(ctx context.Context, leaf *x509.Certificate, rt Route, forwarded bool) (Caller, error) {
	fsm := p.raft.FSM()
	if _, ok := fsm.Cluster(); !ok {
		if servedWhileJoining(rt) {
			role, _ := pki.RoleOf(leaf)
			return Caller{NodeID: pki.NodeIDOf(leaf), Name: leaf.Subject.CommonName, Role: role, Forwarded: forwarded}, nil
		}
		if err := p.CaughtUp(ctx); err != nil {
			return Caller{}, err
		}
		if _, ok := fsm.Cluster(); !ok {
			return Caller{}, codes.Wrap(codes.NotMember, errors.New("this node has no cluster records yet; ask another control node"))
		}
	}
	n, err := judgeLeaf(fsm, leaf)
	// A joining record on a route only members serve may be this node
	// lagging the confirmation: one read index, as for a refusal.
	lagJoin := err == nil && n.State == state.NodeJoining && !servedToJoining(rt)
	if (err != nil && mayLag(fsm, leaf, err)) || lagJoin {
		if serr := p.SyncRead(ctx); serr != nil {
			return Caller{}, serr
		}
		n, err = judgeLeaf(fsm, leaf)
	}
	if err != nil {
		return Caller{}, err
	}
	if n.State == state.NodeJoining && !servedToJoining(rt) {
		return Caller{}, codes.Wrap(codes.NotMember, fmt.Errorf("node %s is joining; it is a member once its join is confirmed", n.Name))
	}
	if !slices.Contains(rt.Roles, n.Role) {
		return Caller{}, codes.Wrap(codes.PeerRoleDenied, fmt.Errorf("node %s has role %s; this route needs %v", n.Name, n.Role, rt.Roles))
	}
	return Caller{NodeID: n.ID, Name: n.Name, Role: n.Role, Forwarded: forwarded}, nil
}

// mayLag reports whether this node's refusal of leaf (err from judgeLeaf)
// may come from its FSM lagging the leader's, so that a read index is
// worth one more look: no record yet, a record still joining (its
// certificates were recorded a moment ago), or another leaf than the one
// recorded (a renewal on its way). A removed or left node is final and
// costs no round trip to the leader.
func mayLag(fsm *state.FSM, leaf *x509.Certificate, err error) bool {
	if errors.Is(err, errNoRecord) {
		return true
	}
	n, ok := fsm.Node(pki.NodeIDOf(leaf))
	return ok && !n.State.Former()
}

// servedToJoining: the routes a node whose certificates are recorded but
// whose join is not yet confirmed may call, the ones its join needs: the
// node list, revocations and gossip keys (its overlay and gossip), the
// raft join and read index (a control node), its confirmation or its undo
// (abortjoin.go), and leave.
func servedToJoining(rt Route) bool {
	switch rt.Path {
	case PathNodes, PathWatch, PathRevocations, PathGossipKeys, PathCABundle, PathRaftJoin, PathRaftStats, PathIndex, PathConfirm,
		PathAbortJoin, PathLeft:
		return true
	}
	return false
}

// servedWhileJoining: the one route a control node answers before its
// FSM holds the cluster: the leader reads its raft progress before it
// promotes it.
func servedWhileJoining(rt Route) bool {
	return rt.Method == "GET" && rt.Path == PathRaftStats
}

// raftPeer is the raft port's check (accepted and dialed connections):
// a member control node passes; so does a node raft's configuration lists
// whose record this FSM has not caught up with yet (none, still joining, or
// an older leaf: the leader added or renewed it a moment ago).
// A node on record that is not active, or whose leaf is not the recorded
// one, is refused. While this node has no cluster record (joining, or
// restarted before raft replayed its log) there is nothing to judge
// against: the handshake's checks (CA, control role) decide.
func (p *Plane) raftPeer(leaf *x509.Certificate) error {
	fsm := p.raft.FSM()
	if _, ok := fsm.Cluster(); !ok {
		return nil
	}
	n, err := judgeLeaf(fsm, leaf)
	switch {
	case err != nil && mayLag(fsm, leaf, err) && p.raft.IsMember(pki.NodeIDOf(leaf)):
		return nil
	case err != nil:
		return err
	case n.Role != pki.RoleControl:
		return codes.Wrap(codes.PeerRoleDenied, fmt.Errorf("node %s is not a control node", n.Name))
	}
	return nil
}

// stillMember is the recheck of an open connection on port 7300 after
// node records changed: a leaf judged a member before that is now
// refused closes its connection. A node without a record (on a lagging
// follower) is left to the guard of its next request.
func (p *Plane) stillMember(leaf *x509.Certificate) error {
	fsm := p.raft.FSM()
	if _, ok := fsm.Cluster(); !ok {
		return nil
	}
	if _, err := judgeLeaf(fsm, leaf); err != nil && !errors.Is(err, errNoRecord) {
		return err
	}
	return nil
}

// watchNodes runs until stop: each time raft applied a change to node
// records it pokes the overlay reconcile (a removal reaches this node's
// Nebula blocklist at once, not at the next tick) and closes every open
// connection, on 7300 and on 7301, whose peer is no longer a member.
func (p *Plane) watchNodes(stop <-chan struct{}) {
	changed := p.raft.FSM().NodesChanged()
	for {
		select {
		case <-stop:
			return
		case <-changed:
		}
		p.hooks.Poke()
		nr := p.raft.RecheckPeers()
		na := p.conns.recheck(p.stillMember)
		if nr+na > 0 {
			p.log.Info("closed the connections of peers that are no longer members", "code", codes.NotMember,
				"raft", nr, "api", na)
		}
	}
}

// holdsLeaf reports whether fp is a TLS leaf raft issued to n: current,
// previous or retired (removal revokes them all).
func holdsLeaf(n state.Node, fp string) bool {
	return fp != "" && (fp == n.TLSFingerprint || fp == n.PrevTLSFingerprint || slices.Contains(n.Retired, fp))
}
