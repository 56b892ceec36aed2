package control

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/meshd/meshd/codes"
)

// A voter's leave or removal must not cost the control plane its quorum:
// the leader refuses it (codes.QuorumLoss, naming the voters that are
// down) when the voters it can still reach after the change would be
// fewer than a majority of the configuration after it.

// reachTimeout bounds the leader's question to each voter.
const reachTimeout = 2 * time.Second

// quorumAfterRemoving is the leader's check before it drops id from raft.
// A voter counts as reachable when it answers the leader's raft-stats
// call within reachTimeout and has heard from a leader within maxContact
// (1 s, as for promotion: the leader heartbeats every follower ten times a
// second with the default 1 s heartbeat_timeout, so a following voter is
// far below it, while one that is down or cut off does not answer or is
// past it). The leader counts itself. Removing a non-voter never changes
// the quorum.
func (p *Plane) quorumAfterRemoving(ctx context.Context, id string) error {
	voters := p.raft.VoterIDs()
	after := make([]string, 0, len(voters))
	for _, v := range voters {
		if v != id {
			after = append(after, v)
		}
	}
	if len(after) == len(voters) {
		return nil
	}
	if len(after) == 0 {
		return codes.Wrap(codes.QuorumLoss, fmt.Errorf("%s is the last raft voter", p.nameOf(id)))
	}
	reachable := 0
	var down []string
	for _, v := range after {
		if v == p.cfg.NodeID || p.voterReachable(ctx, v) {
			reachable++
			continue
		}
		down = append(down, p.nameOf(v))
	}
	if need := len(after)/2 + 1; reachable < need {
		return codes.Wrap(codes.QuorumLoss, fmt.Errorf("without %s, %d of the %d remaining raft voters are reachable and %d are needed; down: %s",
			p.nameOf(id), reachable, len(after), need, strings.Join(down, ", ")))
	}
	return nil
}

// voterReachable asks voter id, at the control address its record names,
// how recently it heard from a leader.
func (p *Plane) voterReachable(ctx context.Context, id string) bool {
	n, ok := p.raft.FSM().Node(id)
	if !ok || n.EnrollAddr == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	var st RaftStats
	if err := p.client.Call(ctx, n.EnrollAddr, PathRaftStats, true, nil, &st); err != nil {
		return false
	}
	return st.LastContact >= 0 && st.LastContact < maxContact
}

// nameOf is the node's name as raft records it, else its id.
func (p *Plane) nameOf(id string) string {
	if n, ok := p.raft.FSM().Node(id); ok {
		return n.Name
	}
	return id
}
