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

// writeTimeout bounds a raft write, including waiting out an election.
const writeTimeout = 10 * time.Second

// write commits cmd through raft from any control node: applied here on
// the leader, forwarded one hop to the leader from a follower. It carries a
// request id, so a retry after a lost leader (whose first attempt may have
// committed) applies at most once. With no leader it waits, up to
// writeTimeout, for one to be elected; then codes.NoLeader.
func (rt *runtime) write(ctx context.Context, cmd state.Command) error {
	tracked, err := state.Track(newID(), cmd)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	backoff := 20 * time.Millisecond
	var lastErr error
	for {
		err := rt.writeOnce(ctx, tracked)
		if !retryable(err) {
			return err
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return codes.Wrap(codes.NoLeader, fmt.Errorf("no leader accepted the write within %s: %v", writeTimeout, lastErr))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// retryable: no leader, a leader that stepped down, or one that could not
// be reached. Anything the FSM answered is final.
func retryable(err error) bool {
	return err != nil && (codes.Of(err) == codes.NoLeader || errors.Is(err, errUnreachable))
}

func (rt *runtime) writeOnce(ctx context.Context, t state.Tracked) error {
	if rt.raft.IsLeader() {
		return rt.raft.Apply(ctx, t)
	}
	addr, err := rt.leaderControlAddr()
	if err != nil {
		return err
	}
	return rt.callControl(ctx, addr, internalApplyPath, true, applyRequest{Tracked: t}, nil)
}

// leaderControlAddr is the control (internal API) address of the current
// raft leader, from the leader's node record.
func (rt *runtime) leaderControlAddr() (string, error) {
	id := rt.raft.LeaderID()
	if id == "" {
		return "", codes.Wrap(codes.NoLeader, errors.New("no raft leader known"))
	}
	n, ok := rt.raft.FSM().Node(id)
	if !ok || n.EnrollAddr == "" {
		return "", codes.Wrap(codes.NoLeader, fmt.Errorf("leader %s has no control address on record", id))
	}
	return n.EnrollAddr, nil
}

type applyRequest struct {
	Tracked state.Tracked `json:"tracked"`
}

// handleApply is the leader's side of a forwarded write.
func (rt *runtime) handleApply(w http.ResponseWriter, r *http.Request) {
	var req applyRequest
	rt.leaderOnly(w, r, &req, func() error { return rt.raft.Apply(r.Context(), req.Tracked) })
}

// leaderOnly serves a route only the leader answers: the caller must be a
// control node, the body must decode into req, and this node must lead (one
// hop only: a caller that reached a follower retries once it knows the new
// leader). Then do runs and its error, or an empty success, is the answer.
func (rt *runtime) leaderOnly(w http.ResponseWriter, r *http.Request, req any, do func() error) {
	if _, err := requirePeer(r, pki.RoleControl); err != nil {
		writeInternalError(w, err)
		return
	}
	if err := decodeBody(r, req); err != nil {
		writeInternalError(w, err)
		return
	}
	if !rt.raft.IsLeader() {
		writeInternalError(w, codes.Wrap(codes.NoLeader, errors.New("not the leader")))
		return
	}
	if err := do(); err != nil {
		writeInternalError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// syncRead makes this node's FSM at least as fresh as the leader's commit
// index (a read index), so a token minted on another control node a moment
// ago is visible here. On the leader the FSM is current already.
func (rt *runtime) syncRead(ctx context.Context) error {
	if err := rt.caughtUp(ctx); err != nil {
		return err
	}
	if rt.raft.IsLeader() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readDeadline)
	defer cancel()
	addr, err := rt.leaderControlAddr()
	if err != nil {
		return err
	}
	var idx struct{ Index uint64 }
	if err := rt.callControl(ctx, addr, internalIndexPath, true, nil, &idx); err != nil {
		if errors.Is(err, errUnreachable) {
			return codes.Wrap(codes.NoLeader, err)
		}
		return err
	}
	return rt.raft.WaitApplied(ctx, idx.Index)
}

// freshRead is syncRead for listings: without a reachable leader (a
// minority partition) it answers from this node's possibly stale state
// rather than fail; raft having replayed its own log is still required.
func (rt *runtime) freshRead(ctx context.Context) error {
	err := rt.syncRead(ctx)
	if codes.Of(err) == codes.NoLeader {
		rt.log.Debug("listing from local raft state; no leader reachable", "err", err)
		return rt.caughtUp(ctx)
	}
	return err
}

// handleIndex answers the index of the last command the leader's FSM
// applied, after confirming it still leads (VerifyLeader contacts a quorum).
func (rt *runtime) handleIndex(w http.ResponseWriter, r *http.Request) {
	if _, err := requirePeer(r, pki.RoleControl); err != nil {
		writeInternalError(w, err)
		return
	}
	if err := rt.raft.VerifyLeader(); err != nil {
		writeInternalError(w, err)
		return
	}
	// The FSM's index, not raft's commit index: the latter may point at a
	// configuration entry that never reaches a follower's FSM.
	writeJSON(w, http.StatusOK, struct{ Index uint64 }{rt.raft.FSM().Index()})
}
