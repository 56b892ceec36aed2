package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// maxContact is how recently a non-voter must have heard from the leader
// to count as healthy for promotion.
const maxContact = time.Second

type raftJoinRequest struct {
	NodeID string `json:"node_id"`
}

type raftJoinResult struct {
	Index  uint64        `json:"index"`  // the leader's commit index the node had reached
	Waited time.Duration `json:"waited"` // from AddNonvoter to AddVoter
}

type raftStats struct {
	LastLogIndex  uint64        `json:"last_log_index"`
	AppliedIndex  uint64        `json:"applied_index"`
	LastContact   time.Duration `json:"last_contact"` // since the last contact with a leader; -1 never
	Configuration uint64        `json:"configuration_index"`
}

// caughtUp reports whether a non-voter with these stats may be promoted
// by a leader whose commit index is commit: its log holds every committed
// entry, and it has heard from a leader within maxContact.
func (st raftStats) caughtUp(commit uint64) bool {
	return st.LastLogIndex >= commit && st.LastContact >= 0 && st.LastContact < maxContact
}

// joinRaft is a new control node's side: ask the leader (through any
// control node) to add it as a non-voter and promote it once it has caught
// up, then wait until this node's own raft configuration shows it a voter.
func (rt *runtime) joinRaft(ctx context.Context, step func(string, ...any)) error {
	start := time.Now()
	step("raft: entering as a non-voter; the leader promotes this node once its log has caught up")
	var (
		res     raftJoinResult
		lastErr error = errors.New("no control node to ask")
		asked   bool
	)
	for _, seed := range rt.facts.Seeds {
		err := rt.callControl(ctx, seed, internalRaftJoinPath, false, raftJoinRequest{NodeID: rt.facts.NodeID}, &res)
		if errors.Is(err, errUnreachable) {
			lastErr = err
			continue
		}
		if err != nil {
			return err
		}
		asked = true
		break
	}
	if !asked {
		return codes.Wrap(codes.SeedsUnreachable, lastErr)
	}
	for !rt.isVoter() {
		select {
		case <-ctx.Done():
			return codes.Wrap(codes.JoinUnconfirmed, errors.New("promoted by the leader, but the promotion has not reached this node"))
		case <-time.After(10 * time.Millisecond):
		}
	}
	step("raft: caught up to index %d and promoted to voter (leader waited %s; %s in all)", res.Index,
		res.Waited.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	return nil
}

// isVoter reports whether this node's raft configuration lists it a voter.
func (rt *runtime) isVoter() bool { return rt.raft.IsVoter(rt.facts.NodeID) }

// handleRaftJoin adds a newly admitted control node to raft the safe way.
func (rt *runtime) handleRaftJoin(w http.ResponseWriter, r *http.Request) {
	caller, err := requirePeer(r, pki.RoleControl)
	if err != nil {
		writeInternalError(w, err)
		return
	}
	var req raftJoinRequest
	if err := decodeBody(r, &req); err != nil {
		writeInternalError(w, err)
		return
	}
	forwarded := r.Header.Get(forwardedHeader) != ""
	if !forwarded && caller != req.NodeID {
		writeInternalError(w, codes.Wrap(codes.PeerRoleDenied, fmt.Errorf("%s may not add %s to raft", caller, req.NodeID)))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), rt.promoteTimeout+10*time.Second)
	defer cancel()
	var res raftJoinResult
	if !rt.raft.IsLeader() {
		if forwarded {
			writeInternalError(w, codes.Wrap(codes.NoLeader, errors.New("not the leader")))
			return
		}
		addr, err := rt.leaderControlAddr()
		if err == nil {
			err = rt.callControl(ctx, addr, internalRaftJoinPath, true, req, &res)
		}
		if err != nil {
			writeInternalError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	if err := rt.syncRead(ctx); err != nil {
		writeInternalError(w, err)
		return
	}
	n, ok := rt.raft.FSM().Node(req.NodeID)
	if !ok || n.Role != pki.RoleControl || n.State != state.NodeActive || n.RaftAddr == "" || n.EnrollAddr == "" {
		writeInternalError(w, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no active control node %s on record", req.NodeID)))
		return
	}
	res, err = rt.promote(ctx, n)
	if err != nil {
		rt.log.Warn("control node not promoted", "code", codes.OrInternal(err), "node", n.Name, "err", err)
		writeInternalError(w, err)
		return
	}
	rt.log.Info("control node promoted to raft voter", "node", n.Name, "index", res.Index, "waited", res.Waited)
	writeJSON(w, http.StatusOK, res)
}

// promote adds n as a non-voter, waits until its log has caught up with
// this leader's commit index and it hears from the leader, then makes it a
// voter. A node that does not catch up in time is removed again, leaving
// the membership as it was: a node that never replicated is never a voter
// (AddVoter on it would cost a one-voter cluster its leader).
func (rt *runtime) promote(ctx context.Context, n state.Node) (raftJoinResult, error) {
	if rt.raft.IsVoter(n.ID) {
		return raftJoinResult{Index: rt.raft.CommitIndex()}, nil
	}
	start := time.Now()
	if err := rt.raft.AddNonvoter(n.ID, n.RaftAddr); err != nil {
		return raftJoinResult{}, codes.Wrap(codes.RaftApply, fmt.Errorf("add %s as non-voter: %w", n.Name, err))
	}
	deadline := time.Now().Add(rt.promoteTimeout)
	backoff := 5 * time.Millisecond
	for time.Now().Before(deadline) && ctx.Err() == nil {
		commit := rt.raft.CommitIndex()
		var st raftStats
		err := rt.callControl(ctx, n.EnrollAddr, internalRaftStatsPath, true, nil, &st)
		if err == nil && st.caughtUp(commit) {
			if err := rt.raft.AddVoter(n.ID, n.RaftAddr); err != nil {
				return raftJoinResult{}, codes.Wrap(codes.RaftApply, fmt.Errorf("promote %s: %w", n.Name, err))
			}
			return raftJoinResult{Index: commit, Waited: time.Since(start)}, nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
	if err := rt.raft.RemoveServer(n.ID, 5*time.Second); err != nil {
		rt.log.Warn("could not remove the unpromoted non-voter", "node", n.Name, "err", err)
	}
	return raftJoinResult{}, codes.Wrap(codes.JoinUnconfirmed,
		fmt.Errorf("%s did not catch up with the raft log within %s; it was removed from raft membership again", n.Name, rt.promoteTimeout))
}

// handleRaftStats tells the leader how far this node's raft has come.
func (rt *runtime) handleRaftStats(w http.ResponseWriter, r *http.Request) {
	if _, err := requirePeer(r, pki.RoleControl); err != nil {
		writeInternalError(w, err)
		return
	}
	p := rt.raft.Progress()
	st := raftStats{LastLogIndex: p.LastLogIndex, AppliedIndex: p.AppliedIndex, LastContact: p.LastContact}
	writeJSON(w, http.StatusOK, st)
}
