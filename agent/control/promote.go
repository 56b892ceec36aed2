package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// maxContact is how recently a non-voter must have heard from the leader
// to count as healthy for promotion.
const maxContact = time.Second

// caughtUp reports whether a non-voter with these stats may be promoted
// by a leader whose commit index is commit: its log holds every committed
// entry, and it has heard from a leader within maxContact.
func (st RaftStats) caughtUp(commit uint64) bool {
	return st.LastLogIndex >= commit && st.LastContact >= 0 && st.LastContact < maxContact
}

// JoinRaft is a new control node's side: ask the leader (through any
// control node in seeds) to add it as a non-voter and promote it once it
// has caught up, then wait until this node's own raft configuration shows
// it a voter.
func (p *Plane) JoinRaft(ctx context.Context, seeds []string, step func(string, ...any)) error {
	start := time.Now()
	step("raft: entering as a non-voter; the leader promotes this node once its log has caught up")
	var res RaftJoinResult
	if err := p.client.PostSeeds(ctx, seeds, PathRaftJoin, NodeRef{NodeID: p.cfg.NodeID}, &res); err != nil {
		return err
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !p.raft.IsVoter(p.cfg.NodeID) {
		select {
		case <-ctx.Done():
			return codes.Wrap(codes.JoinUnconfirmed, errors.New("promoted by the leader, but the promotion has not reached this node"))
		case <-t.C:
		}
	}
	step("raft: caught up to index %d and promoted to voter (leader waited %s; %s in all)", res.Index,
		res.Waited.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	return nil
}

// handleRaftJoin adds a newly admitted control node to raft the safe way:
// a control node may ask only for itself; a follower passes the request
// to the leader.
func (p *Plane) handleRaftJoin(w http.ResponseWriter, r *http.Request, c Caller) {
	var req NodeRef
	if err := apitype.DecodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if !c.Forwarded && c.NodeID != req.NodeID {
		writeError(w, codes.Wrap(codes.PeerRoleDenied, fmt.Errorf("%s may not add %s to raft", c.NodeID, req.NodeID)))
		return
	}
	if c.Forwarded && !p.raft.IsLeader() {
		writeError(w, codes.Wrap(codes.NoLeader, errors.New("not the leader")))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.PromoteTimeout+10*time.Second)
	defer cancel()
	var res RaftJoinResult
	promote := func() error {
		return p.onLeader(ctx, PathRaftJoin, req, &res, func() (err error) {
			res, err = p.promoteRecorded(ctx, req.NodeID)
			return err
		})
	}
	// Leadership moved while the promotion ran (or before it was
	// forwarded): the promotion is repeatable, so the node the joiner
	// asked asks whoever leads now; a forwarded request answers once.
	var err error
	if c.Forwarded {
		err = promote()
	} else {
		err = untilLeaderAnswers(ctx, promote)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, res)
}

// promoteRecorded promotes id if raft records it as a control node with
// raft and control addresses, joining with its certificates recorded (a
// join confirms only after the promotion) or active.
func (p *Plane) promoteRecorded(ctx context.Context, id string) (RaftJoinResult, error) {
	if err := p.SyncRead(ctx); err != nil {
		return RaftJoinResult{}, err
	}
	n, ok := p.raft.FSM().Node(id)
	certified := n.State == state.NodeActive || (n.State == state.NodeJoining && n.TLSFingerprint != "")
	if !ok || n.Role != pki.RoleControl || !certified || n.RaftAddr == "" || n.EnrollAddr == "" {
		return RaftJoinResult{}, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no certified control node %s on record", id))
	}
	res, err := p.promote(ctx, n)
	if err != nil {
		p.log.Warn("control node not promoted", "code", codes.OrInternal(err), "node", n.Name, "err", err)
		return res, err
	}
	p.log.Info("control node promoted to raft voter", "node", n.Name, "index", res.Index, "waited", res.Waited)
	return res, nil
}

// promote adds n as a non-voter, waits until its log has caught up with
// this leader's commit index and it hears from the leader, then makes it a
// voter. A node that does not catch up in time is removed again, leaving
// the membership as it was: a node that never replicated is never a voter
// (AddVoter on it would cost a one-voter cluster its leader).
func (p *Plane) promote(ctx context.Context, n state.Node) (RaftJoinResult, error) {
	if p.raft.IsVoter(n.ID) {
		return RaftJoinResult{Index: p.raft.CommitIndex()}, nil
	}
	start := time.Now()
	if err := p.raft.AddNonvoter(n.ID, n.RaftAddr); err != nil {
		return RaftJoinResult{}, membershipErr(fmt.Errorf("add %s as non-voter: %w", n.Name, err))
	}
	deadline := time.Now().Add(p.cfg.PromoteTimeout)
	backoff := 5 * time.Millisecond
	for time.Now().Before(deadline) && ctx.Err() == nil {
		commit := p.raft.CommitIndex()
		var st RaftStats
		err := p.client.Call(ctx, n.EnrollAddr, PathRaftStats, true, nil, &st)
		if err == nil && st.caughtUp(commit) {
			if err := p.raft.AddVoter(n.ID, n.RaftAddr); err != nil {
				return RaftJoinResult{}, membershipErr(fmt.Errorf("promote %s: %w", n.Name, err))
			}
			return RaftJoinResult{Index: commit, Waited: time.Since(start)}, nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
	if err := p.raft.RemoveServer(n.ID, 5*time.Second); err != nil {
		p.log.Warn("could not remove the unpromoted non-voter", "node", n.Name, "err", err)
	}
	return RaftJoinResult{}, codes.Wrap(codes.JoinUnconfirmed,
		fmt.Errorf("%s did not catch up with the raft log within %s; it was removed from raft membership again", n.Name, p.cfg.PromoteTimeout))
}

// handleRaftStats tells the leader how far this node's raft has come.
func (p *Plane) handleRaftStats(w http.ResponseWriter, _ *http.Request, _ Caller) {
	pr := p.raft.Progress()
	apitype.WriteJSON(w, http.StatusOK, RaftStats{LastLogIndex: pr.LastLogIndex, AppliedIndex: pr.AppliedIndex, LastContact: pr.LastContact})
}

// membershipErr keeps a raft membership change's NoLeader (leadership
// lost mid-promotion: the caller asks the next leader) and codes any other
// failure RaftApply.
func membershipErr(err error) error {
	if codes.Of(err) == codes.NoLeader {
		return err
	}
	return codes.Wrap(codes.RaftApply, err)
}
