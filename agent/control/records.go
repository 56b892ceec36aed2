package control

import (
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
)

// NodeRecord is one row of GET /v1/nodes: the node as `meshctl nodes`
// shows it, plus what a worker needs to follow raft's decisions without
// a raft of its own (its node list): the Nebula port, the control
// address, and the TLS leaves a control node may present. Decoded as an
// apitype.Node, the extra fields are simply dropped.
type NodeRecord struct {
	apitype.Node
	NebulaPort         int    `json:"nebula_port,omitempty"`
	EnrollAddr         string `json:"enroll_addr,omitempty"`
	SerfAddr           string `json:"serf_addr,omitempty"`
	TLSFingerprint     string `json:"tls_fingerprint,omitempty"`
	PrevTLSFingerprint string `json:"prev_tls_fingerprint,omitempty"`
}

// nodeRecords are the node rows with their records' details.
func (p *Plane) nodeRecords() []NodeRecord {
	rows := p.nodeRows()
	out := make([]NodeRecord, 0, len(rows))
	for _, row := range rows {
		rec := NodeRecord{Node: row}
		if n, ok := p.raft.FSM().Node(row.ID); ok {
			rec.NebulaPort, rec.EnrollAddr, rec.SerfAddr = n.NebulaPort, n.EnrollAddr, n.SerfAddr
			rec.TLSFingerprint, rec.PrevTLSFingerprint = n.TLSFingerprint, n.PrevTLSFingerprint
		}
		out = append(out, rec)
	}
	return out
}

// Active reports whether the record is an active node's.
func (r NodeRecord) Active() bool { return r.State == string(state.NodeActive) }

// handleNodes serves the node list to a member: a worker's `meshctl
// nodes`, and the list a worker takes its peers and control nodes from.
func (p *Plane) handleNodes(w http.ResponseWriter, r *http.Request, _ Caller) {
	if err := p.CaughtUp(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, p.nodeRecords())
}
