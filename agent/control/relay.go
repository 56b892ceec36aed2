package control

import (
	"fmt"
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/pki"
)

// PathSelfRelay is where a member records its own relay offer (`relay:
// true` in its meshd.yaml) when it starts with a setting its record does
// not show: the join recorded the setting it joined with, and this is
// the one way to change it afterwards. The caller is its mTLS leaf; the
// body names no node, so a member changes only its own record.
const PathSelfRelay = "/v1/self/relay"

// RelayRequest is PathSelfRelay's body.
type RelayRequest struct {
	Relay bool `json:"relay"`
}

// handleSelfRelay records the caller's relay setting (state.SetRelay on
// the caller's own node id), pokes this node's overlay reconcile and
// tells every member (Hooks.NotifyRevoked) so that each worker fetches
// the node list, and its relay list follows, at once: without the
// notification a worker saw the change only at its next reconcile tick,
// up to 30 s later (e2e.TestNATRelayLab views_and_relay_volunteer).
func (p *Plane) handleSelfRelay(w http.ResponseWriter, r *http.Request, c Caller) {
	var req RelayRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := p.Write(r.Context(), &state.SetRelay{NodeID: c.NodeID, Relay: req.Relay, At: p.now(), Actor: p.relayedActor(c, "")}); err != nil {
		writeError(w, err)
		return
	}
	p.hooks.Poke()
	if err := p.hooks.NotifyRevoked(); err != nil {
		p.log.Debug("could not tell the workers about the relay setting; they see it on their next tick", "err", err)
	}
	apitype.WriteJSON(w, http.StatusOK, Empty{})
}

// setRelayRule: a control node forwards its own relay setting, or a
// worker's (it relays the worker's own POST PathSelfRelay, whose guard
// checked the worker is the caller); never another control node's.
func setRelayRule(p *Plane, c Caller, cmd state.Command) error {
	s := cmd.(state.SetRelay)
	if s.NodeID == c.NodeID {
		return nil
	}
	if n, ok := p.raft.FSM().Node(s.NodeID); ok && n.Role == pki.RoleWorker {
		return nil
	}
	return fmt.Errorf("%s may not set node %s's relay setting", c.NodeID, s.NodeID)
}
