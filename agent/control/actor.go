package control

import (
	"regexp"
	"strconv"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/pki"
)

// Actor is who did what the audit trail records. Its text has one of
// these forms:
//
//	uid=U@NODE           the operator with uid U ran it on NODE's local socket
//	                     (the kernel's SO_PEERCRED of the connection)
//	node:NODE            NODE did it by itself: its enroll server admitting a
//	                     joiner, a renewal, token pruning
//	... via RELAY        RELAY, a control node, passed on what NODE asked it
//	                     over NODE's own TLS identity (a worker's leave)
//
// NODE and RELAY are node names. Where an actor comes from, and why no
// caller can choose it, is in docs/security.md ("The audit trail").
type Actor struct {
	Node     string
	Operator bool   // UID is an operator's; false: the node itself
	UID      uint32 // meaningful only with Operator
	Via      string // the control node that relayed it; "" if none
}

// OperatorActor is the operator with uid on node's local socket.
func OperatorActor(uid uint32, node string) Actor {
	return Actor{Node: node, Operator: true, UID: uid}
}

// NodeActor is node acting by itself.
func NodeActor(node string) Actor { return Actor{Node: node} }

func (a Actor) String() string {
	s := "node:" + a.Node
	if a.Operator {
		s = "uid=" + strconv.FormatUint(uint64(a.UID), 10) + "@" + a.Node
	}
	if a.Via != "" {
		s += " via " + a.Via
	}
	return s
}

// nameRE is a node name as enroll.ValidName accepts it.
const nameRE = `[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?`

var actorRE = regexp.MustCompile(`^(?:uid=([0-9]{1,10})@(` + nameRE + `)|node:(` + nameRE + `))(?: via (` + nameRE + `))?$`)

// ParseActor reads an Actor's text; ok is false for anything else.
func ParseActor(s string) (Actor, bool) {
	m := actorRE.FindStringSubmatch(s)
	if m == nil {
		return Actor{}, false
	}
	if m[3] != "" {
		return Actor{Node: m[3], Via: m[4]}, true
	}
	uid, err := strconv.ParseUint(m[1], 10, 32)
	if err != nil {
		return Actor{}, false
	}
	return Actor{Node: m[2], Operator: true, UID: uint32(uid), Via: m[4]}, true
}

// self is this node acting by itself.
func (p *Plane) self() string { return NodeActor(p.cfg.Name).String() }

// forwardedActor is the audit actor the leader records for cmd, which
// the control node c forwarded claiming claim (the Actor its own socket
// or relay produced). The leader cannot see a follower's socket, so it
// takes the operator's uid on the follower's word, but binds it to the
// follower's authenticated name: a forwarder may name an operator of
// its own (uid=U@c) or itself (node:c), never another node's operator.
// The one relay is a worker's leave (setNodeStateRule lets a control
// node record it): there the claim may name that worker, "via c". Any
// other claim (another node's name, a relay of something else, text in
// no actor form) is replaced by node:c, which is what the leader knows
// for certain. The Actor field inside the forwarded command is never read.
func (p *Plane) forwardedActor(c Caller, cmd state.Command, claim string) (actor string, accepted bool) {
	fallback := NodeActor(c.Name).String()
	a, ok := ParseActor(claim)
	switch {
	case !ok:
	case a.Via == "" && a.Node == c.Name:
		return a.String(), true
	case joinersOwn(cmd, a):
		return a.String(), true
	case a.Via == c.Name && a.Node != c.Name && p.relays(cmd, a.Node):
		return a.String(), true
	}
	return fallback, claim == ""
}

// joinersOwn reports whether cmd is a joining node's own act that the
// control node serving it passes on (its confirmation, the undoing of its
// join), claimed as that node by id (node:ID), as the leader records it
// when it serves the joiner itself. Before, the leader replaced such a
// claim by the forwarder and warned, once per join through a follower
// (issue 54 item 6: 1,000 warnings in agenttest.BenchmarkControlScale).
func joinersOwn(cmd state.Command, a Actor) bool {
	if a.Via != "" || a.Operator {
		return false
	}
	switch c := cmd.(type) {
	case state.ConfirmJoin:
		return a.Node == c.NodeID
	case state.AbortJoin:
		return a.Node == c.NodeID
	}
	return false
}

// relays reports whether cmd is one a control node passes on for the
// node named name: that worker's own leave.
func (p *Plane) relays(cmd state.Command, name string) bool {
	s, ok := cmd.(state.SetNodeState)
	if !ok || s.State != state.NodeLeft {
		return false
	}
	n, ok := p.raft.FSM().Node(s.NodeID)
	return ok && n.Name == name && n.Role == pki.RoleWorker
}

// relayedActor is the actor of a request a member made of this control
// node over the internal API (a worker's leave): the operator the caller
// names if it names one of its own, else the caller itself; "via" this
// node either way.
func (p *Plane) relayedActor(c Caller, claim string) string {
	a, ok := ParseActor(claim)
	if !ok || a.Node != c.Name || a.Via != "" {
		a = NodeActor(c.Name)
	}
	if c.Name != p.cfg.Name {
		a.Via = p.cfg.Name
	}
	return a.String()
}
