package member

import (
	"context"
	"slices"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/fetched"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// A node the cluster no longer knows says so (issue 52 item 9; the
// judgement is fetched.Standing's). While the node is judged removed:
//
//   - its overlay is cut off (cutOff): Nebula keeps running, since a
//     userspace instance cannot be stopped in-process (Parked) and a
//     restart would race every reader of rt.mesh, but it has no
//     lighthouse, static host, relay or route left, and its firewall lets
//     nothing in or out, gossip included;
//   - its names are not answered (dnsNames.syncZone: no zone, so every
//     query is refused);
//   - `meshctl status` says "removed by the cluster" with
//     codes.RemovedByCluster and the remedy (removedStatus);
//   - it asks the control nodes again at most once per
//     fetched.RemovedRetry (a worker's copies; a control node's
//     followStanding), and sends nothing else of its own accord (tunnel
//     reports, relay reports, renewals).
//
// An answer that accepts it again restores it: the next overlay pass
// reloads Nebula with the whole config (the overlay restarts), the names
// are answered again, and a worker's watch stream starts again.

// standingChanged is told by the standing after each change: the overlay
// loop reconciles at once (cut off, or whole again), and gossip, whose
// sends a cut-off overlay refuses, logs those failures at debug meanwhile.
func (nd *node) standingChanged(removed bool) {
	if nd.gossip != nil {
		nd.gossip.CutOff(removed)
	}
	nd.poke()
}

// removed reports whether this node is judged removed by its cluster.
func (nd *node) removed() bool { return nd.standing.Removed() }

// RemovedErr is codes.RemovedByCluster, with what it was judged on, while
// this node's cluster no longer knows it; nil otherwise.
func (rt *Runtime) RemovedErr() error { return rt.standing.Err() }

// cutOff is c with nothing of the cluster left in it: no lighthouse,
// static host, relay, roaming peer or route, and a firewall that drops
// everything both ways (no gossip port either). Identity, listener and
// the settings Nebula cannot change live stay as they were, so the cut
// and the restore are both live reloads.
func cutOff(c mesh.Config) mesh.Config {
	c.Lighthouses, c.StaticHosts, c.Relays, c.Roaming, c.UnsafeRoutes = nil, nil, nil, nil, nil
	c.Inbound, c.Outbound, c.GossipPort, c.SoMark = nil, nil, 0, 0
	return c
}

// removedStatus makes the status of a running node say that the cluster
// removed it: state "removed", the coded error with its remedy, and when
// it asks again (a stopping node says it stops).
func (rt *Runtime) removedStatus(s *apitype.Status) {
	st, ok := rt.standing.State()
	if !ok || s.State != "running" {
		return
	}
	s.State = apitype.StateRemoved
	s.Error = apitype.NewError(codes.RemovedByCluster, st.Err)
	s.Removed = &apitype.Removed{Since: st.Since, Asked: st.Asked, NextAsk: st.NextAsk, Asks: st.Asks}
}

// followStanding is a control node's follow step for its standing: its
// own record in its raft reads left, removed or failed; or, while it
// knows no raft leader (a control node dropped from raft hears from none
// again), its peers, the other active control nodes in raft's
// configuration, are asked whether they still count it a member (GET
// control.PathRaftStats: cheap, served to every member control node),
// at most once per fetched.RemovedRetry. A leader known again with its
// own record active restores it. The FSM is read by index, the peers
// from raft's configuration: nothing here scans the records.
func (rt *Runtime) followStanding(ctx context.Context) {
	r := rt.ctl.Raft()
	fsm := r.FSM()
	self, ok := fsm.Node(rt.facts.NodeID)
	switch {
	case ok && self.State.Former():
		rt.standing.Former(string(self.State))
		return
	case !ok || self.State != state.NodeActive:
		return // joining: its FSM is still filling (a join in progress is no removal)
	case r.LeaderID() != "":
		if rt.standing.Removed() {
			rt.standing.Answer("the raft leader", nil, nil)
		}
		return
	}
	if rt.standing.Removed() {
		if !rt.standing.Due() {
			return
		}
	} else if now := rt.now(); now.Sub(rt.peersAsked) < fetched.RemovedRetry {
		return
	} else {
		rt.peersAsked = now
	}
	var peers []string // raft's servers: no scan of the records
	for id := range r.Roles() {
		if n, ok := fsm.Node(id); ok && id != rt.facts.NodeID && n.Role == pki.RoleControl && n.State == state.NodeActive && n.EnrollAddr != "" {
			peers = append(peers, n.EnrollAddr)
		}
	}
	slices.Sort(peers)
	for _, addr := range peers {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := rt.client.Call(actx, addr, control.PathRaftStats, false, nil, nil)
		cancel()
		rt.standing.Answer(addr, peers, err)
		if err == nil || ctx.Err() != nil {
			return
		}
	}
}
