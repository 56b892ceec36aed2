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
)

// writeTimeout bounds a raft write, including waiting out an election.
const writeTimeout = 10 * time.Second

// readDeadline bounds how long a read waits for raft to catch up after a
// restart before it answers codes.NoLeader.
const readDeadline = 5 * time.Second

// Write commits cmd through raft from any control node: applied here on
// the leader, forwarded one hop to the leader from a follower. It carries a
// request id, so a retry after a lost leader (whose first attempt may have
// committed) applies at most once. With no leader it waits, up to
// writeTimeout, for one to be elected; then codes.NoLeader.
func (p *Plane) Write(ctx context.Context, cmd state.Command) error {
	_, err := p.writeAt(ctx, cmd)
	return err
}

// WriteApplied is Write that returns once this node's FSM has applied the
// entry, so that what the caller reads next from it includes the write
// (and everything committed before it). On a follower that costs the wait
// for the leader's commit to reach it, not a read index round trip to the
// leader after the write's own (TestSites: 100 ms across its two sites);
// a leader of an older release names no index, and SyncRead does it.
func (p *Plane) WriteApplied(ctx context.Context, cmd state.Command) error {
	idx, err := p.writeAt(ctx, cmd)
	if err != nil {
		return err
	}
	return p.appliedHere(ctx, idx)
}

// appliedHere waits, up to readDeadline, until this node's FSM has
// applied log index idx; 0 (an older leader's answer) is a read index.
func (p *Plane) appliedHere(ctx context.Context, idx uint64) error {
	if idx == 0 {
		return p.SyncRead(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, readDeadline)
	defer cancel()
	return p.raft.WaitApplied(ctx, idx)
}

// writeAt is Write returning the entry's log index (0 if the leader that
// applied it did not say).
func (p *Plane) writeAt(ctx context.Context, cmd state.Command) (uint64, error) {
	tracked, err := state.Track(newRequestID(), cmd)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	backoff := 20 * time.Millisecond
	var lastErr error
	for {
		var res ApplyResponse
		err := p.onLeader(ctx, PathApply, ApplyRequest{Tracked: tracked, Operator: actorOf(cmd)}, &res,
			func() (err error) { res.Index, err = p.raft.ApplyAt(ctx, tracked); return err })
		if !retryable(err) {
			return res.Index, err
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return 0, codes.Wrap(codes.NoLeader, fmt.Errorf("no leader accepted the write within %s: %v", writeTimeout, lastErr))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// retryable: no leader, a leader that stepped down, or one that could not
// be reached. Anything the FSM answered is final.
func retryable(err error) bool {
	return err != nil && (codes.Of(err) == codes.NoLeader || errors.Is(err, ErrUnreachable))
}

// onLeader runs local when this node leads, and otherwise sends in to path
// on the leader, one hop (the leader never forwards it again), decoding
// its answer into out.
func (p *Plane) onLeader(ctx context.Context, path string, in, out any, local func() error) error {
	if p.raft.IsLeader() {
		return local()
	}
	id, addr, err := p.leaderAddr()
	if err != nil {
		return err
	}
	return p.callLeader(ctx, id, addr, path, in, out)
}

// untilLeaderAnswers runs try until it answers something other than
// NoLeader, or ctx ends, waiting leaderPoll between tries: for a
// repeatable raft membership change (a promotion, a removal) whose leader
// lost its leadership mid-way, asked again of whoever leads next. Found by
// control.TestGateRefusesRemovedNodes under load; the coding it relies on
// is raftnode.TestRemoveOnFollowerIsNoLeader's.
func untilLeaderAnswers(ctx context.Context, try func() error) error {
	for {
		err := try()
		if codes.Of(err) != codes.NoLeader || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(leaderPoll):
		}
	}
}

// leaderPoll is how often a call to the leader checks that this node still
// knows the same leader.
const leaderPoll = 50 * time.Millisecond

// callLeader sends in to path on the leader id at addr, and gives up
// (ErrUnreachable, so the caller retries against whoever leads next) as
// soon as this node knows another leader or none: a leader cut off by a
// partition would otherwise hold the call until the caller's deadline,
// though the majority elected another within a second. Found by
// e2e.TestPartitionLedgerSplit, where an admission through the majority
// waited out its 10 s on the deposed leader and failed NoLeader. A write
// retried this way carries the same request id, so it applies at most
// once.
func (p *Plane) callLeader(ctx context.Context, id, addr, path string, in, out any) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		t := time.NewTicker(leaderPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if now := p.raft.LeaderID(); now != id {
					cancel(fmt.Errorf("leader changed from %s to %q", id, now))
					return
				}
			}
		}
	}()
	err := p.client.Call(ctx, addr, path, true, in, out)
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, addr, cause)
	}
	return err
}

// leaderAddr is the raft leader's id and its control (internal API)
// address, from the leader's node record.
func (p *Plane) leaderAddr() (id, addr string, err error) {
	id = p.raft.LeaderID()
	if id == "" {
		return "", "", codes.Wrap(codes.NoLeader, errors.New("no raft leader known"))
	}
	n, ok := p.raft.FSM().Node(id)
	if !ok || n.EnrollAddr == "" {
		return "", "", codes.Wrap(codes.NoLeader, fmt.Errorf("leader %s has no control address on record", id))
	}
	return id, n.EnrollAddr, nil
}

// CaughtUp waits until this node's FSM reflects its whole log (after a
// restart raft re-applies it only once a leader commits).
func (p *Plane) CaughtUp(ctx context.Context) error {
	return p.raft.WaitCaughtUp(ctx, readDeadline)
}

// SyncRead makes this node's FSM at least as fresh as the leader's (a read
// index), so a token minted on another control node a moment ago is
// visible here. On the leader the FSM is current already. While there is
// no leader, or the one it knew stepped down, it waits up to readDeadline
// for one; then codes.NoLeader.
func (p *Plane) SyncRead(ctx context.Context) error {
	// A node whose state dir fails its write check cannot append raft's
	// log, so it falls behind and no read index would ever come back:
	// answer at once, so the caller asks another control node instead of
	// waiting out readDeadline (a worker's node list, a confirmation).
	if err := p.hooks.DiskFailing(); err != nil {
		return codes.Wrap(codes.SeedUnfit, fmt.Errorf("this control node's raft cannot keep up: %w", err))
	}
	if err := p.CaughtUp(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, readDeadline)
	defer cancel()
	backoff := 10 * time.Millisecond
	for {
		err := p.readIndexOnce(ctx)
		if !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return codes.Wrap(codes.NoLeader, fmt.Errorf("no leader confirmed a read index within %s: %v", readDeadline, err))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// readIndexOnce makes this node's FSM at least as fresh as the leader's
// commit index at the time of the call: at once on the leader; on a
// follower through a read index round trip it shares with the reads that
// arrive while it waits (readBatch).
func (p *Plane) readIndexOnce(ctx context.Context) error {
	if p.raft.IsLeader() {
		return nil
	}
	idx, err := p.reads.index(ctx, &p.wg, readDeadline, func(ctx context.Context) (uint64, error) {
		id, addr, err := p.leaderAddr()
		if err != nil {
			return 0, err
		}
		var res IndexResponse
		if err := p.callLeader(ctx, id, addr, PathIndex, nil, &res); err != nil {
			return 0, err
		}
		return res.Index, nil
	})
	if err != nil {
		return err
	}
	return p.raft.WaitApplied(ctx, idx)
}

// FreshRead is a read index for listings that does not wait for a
// leader: without a reachable one (a minority partition) it answers from
// this node's possibly stale state at once rather than fail; raft having
// replayed its own log is still required.
func (p *Plane) FreshRead(ctx context.Context) error {
	if err := p.CaughtUp(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, readDeadline)
	defer cancel()
	err := p.readIndexOnce(ctx)
	if retryable(err) {
		p.log.Debug("listing from local raft state; no leader reachable", "err", err)
		return nil
	}
	return err
}

// handleApply is the leader's side of a forwarded write: applied only if
// the caller may forward that command (forwardable), with the caller as
// its audit actor.
// Its answer names the entry's log index (ApplyResponse).
func (p *Plane) handleApply(w http.ResponseWriter, r *http.Request, c Caller) {
	var req ApplyRequest
	var res ApplyResponse
	p.leaderOnlyAnswer(w, r, &req, &res, func() (err error) {
		t, err := p.authorizeForward(c, req.Tracked, req.Operator)
		if err != nil {
			p.log.Warn("refused a forwarded write", "code", codes.OrInternal(err), "caller", c.NodeID, "err", err)
			return err
		}
		res.Index, err = p.raft.ApplyAt(r.Context(), t)
		return err
	})
}

// leaderOnly serves a route only the leader answers: the body must decode
// into req and this node must lead (one hop only: a caller that reached a
// follower retries once it knows the new leader). Then do runs and its
// error, or an empty success, is the answer.
func (p *Plane) leaderOnly(w http.ResponseWriter, r *http.Request, req any, do func() error) {
	p.leaderOnlyAnswer(w, r, req, Empty{}, do)
}

// leaderOnlyAnswer is leaderOnly answering res (filled by do) on success.
func (p *Plane) leaderOnlyAnswer(w http.ResponseWriter, r *http.Request, req, res any, do func() error) {
	if err := apitype.DecodeBody(r, req); err != nil {
		writeError(w, err)
		return
	}
	if !p.raft.IsLeader() {
		writeError(w, codes.Wrap(codes.NoLeader, errors.New("not the leader")))
		return
	}
	if err := do(); err != nil {
		writeError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, res)
}

// handleIndex answers the index of the last command the leader's FSM
// applied, after confirming it still leads (VerifyLeader contacts a
// quorum). The FSM's index, not raft's commit index: the latter may point
// at a configuration entry that never reaches a follower's FSM.
func (p *Plane) handleIndex(w http.ResponseWriter, _ *http.Request, _ Caller) {
	if err := p.raft.VerifyLeader(); err != nil {
		writeError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, IndexResponse{Index: p.raft.FSM().Index()})
}
