package control

import (
	"context"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// A join the cluster admitted and certified can still fail on the joining
// machine before it confirms: its overlay does not start, gossip does
// not, a port was taken between the join's check and its use. The joiner
// then undoes its own admission (POST /v1/self/abort, issue 52 item 10),
// authenticated by the leaf it was just given: the guard lets a joining
// record through to this door as it does to its confirmation, and the
// FSM (state.AbortJoin) takes the command only for a joining record whose
// recorded leaf is the one presented at the handshake. Its certificates
// are revoked and its token is unused again. A joiner that dies before it
// asks is failed by the leader's join bound (FailStaleJoins), as before.

// PathAbortJoin is the joiner's undo of its own admission.
const PathAbortJoin = "/v1/self/abort"

// AbortJoinRequest says why the join failed on the joiner (for the audit
// trail; cut to maxAbortCause bytes).
type AbortJoinRequest struct {
	Cause string `json:"cause,omitempty"`
}

// maxAbortCause bounds the cause a joiner gives (state.AbortJoin refuses
// a longer one).
const maxAbortCause = 512

// handleAbortJoin undoes the calling joiner's admission. An active
// member is refused (codes.JoinConfirmed); a control node that got into
// raft's configuration cannot be undone this way (the join bound fails it
// and takes it out of raft); anything but a joining record presenting its
// own recorded leaf is refused by the FSM.
func (p *Plane) handleAbortJoin(w http.ResponseWriter, r *http.Request, c Caller) {
	var req AbortJoinRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	// An active record never goes back to joining: this node's view
	// suffices to say so.
	if n, ok := p.raft.FSM().Node(c.NodeID); ok && n.State == state.NodeActive {
		writeError(w, codes.Wrap(codes.JoinConfirmed, fmt.Errorf("%s is active: its join was confirmed and is never undone", c.Name)))
		return
	}
	if p.raft.IsMember(c.NodeID) {
		writeError(w, codes.Wrap(codes.BadRequest, fmt.Errorf("%s is in raft's configuration already; its join cannot be undone, the join bound fails it", c.Name)))
		return
	}
	leaf := pki.FingerprintOf(r.TLS.PeerCertificates[0]).String()
	cmd := &state.AbortJoin{NodeID: c.NodeID, Leaf: leaf, Cause: cutCause(req.Cause), At: p.now(), Actor: "node:" + c.NodeID}
	if err := p.Write(r.Context(), cmd); err != nil {
		writeError(w, err)
		return
	}
	p.hooks.Poke()
	if err := p.hooks.NotifyRevoked(); err != nil {
		p.log.Warn("could not tell the cluster about the revocation; workers pick it up on their next tick", "err", err)
	}
	p.log.Warn("a joiner undid its own join: its certificates are revoked, its token is unused again", "code", codes.EventJoinAborted,
		"node", c.Name, "node_id", c.NodeID, "cause", cmd.Cause)
	apitype.WriteJSON(w, http.StatusOK, Empty{})
}

// cutCause is s cut to maxAbortCause bytes, on a rune boundary.
func cutCause(s string) string {
	if len(s) <= maxAbortCause {
		return s
	}
	s = s[:maxAbortCause]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// abortJoinRule: a forwarded AbortJoin (the joiner asked a follower) is
// refused for a node this leader's raft configuration lists; the FSM
// judges the rest (joining, the caller's own leaf).
func abortJoinRule(p *Plane, _ Caller, cmd state.Command) error {
	a := cmd.(state.AbortJoin)
	if p.raft.IsMember(a.NodeID) {
		return fmt.Errorf("node %s is in raft's configuration; its join cannot be undone", a.NodeID)
	}
	return nil
}

// AbortJoin is the joiner's side: it asks a control node in seeds to undo
// its admission, with why. As ConfirmJoin, an answer that only says no
// leader could be reached (or no seed answered) is asked again, of the
// next seed first, until ctx ends; any other answer is final.
func (c *Client) AbortJoin(ctx context.Context, seeds []string, cause string) error {
	backoff := 50 * time.Millisecond
	for k := 0; ; k++ {
		err := c.PostSeeds(ctx, rotated(seeds, k), PathAbortJoin, AbortJoinRequest{Cause: cutCause(cause)}, nil)
		if !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}
