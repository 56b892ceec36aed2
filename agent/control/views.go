package control

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// Nodes lists every node on record, with its raft role and gossip status,
// from state at least as fresh as the leader's when a leader is reachable,
// and the members that cannot reach it (pairhealth.go).
func (p *Plane) Nodes(ctx context.Context) ([]apitype.Node, error) {
	from, err := p.readWithPairs(ctx, p.FreshRead)
	if err != nil {
		return nil, err
	}
	rows := p.nodeRows()
	for i := range rows {
		rows[i].UnreachableFrom = from[rows[i].Name]
	}
	return rows, nil
}

func (p *Plane) nodeRows() []apitype.Node {
	roles := p.raft.Roles()
	nodes := p.raft.FSM().Nodes()
	gossip := p.gossipViewOf(nodes) // outofpool.go: a worker out of the pool by its record
	lastSeen := p.lastSeenIn(nodes)
	versions := p.hooks.Versions()
	out := []apitype.Node{}
	for _, n := range nodes {
		row := NodeRow(n, roles[n.ID])
		if a, ok := p.raft.FSM().RevocationAck(n.ID); ok && n.State.Former() {
			row.Revocation = RevocationSummary(a.Pending)
		}
		if g, ok := gossip[n.Name]; ok && n.Role != pki.RoleNebula {
			row.Gossip = g
		}
		if v := cmp.Or(n.RunsVersion, versions[n.Name]); v != "" {
			row.Version = v // what it runs now (its report in raft, else its gossip tag); the record has what joined
		}
		if row.Gossip != "alive" {
			if at, ok := lastSeen(n.Name); ok {
				row.LastSeen = at
			}
		}
		out = append(out, row)
	}
	return out
}

// NodeRow is a node's record as `meshctl nodes` shows it, before gossip
// is known ("unknown").
func NodeRow(n state.Node, raftRole raftnode.Role) apitype.Node {
	if raftRole == "" {
		raftRole = raftnode.None
	}
	row := apitype.Node{
		Name: n.Name, ID: n.ID, Role: string(n.Role), State: string(n.State),
		Gossip: "unknown", Underlay: n.Underlay, Raft: string(raftRole),
		CertExpires: n.TLSExpires, Version: n.Version, Cause: n.Cause, Groups: slices.Clone(n.Groups),
		SeenFrom: n.SeenFrom, BehindNAT: apitype.NATBehind(n.Underlay, n.SeenFrom), Relay: n.Relay,
		Ephemeral: n.Ephemeral, Routes: NodeRoutes(n),
	}
	if !n.NebulaExpires.IsZero() && (row.CertExpires.IsZero() || n.NebulaExpires.Before(row.CertExpires)) {
		row.CertExpires = n.NebulaExpires
	}
	if n.Role == pki.RoleNebula {
		row.Gossip = "none" // a stock Nebula member does not gossip
	}
	if n.State.Former() {
		row.Departed = n.Updated // a departure sets it; nothing moves a former record after
	}
	if n.OverlayIP.IsValid() {
		row.OverlayIP = n.OverlayIP.String()
	}
	if n.OverlayIP6.IsValid() {
		row.OverlayIP6 = n.OverlayIP6.String()
	}
	if n.State == state.NodeActive {
		row.Unheard = n.Unheard // the control nodes' verdict (verdict.go)
	}
	return row
}

// Tokens lists the ledger's join tokens (never a secret).
func (p *Plane) Tokens(ctx context.Context) ([]apitype.Token, error) {
	if err := p.FreshRead(ctx); err != nil {
		return nil, err
	}
	now := p.clusterNow() // expiry judged as every control node judges it
	out := []apitype.Token{}
	for _, t := range p.raft.FSM().Tokens() {
		row := TokenRow(t, now)
		if t.Consumed() {
			if n, ok := p.raft.FSM().Node(t.ConsumedBy); ok {
				row.ConsumedBy = n.Name
			}
		}
		out = append(out, row)
	}
	return out, nil
}

// Revocations is what every node's overlay must refuse, from raft.
func (p *Plane) Revocations() Revocations {
	var l Revocations
	for _, r := range p.raft.FSM().Revocations() {
		l.Fingerprints = append(l.Fingerprints, r.Fingerprint)
	}
	l.Version = len(l.Fingerprints)
	for _, n := range p.raft.FSM().Nodes() {
		if n.State.Former() {
			l.Gone = append(l.Gone, n.ID)
		}
	}
	return l
}

// handleRevocations serves the revocation list to a member, after a
// strict read: a control node that cannot confirm it is as fresh as the
// leader (cut off, or healed but not caught up) answers codes.NoLeader,
// and the worker asks the next control node, instead of taking a list
// that may lack a removal (found by e2e.TestSoak: a healed control node
// served a stale list for 2.8 s).
func (p *Plane) handleRevocations(w http.ResponseWriter, r *http.Request, _ Caller) {
	if err := p.strictRead(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, p.Revocations())
}

// handleNebulaCert serves a member its own current Nebula host cert, by
// the node id in its TLS leaf.
func (p *Plane) handleNebulaCert(w http.ResponseWriter, r *http.Request, c Caller) {
	if err := p.CaughtUp(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	n, ok := p.raft.FSM().Node(c.NodeID)
	if !ok || n.State.Former() {
		writeError(w, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no active node %s", c.NodeID)))
		return
	}
	apitype.WriteJSON(w, http.StatusOK, NebulaCertResponse{Cert: n.NebulaCert})
}
